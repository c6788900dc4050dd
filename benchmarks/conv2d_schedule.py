"""ResNet-18 C6 (conv2d 28x28, 128 -> 128, 3x3, pad 1) scheduled with tessel's primitives, timed
beside torch's conv2d in the same run.

The same register-blocking structure as benchmarks/gmm_schedule.py, with output channels in
the vector lanes:

    weight_global = cache_read(conv2d, weight); transform_layout -> [o // oc, i, h, w, o % oc]
    conv2d_local  = cache_write(conv2d, "local")
    o -> o0 o1(oc)   y -> y0 y1(oh)   x -> x0 x1(ow)   rc -> rc0 rc1
    order n o0 y0 x0 rc0 rc1 ry rx y1 x1 o1;  local tile written back at x0;
    y1, x1 unrolled, o1 vectorized (two vectors), fuse(n, o0, y0) parallel

with the register tile sized for the target: oc two vectors of output channels, oh x ow
pixels within its accumulator registers, ow the widest that divides the output rows (a
partial tile's predicates keep the accumulators out of registers): on R18-C6's 28-wide rows
AVX2 16 channels x 2 x 2 pixels in 8 ymm registers, AVX-512 32 x 2 x 4 in 16 zmm registers
(0.98x torch; 32 x 2 x 6 spilled and ran at 0.13x; 2026-11-23, Zen 4). Each (rc, ry, rx)
step is 2 vector loads of packed weights, oh * ow broadcasts of the padded input and
2 * oh * ow FMAs into registers.

    python benchmarks/conv2d_schedule.py [--workload R18-C6] [--rounds 5] [--trace]
"""
from __future__ import annotations

import argparse

import numpy as np

import tessel
from tessel import ops
from tessel.codegen.asm import summary

from common import best_secs, gflops, settle
from gmm_schedule import largest_divisor


def schedule_conv2d(sch: tessel.Schedule, target: tessel.Target | None = None,
                    oc: int | None = None, oh: int = 2, ow: int | None = None,
                    ic: int | None = None) -> tessel.Schedule:
    """Schedule the "pad" and "conv2d" blocks of an ops.conv2d NCHW program in place.

    oc x oh x ow is the register tile (oc a multiple of the vector width; by default two
    vectors of `target`, and ow the most pixels that fit its accumulator registers and divide
    the output width); ic splits the input-channel reduction (None: not split)."""
    target = target if target is not None else tessel.Target("host")
    conv = sch.get_block("conv2d")
    oc = oc or 2 * target.vector_lanes("float32")
    width = sch.get(sch.get_loops(conv)[3]).extent
    ow = ow or largest_divisor(width, target.accumulator_registers // (2 * oh))
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
    parser.add_argument("--tile", help="register tile oc,oh,ow (default: sized for the host)")
    args = parser.parse_args()
    target = tessel.Target("host")
    tile = dict(zip(("oc", "oh", "ow"), map(int, args.tile.split(",")))) if args.tile else {}
    func = ops.SUITE[args.workload]
    conv_args = func.attrs["args"]
    sch = schedule_conv2d(tessel.Schedule(func), target, **tile)
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
        settle()
        ours.append(mod.time(data, weight, out, number=10, repeat=3))
        theirs.append(best_secs(conv, 10))
    flops = ops.flops(func)
    g_ours, g_torch = gflops(flops, min(ours)), gflops(flops, min(theirs))
    print(f"target: {target}")
    print(f"{args.workload}: max relative error vs torch {err:.1e}")
    print(f"  tessel (schedule primitives)  {g_ours:7.1f} GFLOP/s  ({min(ours) * 1e3:.3f} ms)")
    print(f"  torch conv2d (oneDNN)         {g_torch:7.1f} GFLOP/s  ({min(theirs) * 1e3:.3f} ms)")
    print(f"  ratio                         {g_ours / g_torch:7.2f}")
    print(summary(mod.asm(), target))
    if args.trace:
        print(sch.trace.script())


if __name__ == "__main__":
    main()
