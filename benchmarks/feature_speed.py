"""Feature extraction speed: candidates per second for each feature set.

    python benchmarks/feature_speed.py [--n 300] [--workload GMM-1024] [--repeat 3]

Builds n distinct random multi-level-tiled schedules of the workload (real primitives:
sample_perfect_tile + split + reorder, cache_write + reverse_compute_at, fuse + parallel,
vectorize, unroll, auto-unroll annotations; see random_schedules.py), then times
`features.extract(name, candidates)` per feature set. The per-program analysis cache is
emptied before each timed pass, so every pass walks every program; the per-store cache
(block bodies shared by the candidates of one workload) stays warm, as it is in a tuner.
"cold" is one pass with every cache empty. Goal: >= 1,000 GMM-1024 candidates per second.
"""
from __future__ import annotations

import argparse
import time

from random_schedules import random_schedules

from tessel import features, ops
from tessel.features import analysis, walker
from tessel.measure import MeasureCandidate


def clear_caches(warm_stores: bool) -> None:
    walker._nest_cache.clear()
    if not warm_stores:
        walker._store_cache.clear()
        analysis._linear_cache.clear()


def rate(name: str, cands: list, repeat: int, warm_stores: bool = True) -> float:
    best = float("inf")
    for _ in range(repeat):
        clear_caches(warm_stores)
        t0 = time.perf_counter()
        features.extract(name, cands)
        best = min(best, time.perf_counter() - t0)
    return len(cands) / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--workload", default="GMM-1024")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    func = ops.SUITE[args.workload]
    schedules = random_schedules(func, args.n, seed=0)
    cands = [MeasureCandidate(func, s.func, s.trace) for s in schedules]
    loops = sum(analysis_loops(c.func) for c in cands) / len(cands)
    print(f"{args.workload}: {len(cands)} distinct schedules, {loops:.1f} loops on average")
    print(f"{'feature set':<12} {'width':>6} {'cands/s':>10}")
    for name in features.NAMES:
        width = features.extract(name, cands[:1]).shape[1]
        print(f"{name:<12} {width:>6} {rate(name, cands, args.repeat):>10.0f}")
    cold = rate(features.DEFAULT, cands, 1, warm_stores=False)
    print(f"{features.DEFAULT + ' cold':<12} {'':>6} {cold:>10.0f}")


def analysis_loops(func) -> int:
    return features.analyze(func).n_loops


if __name__ == "__main__":
    main()
