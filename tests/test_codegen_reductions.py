"""Innermost reduction loops get vector accumulators (tessel.codegen.passes.reductions): the programs
are built, run and compared with numpy; the rewrite is checked in the IR and the C."""
import numpy as np
import pytest

from tessel import ops
from tessel.codegen import build, generate_c
from tessel.codegen.passes.reductions import vectorize_reductions
from tessel.ir import For, collect
from tessel.ops import reference
from tessel.target import Target
from isa import ISA_PRESETS, runs_here

HOST = Target("host")
AVX2 = Target("x86_64-avx2")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def lane_loops(func, target=AVX2):
    return [s for s in collect(vectorize_reductions(func, target).body, For)
            if s.kind == "vectorized"]


@ISA_PRESETS
@pytest.mark.parametrize("M, vectors, tail", [(3, 2, 5), (5, 8, 0), (2, 2, 0)])
def test_softmax_rows_reduce_in_vectors(cache_dir, target, M, vectors, tail):
    """max and sum over each row: L lanes (8 with AVX2, 16 with AVX-512), then across the
    lanes, then the N % L tail; rows of two vectors are the shortest that get lanes."""
    N = vectors * target.vector_lanes("float32") + tail
    func = ops.softmax(M, N)
    # maxelem and expsum: identity fill + accumulate each
    assert len(lane_loops(func, target)) == 4
    source = generate_c(func, target)
    assert "maxelem_lanes" in source and "expsum_lanes" in source
    if runs_here(target):
        x = rand(M, N) * 4
        out = np.zeros((M, N), np.float32)
        build(func, target, cache_dir=cache_dir)(x, out)
        np.testing.assert_allclose(out, reference.softmax(x), rtol=2e-6, atol=1e-7)


@ISA_PRESETS
def test_a_vector_accumulator_folds_as_a_tree_and_keeps_nans(cache_dir, target):
    """The lanes of the maximum's and the sum's vectors go into the scalar in log2(lanes)
    whole-vector steps (tessel.codegen.passes.lanes), not lane by lane; a NaN anywhere in a
    row, in any lane or in the tail, is the row's maximum (so its softmax is NaN), and the
    rows without one match numpy."""
    lanes = target.vector_lanes("float32")
    M, N = 2 * lanes + 4, 3 * lanes + 5
    func = ops.softmax(M, N)
    source = generate_c(func, target)
    assert f"{_vector(target)}_fold_max(" in source and f"{_vector(target)}_fold_sum(" in source
    assert "_lanes_0[1]" not in source  # no lane read one at a time
    if runs_here(target):
        x = rand(M, N) * 4
        nan_at = [(r, r % N) for r in range(0, M, 3)] + [(1, N - 1)]
        for r, c in nan_at:
            x[r, c] = np.nan
        out = np.zeros((M, N), np.float32)
        build(func, target, cache_dir=cache_dir)(x, out)
        nan_rows = sorted({r for r, _ in nan_at})
        assert np.isnan(out[nan_rows]).all()
        rest = [r for r in range(M) if r not in nan_rows]
        np.testing.assert_allclose(out[rest], reference.softmax(x[rest]), rtol=2e-6, atol=1e-7)


def _vector(target):
    return f"tessel_f32x{target.vector_lanes('float32')}"


@pytest.mark.parametrize("M, N, K", [(3, 5, 37), (4, 7, 64)])
def test_unscheduled_dense_becomes_vector_dot_products(cache_dir, M, N, K):
    """data[i, k] * weight[j, k]: both contiguous in k, with the init of the block first."""
    func = ops.dense(M, N, K, bias=False)
    assert lane_loops(func)
    x, w = rand(M, K), rand(N, K, seed=1)
    out = np.zeros((M, N), np.float32)
    build(func, HOST, cache_dir=cache_dir)(x, w, out)
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)


def test_layer_norm_vectorizes_and_a_two_axis_pool_with_init_does_not(cache_dir):
    ln = ops.layer_norm(3, 50)
    assert len(lane_loops(ln)) == 4
    x, g, b = rand(3, 50), rand(50, seed=1), rand(50, seed=2)
    out = np.zeros((3, 50), np.float32)
    build(ln, HOST, cache_dir=cache_dir)(x, g, b, out)
    np.testing.assert_allclose(out, reference.layer_norm(x, g, b), rtol=1e-4, atol=1e-5)
    pool = ops.global_avg_pool2d(1, 3, 7, 19)
    # its block's init runs when both ry and rx are 0: the inner rx loop alone cannot start
    # the accumulation, so it stays scalar (a scheduled program has its init split off)
    assert not lane_loops(pool)
    d = rand(1, 3, 7, 19)
    out = np.zeros((1, 3, 1, 1), np.float32)
    build(pool, HOST, cache_dir=cache_dir)(d, out)
    np.testing.assert_allclose(out, d.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


@ISA_PRESETS
def test_strided_or_short_reductions_stay_scalar(target):
    """matmul's B[k, j] moves by N per k: lane-by-lane gathers would not pay; a loop shorter
    than two vectors is left alone."""
    short = 2 * target.vector_lanes("float32") - 1
    assert not lane_loops(ops.matmul(4, 6, 40), target)
    func = ops.softmax(4, short)
    assert not lane_loops(func, target)
    assert vectorize_reductions(func, target) is func
    assert "_lanes" not in generate_c(func, target)
