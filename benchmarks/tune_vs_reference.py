"""Tune a workload with tessel, then time the tuned kernel beside the vendor library in the
same run: numpy/OpenBLAS for matmul (GMM, GMM-1024), torch/oneDNN for conv2d (R18-*, C2D).

    python benchmarks/tune_vs_reference.py GMM-1024 --trials 256 --db bench.db
    python benchmarks/tune_vs_reference.py R18-C6 --trials 256 --db bench.db

The database keeps every measurement: a second call resumes (and with more --trials goes on).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tessel
from tessel import ops

from common import best_secs, gflops, settle


def reference(func, inputs):
    """The vendor-library call computing what `func` computes, on the same inputs."""
    op, args = func.attrs["op"], func.attrs["args"]
    if op == "matmul":
        a, b = inputs
        return lambda: a @ b, "numpy matmul (OpenBLAS)"
    if op == "conv2d":
        import torch
        torch.set_num_threads(tessel.Target("host").cores)
        x, w = (torch.from_numpy(t) for t in inputs)
        return (lambda: torch.nn.functional.conv2d(
            x, w, stride=args["stride"], padding=args["padding"], dilation=args["dilation"],
            groups=args["groups"]), "torch conv2d (oneDNN)")
    raise SystemExit(f"no reference library for op {op!r}")


def time_against_reference(func, module, rounds: int) -> tuple[float, float, str]:
    """Check `module` (a built program of `func`) against the vendor library on the same
    inputs (SystemExit if it is wrong), then time both in alternating rounds: (best seconds
    of the module, best seconds of the library, the library's name)."""
    inputs = ops.reference_inputs(func, seed=0)
    (out,) = ops.empty_outputs(func)
    module(*inputs, out)
    ref_fn, ref_name = reference(func, inputs)
    want = np.asarray(ref_fn())
    err = float(np.abs(out - want).max() / np.abs(want).max())
    if err > 1e-4:
        raise SystemExit(f"{func.name}: the tuned kernel is wrong (max relative error "
                         f"{err:.3g})")
    ours, theirs = [], []
    for _ in range(rounds):  # alternate: the machine is shared and noisy
        settle()
        ours.append(module.time(*inputs, out, number=5, repeat=3))
        theirs.append(best_secs(ref_fn, 5))
    return min(ours), min(theirs), ref_name


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--strategy", default="evolutionary")
    parser.add_argument("--cost-model", default="xgb")
    parser.add_argument("--db", default="bench.db")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    func = ops.SUITE[args.workload]
    target = tessel.Target("host")
    start = time.perf_counter()
    result = tessel.tune(func, target, args.trials, strategy=args.strategy,
                         cost_model=args.cost_model, database=args.db)
    minutes = (time.perf_counter() - start) / 60
    secs, ref_secs, ref_name = time_against_reference(func, result.module, args.rounds)
    flops = ops.flops(func)
    g_ours, g_ref = gflops(flops, secs), gflops(flops, ref_secs)
    new = len(result.history)
    print(f"target: {target}; {time.strftime('%Y-%m-%d %H:%M')}")
    print(f"{args.workload}: {result.trials_before + new} trials ({new} this run, "
          f"{args.strategy} + {args.cost_model}), {new / minutes:.1f} trials/min this run")
    print(f"  tessel (tuned)            {g_ours:7.1f} GFLOP/s  ({secs * 1e3:.3f} ms)")
    print(f"  {ref_name:<25} {g_ref:7.1f} GFLOP/s  ({ref_secs * 1e3:.3f} ms)")
    print(f"  ratio                     {g_ours / g_ref:7.2f}")


if __name__ == "__main__":
    main()
