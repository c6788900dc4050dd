"""AMX's memory intrinsics (tessel.intrin.amx): matching with free strides, free reduction
extents and partial rows, the call in the generated C, numbers against numpy on a host with
AMX (matmuls, and NHWC convolutions whose window runs inside the call), the auto space choosing
them (on a target that names AMX, whatever the host) and the layout pass giving 8-bit
convolutions whole-channel (NHWC) blocks for them."""
import random

import numpy as np
import pytest

import tessel
from tessel import intrin, ir, ops, te
from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared
from tessel.graph import Graph
from tessel.graph.layout import block_layouts, int8_rows
from tessel.graph.reference import run_graph
from tessel.schedule import Schedule, ScheduleError
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.rules.base import AUTO_TENSORIZE
from tessel.space.rules.tensorize import tile_for_memory_intrin
from tessel.target import Target, host_arch

from intrin_cases import amx_tensorized, operands, runs_here

HOST = Target("host")
INT8 = [s for s in intrin.REGISTRY.values() if s.desc.params[0].dtype in ("uint8", "int8")]
AMX = [s for s in INT8 if s.memory and not s.partial_extents]  # bfloat16's: test_bfloat16.py
TAPS = [s for s in INT8 if s.memory and s.partial_extents]
# AVX-512 with VNNI and AMX: a Sapphire Rapids class CPU, named so on any host
AMX_TARGET = Target("x86_64-avx512", features=[*Target("x86_64-avx512").features,
                                               "avx512_vnni", "amx_tile", "amx_int8"])


def test_the_amx_intrinsics_are_memory_intrinsics_with_free_strides():
    assert {s.name for s in AMX} == {"amx_u8s8_32x32", "amx_s8s8_32x32"}
    assert {s.name for s in TAPS} == {"amx_u8s8_16x64_taps", "amx_s8s8_16x64_taps"}
    taps = intrin.get("amx_s8s8_16x64_taps")
    assert taps.c_signature({"uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t"}) == (
        "const int8_t* a, const int8_t* b, int32_t* c, int64_t lda, int64_t lda1, "
        "int64_t lda2, int64_t ldb, int64_t ldb1, int64_t ldb2, int64_t ldc, int64_t n_ry, "
        "int64_t n_rx, int64_t n_kq, int64_t e_m, int zero")
    spec = intrin.get("amx_u8s8_32x32")
    assert spec.free_strides == (("A", 0), ("B", 0), ("C", 0)) and spec.free_extents == ("kq",)
    assert spec.c_signature({"uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t"}) == (
        "const uint8_t* a, const int8_t* b, int32_t* c, int64_t lda, int64_t ldb, "
        "int64_t ldc, int64_t n_kq, int zero")
    # the preferred intrinsic where the target has AMX, absent where it does not
    assert intrin.for_target(AMX_TARGET)[0].name == "amx_u8s8_32x32"
    assert not any(s.memory for s in intrin.for_target(Target("x86_64-avx512")))


def test_a_binding_gives_the_programs_strides_and_the_reduction_count():
    """K 640 in chunks of 128 (two steps of 64 in each call): A's rows are K apart, C's N
    (the local accumulator has the output's shape until code generation compacts it), B's
    column tiles K * 16 bytes apart."""
    spec = intrin.get("amx_u8s8_32x32")
    sch = amx_tensorized(spec, 64, 96, 640, chunk=128)
    outer = next(b for b in ir.blocks(sch.func.body) if intrin.ANNOTATION in b.annotations)
    bound = intrin.bind(outer, spec)
    assert [o.param.name for o in bound.operands] == ["A", "B", "C"]
    assert bound.strides == (640, 640 * 16, 96) and bound.counts == (2,)


def test_a_block_whose_rows_are_not_consecutive_k_is_refused_naming_the_operand():
    """A read transposed (A[k, i]): its reduction elements are M apart, not consecutive (four
    k of one step of k_1: 256 elements)."""
    spec = intrin.get("amx_u8s8_32x32")
    A = te.placeholder((64, 64), "uint8", name="A")
    B = te.placeholder((64, 64), "int8", name="B")
    r = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(
        te.cast("int32", A[r, i]) * te.cast("int32", B[r, j]), axis=r), name="C")
    sch = Schedule(te.create_func([A, B, C], name="matmul_at"))
    c = sch.get_block("C")
    sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read", "lambda k, j: (j // 16, k // 4, j % 16, k % 4)")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1, j2 = sch.split(j, [None, 2, 16])
    k0, k1, k2 = sch.split(k, [None, 16, 4])
    sch.reorder(i0, j0, k0, i1, j1, j2, k1, k2)
    sch.decompose_reduction(c, k0)
    with pytest.raises(ScheduleError, match=r"tensorize amx_u8s8_32x32: block C_o: A's element "
                                            r"offset moves by 256 with loop k_1, where the "
                                            r"intrinsic's A moves by 4"):
        sch.tensorize(i1, spec.name)


@pytest.mark.parametrize("spec", AMX, ids=lambda s: s.name)
def test_the_amx_call_compiles_for_a_target_with_amx(spec):
    """The kernel calls the intrinsic once per 32 x 32 block and chunk: its zero flag is the
    first chunk of the reduction, the tiles configured and released inside the call."""
    if host_arch() != "x86_64":
        pytest.skip("x86-64 intrinsics are compiled by this host's x86-64 compiler")
    src = generate_c(amx_tensorized(spec, 64, 64, 256, 128, decompose=False).func, AMX_TARGET)
    assert src.count(f"{spec.c_name}(&") == 1
    assert "k_0 == 0" in src.split(f"{spec.c_name}(&")[1].split(";")[0]
    assert "_tile_loadconfig" in src and "_tile_release" in src
    assert compile_shared(src, AMX_TARGET).exists()


@pytest.mark.parametrize("spec", AMX, ids=lambda s: s.name)
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
@pytest.mark.parametrize("K, chunk, decompose", [(192, 64, True), (1088, 64, False),
                                                 (1024, 512, False)])
def test_the_amx_intrinsics_match_numpy(spec, extreme, K, chunk, decompose):
    """Random and extreme operands (255 or -128 times -128, K past 1000: sums near -2^25);
    one call per chunk (the accumulator loaded back between calls) or the whole K; zeroed by
    a block of its own or by the first call."""
    if not runs_here(spec):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(spec.missing(HOST))}")
    M, N = 96, 64
    a, b = operands(spec, M, N, K, extreme)
    c = np.full((M, N), 7, np.int32)  # the init zeroes: what the output held is unread
    tessel.build(amx_tensorized(spec, M, N, K, chunk, decompose).func, HOST)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("shape, expected", [
    ((64, 96, 128), "amx_u8s8_32x32"),
    ((24, 64, 128), "amx_u8s8_16x64_taps"),  # 24 rows: not whole 32-row blocks; two of 12
    ((24, 48, 128), "dot_u8s8_16x4_vnni"),  # 48 columns: no whole AMX block either way
], ids=["amx", "amx-rows", "vnni"])
def test_the_auto_space_tiles_with_amx_where_the_block_fits(shape, expected):
    M, N, K = shape
    func = ops.matmul(M, N, K, dtype="uint8", b_dtype="int8", out_dtype="int32")
    space = make_space("auto", AMX_TARGET)
    names = {dict(i.args).get("value") for d in space.designs(func) for i in d.instructions
             if i.kind == "annotate" and dict(i.args)["key"] == AUTO_TENSORIZE}
    assert names == {expected}
    rng = random.Random(0)
    runs = runs_here(intrin.get(expected))
    for _ in range(3):
        final = postprocess(space.sample(func, rng), default_postprocs(AMX_TARGET), strict=True)
        done = [b.annotations.get(intrin.ANNOTATION) for b in ir.blocks(final.func.body)]
        assert expected in done
        if runs:
            a, b = operands(intrin.get(expected), M, N, K, seed=2)
            c = np.zeros((M, N), np.int32)
            tessel.build(final.func, HOST)(a, b, c)
            np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


def _nhwc_conv(H, W, C, O, K, stride, a_dtype="uint8"):
    """An NHWC 8-bit convolution on data padded beforehand: C[y, x, o] = sum over ry, rx, c
    of A[y * stride + ry, x * stride + rx, c] * W[ry, rx, c, o]."""
    hp, wp = (H - 1) * stride + K, (W - 1) * stride + K
    A = te.placeholder((hp, wp, C), a_dtype, name="A")
    Wt = te.placeholder((K, K, C, O), "int8", name="W")
    ry, rx, rc = (te.reduce_axis(n, name=v) for n, v in ((K, "ry"), (K, "rx"), (C, "rc")))
    out = te.compute((H, W, O), lambda y, x, o: te.sum(
        te.cast("int32", A[y * stride + ry, x * stride + rx, rc]) *
        te.cast("int32", Wt[ry, rx, rc, o]), axis=[ry, rx, rc]), name="C")
    return te.create_func([A, Wt, out], name="conv_nhwc")


def test_a_convolutions_window_runs_inside_one_call():
    """14 x 14 output pixels, 64 -> 128 channels, 3 x 3: rows of 14 pixels (two tiles of 16
    rows would not divide them), each call over the whole window (n_ry = n_rx = 3) and the 64
    channels; A's taps 16 pixels (a padded row) and one pixel apart, its rows one pixel; B
    packed [o // 16, ry, rx, c // 4, o % 16, c % 4]."""
    spec = intrin.get("amx_u8s8_16x64_taps")
    sch = Schedule(_nhwc_conv(14, 14, 64, 128, 3, 1))
    c = sch.get_block("C")
    y, x, o, *_ = (iv.var for iv in sch.get(c).iter_vars)
    k = sch.get(c).iter_vars[-1].var
    outer = tile_for_memory_intrin(sch, c, spec, o, k)
    sch.tensorize(outer, spec.name)
    bound = intrin.bind(sch.get(outer), spec)
    assert bound.strides == (16 * 64, 64, 64, 3 * 1024, 1024, 9 * 1024, 128)
    assert bound.counts == (3, 3, 1) and bound.extents == (14,)


@pytest.mark.parametrize("spec", TAPS, ids=lambda s: s.name)
@pytest.mark.parametrize("H, W, C, O, K, stride", [
    (9, 9, 64, 64, 3, 1), (7, 5, 128, 64, 3, 2), (13, 13, 192, 128, 1, 1), (4, 32, 64, 64, 3, 1),
], ids=["9x9", "stride2", "1x1-odd", "32-wide"])
def test_nhwc_convolutions_on_the_taps_intrinsic_match_numpy(spec, H, W, C, O, K, stride):
    """The auto space's designs for an NHWC convolution take the taps intrinsic (rows of 9,
    5, 13, 16 pixels), and every one computes numpy's sums exactly, extreme operands too."""
    func = _nhwc_conv(H, W, C, O, K, stride, spec.desc.params[0].dtype)
    space = make_space("auto", AMX_TARGET)
    rng = random.Random(1)
    finals = [postprocess(space.sample(func, rng), default_postprocs(AMX_TARGET), strict=True)
              for _ in range(2)]
    for final in finals:
        assert spec.name in {b.annotations.get(intrin.ANNOTATION)
                             for b in ir.blocks(final.func.body)}
    if not runs_here(spec):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(spec.missing(HOST))}")
    a_shape, w_shape, out_shape = (p.shape for p in func.params)
    gen = np.random.default_rng(4)
    lo = 0 if spec.desc.params[0].dtype == "uint8" else -128
    cases = [(gen.integers(lo, lo + 256, a_shape), gen.integers(-128, 128, w_shape)),
             (np.full(a_shape, lo + 255 if lo == 0 else -128), np.full(w_shape, -128))]
    for final, (a, w) in zip(finals, cases):
        a, w = a.astype(spec.desc.params[0].dtype), w.astype(np.int8)
        want = np.zeros(out_shape, np.int64)
        for ry in range(K):
            for rx in range(K):
                win = a[ry:ry + (H - 1) * stride + 1:stride, rx:rx + (W - 1) * stride + 1:stride]
                want += win.astype(np.int64) @ w[ry, rx].astype(np.int64)
        got = np.full(out_shape, 7, np.int32)
        tessel.build(final.func, HOST)(a, w, got)
        np.testing.assert_array_equal(got, want)


def _int8_net(c=64, h=9):
    """uint8 (1, c, h, h) -> 3 x 3 conv_integer (c -> c, padded with the zero point 5) ->
    requantized to uint8 -> 1 x 1 stride-2 conv_integer (c -> 2c): int32."""
    rng = np.random.default_rng(2)
    g = Graph("int8net")
    x = g.add_input("x", (1, c, h, h), "uint8")
    w1 = g.add_constant("w1", rng.integers(-128, 128, (c, c, 3, 3)).astype(np.int8))
    w2 = g.add_constant("w2", rng.integers(-128, 128, (2 * c, c, 1, 1)).astype(np.int8))
    y = g.add_node("conv_integer", [x, w1], pads=(1, 1, 1, 1), pad_value=5)
    y = g.add_node("cast", [y], to="float32")
    y = g.add_node("mul", [y, g.add_constant("scale", np.float32(1 / 4096))])
    y = g.add_node("clip", [g.add_node("round", [y])], min=0.0, max=255.0)
    y = g.add_node("cast", [y], to="uint8")
    g.set_outputs([g.add_node("conv_integer", [y, w2], strides=(2, 2))])
    return g


def test_the_layout_pass_gives_8_bit_convolutions_whole_channel_blocks_for_amx():
    """With whole_int8=64 (an AMX target's) both convolutions read and write NHWC
    (one block of all channels); with 0 the plain input goes into blocks of 4 channels (the
    dot-product instructions' group) and the activation between them into blocks of 16; the
    outputs are the plain graph's."""
    g = _int8_net()
    assert int8_rows(AMX_TARGET) == 64 and int8_rows(Target("x86_64-avx512")) == 0
    x = np.random.default_rng(3).integers(0, 256, (1, 64, 9, 9)).astype(np.uint8)
    want = run_graph(g, [x])[0]
    for whole, data in ((64, [(1, 1, 9, 9, 64)] * 2),
                        (0, [(1, 16, 9, 9, 4), (1, 4, 9, 9, 16)])):
        laid = block_layouts(g, 16, whole_int8=whole)
        convs = [n for n in laid.nodes if n.op == "conv_integer_blocked"]
        assert [laid.types[n.inputs[0]].shape for n in convs] == data
        np.testing.assert_array_equal(run_graph(laid, [x])[0], want)


def test_a_compiled_int8_net_runs_its_convolutions_on_amx_tiles():
    """On a host with AMX, compile_model lays the net out NHWC and both convolutions call the
    taps intrinsic; the output equals the plain graph's."""
    spec = intrin.get("amx_u8s8_16x64_taps")
    if not runs_here(spec):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(spec.missing(HOST))}")
    g = _int8_net()
    model = tessel.compile_model(g)
    sources = [call.module.source for call in model.calls]
    assert sum(f"{spec.c_name}(&" in s for s in sources) == 2
    x = np.random.default_rng(5).integers(0, 256, (1, 64, 9, 9)).astype(np.uint8)
    np.testing.assert_array_equal(model(x)[0], run_graph(g, [x])[0])
