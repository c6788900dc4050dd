"""Tensorized int8 matmuls for the tests of tessel.intrin (test_schedule_tensorize.py and, for
AArch64's intrinsics under emulation, test_aarch64.py)."""
import sys
from pathlib import Path

import numpy as np

from tessel import ops
from tessel.schedule import Schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from int8_gemm import schedule_amx  # noqa: E402


def dims(spec):
    """(lanes, group) of a dot-product intrinsic: C[j] += A[k] * B[j, k], j < lanes, k < group."""
    return spec.block.iter_vars[0].extent, spec.block.iter_vars[1].extent


def int8_matmul(spec, M, N, K):
    a, b = (p.dtype for p in spec.desc.params[:2])
    return ops.matmul(M, N, K, dtype=a, b_dtype=b, out_dtype="int32")


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
    a_dtype, b_dtype = (p.dtype for p in spec.desc.params[:2])
    if extreme:  # the largest products: 255 (or -128) times -128, summed over K
        a = np.full((M, K), 255 if a_dtype == "uint8" else -128, a_dtype)
        return a, np.full((K, N), -128, b_dtype)
    rng = np.random.default_rng(seed)
    lo = 0 if a_dtype == "uint8" else -128
    return (rng.integers(lo, lo + 256, (M, K)).astype(a_dtype),
            rng.integers(-128, 128, (K, N)).astype(b_dtype))
