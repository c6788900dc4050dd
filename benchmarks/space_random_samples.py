"""Best of N random samples of the auto space vs the unscheduled program, per suite operator.

For each workload: draw N samples of space="auto" (seeded), postprocess, build and time each
(Module.time with min_repeat_ms), check the best against numpy, and time the unscheduled
program (once, number=1, when it is slow). Prints GFLOP/s:

    python benchmarks/space_random_samples.py [--samples 64] [--ops GMM,C2D] [--min-ms 50]
"""
from __future__ import annotations

import argparse
import random
import time

import numpy as np

import tessel
from tessel import ops
from tessel.space import default_postprocs, make_space, postprocess

SUITE = ["C1D", "C2D", "C3D", "DEP", "DIL", "GMM", "GRP", "T2D", "CBR", "TBG", "NRM", "SFM"]


def time_program(func, target, inputs, min_ms: float, quick: bool = False) -> float:
    mod = tessel.build(func, target)
    outs = ops.empty_outputs(func)
    if quick:  # one run: the naive programs of the big convolutions take seconds each
        mod(*inputs, *outs)
        start = time.perf_counter()
        mod(*inputs, *outs)
        return time.perf_counter() - start
    return mod.time(*inputs, *outs, number=1, repeat=3, min_repeat_ms=min_ms)


def best_of_samples(name: str, n: int, target, min_ms: float) -> tuple[float, float, int, float]:
    """(best secs, naive secs, valid samples, max error of the best) for one workload."""
    func = ops.SUITE[name]
    space, posts = make_space("auto", target), default_postprocs(target)
    inputs = ops.reference_inputs(func, seed=0)
    rng = random.Random(0)
    best, best_func, valid = float("inf"), None, 0
    for _ in range(n):
        final = postprocess(space.sample(func, rng), posts)
        if final is None:
            continue
        valid += 1
        secs = time_program(final.func, target, inputs, min_ms)
        if secs < best:
            best, best_func = secs, final.func
    naive = time_program(func, target, inputs, min_ms, quick=True)
    return best, naive, valid, _error(best_func, target, inputs)


def _error(func, target, inputs) -> float:
    outs = ops.empty_outputs(func)
    tessel.build(func, target)(*inputs, *outs)
    expected = ops.run_reference(func, *inputs)
    return float(np.max(np.abs(outs[0] - expected)) / max(1e-30, np.max(np.abs(expected))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--ops", default=",".join(SUITE))
    parser.add_argument("--min-ms", type=float, default=50.0, help="min_repeat_ms per timing")
    args = parser.parse_args()
    target = tessel.Target("host")
    print(f"target: {target}; best of {args.samples} random samples of space='auto'")
    print(f"{'op':5} {'GFLOP/s best':>12} {'GFLOP/s naive':>13} {'speedup':>8} {'valid':>6} "
          f"{'rel.err':>8} {'secs':>6}")
    for name in args.ops.split(","):
        start = time.time()
        best, naive, valid, err = best_of_samples(name, args.samples, target, args.min_ms)
        flops = ops.flops(ops.SUITE[name])
        print(f"{name:5} {flops / best / 1e9:12.2f} {flops / naive / 1e9:13.2f} "
              f"{naive / best:8.1f} {valid:6d} {err:8.1e} {time.time() - start:6.0f}",
              flush=True)


if __name__ == "__main__":
    main()
