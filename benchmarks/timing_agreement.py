"""Does the best time `tessel tune` reports agree with what a user's process measures?

For each workload: `tessel tune W --trials N` into a fresh database (the time it reports:
re-timed at the end of the run as a user's process times it, and the time in search beside
it); then, in a new process, what a user does: apply_best, numpy arrays of their own, and
Module.time for `--rounds` rounds (the median), then torch's equivalent (matmul or conv2d)
for reference. Timing tessel alternating with torch put torch's spinning OpenMP threads
into tessel's timings, and resting between them an idle CPU's first milliseconds. The ratio user/reported is what issue 38 asks to be within 5% on a
quiet machine (the Zen 3 of 2026-11-25 reported GMM-1024 at 14.41 ms in search where a user's
process measured 18.8 ms).

    python benchmarks/timing_agreement.py GMM-1024 R18-C6 GMM --trials 64 --repeat 3
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_USER = r"""
import statistics, sys, time
import numpy as np
import torch
import tessel
from tessel import ops
name, db, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
func = ops.SUITE[name]
mod = tessel.apply_best(func, tessel.Target("host"), db, strict=True)
rng = np.random.default_rng(1)
ins = [rng.uniform(-1, 1, p.shape).astype("float32") for p in func.params[:-1]]
out = np.empty(func.params[-1].shape, "float32")
t_ins = [torch.from_numpy(a) for a in ins]
if name.startswith("GMM"):
    ref = lambda: torch.matmul(*t_ins)
else:
    attrs = dict(stride=int(sys.argv[4]), padding=int(sys.argv[5]))
    ref = lambda: torch.nn.functional.conv2d(*t_ins, **attrs)
ours = [mod.time(*ins, out) for _ in range(rounds)]  # alone, as a user times it
time.sleep(0.3)  # then torch (its OpenMP threads would spin into tessel's timings)
theirs = []
for _ in range(rounds):
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < 0.05:
        ref()
        n += 1
    theirs.append((time.perf_counter() - start) / n)
print(f"{statistics.median(ours):.9f} {statistics.median(theirs):.9f}")
"""


def tune(name: str, trials: int, db: Path) -> tuple[float, float, str]:
    """(reported ms, in-search ms, the line) of `tessel tune`."""
    out = subprocess.run([sys.executable, "-m", "tessel.cli", "tune", name, "--trials",
                          str(trials), "--db", str(db)], capture_output=True, text=True,
                         check=True).stdout
    line = out.strip().splitlines()[-1]
    found = re.search(r"\(([\d.]+) ms re-timed.*?; ([\d.]+) ms in search", line)
    return float(found.group(1)), float(found.group(2)), line


def user(name: str, db: Path, rounds: int) -> tuple[float, float]:
    """(tessel ms, torch ms) measured in a user's process."""
    from tessel import ops
    func = ops.SUITE[name]
    extra = []
    if not name.startswith("GMM"):
        k = func.params[1].shape[-1]
        stride = func.params[0].shape[-1] // func.params[-1].shape[-1]
        extra = [str(stride), str(k // 2)]
    out = subprocess.run([sys.executable, "-c", _USER, name, str(db), str(rounds), *extra],
                         capture_output=True, text=True, check=True).stdout
    ours, theirs = (float(x) * 1e3 for x in out.split())
    return ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--repeat", type=int, default=1, help="tune + user runs per workload")
    args = parser.parse_args()
    import tessel
    print(f"{time.strftime('%Y-%m-%d %H:%M')} on {tessel.Target('host')} "
          f"({tessel.Target('host').cpu_model})")
    print(f"{'workload':<10} {'search ms':>10} {'reported ms':>12} {'user ms':>9} "
          f"{'user/reported':>14} {'user/search':>12} {'torch ms':>9}")
    summary = []
    for name in args.workloads:
        ratios = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as tmp:
                db = Path(tmp) / "t.db"
                reported, searched, _ = tune(name, args.trials, db)
                ours, theirs = user(name, db, args.rounds)
            ratios.append((ours / reported, ours / searched))
            print(f"{name:<10} {searched:>10.4f} {reported:>12.4f} {ours:>9.4f} "
                  f"{ours / reported:>14.3f} {ours / searched:>12.3f} {theirs:>9.4f}",
                  flush=True)
        summary.append((name, *(statistics.median(r[k] for r in ratios) for k in (0, 1))))
    print("\nmedian of the runs: " + "; ".join(
        f"{name} user/reported {a:.3f}, user/search {b:.3f}" for name, a, b in summary))


if __name__ == "__main__":
    main()
