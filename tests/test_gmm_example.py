"""The GMM example schedule (benchmarks/gmm_schedule.py) is correct at odd shapes, replays
from its trace, and its inner loop becomes register-blocked FMA code."""
import sys
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import ir, ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
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
