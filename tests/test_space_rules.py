"""The generated ("auto") space: schedule rules applied post-order to any program."""
import multiprocessing
import random
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.space import (AutoInline, FunctionSpace, MultiLevelTiling, RuleSpace, SpaceError,
                          TemplateSpace, UnionSpace, make_space, postprocess)
from tessel.codegen import asm_for, generate_c
from tessel.codegen.passes import compact_buffers
from tessel.space import default_postprocs
from space_cases import (POSTPROCS, SUITE_NAMES, TARGET, distinct_programs, loop_signature,
                         max_errors, small)
from isa import ISA_PRESETS, fmas, hot_loop, spills

AUTO = make_space("auto", TARGET)


@pytest.mark.parametrize("name", SUITE_NAMES)
def test_auto_space_gives_20_distinct_correct_programs_at_small_odd_shapes(name):
    func = small(name)
    found = distinct_programs(AUTO, func, 20)
    assert len(found) >= 20
    errors = max_errors(func, [program for _, program in found.values()])
    assert max(errors) < 1e-4, errors


def _full_shape_count(name: str) -> int:
    return len(distinct_programs(AUTO, ops.SUITE[name], 20, max_draws=40))


def test_auto_space_gives_20_distinct_valid_programs_at_full_shape():
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        counts = dict(zip(SUITE_NAMES, pool.map(_full_shape_count, SUITE_NAMES)))
    assert all(n >= 20 for n in counts.values()), counts


@pytest.mark.parametrize("name", ["GMM", "SFM", "NRM"])
def test_auto_space_full_shape_builds_match(name):
    func = ops.SUITE[name]
    found = distinct_programs(AUTO, func, 2, seed=3)
    assert max(max_errors(func, [p for _, p in found.values()])) < 1e-3


def test_design_traces_round_trip_through_json():
    func = small("CBR")
    for design in AUTO.designs(func):
        again = tessel.Trace.from_json(design.to_json())
        a = design.apply(tessel.Schedule(func))
        b = again.apply(tessel.Schedule(func))
        assert ir.structural_equal(a.func, b.func)
        assert again.script() == design.script()


def test_multi_level_tiling_makes_ssrsrs_and_write_cache_designs():
    func = ops.matmul(8, 32, 16)
    designs = RuleSpace([MultiLevelTiling()]).generate(func)
    assert len(designs) == 3  # no write cache, local cache at S level 2, at S level 1
    sch = designs[0]
    loops = sch.get_loops(sch.get_block("C"))
    names = [sch.get(l).loop_var.name for l in loops]
    # the vector axis's tiles first between the reductions: a column's panel of B stays
    assert names == ["i_0", "j_0", "i_1", "j_1", "k_0", "j_2", "i_2", "k_1", "i_3", "j_3"]
    scopes = [{b.scope for b in d.func.body.block.alloc_buffers} for d in designs[1:]]
    assert scopes == [{"local"}, {"local"}]
    sch = RuleSpace([MultiLevelTiling(vector_outer=False)]).generate(func)[0]
    names = [sch.get(loop).loop_var.name for loop in sch.get_loops(sch.get_block("C"))]
    assert names[5:7] == ["i_2", "j_2"]


def test_add_rfactor_forks_softmax_and_layer_norm():
    for func in (small("SFM"), small("NRM")):
        kinds = [{i.kind for i in d.instructions} for d in AUTO.designs(func)]
        assert any("rfactor" in k for k in kinds) and any("rfactor" not in k for k in kinds)


def test_auto_inline_removes_transposes_of_tbg():
    sch = RuleSpace([AutoInline()]).generate(small("TBG"))[0]
    assert [b.name for b in ir.blocks(sch.func.body)][1:] == ["C"]


def test_auto_inline_puts_an_elementwise_producer_into_its_consumer():
    """A layout change read by a transpose (ConvNeXt's blocked channels to channels-last):
    the producer goes into the transpose, whose loops walk the output (channels innermost:
    contiguous stores, each 16 of them one contiguous load), where the transpose folded
    into the producer kept the producer's loops (stores 96 apart, lane by lane)."""
    te = tessel.te
    x = te.placeholder((1, 6, 5, 7, 16), "float32", name="x")
    plain = te.compute((1, 96, 5, 7), lambda n, c, h, w: x[n, c // 16, h, w, c % 16],
                       name="from_blocked")
    out = te.compute((1, 5, 7, 96), lambda n, h, w, c: plain[n, c, h, w], name="transpose")
    sch = RuleSpace([AutoInline()]).generate(te.create_func([x, out], name="nhwc"))[0]
    assert [b.name for b in ir.blocks(sch.func.body)][1:] == ["transpose"]
    loops = sch.get_loops(sch.get_block("transpose"))
    assert sch.get(loops[-1]).extent == 96
    # an epilogue of a reduction still goes into its producer
    sch = RuleSpace([AutoInline()]).generate(small("TBG"))[0]
    assert [b.name for b in ir.blocks(sch.func.body)][1:] == ["C"]


def test_auto_inline_keeps_a_costly_producer_of_two_consumers_for_compute_location():
    # softmax's exp feeds the row sum and the output: inlined, each computes it again
    func = small("SFM")

    def after(rule, func, name="exp"):  # the blocks left once `rule` has seen block `name`
        sch = tessel.Schedule(func)
        return [b.name for b in ir.blocks(rule.apply(sch, sch.get_block(name))[0].func.body)]

    assert "exp" in after(AutoInline(), func)
    assert "exp" not in after(AutoInline(keep_shared_calls=False), func)
    # a costly producer of one consumer is still inlined
    x = tessel.te.placeholder((6, 5), "float32", name="x")
    e = tessel.te.compute((6, 5), lambda i, j: tessel.te.exp(x[i, j]), name="e")
    y = tessel.te.compute((6, 5), lambda i, j: e[i, j] * 2.0, name="y")
    assert "e" not in after(AutoInline(), tessel.te.create_func([x, y], name="exp2"), "e")
    # the auto space samples exp under the output's row loop: computed once per row, right
    rng, fused = random.Random(0), None
    for _ in range(200):
        sch = AUTO.sample(func, rng)
        rows = [r for r in ir.collect(sch.func.body, ir.For)
                if any(b.block.name == "exp" for b in ir.collect(r.body, ir.BlockRealize))
                and any(b.block.name == "softmax" for b in ir.collect(r.body, ir.BlockRealize))]
        if rows:
            fused = postprocess(sch, POSTPROCS).func
            break
    assert fused is not None
    assert max(max_errors(func, [fused])) < 1e-5


def _cases_func(spec):
    """out[t, p, c]: one of four formulas, chosen by t, over 5 x 32 (p, c)."""
    from tessel import te
    from tessel.space.rules.cases import CASES
    x = te.placeholder((4, 5, 32), name="x")

    def body(t, p, c):
        return te.if_then_else(t == 0, x[0, p, c] * 2.0, te.if_then_else(
            t == 1, x[1, p, c] - x[2, p, c], te.if_then_else(t == 2, x[3, p, c], x[0, p, c])))

    out = te.compute((4, 5, 32), body, name="out", attrs={CASES: spec})
    return te.create_func([x, out], name="cases")


def test_unroll_cases_unrolls_the_chosen_axes_just_outside_the_vector_loop():
    """t (4 = 2 x 2) unrolled whole, c split into 16-lane vectors innermost; in the C every
    choice folded (no ==); the program matches numpy. An annotation whose factors do not
    divide their axis, or a block already transformed, is left as it is."""
    from tessel.schedule import Schedule
    from tessel.space import UnrollCases
    rule = UnrollCases(vector_lanes=16)
    sch = Schedule(_cases_func(((2, 2), (), ())))
    rule.apply(sch, sch.get_block("out"))
    loops = [sch.get(lp) for lp in sch.get_loops(sch.get_block("out"))]
    assert [(lp.extent, lp.kind) for lp in loops] == [
        (5, "serial"), (2, "serial"), (2, "unrolled"), (2, "unrolled"), (16, "serial")]
    func = postprocess(sch, POSTPROCS).func
    source = generate_c(func, TARGET)
    kernel = source[source.index("static int32_t"):source.index("int32_t tessel_entry")]
    assert " == " not in kernel and kernel.count("// block out") == 4, kernel
    x = np.random.default_rng(0).standard_normal((4, 5, 32)).astype("float32")
    out = np.empty_like(x)
    tessel.build(func, TARGET)(x, out)
    want = np.stack([x[0] * 2, x[1] - x[2], x[3], x[0]])
    np.testing.assert_allclose(out, want, rtol=1e-6)
    for spec in (((3,), (), ()), ((2, 2), ())):  # 3 does not divide 4; one axis missing
        sch = Schedule(_cases_func(spec))
        rule.apply(sch, sch.get_block("out"))
        assert not _transforms(sch) and len(sch.get_loops(sch.get_block("out"))) == 3
    sch = Schedule(_cases_func(((2, 2), (), ())))
    sch.split(sch.get_loops(sch.get_block("out"))[1], [None, 5])
    rule.apply(sch, sch.get_block("out"))
    assert _transforms(sch) == ["split"]


def _transforms(sch) -> list[str]:
    from tessel.schedule.trace import is_pure
    return [i.kind for i in sch.trace.instructions if not is_pure(i.kind)]


def test_rules_that_match_no_block_raise():
    with pytest.raises(SpaceError, match="match no block of softmax"):
        make_space([MultiLevelTiling()]).designs(small("SFM"))


def test_make_space_accepts_functions_rules_templates_and_unions():
    def tile_rows(sch):
        i, j, k = sch.get_loops(sch.get_block("C"))
        sch.split(i, sch.sample_perfect_tile(i, 2, 8))

    assert isinstance(make_space(tile_rows), FunctionSpace)
    assert isinstance(make_space([AutoInline(), MultiLevelTiling()]), RuleSpace)
    assert isinstance(make_space("matmul"), TemplateSpace)
    union = make_space(["auto", "matmul", tile_rows], TARGET)
    assert isinstance(union, UnionSpace) and len(union.spaces) == 3
    func = small("GMM")
    rng = random.Random(0)
    found = {ir.structural_hash(union.sample(func, rng).func) for _ in range(12)}
    assert len(found) >= 6
    with pytest.raises(SpaceError, match="unknown space 'nope'"):
        make_space("nope")
    with pytest.raises(SpaceError, match="mixes schedule rules with spaces"):
        make_space([AutoInline(), "auto"])


def test_multi_level_tiling_takes_lanes_and_registers_from_the_target():
    avx2, avx512 = tessel.Target("x86_64-avx2"), tessel.Target("x86_64-avx512")
    rule = MultiLevelTiling().for_target(avx512)
    assert (rule.vector_lanes, rule.accumulator_registers) == (16, 24)
    mine = MultiLevelTiling(vector_lanes=8)  # what the user set stays
    (filled,) = make_space([mine], avx512).rules
    assert (filled.vector_lanes, filled.accumulator_registers) == (8, 24)
    (auto,) = [r for r in make_space("auto", avx2).rules if isinstance(r, MultiLevelTiling)]
    assert (auto.lanes, auto.accumulators) == (8, 12)
    host = tessel.Target("host")
    assert (MultiLevelTiling().lanes, MultiLevelTiling().accumulators) == (
        host.vector_lanes("float32"), host.accumulator_registers)
    with pytest.raises(SpaceError, match="accumulator_registers must be a positive int"):
        MultiLevelTiling(accumulator_registers=0)


def test_postprocessing_rejects_invalid_programs():
    sch = tessel.Schedule(small("GMM"))
    i, j, k = sch.get_loops(sch.get_block("C"))
    sch.annotate(i, "pragma_auto_unroll_max_step", 4096)
    assert postprocess(sch, POSTPROCS) is None
    with pytest.raises(SpaceError, match="pragma_auto_unroll_max_step 4096 > 512"):
        postprocess(sch, POSTPROCS, strict=True)


# ---- the hand-written GMM schedule is in the auto space ----------------------------------------
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _gmm_decisions(design: tessel.Trace, tiles: list[tuple[int, ...]], unroll: int) -> dict:
    it, out = iter(tiles), {}
    for site in design.sampling_sites():
        inst = design.instructions[site]
        candidates = dict(inst.args).get("candidates")
        if inst.kind == "sample_perfect_tile":
            out[site] = next(it)
        elif tuple(candidates) == (0, 1):  # pack B in panels of the vector tile
            out[site] = 1
        else:
            out[site] = list(candidates).index(unroll)
    return out


@ISA_PRESETS
def test_hand_written_gmm_schedule_is_reachable_in_the_auto_space(target):
    """benchmarks/gmm_schedule.py's 6 x (2 vectors) register tile, sized for `target`, is a
    design of the target's auto space under the right decisions, and its hot loop is 12 FMAs
    on full vectors (ymm with AVX2, zmm with AVX-512)."""
    from gmm_schedule import schedule_gmm
    nr = 2 * target.vector_lanes("float32")
    M, N, K = 96, 20 * nr, 128
    func = ops.matmul(M, N, K)
    hand = schedule_gmm(tessel.Schedule(func), target, mr=6, nr=nr, i1=4, j1=2, kt=64)
    tiles = [(4, 1, 4, 6), (10, 1, 2, nr), (2, 64)]  # i: i0 . i1 6 rows; j: j0 . j1 2 vectors
    auto, posts = make_space("auto", target), default_postprocs(target)
    matches = []
    for design in auto.designs(func):
        sch = design.apply(tessel.Schedule(func), _gmm_decisions(design, tiles, unroll=16))
        final = postprocess(sch, posts, strict=True)
        if loop_signature(final.func.body) == loop_signature(hand.func.body):
            matches.append(final.func)
    assert matches, "no design of the auto space reproduces the hand-written GMM schedule"
    assert max(max_errors(func, matches[:1])) < 1e-3
    loop = hot_loop(asm_for(generate_c(compact_buffers(matches[0]), target), target))
    assert len(fmas(loop, target)) == 12  # the 6 x 2-vector register tile, as by hand
    assert not spills(loop), loop


def _conv_decisions(design: tessel.Trace, tiles: list[tuple[int, ...]]) -> dict:
    it, out = iter(tiles), {}
    for site in design.sampling_sites():
        inst = design.instructions[site]
        if inst.kind == "sample_perfect_tile":
            out[site] = next(it)
        elif inst.kind == "sample_compute_location":
            out[site] = -1  # the padding at the root: computed once
        elif tuple(dict(inst.args)["candidates"]) == (0, 1):
            out[site] = 1  # pack the weight in panels of the vector tile
        else:
            out[site] = 0
    return out


@ISA_PRESETS
def test_hand_written_conv2d_schedule_is_reachable_in_the_auto_space(target):
    """benchmarks/conv2d_schedule.py's structure (output channels in the vector lanes, weight
    packed, a 2 x 2 pixel x 2-vector register tile) is a design of the auto space: its rows
    are 6 wide, so MultiLevelTiling also offers the output channels as the vector axis."""
    oc = 2 * target.vector_lanes("float32")
    func = ops.conv2d(1, 5, 6, 6, oc, 3, 3, padding=1)
    tiles = [(3, 1, 1, 2), (3, 1, 1, 2), (1, 5), (1, 3), (1, 3), (1, 1, 1, oc)]  # y x rc ry rx o
    auto, posts = make_space("auto", target), default_postprocs(target)
    designs = [d for d in auto.designs(func)
               if any(i.kind == "cache_write" for i in d.instructions)]
    programs = []
    for design in designs:
        try:
            sch = design.apply(tessel.Schedule(func), _conv_decisions(design, tiles))
        except tessel.ScheduleError:
            continue  # a design whose tiles do not take these decisions
        programs.append(postprocess(sch, posts, strict=True).func)
    packed = [p for p in programs if any(b.name.endswith("_global") for b in ir.blocks(p.body))]
    assert packed, "no design packs the weight along the output channels"
    assert max(max_errors(func, packed)) < 1e-4
    loop = hot_loop(asm_for(generate_c(compact_buffers(packed[0]), target), target))
    assert len(fmas(loop, target)) >= 8  # 2 x 2 pixels x two vectors of channels


@pytest.mark.parametrize("rows, n, piece, threads", [(40, 200, 40, True), (33, 3072, 64, True),
                                                     (100, 67, 8, True), (1, 650, 8, False),
                                                     (3, 67, 8, False)])
def test_a_loop_too_long_to_vectorize_whole_gets_a_vectorized_piece(rows, n, piece, threads):
    """RewriteParallelVectorizeUnroll: the innermost loop of an elementwise block, longer than
    max_vectorize_extent, is split by the largest multiple of the vector width that divides
    it and fits, or where none divides it (67, 650) in vectors (8 lanes here), the last one
    guarded; the inner piece is vectorized. A kernel of at most SERIAL_WORK iterations (an LSTM
    step's 650 gates) runs on one thread."""
    from tessel import te
    from tessel.space.postproc import SERIAL_WORK, RewriteParallelVectorizeUnroll
    from tessel.space.rules.parallel import PARALLEL, VECTORIZE
    A = te.placeholder((rows, n), name="A")
    B = te.compute((rows, n), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    sch = tessel.Schedule(te.create_func([A, B], name="scale"))
    sch.annotate(sch.get_block("root"), VECTORIZE, 64)
    sch.annotate(sch.get_block("root"), PARALLEL, 32)
    final = postprocess(sch, [RewriteParallelVectorizeUnroll(cores=2)], strict=True)
    loops = [l for l in ir.collect(final.func.body, ir.For)]
    vectorized = [l.extent for l in loops if l.kind == "vectorized"]
    assert vectorized == ([piece] if piece else [])
    assert any(l.kind == "parallel" for l in loops) == threads == (rows * n > SERIAL_WORK)
    a = np.random.default_rng(0).standard_normal((rows, n)).astype("float32")
    b = np.zeros_like(a)
    tessel.build(final.func)(a, b)
    np.testing.assert_allclose(b, a * 2 + 1, rtol=1e-6)


# ---- where RewriteLayout puts the pack stage ---------------------------------------------------
def _panel_gmm(i_tiles: list[int], lanes: int) -> tessel.Schedule:
    """A 40 x (3 vectors) x 37 matmul tiled like the tuned GMM-1024 programs: j in panels of
    one vector, the accumulators cached per j_0 panel, B packed, the root parallel."""
    func = ops.matmul(40, 3 * lanes, 37)
    sch = tessel.Schedule(func)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1, i2, i3 = sch.split(i, i_tiles)
    j0, j1, j2, j3 = sch.split(j, [3, 1, 1, lanes])
    k0, k1 = sch.split(k, [1, 37])
    sch.reorder(i0, j0, i1, j1, k0, i2, j2, k1, i3, j3)
    sch.annotate(block, "meta_schedule.pack_read", 1)
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, j0)
    root = sch.get_block("root")
    sch.annotate(root, "meta_schedule.parallel", 32)
    sch.annotate(root, "meta_schedule.vectorize", 64)
    return sch


def _pack_in_parallel_loop(program: ir.PrimFunc) -> bool:
    (loop,) = [f for f in ir.collect(program.body, ir.For)
               if f.kind == "parallel" and any(b.name == "C" for b in ir.blocks(f.body))]
    return any(b.name == "B_global" for b in ir.blocks(loop.body))


def test_each_thread_packs_the_panels_it_reads():
    """When only the packed axis iterates above the loop where the accumulators are cached,
    RewriteLayout packs B per panel inside the parallel loop (each panel once, by the thread
    that reads it, while it is in that thread's cache); when rows iterate there too it packs
    at the root, once. Both are correct at a shape of no suite."""
    lanes = TARGET.vector_lanes("float32")
    per_panel = postprocess(_panel_gmm([1, 5, 1, 8], lanes), POSTPROCS, strict=True).func
    at_root = postprocess(_panel_gmm([2, 5, 1, 4], lanes), POSTPROCS, strict=True).func
    assert _pack_in_parallel_loop(per_panel)
    assert not _pack_in_parallel_loop(at_root)
    assert any(b.name == "B_global" for b in ir.blocks(at_root.body))
    assert max(max_errors(ops.matmul(40, 3 * lanes, 37), [per_panel, at_root])) < 1e-4


def test_pack_stages_stay_at_the_root_for_prepacking():
    """pack_panels=False (what compile_model asks for when a kernel reads a constant) keeps
    the pack stage at the root, where split_prepacks takes it out of the kernel to run once;
    inside the parallel loop it could not."""
    from tessel.prepack import split_prepacks
    lanes = TARGET.vector_lanes("float32")
    per_panel = postprocess(_panel_gmm([1, 5, 1, 8], lanes), POSTPROCS, strict=True).func
    at_root = postprocess(_panel_gmm([1, 5, 1, 8], lanes),
                          default_postprocs(TARGET, pack_panels=False), strict=True).func
    assert not _pack_in_parallel_loop(at_root)
    assert split_prepacks(per_panel, constant={1})[1] == []
    main, (pack,) = split_prepacks(at_root, constant={1})
    assert pack.source == 1 and pack.packed.name == "B_global"
    assert not any(b.name == "B_global" for b in ir.blocks(main.body))


def test_a_packed_operand_is_laid_out_in_the_order_its_loops_read_it():
    """A conv whose loops walk the window (ry, rx) outside the input channels reads its packed
    weight as (o // t, ry, rx, c, o % t), not in OIHW's (c, ry, rx) order: one forward stream
    per output block. Correct against numpy at a shape of no suite, prepacked or not."""
    lanes = TARGET.vector_lanes("float32")
    func = ops.conv2d(1, 6, 9, 7, 2 * lanes, 3, 3, padding=1)
    sch = tessel.Schedule(func)
    block = sch.get_block("conv2d")
    n, o, y, x, c, ry, rx = sch.get_loops(block)
    o0, o1 = sch.split(o, [2, lanes])
    sch.reorder(n, o0, y, ry, rx, c, x, o1)
    sch.annotate(block, "meta_schedule.pack_read", 1)
    final = postprocess(sch, POSTPROCS, strict=True).func
    realize = next(r for r in ir.collect(final.body, ir.BlockRealize)
                   if r.block.name == "conv2d")
    (read,) = [load for load in ir.collect(realize.block.body, ir.BufferLoad)
               if load.buffer.name.endswith("global")]
    names = {iv.var: iv.var.name for iv in realize.block.iter_vars}
    order = [next(names[v] for v in names if ir.uses_var(index, v)) for index in read.indices]
    assert order == ["vo", "vry", "vrx", "vrc", "vo"], order
    assert [int(n) for n in read.buffer.shape] == [2, 3, 3, 6, lanes]
    prepacked = postprocess(sch, default_postprocs(TARGET, pack_panels=False), strict=True).func
    assert max(max_errors(func, [final, prepacked])) < 1e-4


def test_a_pack_that_would_copy_the_operand_as_it_is_is_skipped():
    """B[k, j] read along j, the whole of its rows one vector tile wide: its panels
    [j // N, k, j % N] are B itself, so RewriteLayout makes no copy (a blocked pool's input
    was copied whole on every call: SqueezeNet's first max pool 82 -> 38 us); three tiles wide
    it packs. Both correct against numpy."""
    lanes = TARGET.vector_lanes("float32")

    def program(n: int) -> ir.PrimFunc:
        func = ops.matmul(13, n, 9)
        sch = tessel.Schedule(func)
        block = sch.get_block("C")
        i, j, k = sch.get_loops(block)
        j0, j1 = sch.split(j, [n // lanes, lanes])
        sch.reorder(i, j0, k, j1)
        sch.annotate(block, "meta_schedule.pack_read", 1)
        return postprocess(sch, POSTPROCS, strict=True).func

    whole, tiled = program(lanes), program(3 * lanes)
    assert not any(b.name.endswith("_global") for b in ir.blocks(whole.body))
    assert any(b.name == "B_global" for b in ir.blocks(tiled.body))
    assert max(max_errors(ops.matmul(13, lanes, 9), [whole])) < 1e-4
    assert max(max_errors(ops.matmul(13, 3 * lanes, 9), [tiled])) < 1e-4
