"""ResNet-18 C6 (conv2d 28x28, 128 -> 128, 3x3, pad 1) scheduled with tessel's primitives, timed
beside torch's conv2d in the same run.

The same register-blocking structure as benchmarks/gmm_schedule.py, with output channels in
the vector lanes:

    weight_global = cache_read(conv2d, weight); transform_layout -> [o // 16, i, h, w, o % 16]
    conv2d_local  = cache_write(conv2d, "local")
    o -> o0 o1(16)   y -> y0 y1(2)   x -> x0 x1(2)   rc -> rc0 rc1
    order n o0 y0 x0 rc0 rc1 ry rx y1 x1 o1;  local tile written back at x0;
    y1, x1 unrolled, o1 vectorized (two 8-lane vectors), fuse(n, o0, y0) parallel

so each (rc, ry, rx) step is 2 vector loads of packed weights, 4 broadcasts of the padded
input and 8 FMAs into registers.

    python benchmarks/conv2d_schedule.py [--workload R18-C6] [--rounds 5] [--trace]
"""
from __future__ import annotations

import argparse
import re

import numpy as np

import tessel
from tessel import ops

from common import best_secs, gflops, hot_loop


def schedule_conv2d(sch: tessel.Schedule, oc: int = 16, oh: int = 2, ow: int = 2,
                    ic: int | None = None) -> tessel.Schedule:
    """Schedule the "pad" and "conv2d" blocks of an ops.conv2d NCHW program in place.

    oc x oh x ow is the register tile (oc a multiple of the vector width); ic splits the
    input-channel reduction (None: not split)."""
    conv = sch.get_block("conv2d")
    _pack_weight(sch, conv, oc)
    if any(b.name == "pad" for b in tessel.ir.blocks(sch.func.body)):
        sch.parallel(sch.get_loops(sch.get_block("pad"))[1])
    local = sch.cache_write(conv, 0, "local")
    n, o, y, x, rc, ry, rx = sch.get_loops(conv)
    o0, o1 = sch.split(o, [None, oc])
    y0, y1 = sch.split(y, [None, oh])
    x0, x1 = sch.split(x, [None, ow])
    rc0, rc1 = sch.split(rc, [None, ic or sch.get(rc).extent])
    sch.reorder(n, o0, y0, x0, rc0, rc1, ry, rx, y1, x1, o1)
    sch.reverse_compute_at(local, x0)
    init = sch.decompose_reduction(conv, rc0)
    sch.unroll(y1)
    sch.unroll(x1)
    sch.vectorize(o1)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.parallel(sch.fuse(n, o0, y0))
    return sch


def _pack_weight(sch: tessel.Schedule, conv, oc: int) -> None:
    """Copy the weight into blocks of oc output channels, innermost (a parallel pre-stage)."""
    pack = sch.cache_read(conv, 1, "global")
    sch.transform_layout(conv, 1, "read", f"lambda o, i, h, w: (o // {oc}, i, h, w, o % {oc})")
    o, i, h, w = sch.get_loops(pack)
    o0, o1 = sch.split(o, [None, oc])
    sch.reorder(o0, i, h, w, o1)
    sch.vectorize(o1)
    sch.parallel(o0)


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", default="R18-C6")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--trace", action="store_true", help="print the schedule's trace")
    args = parser.parse_args()
    target = tessel.Target("host")
    func = ops.SUITE[args.workload]
    conv_args = func.attrs["args"]
    sch = schedule_conv2d(tessel.Schedule(func))
    mod = tessel.build(sch.func, target)
    rng = np.random.default_rng(0)
    data, weight = (rng.standard_normal(b.shape).astype(np.float32) for b in func.inputs)
    out = np.zeros(func.outputs[0].shape, np.float32)
    mod(data, weight, out)
    torch.set_num_threads(target.cores)
    td, tw = torch.from_numpy(data), torch.from_numpy(weight)
    conv = lambda: torch.nn.functional.conv2d(  # noqa: E731
        td, tw, stride=conv_args["stride"], padding=conv_args["padding"],
        dilation=conv_args["dilation"], groups=conv_args["groups"])
    ref = conv().numpy()
    err = float(np.abs(out - ref).max() / np.abs(ref).max())
    assert err < 1e-5, f"wrong result: max relative error {err}"
    ours, theirs = [], []
    for _ in range(args.rounds):  # alternate: the machine is shared and noisy
        ours.append(mod.time(data, weight, out, number=10, repeat=3))
        theirs.append(best_secs(conv, 10))
    flops = ops.flops(func)
    g_ours, g_torch = gflops(flops, min(ours)), gflops(flops, min(theirs))
    print(f"target: {target}")
    print(f"{args.workload}: max relative error vs torch {err:.1e}")
    print(f"  tessel (schedule primitives)  {g_ours:7.1f} GFLOP/s  ({min(ours) * 1e3:.3f} ms)")
    print(f"  torch conv2d (oneDNN)         {g_torch:7.1f} GFLOP/s  ({min(theirs) * 1e3:.3f} ms)")
    print(f"  ratio                         {g_ours / g_torch:7.2f}")
    loop = hot_loop(mod.asm())
    stack = re.findall(r"\b(?:vmov\w*|vfmadd\w*)\s+%ymm\d+, [^\n]*\(%r[sb]p\)", loop)
    print(f"hot loop: {loop.count('vfmadd')} ymm FMAs, {len(stack)} vector stores to the stack")
    if args.trace:
        print(sch.trace.script())


if __name__ == "__main__":
    main()
