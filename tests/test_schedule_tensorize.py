"""blockize and tensorize: expected IR, trace round trip, refusals, and every tensor intrinsic
against numpy on random and extreme integers (run where the host has its features, compiled
for the others on a host of their architecture; AArch64's under qemu: test_aarch64.py)."""
import json
import random
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import intrin, ir, ops
from tessel.codegen import CodegenError
from tessel.codegen.compiler import compile_shared
from tessel.codegen.c import generate_c
from tessel.ir.structural import structural_hash
from tessel.schedule import Schedule, ScheduleError, Trace, tree
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.priors import ranked_priors
from tessel.space.rules.base import AUTO_TENSORIZE
from tessel.space.rules.tensorize import tile_for_intrin
from tessel.target import Target, host_arch

from intrin_cases import (accumulator, assert_product, dims, int8_matmul, operands,
                          runs_here, tensorized)

HOST = Target("host")


# ---- blockize ------------------------------------------------------------------------------

def test_blockize_makes_an_outer_block_over_the_inner_loops():
    sch = Schedule(ops.matmul(8, 32, 16))
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i, j0, k0, j1, k1)
    outer = sch.blockize(j1)
    block = sch.get(outer)
    assert block.name == "C_o"
    assert [(iv.var.name, iv.extent, iv.kind) for iv in block.iter_vars] == [
        ("vi_o", 8, "spatial"), ("vj_o", 2, "spatial"), ("vk_o", 4, "reduce")]
    # the init moved out: the inner block is the bare update, the outer one zeroes 16 outputs
    inner = ir.blocks(block.body)[0]
    assert inner.name == "C" and inner.init is None
    assert isinstance(block.init, ir.For) and block.init.extent == 16
    assert [r.buffer.name for r in block.reads] == ["A", "B"]
    assert [ir.as_int(r.extent) for r in block.writes[0].region] == [1, 16]
    check_equal(sch.func, ops.matmul(8, 32, 16))
    check_round_trip(ops.matmul(8, 32, 16), sch)


def test_blockize_keeps_a_predicate_of_the_loops_outside_on_the_outer_block():
    f = ops.matmul(7, 32, 8)
    sch = Schedule(f)
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.split(i, [None, 3])  # 7 rows in tiles of 3: a predicate of i's loops
    j0, j1 = sch.split(j, [None, 16])
    sch.blockize(j1)
    outer = tree.find_realize(sch.func, "C_o")
    assert not ir.is_true(outer.predicate)
    assert ir.is_true(tree.find_realize(sch.func, "C").predicate)
    check_equal(sch.func, f)


def test_blockize_refusals():
    sch = Schedule(ops.matmul(8, 8, 8))
    c = sch.get_block("C")
    sch.decompose_reduction(c, sch.get_loops(c)[2])
    with pytest.raises(ScheduleError, match="not a perfect nest around one block"):
        sch.blockize(sch.get_loops(c)[1])  # j holds the init block and the k loop
    sch = Schedule(ops.matmul(8, 30, 8))
    _, j, _ = sch.get_loops(sch.get_block("C"))
    with pytest.raises(ScheduleError, match="predicate .* of the loops under"):
        sch.blockize(sch.split(j, [None, 16])[1])  # 30 is no multiple of 16
    sch = Schedule(ops.matmul(8, 32, 8))
    _, j, _ = sch.get_loops(sch.get_block("C"))
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(j1, j0)  # j = j0 * 4 + j1 with j1 outside: j0 alone steps by 4
    with pytest.raises(ScheduleError, match="do not cover a dense range"):
        sch.blockize(j0)
    assert len(sch.trace) == 4  # get_block, get_loops, split, reorder: the refusal left none


def check_equal(scheduled, original):
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(b.shape).astype(b.dtype) for b in original.inputs]
    outs = [[np.zeros(b.shape, b.dtype) for b in f.outputs] for f in (original, scheduled)]
    for f, o in zip((original, scheduled), outs):
        tessel.build(f)(*ins, *o)
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)


def check_round_trip(original, sch):
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(original))
    assert ir.structural_equal(replayed.func, sch.func)
    assert replayed.trace.script() == sch.trace.script()


# ---- tensorize -----------------------------------------------------------------------------

VNNI = intrin.get("dot_u8s8_16x4_vnni")


@pytest.mark.parametrize("via_blockize", [False, True])
def test_tensorize_marks_the_outer_block_and_replays(via_blockize):
    sch = tensorized(VNNI, 3, 32, 8, via_blockize=via_blockize)
    block = tree.find_realize(sch.func, "C_o").block
    assert block.annotations == {intrin.ANNOTATION: VNNI.name}
    ops_ = [i.kind for i in sch.trace.instructions]
    assert ops_[-2:] == ["tensorize", "unroll"]
    check_round_trip(int8_matmul(VNNI, 3, 32, 8), sch)
    found = intrin.match(block, VNNI)
    assert [(o.param.name, o.buffer.name) for o in found] == [("A", "A"), ("B", "B_global"),
                                                              ("C", "C")]


def test_tensorize_in_the_lowered_kernel_is_one_intrinsic_per_step():
    sch = tensorized(VNNI, 3, 32, 8, mr=3)
    src = generate_c(sch.func, Target("x86_64-avx512", features=[
        *Target("x86_64-avx512").features, "avx512_vnni"]))
    assert src.count(f"{VNNI.c_name}(") == 1 + 3  # its definition, one call per unrolled row
    assert '__attribute__((target("avx512f,avx512vnni")))' in src
    assert "_mm512_dpbusd_epi32" in src


@pytest.mark.parametrize("case, match", [
    ("unpacked", r"B's element offset moves by 1 with loop j_1, where the intrinsic's B "
                 r"moves by 4"),
    ("init", "inner block C has an init; decompose_reduction it first"),
    ("extents", r"loop extents \[8, 4\] do not pair with the intrinsic's \[16, 4\]"),
    ("kind", r"loop j_1 \(spatial\) cannot stand for the intrinsic's reduce variable vk of "
             r"extent 4"),
    ("dtype", "A is int8, where the intrinsic's A is uint8"),
    ("float", "computes .* where the intrinsic computes"),
    ("name", "unknown tensor intrinsic 'vnni'; known: amx_bf16_32x32, amx_s8s8_16x64_taps, "
             "amx_s8s8_32x32, amx_u8s8_16x64_taps, amx_u8s8_32x32, dot_bf16_16x2_avx512, dot_"),
])
def test_tensorize_refusals_name_what_differs(case, match):
    func = {"dtype": ops.matmul(4, 32, 8, dtype="int8", out_dtype="int32"),
            "float": ops.matmul(4, 32, 8)}.get(case, int8_matmul(VNNI, 4, 32, 8))
    sch = Schedule(func)
    c = sch.get_block("C")
    if case != "unpacked":
        sch.cache_read(c, 1, "global")
        sch.transform_layout(c, 1, "read", "lambda k, j: (j // 16, k // 4, j % 16, k % 4)")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, {"extents": 8, "kind": 4}.get(case, 16)])
    k0, k1 = sch.split(k, [None, 4])
    # with the reduction loop outside j1, blockize(j1) leaves the init in the inner block
    sch.reorder(*((i, j0, k0, k1, j1) if case == "init" else (i, j0, k0, j1, k1)))
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        sch.tensorize(j1, "vnni" if case == "name" else VNNI.name)
    assert sch.func is before


def test_tensorize_takes_the_init_to_the_outer_block():
    """Without decompose_reduction, blockize moves the init to the outer block (zeroing its 16
    outputs at the first k step), so the intrinsic updates what the init left."""
    f = int8_matmul(VNNI, 5, 32, 12)
    sch = Schedule(f)
    c = sch.get_block("C")
    sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read", "lambda k, j: (j // 16, k // 4, j % 16, k % 4)")
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, [None, 16])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(i, j0, k0, j1, k1)
    sch.tensorize(j1, VNNI.name)
    assert tree.find_realize(sch.func, "C_o").block.init is not None
    if runs_here(VNNI):
        a, b = operands(VNNI, 5, 32, 12)
        c_ = np.full((5, 32), 7, np.int32)  # the init must overwrite this
        tessel.build(sch.func, HOST)(a, b, c_)
        np.testing.assert_array_equal(c_, a.astype(np.int64) @ b.astype(np.int64))


def test_a_target_without_the_features_is_refused_at_code_generation():
    sch = tensorized(VNNI, 2, 16, 4)
    with pytest.raises(CodegenError, match=r"tensorized with dot_u8s8_16x4_vnni, which needs "
                                           r"avx512_vnni; target .* lacks it"):
        generate_c(sch.func, Target("x86_64-avx512"))
    with pytest.raises(CodegenError, match="needs the x86_64 architecture"):
        generate_c(sch.func, Target("aarch64-neon"))


X86 = [s for s in intrin.REGISTRY.values() if s.arch == "x86_64" and not s.memory]  # AMX's:
# test_intrin_amx.py


@pytest.mark.parametrize("spec", X86, ids=lambda s: s.name)
def test_every_x86_intrinsic_compiles(spec):
    """Built for a target with its features (the preset's and its own): the function's target
    attribute makes it compile whatever the host; running it needs the CPU (next test)."""
    if host_arch() != "x86_64":
        pytest.skip("x86-64 intrinsics are compiled by this host's x86-64 compiler")
    lanes, group = dims(spec)
    target = Target("x86_64-avx2", features=[*Target("x86_64-avx2").features, *spec.features])
    src = generate_c(tensorized(spec, 3, 2 * lanes, 3 * group).func, target)
    assert compile_shared(src, target).exists()


@pytest.mark.parametrize("spec", X86, ids=lambda s: s.name)
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
def test_every_x86_intrinsic_matches_numpy(spec, extreme):
    if not runs_here(spec):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(spec.missing(HOST))}")
    lanes, group = dims(spec)
    M, N, K = 7, 3 * lanes, (260 if extreme else 9) * group  # odd rows, K past 1000 bytes
    sch = tensorized(spec, M, N, K, mr=7)
    a, b = operands(spec, M, N, K, extreme)
    c = accumulator(spec, M, N)
    tessel.build(sch.func, HOST)(a, b, c)
    assert_product(c, a, b)


# ---- the space: MultiLevelTilingWithIntrin, RewriteTensorize, priors -----------------------

VNNI_TARGET = Target("x86_64-avx512", features=[*Target("x86_64-avx512").features,
                                                "avx512_vnni"])


@pytest.mark.parametrize("target, expected", [
    (VNNI_TARGET, "dot_u8s8_16x4_vnni"),
    (Target("x86_64-avx2"), "dot_u8s8_8x2_avx2"),
    (Target("x86_64-sse"), None),  # no intrinsic: the plain multi-level tiling
], ids=["avx512-vnni", "avx2", "sse"])
def test_auto_space_tiles_int8_matmul_with_the_targets_intrinsic(target, expected):
    func = ops.matmul(24, 64, 32, dtype="uint8", b_dtype="int8", out_dtype="int32")
    space = make_space("auto", target)
    designs = space.designs(func)
    assert len(designs) == 3  # no write cache, or one copied out at S level 2 or 1
    names = {dict(i.args).get("value") for d in designs for i in d.instructions
             if i.kind == "annotate" and dict(i.args)["key"] == AUTO_TENSORIZE}
    assert names == ({expected} if expected else set())
    rng = random.Random(0)
    runnable = not target.host_gap()
    for _ in range(4):
        final = postprocess(space.sample(func, rng), default_postprocs(target), strict=True)
        tensorized_ = [b.annotations.get(intrin.ANNOTATION) for b in ir.blocks(final.func.body)]
        assert (expected in tensorized_) if expected else not any(tensorized_)
        check_round_trip(func, final)
        if runnable:
            a, b = operands(intrin.get(expected or "dot_u8s8_8x2_avx2"), 24, 64, 32, seed=1)
            c = np.zeros((24, 64), np.int32)
            tessel.build(final.func, target)(a, b, c)
            np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


def test_priors_give_a_register_tile_of_whole_int32_vectors():
    """Counted in the intrinsic's vectors: 2 per row, 12 rows within AVX-512's 24
    accumulators (8: the largest divisor of 1024), unrolled whole (64 steps)."""
    func = ops.matmul(1024, 1024, 1024, dtype="uint8", b_dtype="int8", out_dtype="int32")
    space = make_space("auto", VNNI_TARGET)
    ranked = ranked_priors(space, func)
    assert ranked
    design, decisions = ranked[0]
    spatial = [decisions[s] for s in design.sampling_sites()
               if design.instructions[s].kind == "sample_perfect_tile"
               and dict(design.instructions[s].args)["n"] == 4]
    assert spatial[0][-1] == 8 and spatial[-1][-1] == 2  # rows, vectors of 16 lanes (last)
    unroll = next(decisions[s] for s in design.sampling_sites()
                  if design.instructions[s].kind == "sample_categorical"
                  and dict(design.instructions[s].args)["candidates"] == (0, 16, 64, 512))
    assert unroll == 2  # 64


def test_dense_with_int8_weights_tensorizes_through_its_weight_layout():
    """dense's weight is (N, K): the pack maps it to the same panels as a matmul's B."""
    func = ops.dense(5, 48, 40, bias=False, dtype="uint8", b_dtype="int8", out_dtype="int32")
    sch = Schedule(func)
    block = sch.get_block("dense")
    j, k = (iv.var for iv in sch.get(block).iter_vars[1:])
    spec = intrin.get("dot_u8s8_8x2_avx2")
    outer = tile_for_intrin(sch, block, spec, j, k)
    sch.tensorize(outer, spec.name)
    if runs_here(spec):
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, (5, 40)).astype(np.uint8)
        w = rng.integers(-128, 128, (48, 40)).astype(np.int8)
        out = np.zeros((5, 48), np.int32)
        tessel.build(sch.func, HOST)(x, w, out)
        np.testing.assert_array_equal(out, x.astype(np.int64) @ w.astype(np.int64).T)


# ---- traces written by an earlier tessel -----------------------------------------------------

FIXTURE = json.loads((Path(__file__).parent / "data" / "tensorize_v2.json").read_text())


@pytest.mark.parametrize("case", FIXTURE["cases"], ids=lambda c: f"{c['op']}-{c['scheduled'][:8]}")
def test_a_stored_tensorized_trace_replays_to_the_program_it_made(case):
    """Traces with blockize and tensorize stored by the tessel of tests/data/
    make_tensorize_fixture.py (commit in the file) replay to the same programs (two of a
    batched u8 x s8 matmul sampled from the auto space), which match numpy where the host
    runs their intrinsic."""
    func = getattr(ops, case["op"])(**case["args"])
    sch = Trace.from_json(case["trace"]).apply(Schedule(func))
    assert structural_hash(sch.func) == case["scheduled"]
    names = [b.annotations.get(intrin.ANNOTATION) for b in ir.blocks(sch.func.body)]
    spec = intrin.get(next(n for n in names if n))
    if not runs_here(spec):
        return
    rng = np.random.default_rng(0)
    a_dtype, b_dtype = (p.dtype for p in func.inputs)
    ins = [rng.integers(-128 if d == "int8" else 0, 128 if d == "int8" else 256,
                        p.shape).astype(d) for p, d in zip(func.inputs, (a_dtype, b_dtype))]
    out = np.zeros(func.outputs[0].shape, np.int32)
    tessel.build(sch.func, HOST)(*ins, out)
    np.testing.assert_array_equal(out, np.matmul(ins[0].astype(np.int64),
                                                 ins[1].astype(np.int64)))


def test_a_batched_int8_matmul_tunes_and_matches_numpy(tmp_path):
    """A held-out int8 workload (a batched u8 x s8 product of odd rows) through tessel.tune:
    its programs tile around the host's intrinsic where it has one, and the best matches."""
    func = ops.batch_matmul(3, 13, 32, 24, dtype="uint8", b_dtype="int8", out_dtype="int32")
    result = tessel.tune(func, HOST, trials=8, database=str(tmp_path / "t.db"))
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (3, 13, 24)).astype(np.uint8)
    b = rng.integers(-128, 128, (3, 24, 32)).astype(np.int8)
    out = np.zeros((3, 13, 32), np.int32)
    result.module(a, b, out)
    np.testing.assert_array_equal(out, np.matmul(a.astype(np.int64), b.astype(np.int64)))
    if any(s.desc.params[0].dtype == "uint8" for s in intrin.for_target(HOST)):
        assert "tensorize" in result.best_trace.script()


def test_an_int8_1x1_convolution_of_odd_channels_tunes_and_matches_numpy(tmp_path):
    """A held-out int8 convolution (13 -> 19 channels, 7 x 5, NCHW): no intrinsic fits its
    layout (the channels of its input are H * W apart, the instruction wants them
    consecutive), so it tunes in the plain space, and matches."""
    func = ops.conv2d(1, 13, 7, 5, 19, 1, 1, dtype="int8", out_dtype="int32")
    result = tessel.tune(func, HOST, trials=8, database=str(tmp_path / "t.db"))
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 13, 7, 5)).astype(np.int8)
    w = rng.integers(-128, 128, (19, 13, 1, 1)).astype(np.int8)
    out = np.zeros((1, 19, 7, 5), np.int32)
    result.module(x, w, out)
    want = np.einsum("nchw,oc->nohw", x.astype(np.int64), w[:, :, 0, 0].astype(np.int64))
    np.testing.assert_array_equal(out, want)
    assert "tensorize" not in result.best_trace.script()


@pytest.mark.parametrize("stride", [1, 2])
def test_an_int8_nchw_convolution_tiles_around_the_intrinsic(stride):
    """u8 data x s8 weights in NCHW: the data packed with its channels in groups of the
    instruction's last (N, C / G, H, W, G), the local accumulator with the output channels
    last; the padded, strided 3 x 3 convolution matches numpy (AVX2's intrinsic runs on any
    x86-64 host CI has; the design is checked for the VNNI preset too)."""
    func = ops.conv2d(1, 16, 9, 7, 32, 3, 3, stride=stride, padding=1, dtype="uint8",
                      b_dtype="int8", out_dtype="int32")
    for target, name in ((VNNI_TARGET, "dot_u8s8_16x4_vnni"),
                         (Target("x86_64-avx2"), "dot_u8s8_8x2_avx2")):
        final = postprocess(make_space("auto", target).sample(func, random.Random(1)),
                            default_postprocs(target), strict=True)
        assert f"intrin='{name}'" in final.trace.script()
        if target.host_gap():
            continue
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, (1, 16, 9, 7)).astype(np.uint8)
        w = rng.integers(-128, 128, (32, 16, 3, 3)).astype(np.int8)
        out = np.zeros(func.outputs[0].shape, np.int32)
        tessel.build(final.func, target)(x, w, out)
        torch = pytest.importorskip("torch")
        want = torch.nn.functional.conv2d(torch.from_numpy(x.astype(np.float64)),
                                          torch.from_numpy(w.astype(np.float64)),
                                          stride=stride, padding=1).numpy()
        np.testing.assert_array_equal(out, want.astype(np.int64))
