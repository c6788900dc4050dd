"""Trials per minute of the whole command a user runs: `tessel tune NAME --trials N` from an
empty database and an empty kernel cache, start-up included, timed from outside.

    python benchmarks/tune_rate.py --trials 64
    python benchmarks/tune_rate.py --trials 64 --workloads R18-C1,R18-C6 --cost-model xgb

Prints per workload the wall time, trials per minute and the best GFLOP/s the command
reported. Run it on a quiet machine: any other process on the cores changes every figure.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAYERS = [f"R18-C{i}" for i in range(1, 13)]


def time_command(name: str, trials: int, cost_model: str) -> tuple[float, str]:
    """(wall seconds, best GFLOP/s as printed) of one cold `tessel tune` run."""
    with tempfile.TemporaryDirectory(prefix="tessel-rate-") as tmp:
        env = {**os.environ, "TESSEL_CACHE_DIR": str(Path(tmp) / "kernels")}
        argv = [sys.executable, "-m", "tessel.cli", "tune", name, "--trials", str(trials),
                "--cost-model", cost_model, "--db", str(Path(tmp) / "records.db")]
        start = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    found = re.search(r"best ([\d.]+) GFLOP/s", done.stdout)
    return wall, found.group(1) if found else "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--workloads", default=",".join(LAYERS))
    parser.add_argument("--cost-model", default="pretrained")
    args = parser.parse_args()
    print(f"`tessel tune NAME --trials {args.trials} --cost-model {args.cost_model}`, empty "
          f"database and kernel cache; {time.strftime('%Y-%m-%d %H:%M')}\n")
    print("| workload | wall s | trials/min | best GFLOP/s |")
    print("|---|---:|---:|---:|")
    rates = []
    for name in args.workloads.split(","):
        wall, best = time_command(name, args.trials, args.cost_model)
        rates.append(args.trials / wall * 60)
        print(f"| {name} | {wall:.1f} | {rates[-1]:.1f} | {best} |", flush=True)
    print(f"\nslowest {min(rates):.1f} trials/min, fastest {max(rates):.1f}")


if __name__ == "__main__":
    main()
