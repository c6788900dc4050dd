"""Tensorized int8 (and bfloat16) matmuls for the tests of tessel.intrin
(test_schedule_tensorize.py, test_bfloat16.py and, for AArch64's intrinsics under emulation,
test_aarch64.py)."""
import sys
from pathlib import Path

import ml_dtypes
import numpy as np

from tessel import ops
from tessel.schedule import Schedule
from tessel.target import Target

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from int8_gemm import schedule_amx  # noqa: E402


HOST = Target("host")


def runs_here(spec):
    """Whether this host can run the intrinsic."""
    return spec.arch == HOST.arch and not spec.missing(HOST)


def dims(spec):
    """(lanes, group) of a dot-product intrinsic: C[j] += A[k] * B[j, k], j < lanes, k < group."""
    return spec.block.iter_vars[0].extent, spec.block.iter_vars[1].extent


def acc_dtype(spec):
    """The intrinsic's accumulator dtype (int32; float32 for bfloat16)."""
    return spec.block.body.buffer.dtype


def int8_matmul(spec, M, N, K):
    """The matmul of the intrinsic's operand and accumulator dtypes (bfloat16's too)."""
    a, b = (p.dtype for p in spec.desc.params[:2])
    return ops.matmul(M, N, K, dtype=a, b_dtype=b, out_dtype=acc_dtype(spec))


def tensorized(spec, M, N, K, *, mr=1, via_blockize=False):
    """A matmul whose innermost block is `spec`: B packed for it, an mr-row register tile."""
    lanes, group = dims(spec)
    sch = Schedule(int8_matmul(spec, M, N, K))
    c = sch.get_block("C")
    sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read",
                         f"lambda k, j: (j // {lanes}, k // {group}, j % {lanes}, k % {group})")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, lanes])
    k0, k1 = sch.split(k, [None, group])
    sch.reorder(i0, j0, k0, i1, j1, k1)
    sch.decompose_reduction(c, k0)
    if via_blockize:
        sch.tensorize(sch.blockize(j1), spec.name)
    else:
        sch.tensorize(j1, spec.name)
    sch.unroll(i1)
    return sch


def amx_tensorized(spec, M, N, K, chunk, decompose=True):
    """A matmul whose 32 x 32 blocks are AMX's memory intrinsic (tessel.intrin.amx), each call
    over `chunk` of the reduction, with a local accumulator: benchmarks/int8_gemm.py's hand
    schedule; with `decompose`, its zeroing is a block of its own, else the call's zero
    flag."""
    return schedule_amx(Schedule(int8_matmul(spec, M, N, K)), spec, chunk, decompose)


def operands(spec, M, N, K, extreme=False, seed=0):
    """Random (A, B) of the intrinsic's dtypes; `extreme`: the largest products (for
    bfloat16: +-2^50 and an odd mantissa, so every product is exact and none overflows)."""
    a_dtype, b_dtype = (p.dtype for p in spec.desc.params[:2])
    rng = np.random.default_rng(seed)
    if a_dtype == "bfloat16":
        bf16 = ml_dtypes.bfloat16
        if extreme:
            signs = rng.choice([-1.0, 1.0], (M, K)), rng.choice([-1.0, 1.0], (K, N))
            return tuple((s * 1.5078125 * 2.0 ** 50).astype(bf16) for s in signs)
        return (rng.standard_normal((M, K)).astype(bf16),
                rng.standard_normal((K, N)).astype(bf16))
    if extreme:  # the largest products: 255 (or -128) times -128, summed over K
        a = np.full((M, K), 255 if a_dtype == "uint8" else -128, a_dtype)
        return a, np.full((K, N), -128, b_dtype)
    lo = 0 if a_dtype == "uint8" else -128
    return (rng.integers(lo, lo + 256, (M, K)).astype(a_dtype),
            rng.integers(-128, 128, (K, N)).astype(b_dtype))


def accumulator(spec, M, N):
    """An output for the intrinsic's matmul holding 7s (an init must overwrite them)."""
    return np.full((M, N), 7, acc_dtype(spec))


def assert_product(c, a, b):
    """c == a @ b: exactly for integers; for bfloat16 operands within float32 accumulation's
    error (each product exact, K roundings of a sum up to sum |a||b|)."""
    want = a.astype(np.float64) @ b.astype(np.float64) if c.dtype.kind == "f" else \
        a.astype(np.int64) @ b.astype(np.int64)
    if c.dtype.kind != "f":
        np.testing.assert_array_equal(c, want)
        return
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert np.all(np.abs(c - want) <= a.shape[1] * 2.0 ** -24 * bound + 1e-30), \
        f"largest error {np.abs(c - want).max():.3g} (bound {a.shape[1] * 2.0 ** -24:.3g} " \
        "x |a||b|)"
