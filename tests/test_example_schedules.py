"""The example schedules (benchmarks/gmm_schedule.py, benchmarks/conv2d_schedule.py) are correct
at odd shapes, replay from their traces, and their inner loops become register-blocked FMA
code sized for each ISA preset (run where the host can, compiled and read everywhere)."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.codegen import asm_for, generate_c
from tessel.codegen.passes import compact_buffers
from isa import HOST, ISA_PRESETS, fmas, hot_loop, runs_here, spills

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from conv2d_schedule import schedule_conv2d  # noqa: E402
from gmm_schedule import schedule_gmm  # noqa: E402



def _runnable(target: tessel.Target) -> tessel.Target:
    """`target` if this host runs its code, else the host (the schedule stays sized for
    `target`: only the instructions differ)."""
    return target if runs_here(target) else HOST


@ISA_PRESETS
@pytest.mark.parametrize("shape", [(515, 389, 203), (97, 100, 61), (6, 16, 1), (64, 64, 64)])
def test_gmm_schedule_matches_numpy(target, shape):
    M, N, K = shape
    sch = schedule_gmm(tessel.Schedule(ops.matmul(M, N, K)), target, kt=64)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    tessel.build(sch.func, _runnable(target))(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_gmm_schedule_replays_from_json():
    func = ops.matmul(96, 64, 48)
    sch = schedule_gmm(tessel.Schedule(func))
    replayed = tessel.Trace.from_json(sch.trace.to_json()).apply(tessel.Schedule(func))
    assert ir.structural_equal(replayed.func, sch.func)


@ISA_PRESETS
def test_gmm_inner_loop_is_register_blocked_fma(target):
    """At M = 96 the tile is 6 x 2 vectors (AVX2: 12 ymm accumulators of 16 registers) or
    12 x 2 vectors (AVX-512: 24 zmm accumulators of 32), all in registers."""
    rows = target.accumulator_registers // 2
    sch = schedule_gmm(tessel.Schedule(ops.matmul(96, 4 * target.vector_lanes("float32"), 48)),
                       target)
    loop = hot_loop(asm_for(generate_c(compact_buffers(sch.func), target), target))
    assert len(fmas(loop, target)) == 2 * rows
    assert not spills(loop), loop  # accumulators stay in registers


@ISA_PRESETS
@pytest.mark.parametrize("args, tile", [
    ((1, 5, 13, 11, 24, 3, 3, 1, 1), dict(oc=16, oh=2, ow=2)),
    ((1, 7, 15, 9, 16, 3, 3, 2, 1), dict(oc=8, oh=3, ow=2, ic=3)),
    ((1, 3, 8, 8, 8, 1, 1, 1, 0), dict(oc=8, oh=1, ow=4)),
    ((1, 6, 14, 14, 40, 3, 3, 1, 1), {}),  # the tile the target implies
])
def test_conv2d_schedule_matches_numpy(target, args, tile):
    func = ops.conv2d(*args[:7], stride=args[7], padding=args[8])
    sch = schedule_conv2d(tessel.Schedule(func), target, **tile)
    inputs = ops.reference_inputs(func, seed=2)
    out = np.full(func.outputs[0].shape, np.nan, np.float32)
    tessel.build(sch.func, _runnable(target))(*inputs, out)
    np.testing.assert_allclose(out, ops.run_reference(func, *inputs), rtol=1e-4, atol=1e-4)
    replayed = tessel.Trace.from_json(sch.trace.to_json()).apply(tessel.Schedule(func))
    assert ir.structural_equal(replayed.func, sch.func)


@ISA_PRESETS
def test_conv2d_inner_loop_is_register_blocked_fma(target):
    """R18-C6's 28-wide rows: 2 x 2 pixels x 2 vectors with AVX2, 2 x 4 x 2 with AVX-512 (the
    widest pixel row that divides 28 within the accumulator registers)."""
    sch = schedule_conv2d(tessel.Schedule(ops.SUITE["R18-C6"]), target)
    loop = hot_loop(asm_for(generate_c(compact_buffers(sch.func), target), target))
    pixels = 4 if target.vector_registers == 16 else 8
    assert len(fmas(loop, target)) % (2 * pixels) == 0 and fmas(loop, target)
    assert not spills(loop), loop
