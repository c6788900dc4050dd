"""Expert priors of the auto space (tessel.space.priors): register-blocked decisions per design,
valid and correct programs, measured first by the evolutionary search."""
import math

import numpy as np
import pytest

import tessel
from tessel import ops
from tessel.search import make_strategy
from tessel.space import default_postprocs, make_space, postprocess
from tessel.codegen import asm_for, generate_c
from tessel.codegen.passes import compact_buffers
from tessel.graph.opdefs.blocked import block_weight, unblock_array
from tessel.space.priors import (LOCAL_TILE_BYTES, partial_rows, prior_decisions,
                                 prior_schedules, ranked_priors)
from isa import ISA_PRESETS, fmas, hot_loop, runs_here, spills

TARGET = tessel.Target("host")
AUTO = make_space("auto", TARGET)
POSTPROCS = default_postprocs(TARGET)


def _run(func, program, target=TARGET) -> float:
    inputs = ops.reference_inputs(func, seed=1)
    (out,) = ops.empty_outputs(func)
    tessel.build(program, target if runs_here(target) else TARGET)(*inputs, out)
    ref = ops.run_reference(func, *inputs)
    return float(np.abs(out - ref).max() / max(1.0, np.abs(ref).max()))


def _prior_programs(func):
    """The postprocessed prior programs of `func` (PrimFuncs)."""
    return [p.func for p in (postprocess(s, POSTPROCS) for s in prior_schedules(AUTO, func))
            if p is not None]


def _packs_weight(program) -> bool:
    return any(b.name == "weight_global" for b in tessel.ir.blocks(program.body))


def _tiles(trace):
    return _tiles_of(trace, trace.decisions)


@ISA_PRESETS
def test_matmul_priors_tile_whole_vectors_and_a_few_rows(target):
    """Register tiles of one or two whole vectors by as many rows as fit three quarters of
    the target's vector registers (12 of AVX2's 16, 24 of AVX-512's 32)."""
    lanes, accumulators = target.vector_lanes("float32"), target.accumulator_registers
    func = ops.matmul(96, 640, 120)
    auto = make_space("auto", target)
    designs = auto.designs(func)
    widths, tiles_seen = set(), set()
    for design in designs:
        for decisions in prior_decisions(design, lanes, accumulators):
            tiles = [decisions[s] for s in design.sampling_sites() if s in decisions
                     and design.instructions[s].kind == "sample_perfect_tile"]
            rows, cols, red = tiles
            assert math.prod(rows) == 96 and math.prod(cols) == 640 and math.prod(red) == 120
            assert cols[-1] in (lanes, 2 * lanes)
            assert rows[-1] * cols[-1] // lanes <= accumulators
            assert red[-1] == 120  # the whole reduction inside the register tile
            widths.add(cols[-1])
            tiles_seen.add((rows[-1], cols[-1]))
    assert widths == {lanes, 2 * lanes}
    # 96 rows: the most that divide them within the registers (AVX2 6 x 2, AVX-512 12 x 2)
    assert (accumulators // 2, 2 * lanes) in tiles_seen
    ranked = prior_schedules(auto, func)  # the best two ranks: a local accumulator tile
    assert 0 < len(ranked) <= 4 * len(designs) - 2
    assert all(any(i.kind == "cache_write" for i in s.trace.instructions) for s in ranked[:2])


@ISA_PRESETS
def test_a_product_of_fewer_rows_than_columns_keeps_its_row_blocks_inside_the_task(target):
    """200 rows by 768 columns (a transformer's dense layer): the first prior runs its row
    blocks inside parallel tasks over the columns, as few outside as leave 4 tasks a core (each
    core then reads its panel of the weight once), all of a task's register tiles between the
    two reduction levels where their local tile takes at most LOCAL_TILE_BYTES (each chunk of
    the weight read into L1 once for all the rows), else above the reduction; the second is
    the prior as before; 768 rows by 200 columns keep every row block outermost."""
    lanes, accumulators = target.vector_lanes("float32"), target.accumulator_registers
    placed = set()
    for m, n in ((200, 768), (1024, 4096)):
        design = make_space("auto", target).designs(ops.matmul(m, n, 64))[0]
        for cores in (1, 2, 3):
            first, second = prior_decisions(design, lanes, accumulators, cores=cores)[:2]
            (rows, cols, _), (rows_before, cols_before, _) = _tiles_of(design, first), \
                _tiles_of(design, second)
            assert cols == cols_before and rows[3] == rows_before[3]
            assert rows_before[1] == 1 and math.prod(rows) == math.prod(rows_before) == m
            assert rows[0] * cols[0] >= 4 * cores
            assert all(d * cols[0] < 4 * cores for d in range(1, rows[0]) if rows[0] % d == 0)
            between = math.prod(rows[1:]) * cols[2] * cols[3] * 4 <= LOCAL_TILE_BYTES
            if between:  # every register tile of the task between the reductions
                assert rows[1] == 1 and rows[2] == m // rows[0] // rows[3]
            else:
                assert rows[1] == rows_before[0] // rows[0] and rows[2] == rows_before[2]
            placed.add(between)
    assert placed == {True, False}
    for decisions in prior_decisions(design, lanes, accumulators, cores=1000):
        assert _tiles_of(design, decisions)[0][1] == 1  # too few columns for the cores: as before
    tall = make_space("auto", target).designs(ops.matmul(768, 200, 64))[0]
    for decisions in prior_decisions(tall, lanes, accumulators, cores=2):
        assert _tiles_of(tall, decisions)[0][1] == 1


@ISA_PRESETS
def test_prior_programs_are_correct_and_register_blocked(target):
    func = ops.matmul(48, 4 * target.vector_lanes("float32"), 40)
    posts = default_postprocs(target)
    finals = [postprocess(s, posts) for s in prior_schedules(make_space("auto", target), func)]
    programs = [f.func for f in finals if f is not None]
    assert programs and all(_run(func, p, target) < 1e-5 for p in programs)
    loops = [hot_loop(asm_for(generate_c(compact_buffers(p), target), target))
             for p in programs]
    counts = [len(fmas(loop, target)) for loop in loops]
    # 48 rows: the 2-vector tiles fill the accumulator registers (AVX2 6 x 2, AVX-512 12 x 2),
    # the 1-vector ones half of them (at most 12 rows); nothing leaves its register
    assert max(counts) == target.accumulator_registers, counts
    assert min(counts) >= target.accumulator_registers // 2, counts
    assert not any(spills(loop) for loop in loops)


@ISA_PRESETS
def test_rows_no_full_tile_divides_get_a_partial_register_tile(target):
    """1024 rows: two-vector register tiles of the most rows the accumulators hold (AVX2 6,
    AVX-512 12) divide neither, the perfect tiles hold 4 and 8. A further design splits the
    rows by 6 or 12, its last tile partial; its prior goes first where the perfect tile keeps
    fewer than 12 accumulators in flight (AVX2's 4 x 2), after it otherwise (AVX-512's
    8 x 2), and after it for a short reduction (64: the accumulators are loaded and stored
    every 64 steps). Its program is correct, its hot loop the full register tile, unguarded."""
    lanes, accumulators = target.vector_lanes("float32"), target.accumulator_registers
    rows = min(12, accumulators // 2)
    auto = make_space("auto", target)
    perfect_rows = max(d for d in range(1, rows + 1) if 1024 % d == 0)
    for k in (64, 512):
        func = ops.matmul(1024, 4 * lanes, k)
        partial = [d for d in auto.designs(func) if partial_rows(d)]
        assert [partial_rows(d) for d in partial] == [(1024, rows)]
        ranked = ranked_priors(auto, func)
        assert (ranked[0][0] is partial[0]) == (2 * perfect_rows < 12 and k >= 256)
    design, decisions = next((d, x) for d, x in ranked if d is partial[0])
    row_tile = [decisions[s] for s in design.sampling_sites() if s in decisions
                and design.instructions[s].kind == "sample_perfect_tile"][0]
    assert math.prod(row_tile) == -(-1024 // rows) and row_tile[-1] == 1
    program = postprocess(design.apply(tessel.Schedule(func), decisions),
                          default_postprocs(target)).func
    assert _run(func, program, target) < 1e-5
    source = generate_c(compact_buffers(program), target)
    assert f"+ {rows - 1} < 1024) {{" in source  # the test of a whole tile, per tile
    loop = hot_loop(asm_for(source, target))
    assert len(fmas(loop, target)) == 2 * rows and not spills(loop)


@ISA_PRESETS
def test_rows_a_tile_divides_well_get_no_partial_design(target):
    """96 rows (AVX2 6 x 2 and AVX-512 12 x 2 divide them), 200 (5 and 10 rows: close to the
    accumulators' 6 and 12) and 8 (6 + 2 rows make as many tiles as 4 + 4): perfect tiles."""
    lanes = target.vector_lanes("float32")
    auto = make_space("auto", target)
    for m in (96, 200, 8):
        assert not any(partial_rows(d) for d in auto.designs(ops.matmul(m, 2 * lanes, 16)))


def test_conv_priors_include_channels_in_the_vector_lanes_with_a_packed_weight():
    func = ops.conv2d(1, 5, 7, 7, 16, 3, 3, padding=1)  # rows of 7 cannot fill vectors
    programs = [postprocess(s, POSTPROCS) for s in prior_schedules(AUTO, func)]
    packed = [p.func for p in programs
              if p is not None and any(b.name.endswith("_global")
                                       for b in tessel.ir.blocks(p.func.body))]
    assert packed and max(_run(func, p) for p in packed) < 1e-5


def test_strided_conv_priors_put_channels_in_the_vector_lanes():
    """A stride-2 conv whose output rows fill whole vectors still gets the channel-vector
    design: vectors along its rows would gather every other input (R18-C1, the 7x7 stem: the
    best prior 91 -> 300 GFLOP/s with it)."""
    func = ops.conv2d(1, 3, 64, 64, 32, 3, 3, stride=2, padding=1)  # 32-wide output rows
    packed = [p for p in _prior_programs(func) if _packs_weight(p)]
    assert packed and max(_run(func, p) for p in packed) < 1e-5
    unit = ops.conv2d(1, 3, 32, 32, 32, 3, 3, padding=1)  # stride 1: rows stay the vector axis
    assert not any(_packs_weight(p) for p in _prior_programs(unit))


@pytest.mark.parametrize("stride", [1, 2])
def test_one_by_one_conv_priors_pack_the_weight(stride):
    """A 1x1 window's reduction loops of extent 1 stay innermost after tiling: the pack still
    follows the vector axis (it was skipped: every 1x1 conv read its weight with 16 scalar
    loads per vector)."""
    func = ops.conv2d(1, 24, 9, 9, 48, 1, 1, stride=stride)
    programs = _prior_programs(func)
    assert programs
    for program in programs:
        assert _packs_weight(program)
        assert _run(func, program) < 1e-5


def test_templates_and_untiled_programs_have_no_priors():
    assert prior_schedules(make_space("matmul"), ops.matmul(16, 16, 16)) == []
    assert prior_schedules(AUTO, ops.relu((5, 7))) == []


@pytest.mark.parametrize("priors", [True, False])
def test_evolutionary_search_measures_the_priors_first(priors):
    func = ops.matmul(48, 64, 40)
    strategy = make_strategy("evolutionary", AUTO, func, seed=0, postprocs=POSTPROCS,
                             priors=priors, population=8, generations=1)
    batch = strategy.ask(6)
    assert len(batch) == 6
    prior_keys = {tessel.ir.structural_hash(p.func)
                  for p in map(lambda s: postprocess(s, POSTPROCS), prior_schedules(AUTO, func))
                  if p is not None}
    firsts = [tessel.ir.structural_hash(p.func) in prior_keys for p in batch]
    assert all(firsts[:4]) if priors else sum(firsts) <= 1


@ISA_PRESETS
def test_matrix_vector_priors_keep_several_accumulators_in_flight(target):
    """A product of one row (a classifier, batch 1) has no rows to block: its vector tile
    widens instead, so its steps do not all wait on one FMA (1000 outputs, no divisor of 16:
    the tile was 10 lanes, one vector and two scalars; MobileNet-v2's 1280x1000 classifier
    60 -> 27 us alone)."""
    lanes, accumulators = target.vector_lanes("float32"), target.accumulator_registers
    func = ops.dense(1, 1000, 96)
    auto = make_space("auto", target)
    vector_tiles = set()
    for design in auto.designs(func):
        for decisions in prior_decisions(design, lanes, accumulators):
            vec = [decisions[s] for s in design.sampling_sites() if s in decisions
                   and design.instructions[s].kind == "sample_perfect_tile"][0]
            assert math.prod(vec) == 1000
            vector_tiles.add(vec[-1])
    assert vector_tiles and all(math.ceil(t / lanes) >= 3 for t in vector_tiles), vector_tiles
    posts = default_postprocs(target)
    finals = [postprocess(s, posts) for s in prior_schedules(auto, func)]
    programs = [f.func for f in finals if f is not None]
    assert programs and all(_run(func, p, target) < 1e-5 for p in programs)
    for p in programs:
        loop = hot_loop(asm_for(generate_c(compact_buffers(p), target), target))
        assert len(fmas(loop, target)) >= 3, loop


def _first_conv_prior(target, in_channels: int, size: int):
    """The first prior of a 1x1 convolution from `in_channels` to 4 vectors of output channels
    over a size x size map, in the blocked layout: the last-level tiles (output-channel
    blocks, pixels of a row, vector) and the hot loop of its program, which is checked
    against numpy where it runs."""
    from tessel.graph.compiler import model_tasks
    from tessel.graph.ir import Graph
    rng = np.random.default_rng(0)
    lanes = target.vector_lanes("float32")
    g = Graph("conv")
    x = g.add_input("x", (1, in_channels, size, size))
    w = g.add_constant("w", rng.standard_normal((4 * lanes, in_channels, 1, 1)).astype("float32"))
    g.set_outputs([g.add_node("conv", [x, w])])
    _, tasks = model_tasks(g, target, layout="blocked")
    (func,) = [t.workload for t in tasks if "conv_blocked" in t.workload.name]
    design, decisions = ranked_priors(make_space("auto", target), func)[0]
    blocks, _, pixels, vector = [t for t in _tiles_of(design, decisions) if len(t) == 4]
    program = postprocess(design.apply(tessel.Schedule(func), decisions),
                          default_postprocs(target)).func
    if runs_here(target):
        data = rng.standard_normal((1, in_channels, size, size)).astype("float32")
        weight = g.constants[w]
        out = np.zeros((1, 4, size, size, lanes), "float32")  # a plain input reads as NCHW[1]c
        tessel.build(program, target)(data[..., None], block_weight(weight, 1, lanes), out)
        expected = np.einsum("nchw,oc->nohw", data, weight[:, :, 0, 0])
        np.testing.assert_allclose(unblock_array(out), expected, rtol=1e-4, atol=1e-4)
    loop = hot_loop(asm_for(generate_c(compact_buffers(program), target), target))
    return (blocks[-1], pixels[-1], vector[-1]), loop


def _tiles_of(design, decisions):
    return [decisions[s] for s in design.sampling_sites() if s in decisions
            and design.instructions[s].kind == "sample_perfect_tile"]


@ISA_PRESETS
def test_small_map_priors_hold_two_channel_blocks_where_registers_allow(target):
    """A 7x7 map gives a register tile 7 pixels by one vector of output channels: 7
    accumulators, too few to hide the FMA latency. Where the target has the registers for it
    (AVX-512's 24 accumulators, not AVX2's 12), the first prior holds two output-channel blocks
    instead (14; MobileNet-v2's kernels at 14x14 and 7x7 ran 10-30% faster, the untuned model
    2.26 -> 1.94 ms as the sum of its kernels alone)."""
    lanes = target.vector_lanes("float32")
    tile, loop = _first_conv_prior(target, 2 * lanes, 7)
    held = 2 if 2 * 7 <= target.accumulator_registers else 1
    assert tile == (held, 7, lanes)
    assert len(fmas(loop, target)) >= 7 * held and not spills(loop)


@ISA_PRESETS
def test_conv_priors_balance_a_tiles_loads_and_fmas(target):
    """A 28x28 map gives a register tile of 7 pixels by one vector of output channels: 8
    loads a step (7 broadcasts, one weight vector) for 7 FMAs. Where two channel blocks of 7
    pixels do not fit the accumulators (AVX2's 12), the first prior takes 4 pixels by two
    blocks instead: 6 loads for 8 FMAs (ResNet-50's 1x1 128 -> 512 at 28x28 on a Zen 3: 0.80
    -> 0.65 ms a call); where they fit, 7 x 2 as before."""
    lanes = target.vector_lanes("float32")
    tile, loop = _first_conv_prior(target, 8 * lanes, 28)
    rows = 7 if 2 * 7 <= target.accumulator_registers else 4
    assert tile == (2, rows, lanes)
    assert len(fmas(loop, target)) >= 2 * rows and not spills(loop)


def test_short_reductions_read_their_padding_inline():
    """A depthwise conv's 3x3 window is 9 FMAs per output: copying its whole padded input
    first costs as much (MobileNet-v2's stride-2 depthwise at 112x112: 91 -> 55 us without
    the copy). Its first prior reads the input where it lies; a conv over 64 channels x 3x3
    still pads at the root first, and has the inlined variant too."""
    def blocks_of(program):
        return {b.name for b in tessel.ir.blocks(program.body)}

    depthwise = ops.depthwise_conv2d(1, 32, 15, 15, 3, 3, stride=2, padding=1)
    programs = _prior_programs(depthwise)
    first = blocks_of(programs[0])
    assert not any("pad" in b or b.endswith("_global") for b in first), first
    assert all(_run(depthwise, p) < 1e-5 for p in programs)
    conv = ops.conv2d(1, 64, 14, 14, 64, 3, 3, padding=1)
    programs = _prior_programs(conv)
    assert any("pad" in b for b in blocks_of(programs[0]))
    assert any(not any("pad" in b for b in blocks_of(p)) for p in programs[1:])


def _scores_prior(target, keys):
    """The prior program of q k^T over `keys` tokens, 2 heads of 16, both transposes folded
    into the product, and how the runtime got it."""
    from tessel.graph.compiler.compile import fallback_program
    from tessel.graph.compiler.tasks import extract_tasks, lower_groups
    from tessel.graph.fuse import fuse
    from tessel.graph.ir import Graph
    g = Graph("scores")
    q, k = g.add_input("q", (1, keys, 2, 16)), g.add_input("k", (1, keys, 2, 16))
    g.set_outputs([g.add_node("matmul", [g.add_node("transpose", [q], perm=(0, 2, 1, 3)),
                                         g.add_node("transpose", [k], perm=(0, 2, 3, 1))])])
    task, = extract_tasks(lower_groups(g, fuse(g), target.cores), target)
    return fallback_program(task.workload, make_space("auto", target),
                            default_postprocs(target), target)


def _check_scores(func, target, keys):
    """The scores `func` computes equal numpy's, where the target runs here."""
    if runs_here(target):
        rng = np.random.default_rng(keys)
        a, b = rng.standard_normal((2, 1, keys, 2, 16)).astype(np.float32)
        out = np.zeros((1, 2, keys, keys), np.float32)
        tessel.build(func, target)(a, b, out)
        np.testing.assert_allclose(out, a.transpose(0, 2, 1, 3) @ b.transpose(0, 2, 3, 1),
                                   rtol=1e-5, atol=1e-5)


@ISA_PRESETS
def test_attention_scores_over_keys_that_tile_badly_copy_them_padded(target):
    """q k^T over 37 keys (ViT's 197: no vector width divides them): the product computes 48
    columns from a copy of k^T whose extra columns repeat the last key, a stage of its own
    that the prior leaves at the root (inlined, the keys were read through a clamp one lane
    at a time), and the scores equal numpy's."""
    func, how = _scores_prior(target, 37)
    columns = [b for b in tessel.ir.blocks(func.body) if b.name.endswith("_columns")]
    assert how == "prior" and len(columns) == 1
    assert columns[0].writes[0].buffer.shape[-1] == 48
    _check_scores(func, target, 37)


@ISA_PRESETS
def test_attention_scores_pack_the_transposed_keys(target):
    """q k^T with both transposes folded into the product: k^T's columns are the keys'
    rows, one element a lane once the transpose is inlined, so the prior packs the keys in
    panels (a stage of its own) and the scores equal numpy's."""
    func, how = _scores_prior(target, 48)
    assert how == "prior" and "p1_global" in [b.name for b in tessel.ir.blocks(func.body)]
    _check_scores(func, target, 48)
