"""decompose_reduction / rfactor: expected IR, trace round trip, errors, numerical equivalence."""
import dataclasses

import numpy as np
import pytest

import tessel
from tessel import ir, ops, te
from tessel.schedule import Schedule, ScheduleError, Trace, tree
from tessel.schedule.reduction import kept_predicate


def run(func, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func)(*inputs, *outs)
    return outs


def check_equivalent(original, scheduled):
    expected, got = run(original), run(scheduled)
    assert len(expected) == len(got) >= 1
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def check_round_trip(original, sch):
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(original))
    assert ir.structural_equal(replayed.func, sch.func)
    assert replayed.trace.script() == sch.trace.script()


def tiled_matmul(M=13, N=20, K=7):
    f = ops.matmul(M, N, K)
    sch = Schedule(f)
    c = sch.get_block("C")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    return f, sch, c, (i0, j0, k, i1, j1)


# decompose_reduction -----------------------------------------------------------------------
def test_decompose_reduction_under_a_tiled_matmul():
    f, sch, c, (i0, j0, k, i1, j1) = tiled_matmul()
    init = sch.decompose_reduction(c, k)
    text = sch.func.script()
    assert sch.get(init).name == "C_init" and sch.get(c).init is None
    assert text.index('T.block("C_init")') < text.index("for k in T.serial(7):")
    assert "vi = T.axis.spatial(13, i_0 * 4 + i_1)" in text
    assert "T.where(i_0 * 4 + i_1 < 13 and j_0 * 8 + j_1 < 20)" in text
    assert "C[vi, vj] = 0.0" in text
    # the init nest copies i_1 and j_1 (its spatial loops) under j_0, before k
    j0_loop = sch.get(j0)
    assert isinstance(j0_loop.body, ir.SeqStmt) and len(j0_loop.body.seq) == 2
    init_nest = j0_loop.body.seq[0]
    assert [l.extent for l in ir.collect(init_nest, ir.For)] == [4, 8]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_decompose_reduction_at_the_outermost_loop_keeps_all_spatial_loops():
    f, sch, c, (i0, j0, k, i1, j1) = tiled_matmul(5, 9, 3)
    sch.parallel(i0)
    sch.decompose_reduction(c, i0)
    loops = ir.collect(sch.func.body, ir.For)
    assert [l.kind for l in loops[:4]] == ["parallel", "serial", "serial", "serial"]
    assert len(sch.func.root.body.seq) == 2
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_decompose_reduction_with_a_split_reduction_drops_its_predicate():
    f = ops.layer_norm(3, 11)
    sch = Schedule(f)
    mean = sch.get_block("mean")
    i, k = sch.get_loops(mean)
    k0, k1 = sch.split(k, factors=[None, 8])  # k_0 * 8 + k_1 < 11
    sch.decompose_reduction(mean, k0)
    init = sch.get(sch.get_block("mean_init"))
    realize = [r for r in ir.collect(sch.func.body, ir.BlockRealize) if r.block is init][0]
    assert isinstance(realize.predicate, ir.IntImm) and realize.predicate.value
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_decompose_reduction_errors():
    f, sch, c, (i0, j0, k, i1, j1) = tiled_matmul()
    before = sch.func
    with pytest.raises(ScheduleError, match="a reduction iter var of block C"):
        sch.decompose_reduction(c, i1)  # k is above i1
    g = ops.softmax(3, 5)
    s2 = Schedule(g)
    (i, j) = s2.get_loops(s2.get_block("exp"))
    with pytest.raises(ScheduleError, match="block exp has no init"):
        s2.decompose_reduction(s2.get_block("exp"), i)
    with pytest.raises(ScheduleError, match="loop i is not an ancestor of block maxelem"):
        s2.decompose_reduction(s2.get_block("maxelem"), i)
    assert sch.func is before


# rfactor -------------------------------------------------------------------------------------
def rfactor_row(f, name, factor, axis=0, parallel=True):
    sch = Schedule(f)
    block = sch.get_block(name)
    i, k = sch.get_loops(block)
    k0, k1 = sch.split(k, factors=[None, factor])
    rf = sch.rfactor(k1, axis)
    if parallel:
        loops = sch.get_loops(rf)
        sch.parallel(loops[2])  # the rfactor loop is spatial in the rfactor block
    return sch, rf


def test_rfactor_softmax_max_expected_ir():
    f = ops.softmax(5, 13)
    sch, rf = rfactor_row(f, "maxelem", 4, parallel=False)
    text = sch.func.script()
    assert 'maxelem_rf = T.alloc_buffer((4, 5), "float32")' in text
    assert "vk_1 = T.axis.spatial(4, k_1)" in text and "vk_0 = T.axis.reduce(4, k_0)" in text
    assert "maxelem_rf[vk_1, vi] = T.max(maxelem_rf[vk_1, vi], x[vi, vk_0 * 4 + vk_1])" in text
    assert 'maxelem_rf[vk_1, vi] = T.float32("-inf")' in text
    assert "maxelem[vi_1] = T.max(maxelem[vi_1], maxelem_rf[vk_1_1, vi_1])" in text
    assert sch.get(rf).name == "maxelem_rf"
    wb = sch.get(sch.get_block("maxelem"))
    assert [iv.kind for iv in wb.iter_vars] == ["reduce", "spatial"]
    names = [b.name for b in ir.blocks(sch.func.body)]
    assert names[:3] == ["root", "maxelem_rf", "maxelem"]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


@pytest.mark.parametrize("M, N, factor", [(5, 13, 4), (3, 5, 8), (7, 31, 8)])
def test_rfactor_softmax_max_and_sum_then_parallel(M, N, factor):
    f = ops.softmax(M, N)
    sch = Schedule(f)
    for name in ("maxelem", "expsum"):
        block = sch.get_block(name)
        i, k = sch.get_loops(block)
        k0, k1 = sch.split(k, factors=[None, factor])
        rf = sch.rfactor(k1, 1)
        sch.parallel(sch.get_loops(rf)[2])
    assert sum(l.kind == "parallel" for l in ir.collect(sch.func.body, ir.For)) == 2
    shapes = {b.name: b.shape for b in sch.func.root.alloc_buffers}
    assert shapes["maxelem_rf"] == shapes["expsum_rf"] == (M, factor)
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_rfactor_layer_norm_mean():
    f = ops.layer_norm(4, 19)
    sch, rf = rfactor_row(f, "mean", 8)
    assert "mean_rf[vk_1, vi] = mean_rf[vk_1, vi] + x[vi, vk_0 * 8 + vk_1]" in sch.func.script()
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_rfactor_of_an_inner_split_of_a_conv_reduction():
    f = ops.conv2d(1, 6, 5, 5, 3, 3, 3, padding=1)
    sch = Schedule(f)
    conv = sch.get_block("conv2d")
    loops = sch.get_loops(conv)
    rc0, rc1 = sch.split(loops[4], factors=[None, 4])
    rf = sch.rfactor(rc1, 4)
    assert sch.get(rf).writes[0].buffer.shape == (1, 3, 5, 5, 4)
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_rfactor_errors():
    f = ops.softmax(3, 10)
    sch = Schedule(f)
    m = sch.get_block("maxelem")
    i, k = sch.get_loops(m)
    k0, k1 = sch.split(k, factors=[None, 4])
    before = sch.func
    with pytest.raises(ScheduleError, match="loop i is not a reduction loop of block maxelem"):
        sch.rfactor(i, 0)
    with pytest.raises(ScheduleError, match="factor_axis 3 is out of range"):
        sch.rfactor(k1, 3)
    (i2, j2) = sch.get_loops(sch.get_block("exp"))
    with pytest.raises(ScheduleError, match="block exp is not a reduction block"):
        sch.rfactor(j2, 0)
    assert sch.func is before


def test_rfactor_needs_one_block_and_a_known_combiner():
    f = ops.softmax(3, 10)
    sch = Schedule(f)
    m = sch.get_block("maxelem")
    i, k = sch.get_loops(m)
    sch.decompose_reduction(m, k)
    with pytest.raises(ScheduleError, match="not a reduction block with an init"):
        sch.rfactor(k, 0)
    with pytest.raises(ScheduleError,
                       match=r"must hold exactly one block, found \['maxelem_init', 'maxelem'\]"):
        sch.rfactor(i, 0)
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis(6, name="k")
    P = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="P")
    g = te.create_func([A, P], name="prod")
    realize = ir.collect(g.body, ir.BlockRealize)[1]  # [root, P]
    update = realize.block.body
    prod = ir.BufferStore(update.buffer, update.value.a * update.value.b, update.indices)
    block = dataclasses.replace(realize.block, body=prod)
    new_realize = dataclasses.replace(realize, block=block)
    bad = g.with_body(tree.rebuild(g.body, {id(realize): new_realize}))
    s3 = Schedule(bad)
    with pytest.raises(ScheduleError, match="not a sum, max or min reduction"):
        s3.rfactor(s3.get_loops(s3.get_block("P"))[1], 0)


def test_rfactor_loop_conditions():
    f = ops.conv2d(1, 4, 5, 5, 2, 3, 3)
    sch = Schedule(f)
    conv = sch.get_block("conv2d")
    n, o, y, x, rc, ry, rx = sch.get_loops(conv)
    ryrx = sch.fuse(ry, rx)
    a, b = sch.split(ryrx, factors=[None, 2])
    with pytest.raises(ScheduleError, match="loop ry_rx_fused_1 binds 2 reduction iter vars"):
        sch.rfactor(b, 0)
    sch.reorder(rc, x)
    xrc = sch.fuse(rc, x)
    with pytest.raises(ScheduleError, match="loop rc_x_fused is not a reduction loop"):
        sch.rfactor(xrc, 0)
    g = ops.conv2d(1, 4, 5, 5, 2, 3, 3)
    s2 = Schedule(g)
    n, o, y, x, rc, ry, rx = s2.get_loops(s2.get_block("conv2d"))
    s2.reorder(rc, x)
    s2.fuse(rc, x)
    with pytest.raises(ScheduleError, match="loop rc_x_fused binds both spatial and reduction"):
        s2.rfactor(rx, 0)


def test_predicate_that_cannot_be_relaxed_is_reported():
    i, k = ir.Var("i"), ir.Var("k")
    block = ir.Block("B", (), (), (), ir.SeqStmt(()))
    realize = ir.realize(block, (), i - k < 3)
    loops = [ir.For(i, 4, realize), ir.For(k, 4, realize)]
    with pytest.raises(ScheduleError, match="predicate .* depends on loop"):
        kept_predicate(realize, {k}, {}, "rfactor", loops)
    relaxed = kept_predicate(ir.realize(block, (), i + k * 2 < 3), {k}, {}, "rfactor", loops)
    assert repr(relaxed) == "i < 3"
