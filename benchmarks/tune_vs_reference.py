"""Tune a workload with tessel, then time the tuned kernel beside the vendor libraries in the
same run: numpy (OpenBLAS) and torch for matmul (GMM, GMM-1024), torch/oneDNN for conv2d
(R18-*, C2D).

    python benchmarks/tune_vs_reference.py GMM-1024 --trials 256 --db bench.db
    python benchmarks/tune_vs_reference.py R18-C6 --trials 256 --db bench.db
    python benchmarks/tune_vs_reference.py GMM-1024 --trials 64 --target x86_64-avx2

With --target a preset of a smaller family than the host's (x86_64-avx2 on an AVX-512 host),
tessel tunes for the preset and the libraries are held to the same instructions
(OPENBLAS_CORETYPE, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA, set before they load: the
script runs itself again with them), as on a host of that family.
The database keeps every measurement: a second call resumes (and with more --trials goes on).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

import tessel
from tessel import ops

from common import best_secs, gflops, settle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from pretrain_cost_model import collection_target  # noqa: E402

# what each library reads to keep to one instruction set, by tessel ISA family
LIBRARY_ISA = {"x86_64-avx2": {"OPENBLAS_CORETYPE": "Haswell",
                               "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                               "ONEDNN_MAX_CPU_ISA": "AVX2"}}


def references(func, inputs, cores: int) -> dict:
    """The vendor-library calls computing what `func` computes, on the same inputs:
    {name: callable}."""
    op, args = func.attrs["op"], func.attrs["args"]
    try:
        import torch
        torch.set_num_threads(cores)
    except ImportError:
        torch = None
    if op == "matmul":
        a, b = inputs
        found = {"numpy matmul (OpenBLAS)": lambda: a @ b}
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            found["torch matmul"] = lambda: (ta @ tb).numpy()
        return found
    if op == "conv2d" and torch is not None:
        x, w = (torch.from_numpy(t) for t in inputs)
        return {"torch conv2d (oneDNN)": lambda: torch.nn.functional.conv2d(
            x, w, stride=args["stride"], padding=args["padding"], dilation=args["dilation"],
            groups=args["groups"]).numpy()}
    raise SystemExit(f"no reference library for op {op!r}"
                     + ("" if torch is not None else " without torch"))


def time_against_references(func, module, rounds: int, cores: int) -> tuple[float, dict]:
    """Check `module` (a built program of `func`) against each vendor library on the same
    inputs (SystemExit if it is wrong), then time them all in alternating rounds: (best
    seconds of the module, {library: its best seconds})."""
    inputs = ops.reference_inputs(func, seed=0)
    (out,) = ops.empty_outputs(func)
    module(*inputs, out)
    refs = references(func, inputs, cores)
    for name, ref_fn in refs.items():
        want = np.asarray(ref_fn())
        err = float(np.abs(out - want).max() / np.abs(want).max())
        if err > 1e-4:
            raise SystemExit(f"{func.name}: the tuned kernel is wrong against {name} (max "
                             f"relative error {err:.3g})")
    ours, theirs = [], {name: [] for name in refs}
    for _ in range(rounds):  # alternate: the machine is shared and noisy
        settle()
        ours.append(module.time(*inputs, out, number=5, repeat=3))
        for name, ref_fn in refs.items():
            theirs[name].append(best_secs(ref_fn, 5))
    return min(ours), {name: min(t) for name, t in theirs.items()}


def held_to(family: str) -> None:
    """Run this script again with the libraries held to `family`'s instructions, unless
    they already are (their settings are read once, when they load)."""
    wanted = LIBRARY_ISA.get(family, {})
    if all(os.environ.get(k) == v for k, v in wanted.items()):
        return
    os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **wanted})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--strategy", default="evolutionary")
    parser.add_argument("--cost-model", default="xgb")
    parser.add_argument("--target", default="host",
                        help="host, or a preset of a smaller family the host runs")
    parser.add_argument("--db", default="bench.db")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.workload not in ops.SUITE:
        parser.error(f"unknown workload {args.workload!r}; known: {', '.join(ops.SUITE)}")
    target = collection_target(args.target)
    if args.target != "host":
        held_to(target.isa_family)
    func = ops.SUITE[args.workload]
    start = time.perf_counter()
    result = tessel.tune(func, target, args.trials, strategy=args.strategy,
                         cost_model=args.cost_model, database=args.db)
    minutes = (time.perf_counter() - start) / 60
    secs, refs = time_against_references(func, result.module, args.rounds, target.cores)
    flops = ops.flops(func)
    g_ours = gflops(flops, secs)
    new = len(result.history)
    held = " ".join(f"{k}={os.environ[k]}" for k in LIBRARY_ISA.get(target.isa_family, {})
                    if k in os.environ)
    print(f"target: {target} ({target.isa_family}); {time.strftime('%Y-%m-%d %H:%M')}"
          + (f"; libraries held to {held}" if held else ""))
    print(f"{args.workload}: {result.trials_before + new} trials ({new} this run, "
          f"{args.strategy} + {args.cost_model}), {new / minutes:.1f} trials/min this run")
    print(f"  tessel (tuned)            {g_ours:7.1f} GFLOP/s  ({secs * 1e3:.3f} ms)")
    for name, ref_secs in refs.items():
        g_ref = gflops(flops, ref_secs)
        print(f"  {name:<25} {g_ref:7.1f} GFLOP/s  ({ref_secs * 1e3:.3f} ms)  "
              f"tessel {g_ours / g_ref:.2f}x")
    best = min(refs.values())
    print(f"  against the best library  {best / secs:7.2f}x")


if __name__ == "__main__":
    main()
