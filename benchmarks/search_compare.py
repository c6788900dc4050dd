"""Model-based search against random search at equal trials: best GFLOP/s after 16, 32, 64 ...
trials, per workload and strategy, each run on a fresh database; curves saved as PNGs, and
the databases kept (their records serve benchmarks/cost_model_eval.py).

    python benchmarks/search_compare.py --workloads GMM,C1D,R18-C6 --trials 64
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import tessel
from tessel import ops
from tessel.tuning import report

CONFIGS = {"evolutionary+xgb": ("evolutionary", "xgb"), "annealing+xgb": ("annealing", "xgb"),
           "random": ("random", "random")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default="GMM,C1D,R18-C6")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--configs", default="evolutionary+xgb,random")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="search_compare",
                        help="folder for the PNGs and the databases (<search>-<workload>.db)")
    args = parser.parse_args()
    target, out = tessel.Target("host"), Path(args.out)
    out.mkdir(exist_ok=True)
    marks = [m for m in (8, 16, 32, 64, 128, 256) if m <= args.trials]
    print(f"target: {target}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{'workload':<9} {'search':<18} " + " ".join(f"{'@' + str(m):>7}" for m in marks)
          + f" {'trials/min':>10}")
    for name in args.workloads.split(","):
        func, curves = ops.SUITE[name], {}
        for label in args.configs.split(","):
            strategy, model = CONFIGS[label]
            db = out / f"{label}-{name}.db"  # every run starts from nothing: no resuming
            if db.exists():
                raise SystemExit(f"{db} exists: a comparison starts from an empty database; "
                                 "move it away or pass another --out")
            start = time.perf_counter()
            result = tessel.tune(func, target, args.trials, strategy=strategy, cost_model=model,
                                 database=db, seed=args.seed, progress=False, rerun_top=1)
            rate = len(result.history) / ((time.perf_counter() - start) / 60)
            curve = report.curve(label, [h.seconds for h in result.history], ops.flops(func))
            curves[label] = curve
            at = [f"{curve.best_gflops[m - 1]:>7.1f}" if curve.trials >= m else f"{'-':>7}"
                  for m in marks]
            print(f"{name:<9} {label:<18} {' '.join(at)} {rate:>10.1f}", flush=True)
        report.plot(curves, out / f"{name}.png", title=f"{name} on {target}")


if __name__ == "__main__":
    main()
