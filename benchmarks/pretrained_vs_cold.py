"""Does the shipped cost model help? Tune convolutions that no training set holds for a few
trials with the default cost model ("pretrained": the shipped global model, fine-tuned on the
workload's records) and with a cold one ("xgb": XGBoost from scratch, expert priors first),
each from an empty database, several seeds, and compare the best found.

    python benchmarks/pretrained_vs_cold.py --trials 16 --seeds 0,1,2
    python benchmarks/pretrained_vs_cold.py --trials 16 64 --shapes ODD-3x3-96x20
    python benchmarks/pretrained_vs_cold.py --trials 16 --no-priors
    python benchmarks/pretrained_vs_cold.py --trials 16 --no-priors --target x86_64-avx2

With --no-priors neither arm starts from the space's expert priors (both sample the space and
evolve under their model): what the model itself knows, apart from the priors that a cold
search measures first. The pretrained arm also starts from the shipped file's best programs
of the training workloads nearest each shape (tessel.tuning.knowledge; --no-transplants: the
model alone); the cold arm from nothing.

Prints per shape and budget the best GFLOP/s of each arm (mean over seeds, min-max) and their
ratio, and the tuning wall time of each arm (empty database and kernel cache each run). With
several budgets it also prints AutoTVM's transfer measure: how many trials the cold arm needs
(per seed, up to the largest budget) to reach 98% of what the pretrained arm found (mean over
seeds) in the smallest. The shapes are tools/pretrain_cost_model.py's HELD_BACK: never in the
model's training data. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tessel
from tessel import ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from pretrain_cost_model import HELD_BACK, collection_target, held_back  # noqa: E402

ARMS = ("pretrained", "xgb")
# arm -> (cost model, transplants): the cold arm starts from nothing the shipped file holds
SETUP = {"pretrained": ("pretrained", True), "xgb": ("xgb", False)}


def run(name: str, arm: str, trials: list[int], seed: int, target: tessel.Target,
        priors: bool = True, transplants: bool = True) -> dict:
    """Best GFLOP/s after each budget of `trials` for one arm and seed (one database, resumed
    from budget to budget), and the wall time of the largest."""
    func = held_back(name)
    out: dict = {"best": {}, "wall": 0.0, "gflops": []}  # gflops: every trial's, in order
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TESSEL_CACHE_DIR"] = str(Path(tmp) / "kernels")  # a cold kernel cache
        db = tessel.Database(Path(tmp) / "records.db")
        start = time.perf_counter()
        for budget in sorted(trials):
            model, carried = SETUP[arm]
            options = {"priors": priors, "transplants": 8 if carried and transplants else 0}
            result = tessel.tune(func, target, budget, cost_model=model, database=db,
                                 seed=seed, progress=False, rerun_top=1,
                                 strategy_options=options)
            out["best"][budget] = result.best_gflops
            out["gflops"] += [result.task.gflops(t.seconds) for t in result.history]
        out["wall"] = time.perf_counter() - start
        db.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[16])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--shapes", default=",".join(HELD_BACK))
    parser.add_argument("--no-priors", action="store_true",
                        help="neither arm measures the expert priors first")
    parser.add_argument("--no-transplants", action="store_true",
                        help="the pretrained arm does not start from the shipped file's best "
                             "programs of the nearest training workloads either (the model "
                             "alone)")
    parser.add_argument("--target", default="host", help="host, or a preset this host runs "
                        "(x86_64-avx2 on an AVX-512 host), with the host's cores")
    args = parser.parse_args()
    target = collection_target(args.target)
    seeds = [int(s) for s in args.seeds.split(",")]
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in HELD_BACK]
    if unknown:
        parser.error(f"unknown shape(s) {unknown}; known: {list(HELD_BACK)}")
    print(f"target: {target} ({target.isa_family}); {time.strftime('%Y-%m-%d %H:%M')}; "
          f"seeds {seeds}; expert priors {'off' if args.no_priors else 'on'}; the shipped "
          f"programs {'off' if args.no_transplants else 'on'} in the pretrained arm\n")
    print("| shape | MFLOP | trials | pretrained GFLOP/s | cold xgb GFLOP/s | ratio | "
          "wall s (pre / cold) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ratios = {t: [] for t in args.trials}
    reach: list[str] = []
    first, last = min(args.trials), max(args.trials)
    for name in shapes:
        got = {arm: [run(name, arm, args.trials, s, target, not args.no_priors,
                         not args.no_transplants) for s in seeds] for arm in ARMS}
        for budget in sorted(args.trials):
            best = {arm: np.array([g["best"][budget] for g in got[arm]]) for arm in ARMS}
            ratio = best["pretrained"].mean() / best["xgb"].mean()
            ratios[budget].append(ratio)
            walls = [np.mean([g["wall"] for g in got[arm]]) for arm in ARMS]
            print(f"| {name} | {ops.flops(held_back(name)) / 1e6:.0f} | {budget} | "
                  f"{_spread(best['pretrained'])} | {_spread(best['xgb'])} | {ratio:.2f} | "
                  f"{walls[0]:.0f} / {walls[1]:.0f} |", flush=True)
        if last > first:
            goal = 0.98 * np.mean([g["best"][first] for g in got["pretrained"]])
            needs = [_trials_to(g["gflops"], goal) for g in got["xgb"]]
            reach.append(f"| {name} | {goal / 0.98:.1f} | " + ", ".join(
                str(n) if n else f">{last}" for n in needs) + " |")
    for budget, rs in sorted(ratios.items()):
        print(f"\n{budget} trials: ratio pretrained / cold: geomean "
              f"{np.exp(np.mean(np.log(rs))):.2f}, min {min(rs):.2f}, max {max(rs):.2f}")
    if reach:
        print(f"\n| shape | pretrained best at {first} (GFLOP/s) | trials the cold arm needs "
              f"to reach 98% of it, per seed |\n|---|---:|---|")
        print("\n".join(reach))


def _trials_to(gflops: list[float], goal: float) -> int | None:
    """The 1-based trial at which the running best first reaches `goal` (None: never)."""
    best = 0.0
    for i, g in enumerate(gflops, 1):
        best = max(best, g)
        if best >= goal:
            return i
    return None


def _spread(values: np.ndarray) -> str:
    return f"{values.mean():.1f} ({values.min():.0f}-{values.max():.0f})"


if __name__ == "__main__":
    main()
