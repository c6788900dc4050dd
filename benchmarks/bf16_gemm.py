"""bfloat16 GEMM into float32 with the host's bf16 instructions, against their peak, PyTorch's
bf16 matmul and float32 (tessel's and PyTorch's).

    python benchmarks/bf16_gemm.py [--size 1024] [--rounds 5] [--trials 64 --db bf16.db]

tessel's programs: the auto space's first prior (untuned: MultiLevelTilingWithIntrin picks
AMX's `amx_bf16_32x32` where the target has amx_bf16, else AVX-512 BF16's
`dot_bf16_16x2_avx512`, else the plain space), with --trials the best of a tuning run, and on
an AMX host int8_gemm.py's AMX hand schedule (32 x 32 blocks, the reduction inside the call).
The references, timed in the same run, interleaved: torch.matmul on bfloat16 tensors (oneDNN;
its output rounded to bfloat16, where tessel's stays float32),
torch.matmul in float32 and tessel's float32 GMM (gmm_schedule.py's schedule). The peak is the
probe of int8_gemm.py for the intrinsic (four tdpbf16ps on four accumulator tiles in every
thread; or a 4 x 3 register tile of vdpbf16ps). Outputs are checked against float64 numpy
within float32 accumulation's error before timing.
"""
from __future__ import annotations

import argparse
import time

import ml_dtypes
import numpy as np

import tessel
from tessel import intrin, ops
from tessel.graph.compiler.compile import fallback_program
from tessel.space import default_postprocs, make_space

from common import best_secs, gflops, settle
from gmm_schedule import schedule_gmm
from int8_gemm import pick_intrin, probe_peak, schedule_amx


def untuned(func: tessel.PrimFunc, target: tessel.Target) -> tessel.Module:
    """What a model compiled with no tuning runs (the graph compiler's fallback program: the
    auto space's first expert prior that passes the postprocessors), built."""
    space = make_space("auto", target)
    program, _ = fallback_program(func, space, default_postprocs(target), target)
    return tessel.build(program, target)


def check(c: np.ndarray, a: np.ndarray, b: np.ndarray, label: str, rounded: bool = False
          ) -> None:
    """c equals a @ b within float32 accumulation's error (each bfloat16 product exact), and
    with `rounded` within one rounding to bfloat16 more (torch's bf16 output)."""
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = a.shape[1] * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    bound += 2.0 ** -8 * np.abs(want) if rounded else 0.0
    if not np.all(np.abs(c - want) <= bound):
        raise SystemExit(f"{label}: wrong result (largest error {np.abs(c - want).max():.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--trials", type=int, default=0, help="also tune this many trials")
    parser.add_argument("--db", default="bf16_gemm.db", help="the tuning records")
    args = parser.parse_args()
    n, target = args.size, tessel.Target("host")
    func = ops.matmul(n, n, n, dtype="bfloat16", out_dtype="float32")
    mods = {"tessel bf16 (untuned)": untuned(func, target)}
    amx = pick_intrin(target, "bfloat16", "bfloat16", memory=True)
    if amx is not None:
        mods["tessel bf16 (hand schedule, AMX)"] = tessel.build(
            schedule_amx(tessel.Schedule(func), amx).func, target)
    if args.trials:
        start = time.perf_counter()
        result = tessel.tune(func, target, args.trials, database=args.db)
        mods[f"tessel bf16 ({args.trials} trials)"] = result.module
        print(f"tuned {len(result.history)} trials in {time.perf_counter() - start:.0f} s")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, n)).astype(ml_dtypes.bfloat16)
    c = np.zeros((n, n), np.float32)
    for label, m in mods.items():
        m(a, b, c)
        check(c, a, b, label)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    mods["tessel fp32"] = tessel.build(
        schedule_gmm(tessel.Schedule(ops.matmul(n, n, n)), target).func, target)
    args_of = {label: (a, b, c) for label in mods} | {"tessel fp32": (af, bf, c)}
    runs: dict[str, list[float]] = {label: [] for label in mods}
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        torch.set_num_threads(target.cores)
        ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        tb = torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
        taf, tbf = torch.from_numpy(af), torch.from_numpy(bf)
        check(torch.matmul(ta, tb).float().numpy(), a, b, "torch bf16", rounded=True)
        runs |= {"torch.matmul bf16": [], "torch.matmul fp32": []}
    for _ in range(args.rounds):
        for label, m in mods.items():
            settle()
            runs[label].append(m.time(*args_of[label], number=5, repeat=3))
        if torch is not None:
            runs["torch.matmul bf16"].append(best_secs(lambda: torch.matmul(ta, tb), 3))
            runs["torch.matmul fp32"].append(best_secs(lambda: torch.matmul(taf, tbf), 3))
    vector = next((s for s in intrin.for_target(target)
                   if s.desc.params[0].dtype == "bfloat16" and not s.memory), None)
    print(f"target: {target}")
    peak = 0.0
    for spec in (vector, amx):
        if spec is not None:
            peak = probe_peak(spec, target)
            print(f"{spec.name} peak (probe, {target.cores} threads): {peak:8.1f} GFLOP/s")
    for label, secs in runs.items():
        g = gflops(2.0 * n ** 3, min(secs))
        share = f"  {g / peak:5.1%} of peak" if peak else ""
        print(f"  {label:34s} {g:8.1f} GFLOP/s  ({min(secs) * 1e3:.3f} ms){share}")


if __name__ == "__main__":
    main()
