"""Which kernels of a tuned model run slower now than when they were chosen?

`tessel tune-model` ends by timing each task's best records inside the model's sequence and
storing the fastest as its choice, with that in-sequence time. This script compiles the model
with the same database, times every kernel inside whole runs of the sequence now (the median
of `--runs` runs), and lists each against its choice's time, most slowed first. On a shared
machine whose speed moves in phases, this tells compute-bound kernels (unchanged) from those
that move data (Winograd transforms, strided 1x1 convolutions) at a glance:

    python benchmarks/kernel_drift.py resnet18.onnx --db tuned.db --runs 200

Kernels without a stored choice (untuned, or a record newer than the choice) show "-".
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import tessel
from tessel.database import Database
from tessel.graph.compiler import compile_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("--db", required=True, help="the database the model was tuned into")
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    if not Path(args.db).is_file():
        parser.error(f"no database at {args.db}")
    target = tessel.Target("host")
    model = compile_model(args.model, target, args.db)
    db = Database(args.db)
    rng = np.random.default_rng(0)
    model(*[rng.standard_normal(model.graph.types[v].shape).astype("float32")
            for v in model.input_names])
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    now = model.profile(repeat=args.runs, in_sequence=True)
    rows = []
    for k, ((name, secs), func) in enumerate(zip(now, model.kernel_funcs)):
        chosen = db.selection(func, target)
        rows.append((k, name, secs, chosen.mean_secs if chosen is not None else None))
    rows.sort(key=lambda r: -(r[2] / r[3]) if r[3] else 0.0)
    print(f"{args.model} on {target}, {stamp}: {len(rows)} kernels, median of {args.runs} "
          "runs of the sequence")
    print(f"{'#':>3} {'kernel':<40} {'now us':>9} {'chosen us':>10} {'now/chosen':>10}")
    for k, name, secs, then in rows:
        ratio = f"{secs / then:10.2f}" if then else f"{'-':>10}"
        then_us = f"{then * 1e6:10.1f}" if then else f"{'-':>10}"
        print(f"{k:>3} {name[:40]:<40} {secs * 1e6:9.1f} {then_us} {ratio}")
    known = [(s, t) for _, _, s, t in rows if t]
    print(f"sum: now {sum(r[2] for r in rows) * 1e3:.3f} ms; "
          f"kernels with a choice {sum(s for s, _ in known) * 1e3:.3f} ms now, "
          f"{sum(t for _, t in known) * 1e3:.3f} ms when chosen")


if __name__ == "__main__":
    main()
