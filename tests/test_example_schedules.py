"""The example schedules (benchmarks/gmm_schedule.py, benchmarks/conv2d_schedule.py) are correct
at odd shapes, replay from their traces, and their inner loops become register-blocked FMA
code."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import ir, ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from conv2d_schedule import schedule_conv2d  # noqa: E402
from gmm_schedule import schedule_gmm  # noqa: E402

TARGET = tessel.Target("x86_64-avx2")


@pytest.mark.parametrize("shape", [(515, 389, 203), (97, 100, 61), (6, 16, 1), (64, 64, 64)])
def test_gmm_schedule_matches_numpy(shape):
    M, N, K = shape
    sch = schedule_gmm(tessel.Schedule(ops.matmul(M, N, K)), kt=64)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    c = np.full((M, N), np.nan, np.float32)
    tessel.build(sch.func, TARGET)(a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_gmm_schedule_replays_from_json():
    func = ops.matmul(96, 64, 48)
    sch = schedule_gmm(tessel.Schedule(func))
    replayed = tessel.Trace.from_json(sch.trace.to_json()).apply(tessel.Schedule(func))
    assert ir.structural_equal(replayed.func, sch.func)


def test_gmm_inner_loop_is_register_blocked_fma():
    sch = schedule_gmm(tessel.Schedule(ops.matmul(96, 64, 48)))
    asm = tessel.build(sch.func, TARGET).asm()
    assert asm.count("vfmadd") >= 12
    body = max(asm.split(".L")[1:], key=lambda part: part.count("vfmadd"))
    assert body.count("vfmadd") == 12  # one 6x16 tile: 12 ymm accumulators
    assert "(%rsp)" not in body  # accumulators stay in registers


@pytest.mark.parametrize("args, tile", [
    ((1, 5, 13, 11, 24, 3, 3, 1, 1), dict(oc=16, oh=2, ow=2)),
    ((1, 7, 15, 9, 16, 3, 3, 2, 1), dict(oc=8, oh=3, ow=2, ic=3)),
    ((1, 3, 8, 8, 8, 1, 1, 1, 0), dict(oc=8, oh=1, ow=4)),
])
def test_conv2d_schedule_matches_numpy(args, tile):
    func = ops.conv2d(*args[:7], stride=args[7], padding=args[8])
    sch = schedule_conv2d(tessel.Schedule(func), **tile)
    inputs = ops.reference_inputs(func, seed=2)
    out = np.full(func.outputs[0].shape, np.nan, np.float32)
    tessel.build(sch.func, TARGET)(*inputs, out)
    np.testing.assert_allclose(out, ops.run_reference(func, *inputs), rtol=1e-4, atol=1e-4)
    replayed = tessel.Trace.from_json(sch.trace.to_json()).apply(tessel.Schedule(func))
    assert ir.structural_equal(replayed.func, sch.func)
