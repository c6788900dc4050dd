"""bfloat16: tensors of it in the IR and the C (its bits in uint16_t, computed in float, rounded
to nearest even where stored or cast, as ml_dtypes rounds), and its dot-product intrinsics
(AVX-512 BF16's vdpbf16ps, AMX's tdpbf16ps) chosen by the auto space for a bfloat16 matmul
into float32 where the target has them, the plain space elsewhere."""
import random

import ml_dtypes
import numpy as np
import pytest

import tessel
from tessel import intrin, ir, ops, te
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.rules.base import AUTO_TENSORIZE
from tessel.target import Target

from intrin_cases import accumulator, amx_tensorized, assert_product, operands, runs_here

HOST = Target("host")
BF16 = ml_dtypes.bfloat16
AVX512 = Target("x86_64-avx512")
AVX512_BF16 = Target("x86_64-avx512", features=[*AVX512.features, "avx512_bf16"])
AMX_BF16 = Target("x86_64-avx512", features=[*AVX512_BF16.features, "amx_tile", "amx_bf16"])


def _bits(values) -> np.ndarray:
    return np.array(values, np.uint32).view(np.float32)


# ties to even both ways, the last value below a carry into the exponent, the largest float
# (rounds to inf), NaNs (signalling and quiet, with payloads), infinities, zeros of both signs,
# subnormals (bfloat16 has float32's exponent: they round, they are not flushed)
SPECIAL = _bits([0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3F7FFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                 0x7F800001, 0xFFC12345, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
                 0x00000001, 0x00008000, 0x00018000, 0x807FFFFF, 0x3EAAAAAB, 0xC2F6E979])


def test_stores_and_casts_round_to_nearest_even_as_ml_dtypes_does():
    """A float32 stored into bfloat16 (bits equal to ml_dtypes' conversion; every NaN a
    NaN), a bfloat16 copied (bits kept) and widened back (exact), a cast inside an expression
    rounding before the arithmetic that follows it."""
    n = SPECIAL.size
    X = te.placeholder((n,), "float32", name="X")
    Y = te.compute((n,), lambda i: te.cast("bfloat16", X[i]), name="Y")
    Z = te.compute((n,), lambda i: Y[i], name="Z")
    W = te.compute((n,), lambda i: te.cast("float32", Z[i]), name="W")
    V = te.compute((n,), lambda i: te.cast("float32", te.cast("bfloat16", X[i])) * 2.0,
                   name="V")
    mod = tessel.build(te.create_func([X, Y, Z, W, V], name="bf16_round"), HOST)
    y, z = np.zeros(n, BF16), np.zeros(n, BF16)
    w, v = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mod(SPECIAL, y, z, w, v)
    want = SPECIAL.astype(BF16)
    nan = np.isnan(SPECIAL)
    np.testing.assert_array_equal(y.view(np.uint16)[~nan], want.view(np.uint16)[~nan])
    assert np.isnan(y.astype(np.float32)[nan]).all()
    np.testing.assert_array_equal(z.view(np.uint16), y.view(np.uint16))
    np.testing.assert_array_equal(w.view(np.uint32), (y.view(np.uint16).astype(np.uint32) << 16))
    finite = np.isfinite(want.astype(np.float32))
    np.testing.assert_array_equal(v[finite], want.astype(np.float32)[finite] * 2)


def test_bfloat16_arithmetic_computes_in_float_and_rounds_where_stored():
    """A product of two bfloat16 (exact in float32) plus a bfloat16 sum, stored into a
    bfloat16 output, at odd shapes: equal to numpy's float32 arithmetic rounded by ml_dtypes
    (the sum of two values within 2^16 of each other is exact in float32 too)."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((7, 13)).astype(BF16)
    b = rng.standard_normal((7, 13)).astype(BF16)
    A = te.placeholder((7, 13), "bfloat16", name="A")
    B = te.placeholder((7, 13), "bfloat16", name="B")
    P = te.compute((7, 13), lambda i, j: A[i, j] * B[i, j], name="P")
    S = te.compute((7, 13), lambda i, j: A[i, j] + B[i, j], name="S")
    assert P.dtype == "bfloat16"
    p, s = np.zeros((7, 13), BF16), np.zeros((7, 13), BF16)
    tessel.build(te.create_func([A, B, P, S], name="bf16_ops"), HOST)(a, b, p, s)
    af, bf = a.astype(np.float32), b.astype(np.float32)
    np.testing.assert_array_equal(p.view(np.uint16), (af * bf).astype(BF16).view(np.uint16))
    np.testing.assert_array_equal(s.view(np.uint16), (af + bf).astype(BF16).view(np.uint16))


def test_a_bfloat16_buffer_refuses_arrays_of_another_dtype_in_one_line():
    func = ops.matmul(4, 16, 8, dtype="bfloat16", out_dtype="float32")
    mod = tessel.build(func, HOST)
    a16 = np.zeros((4, 8), np.float16)
    with pytest.raises(tessel.codegen.ArgumentError, match="bfloat16"):
        mod(a16, np.zeros((8, 16), BF16), np.zeros((4, 16), np.float32))


BF16_SPECS = [s for s in intrin.REGISTRY.values() if s.desc.params[0].dtype == "bfloat16"]


def test_the_bfloat16_intrinsics_accumulate_into_float32():
    names = {s.name for s in BF16_SPECS}
    assert names == {"dot_bf16_16x2_avx512", "dot_bf16_8x2_avx512", "amx_bf16_32x32"}
    for spec in BF16_SPECS:
        assert spec.block.body.buffer.dtype == "float32"
        assert "rounded" in spec.exact and "subnormal" in spec.exact
    amx = intrin.get("amx_bf16_32x32")
    assert amx.c_signature({"bfloat16": "uint16_t", "float32": "float"}) == (
        "const uint16_t* a, const uint16_t* b, float* c, int64_t lda, int64_t ldb, "
        "int64_t ldc, int64_t n_kq, int zero")
    # A tile row is 64 bytes, 32 bfloat16: the tile loads take lda in bytes
    assert "_tile_loadd(4, a + 32 * t, lda * 2);" in amx.c_body
    assert "_tile_dpbf16ps(0, 4, 6);" in amx.c_body


@pytest.mark.parametrize("target, shape, expected", [
    (AMX_BF16, (64, 96, 128), "amx_bf16_32x32"),
    (AMX_BF16, (24, 48, 128), "dot_bf16_16x2_avx512"),  # no 32-row block: the vector form
    (AVX512_BF16, (64, 96, 128), "dot_bf16_16x2_avx512"),
    (AVX512, (37, 48, 22), None),  # no bfloat16 instruction: the plain space
], ids=["amx", "amx-rows", "avx512bf16", "plain"])
def test_the_auto_space_tiles_a_bfloat16_matmul_with_the_targets_instruction(target, shape,
                                                                               expected):
    """Each sampled program (built and run where this host can) equals the product within
    float32 accumulation's error."""
    M, N, K = shape
    func = ops.matmul(M, N, K, dtype="bfloat16", out_dtype="float32")
    space = make_space("auto", target)
    names = {dict(i.args).get("value") for d in space.designs(func) for i in d.instructions
             if i.kind == "annotate" and dict(i.args)["key"] == AUTO_TENSORIZE}
    assert names == ({expected} if expected else set())
    runs = HOST.arch == "x86_64" and (expected is None or runs_here(intrin.get(expected)))
    rng = random.Random(0)
    spec = intrin.get(expected or "dot_bf16_16x2_avx512")
    for seed in range(3):
        final = postprocess(space.sample(func, rng), default_postprocs(target), strict=True)
        done = {b.annotations.get(intrin.ANNOTATION) for b in ir.blocks(final.func.body)}
        assert (expected in done) if expected else done == {None}
        if runs:
            a, b = operands(spec, M, N, K, seed=seed)
            c = accumulator(spec, M, N)
            tessel.build(final.func, HOST)(a, b, c)
            assert_product(c, a, b)


AMX_SPEC = intrin.get("amx_bf16_32x32")


@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
@pytest.mark.parametrize("K, chunk, decompose", [(96, 32, True), (1056, 64, False),
                                                 (1024, 512, False)])
def test_the_amx_bfloat16_call_matches_numpy(extreme, K, chunk, decompose):
    """The AMX hand schedule (benchmarks/int8_gemm.py's, in pairs): chunks of 32 bfloat16 (a
    tile row) or the whole K per call, zeroed by the first call or by a block of its own;
    extreme operands (+-1.5 * 2^50) keep every product exact and far from overflow."""
    if not runs_here(AMX_SPEC):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(AMX_SPEC.missing(HOST))}")
    M, N = 96, 64
    a, b = operands(AMX_SPEC, M, N, K, extreme)
    c = accumulator(AMX_SPEC, M, N)
    tessel.build(amx_tensorized(AMX_SPEC, M, N, K, chunk, decompose).func, HOST)(a, b, c)
    assert_product(c, a, b)


def test_a_bfloat16_matmul_tunes_on_this_host_and_matches(tmp_path):
    """Through tessel.tune (whatever the host: its intrinsic, or the plain space), each
    measured program checked against the reference, the best one against numpy."""
    func = ops.matmul(40, 64, 96, dtype="bfloat16", out_dtype="float32")
    result = tessel.tune(func, HOST, 8, database=tmp_path / "bf16.db", progress=False)
    assert result.history and all(r.error_kind is None for r in result.history)
    a, b = operands(AMX_SPEC, 40, 64, 96, seed=5)
    c = accumulator(AMX_SPEC, 40, 64)
    result.module(a, b, c)
    assert_product(c, a, b)
