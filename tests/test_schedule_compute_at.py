"""Compute-location primitives (compute_inline, reverse_compute_inline, compute_at,
reverse_compute_at, sample_compute_location): expected IR, trace round trip, errors, and
numerical equivalence with the unscheduled program at odd shapes."""
import collections
import dataclasses

import numpy as np
import pytest

import tessel
from tessel import ir, ops, te
from tessel.schedule import Schedule, ScheduleError, Trace, tree


# helpers ---------------------------------------------------------------------------------
def run(func, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func)(*inputs, *outs)
    return outs


def check_equivalent(original, scheduled):
    expected, got = run(original), run(scheduled)
    assert len(expected) == len(got)
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def check_round_trip(original, sch):
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(original))
    assert ir.structural_equal(replayed.func, sch.func)
    assert replayed.trace.script() == sch.trace.script()


def check_all(original, sch):
    check_round_trip(original, sch)
    check_equivalent(original, sch.func)


def block_names(func):
    return [b.name for b in ir.blocks(func.body)]


def chain(M=5, N=7, consumer=None, args=None):
    """A -> B = A * 2 -> C = max(B, 0) + W (or `consumer(A, B, W)`), output C."""
    A, W = te.placeholder((M, N), name="A"), te.placeholder((N,), name="W")
    B = te.compute((M, N), lambda i, j: A[i, j] * 2.0, name="B")
    body = consumer or (lambda i, j: te.max(B[i, j], 0.0) + W[j])
    C = te.compute((M, N), lambda i, j: body(i, j) if consumer is None else body(A, B, W, i, j),
                   name="C")
    return te.create_func(args(A, W, B, C) if args else [A, W, C], name="chain")


def chain3(M=5, N=7):
    """A -> P = A * 2 -> X = P + 1 -> C = X * 3."""
    A = te.placeholder((M, N), name="A")
    P = te.compute((M, N), lambda i, j: A[i, j] * 2.0, name="P")
    X = te.compute((M, N), lambda i, j: P[i, j] + 1.0, name="X")
    C = te.compute((M, N), lambda i, j: X[i, j] * 3.0, name="C")
    return te.create_func([A, C], name="chain3")


def rewrite_block(func, name, fn):
    """`func` with block `name` replaced by fn(block)."""
    realize = tree.find_realize(func, name)
    return tree.replace(func, realize, dataclasses.replace(realize, block=fn(realize.block)))


def rewrite_store(func, name, fn):
    """`func` with the single store of block `name` replaced by fn(store, iter vars)."""
    return rewrite_block(func, name, lambda b: dataclasses.replace(
        b, body=fn(b.body, [iv.var for iv in b.iter_vars])))


def schedule(func, block):
    sch = Schedule(func)
    return sch, sch.get_block(block), sch.get_loops(sch.get_block(block))


# 1. compute_inline ------------------------------------------------------------------------
def test_compute_inline_conv_pad():
    f = ops.conv2d(1, 3, 13, 11, 5, 3, 3, stride=2, padding=1)
    sch = Schedule(f)
    sch.compute_inline(sch.get_block("pad"))
    text = sch.func.script()
    assert block_names(sch.func) == ["root", "conv2d"]
    assert "alloc_buffer" not in text
    assert ("T.if_then_else(vy * 2 + vry >= 1 and vy * 2 + vry < 14 and vx * 2 + vrx >= 1 and "
            "vx * 2 + vrx < 12, data[0, vrc, vy * 2 + vry - 1, vx * 2 + vrx - 1], 0.0)") in text
    assert "T.reads(data[0, vrc, vy * 2 + vry - 1, vx * 2 + vrx - 1], weight[vo, vrc, vry, vrx])" \
        in text
    check_all(f, sch)


def test_compute_inline_conv_bn_relu_pad():
    f = ops.conv2d_bn_relu(1, 3, 11, 13, 5, 3, 3, stride=2, padding=1)
    sch = Schedule(f)
    sch.compute_inline(sch.get_block("pad"))
    assert block_names(sch.func) == ["root", "conv2d", "bn_relu"]
    assert [b.name for b in sch.func.root.alloc_buffers] == ["conv2d"]
    check_all(f, sch)


def test_compute_inline_softmax_exp_into_both_readers():
    f = ops.softmax(5, 13)
    sch = Schedule(f)
    sch.compute_inline(sch.get_block("exp"))
    text = sch.func.script()
    assert block_names(sch.func) == ["root", "maxelem", "expsum", "softmax"]
    exp = ("T.if_then_else(x[{v}] - maxelem[{r}] < -70.0, 0.0, "
           "T.exp(T.max(x[{v}] - maxelem[{r}], -70.0)))")
    assert f"expsum[vi_1] = expsum[vi_1] + {exp.format(v='vi_1, vk_1', r='vi_1')}" in text
    assert f"softmax[vi_2, vj] = {exp.format(v='vi_2, vj', r='vi_2')} / expsum[vi_2]" in text
    assert "T.reads(x[vi_2, vj], maxelem[vi_2], expsum[vi_2])" in text
    check_all(f, sch)


def test_compute_inline_after_tiling_the_consumer():
    f = chain(7, 11)
    sch, c, (i, j) = schedule(f, "C")
    sch.split(j, factors=[None, 4])
    sch.compute_inline(sch.get_block("B"))
    assert "C[vi, vj] = T.max(A[vi, vj] * 2.0, 0.0) + W[vj]" in sch.func.script()
    check_all(f, sch)


def _self_reading(store, ivars):
    return ir.BufferStore(store.buffer, store.value + store.buffer.load(tuple(ivars)),
                          store.indices)


@pytest.mark.parametrize("make, block, match", [
    (lambda: ops.softmax(3, 5), "maxelem", "block maxelem is a reduction"),
    (lambda: chain(), "C", "writes C, an output of the function"),
    (lambda: rewrite_store(chain(), "B", lambda s, v: ir.BufferStore(
        s.buffer, s.value, (v[0], 6 - v[1]))), "B", r"stores B\[vi, 6 - vj\]; its indices"),
    (lambda: rewrite_store(chain(), "B", _self_reading), "B", "reads B, the buffer it writes"),
    (lambda: rewrite_store(chain(), "B", lambda s, v: ir.seq(s, s)), "B",
     "not a single BufferStore \\(it has 2 statements\\)"),
])
def test_compute_inline_errors(make, block, match):
    sch = Schedule(make())
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        sch.compute_inline(sch.get_block(block))
    assert sch.func is before


def test_compute_inline_error_names_the_other_writer():
    f = chain3()
    p_buf = tree.find_realize(f, "P").block.body.buffer
    f = rewrite_store(f, "X", lambda s, v: ir.BufferStore(p_buf, s.value, s.indices))
    sch = Schedule(f)
    with pytest.raises(ScheduleError, match="P is also written by X"):
        sch.compute_inline(sch.get_block("P"))


# 2. reverse_compute_inline ----------------------------------------------------------------
def test_reverse_compute_inline_chain():
    f = chain(5, 7)
    sch = Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    text = sch.func.script()
    assert block_names(sch.func) == ["root", "B"]
    assert "alloc_buffer" not in text
    assert "T.reads(A[vi, vj], W[vj])" in text and "T.writes(C[vi, vj])" in text
    assert "C[vi, vj] = T.max(A[vi, vj] * 2.0, 0.0) + W[vj]" in text
    check_all(f, sch)


def test_reverse_compute_inline_transposed_consumer():
    """C[j, i] = relu(B[i, j]): the producer stores at the mapped (swapped) indices."""
    A, W = te.placeholder((5, 7), name="A"), te.placeholder((7,), name="W")
    B = te.compute((5, 7), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((7, 5), lambda j, i: te.max(B[i, j], 0.0) + W[j], name="C")
    f = te.create_func([A, W, C], name="flip")
    sch = Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert "C[vj, vi] = T.max(A[vi, vj] * 2.0, 0.0) + W[vj]" in sch.func.script()
    check_all(f, sch)


def test_reverse_compute_inline_reads_a_batch_of_one_at_zero():
    """After inlining, a consumer reads a unit dimension at 0 (a model's batch of 1); that
    is still an element-wise read, so a conv's epilogue folds into its copy-out."""
    A, W = te.placeholder((1, 4, 6), name="A"), te.placeholder((4,), name="W")
    B = te.compute((1, 4, 6), lambda n, i, j: A[n, i, j] * 2.0, name="B")
    C = te.compute((1, 4, 6), lambda n, i, j: te.min(B[0, i, j] + W[i], 6.0), name="C")
    f = te.create_func([A, W, C], name="batch1")
    sch = Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    assert block_names(sch.func) == ["root", "B"]
    check_all(f, sch)
    D = te.compute((1, 4, 6), lambda n, i, j: B[0, i, 0] + 1.0, name="D")  # not element-wise
    sch = Schedule(te.create_func([A, D], name="row"))
    with pytest.raises(ScheduleError, match="one to one"):
        sch.reverse_compute_inline(sch.get_block("D"))


def test_reverse_compute_inline_keeps_a_buffer_others_read():
    A = te.placeholder((6, 5), name="A")
    B = te.compute((6, 5), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((6, 5), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((6, 5), lambda i, j: B[i, j] * B[i, j], name="D")
    f = te.create_func([A, C, D], name="fanout")
    sch = Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    text = sch.func.script()
    assert block_names(sch.func) == ["root", "B", "D"]
    assert "B[vi, vj] = A[vi, vj] * 2.0\n" in text and "C[vi, vj] = A[vi, vj] * 2.0 + 1.0" in text
    assert "T.writes(B[vi, vj], C[vi, vj])" in text
    check_all(f, sch)
    with pytest.raises(ScheduleError, match="not a single BufferStore"):
        sch.compute_inline(sch.get_block("B"))  # B now stores twice


def test_reverse_compute_inline_then_tiling():
    f = chain(9, 13)
    sch = Schedule(f)
    sch.reverse_compute_inline(sch.get_block("C"))
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(j, factors=[None, 4])
    check_all(f, sch)


def _between_writer():
    """B, then D (rewritten to write C's output), then C = relu(B)."""
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] * 2.0, name="B")
    D = te.compute((5, 7), lambda i, j: A[i, j] * 3.0, name="D")
    C = te.compute((5, 7), lambda i, j: te.max(B[i, j], 0.0), name="C")
    f = te.create_func([A, B, D, C], name="between")
    c_buf = tree.find_realize(f, "C").block.body.buffer
    return rewrite_store(f, "D", lambda s, v: ir.BufferStore(c_buf, s.value, s.indices))


def _two_producers():
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] * 2.0, name="B")
    B2 = te.compute((5, 7), lambda i, j: A[i, j] * 3.0, name="B2")
    C = te.compute((5, 7), lambda i, j: B[i, j] + B2[i, j], name="C")
    return te.create_func([A, C], name="two")


@pytest.mark.parametrize("make, block, match", [
    (lambda: ops.dense(5, 7, 3), "bias_add", "producer dense is a reduction"),
    (lambda: ops.conv2d_bn_relu(1, 2, 5, 5, 3, 3, 3, stride=2, padding=1), "bn_relu",
     "producer conv2d is a reduction"),
    (lambda: ops.dense(5, 7, 3), "dense", "block dense is a reduction"),
    (lambda: chain(consumer=lambda A, B, W, i, j: B[i, 6 - j] + W[j]), "C",
     r"reads B\[vi, 6 - vj\]; it must read B at its iter vars"),
    (lambda: chain(consumer=lambda A, B, W, i, j: B[i, j] + B[i, 0]), "C",
     r"reads B\[vi, 0\]"),
    (_two_producers, "C", "has 2 producer blocks; it needs exactly one"),
    (lambda: chain(), "B", "has 0 producer blocks"),
    (lambda: rewrite_store(chain(), "C", lambda s, v: ir.seq(s, s)), "C",
     "block C is not a single BufferStore"),
    (lambda: rewrite_store(chain(), "C", _self_reading), "C", "reads C, the buffer it writes"),
    (_between_writer, "C", "block D, between B and C, uses a buffer that C reads or writes"),
])
def test_reverse_compute_inline_errors(make, block, match):
    sch = Schedule(make())
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        sch.reverse_compute_inline(sch.get_block(block))
    assert sch.func is before


# 3. compute_at ------------------------------------------------------------------------------
def test_compute_at_pad_under_split_conv_rows():
    """Stride 2, kernel 3: consecutive row tiles overlap, and the last tile runs past the
    padded image (rows 12..18 of 15), so the moved pad block gets a predicate."""
    f = ops.conv2d(1, 3, 13, 11, 4, 3, 3, stride=2, padding=1)
    sch, conv, (n, o, y, x, rc, ry, rx) = schedule(f, "conv2d")
    y0, y1 = sch.split(y, factors=[None, 3])
    sch.compute_at(sch.get_block("pad"), y0)
    text = sch.func.script()
    expected = """            for y_0 in T.serial(3):
                for ax0 in T.serial(3):
                    for ax1 in T.serial(7):
                        for ax2 in T.serial(13):
                            with T.block("pad"):
                                vn = T.axis.spatial(1, 0)
                                vc = T.axis.spatial(3, ax0)
                                vh = T.axis.spatial(15, y_0 * 6 + ax1)
                                vw = T.axis.spatial(13, ax2)
                                T.where(y_0 * 6 + ax1 < 15)"""
    assert expected in text
    assert text.index('T.block("pad")') < text.index("for y_1 in T.serial(3):")
    check_all(f, sch)


def test_compute_at_pad_nonzero_min_in_two_dims_and_unit_loops():
    f = ops.conv2d_bn_relu(1, 3, 11, 13, 5, 3, 3, stride=2, padding=1)
    sch, conv, (n, o, y, x, rc, ry, rx) = schedule(f, "conv2d")
    x0, x1 = sch.split(x, factors=[None, 4])
    sch.compute_at(sch.get_block("pad"), x0, preserve_unit_loops=True)
    text = sch.func.script()
    assert "for ax0 in T.serial(1):" in text            # the unit n loop is kept
    assert "vh = T.axis.spatial(13, y * 2 + ax2)" in text   # rows y*2 .. y*2+2
    assert "vw = T.axis.spatial(15, x_0 * 8 + ax3)" in text  # cols x0*8 .. x0*8+8
    assert "for ax3 in T.serial(9):" in text and "T.where(x_0 * 8 + ax3 < 15)" in text
    check_all(f, sch)


def test_compute_at_unit_loops_are_dropped_by_default():
    f = ops.conv2d(1, 3, 9, 9, 4, 3, 3, stride=2, padding=1)
    sch, conv, (n, o, y, x, rc, ry, rx) = schedule(f, "conv2d")
    sch.compute_at(sch.get_block("pad"), x)
    loops = [l for l in ir.collect(sch.func.body, ir.For) if l.loop_var.name.startswith("ax")]
    assert [l.extent for l in loops] == [3, 3, 3]  # c, h, w; no unit n loop
    check_all(f, sch)


def test_compute_at_layer_norm_reductions_under_the_row_loop():
    f = ops.layer_norm(7, 11)
    sch, ln, (i, j) = schedule(f, "layer_norm")
    sch.compute_at(sch.get_block("var"), i)
    sch.compute_at(sch.get_block("mean"), i)
    text = sch.func.script()
    expected = """    for i in T.serial(7):
        for ax0 in T.serial(11):
            with T.block("mean"):
                vi = T.axis.spatial(7, i)
                vk = T.axis.reduce(11, ax0)"""
    assert expected in text
    assert text.index('"mean"') < text.index('"var"') < text.index('"layer_norm"')
    assert len([l for l in ir.collect(sch.func.body, ir.For) if l.loop_var.name == "i"]) == 1
    check_all(f, sch)


def test_compute_at_softmax_stages_under_the_row_loop():
    f = ops.softmax(5, 13)
    sch, sm, (i, j) = schedule(f, "softmax")
    for name in ("expsum", "exp", "maxelem"):
        sch.compute_at(sch.get_block(name), i)
    outer = [l for l in ir.collect(sch.func.body, ir.For) if l.loop_var.name == "i"]
    assert len(outer) == 1
    assert [b.name for b in tree.child_blocks(outer[0])] == ["maxelem", "exp", "expsum",
                                                             "softmax"]
    assert "vk_1 = T.axis.reduce(13, ax0_2)" in sch.func.script()
    check_all(f, sch)


def test_compute_at_reduction_producer_under_non_dividing_split():
    f = ops.dense(7, 13, 5)
    sch, bias, (i, j) = schedule(f, "bias_add")
    i0, i1 = sch.split(i, factors=[None, 3])
    sch.compute_at(sch.get_block("dense"), i0)
    text = sch.func.script()
    assert "vi = T.axis.spatial(7, i_0 * 3 + ax0)" in text
    assert "vk = T.axis.reduce(5, ax2)" in text
    assert "T.where(i_0 * 3 + ax0 < 7)" in text
    check_all(f, sch)


def test_compute_at_twice_moves_to_an_inner_loop():
    f = chain(7, 11)
    sch, c, (i, j) = schedule(f, "C")
    sch.compute_at(sch.get_block("B"), i)
    sch.compute_at(sch.get_block("B"), j)
    text = sch.func.script()
    assert "vi = T.axis.spatial(7, i)" in text and "vj = T.axis.spatial(11, j)" in text
    assert [l.loop_var.name for l in ir.collect(sch.func.body, ir.For)] == ["i", "j"]
    check_all(f, sch)


def test_compute_at_a_chain_in_consumer_order():
    f = chain3(6, 9)
    sch, c, (i, j) = schedule(f, "C")
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.compute_at(sch.get_block("X"), j0)
    sch.compute_at(sch.get_block("P"), j0)
    j0_loop = sch.get(j0)
    assert [b.name for b in tree.child_blocks(j0_loop)] == ["P", "X", "C"]
    check_all(f, sch)


def _nested_scope():
    """chain(), with C's loop nest wrapped in a block "outer"."""
    f = chain()
    loop = tree.enclosing_loops(tree.block_path(f, "C"))[0]
    outer = ir.Block("outer", (), (), (), loop)
    return tree.replace(f, loop, ir.realize(outer))


def _unread_b():
    """chain() whose C no longer reads B."""
    return rewrite_store(chain(), "C", lambda s, v: ir.BufferStore(
        s.buffer, tree.find_realize(chain(), "B").block.body.value, s.indices))


def _war_between():
    """B, D (rewritten to overwrite A, which B reads), C = relu(B) + D."""
    A = te.placeholder((5, 7), name="A")
    B = te.compute((5, 7), lambda i, j: A[i, j] * 2.0, name="B")
    D = te.compute((5, 7), lambda i, j: A[i, j] * 3.0, name="D")
    C = te.compute((5, 7), lambda i, j: te.max(B[i, j], 0.0) + D[i, j], name="C")
    f = te.create_func([A, C], name="war")
    a_buf = f.params[0]
    return rewrite_store(f, "D", lambda s, v: ir.BufferStore(a_buf, s.value, s.indices))


def _loops(sch, block):
    return sch.get_loops(sch.get_block(block))


def _fused_split(sch):
    i, j = _loops(sch, "C")
    return sch.split(sch.fuse(i, j), factors=[None, 4])[0]


@pytest.mark.parametrize("make, block, loop, match", [
    (lambda: ops.layer_norm(5, 7), "mean", lambda s: _loops(s, "layer_norm")[0],
     "block var reads mean, which mean writes, but is not under loop i;"),
    (lambda: ops.dense(5, 7, 3), "bias_add", lambda s: _loops(s, "dense")[0],
     "block bias_add comes after loop i; use reverse_compute_at"),
    (lambda: chain(), "B", _fused_split, "region of block B's iter var vi depends on the loops "
                                         "around i_j_fused_0: its extent .* is not constant"),
    (lambda: chain(args=lambda A, W, B, C: [A, W, B, C]), "B", lambda s: _loops(s, "C")[0],
     "block B writes an output of the function"),
    (_nested_scope, "B", lambda s: _loops(s, "C")[0], "are in different scopes"),
    (_nested_scope, "outer", lambda s: _loops(s, "C")[0], "loop i is inside block outer"),
    (_unread_b, "B", lambda s: _loops(s, "C")[0], "reads nothing that block B writes"),
    (lambda: chain(), "B", lambda s: _loops(s, "B")[1], "loop j holds no block but B"),
    (_war_between, "B", lambda s: _loops(s, "C")[0],
     "block D depends on B and lies between it and loop i$"),
])
def test_compute_at_errors(make, block, loop, match):
    sch = Schedule(make())
    target = loop(sch)
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        sch.compute_at(sch.get_block(block), target)
    assert sch.func is before


def test_compute_at_between_a_producer_and_a_consumer_in_one_statement():
    f = chain3()
    sch, c, (i, j) = schedule(f, "C")
    sch.compute_at(sch.get_block("X"), j)
    sch.compute_at(sch.get_block("P"), j)
    before = sch.func
    with pytest.raises(ScheduleError, match="one statement of its body holds both"):
        sch.compute_at(sch.get_block("X"), i)
    assert sch.func is before


# 4. reverse_compute_at -----------------------------------------------------------------------
def test_reverse_compute_at_bn_relu_under_tiled_conv():
    f = ops.conv2d_bn_relu(1, 3, 11, 13, 5, 3, 3, stride=2, padding=1)
    sch, conv, (n, o, y, x, rc, ry, rx) = schedule(f, "conv2d")
    o0, o1 = sch.split(o, factors=[None, 2])
    x0, x1 = sch.split(x, factors=[None, 4])
    sch.reorder(o0, y, x0, o1, x1)
    sch.reverse_compute_at(sch.get_block("bn_relu"), x0)
    text = sch.func.script()
    expected = """                    for ax0 in T.serial(2):
                        for ax1 in T.serial(4):
                            with T.block("bn_relu"):
                                vn_2 = T.axis.spatial(1, 0)
                                vo_1 = T.axis.spatial(5, o_0 * 2 + ax0)
                                vy_1 = T.axis.spatial(6, y)
                                vx_1 = T.axis.spatial(7, x_0 * 4 + ax1)
                                T.where(o_0 * 2 + ax0 < 5 and x_0 * 4 + ax1 < 7)"""
    assert expected in text
    assert [b.name for b in tree.child_blocks(sch.get(x0))] == ["conv2d", "bn_relu"]
    check_all(f, sch)


def test_reverse_compute_at_bias_add_under_dense_tiles():
    f = ops.dense(7, 13, 5)
    sch, dense, (i, j, k) = schedule(f, "dense")
    i0, i1 = sch.split(i, factors=[None, 3])
    j0, j1 = sch.split(j, factors=[None, 4])
    sch.reorder(i0, j0, i1, j1)
    sch.reverse_compute_at(sch.get_block("bias_add"), j0)
    text = sch.func.script()
    assert "vi_1 = T.axis.spatial(7, i_0 * 3 + ax0)" in text
    assert "vj_1 = T.axis.spatial(13, j_0 * 4 + ax1)" in text
    assert "T.where(i_0 * 3 + ax0 < 7 and j_0 * 4 + ax1 < 13)" in text
    check_all(f, sch)


def test_reverse_compute_at_then_compute_at_pad_in_one_tile():
    f = ops.conv2d_bn_relu(1, 3, 11, 13, 5, 3, 3, stride=2, padding=1)
    sch, conv, (n, o, y, x, rc, ry, rx) = schedule(f, "conv2d")
    x0, x1 = sch.split(x, factors=[None, 4])
    sch.reorder(y, x0, o, x1)
    sch.reverse_compute_at(sch.get_block("bn_relu"), x0)
    sch.compute_at(sch.get_block("pad"), x0)
    assert [b.name for b in tree.child_blocks(sch.get(x0))] == ["pad", "conv2d", "bn_relu"]
    check_all(f, sch)


def test_reverse_compute_at_to_an_outer_loop_after_an_inner_one():
    f = chain(7, 11)
    sch, b, (i, j) = schedule(f, "B")
    sch.reverse_compute_at(sch.get_block("C"), j)
    sch.reverse_compute_at(sch.get_block("C"), i)
    text = sch.func.script()
    assert "vj_1 = T.axis.spatial(11, ax0)" in text
    assert [b.name for b in tree.child_blocks(sch.get(i))] == ["B", "C"]
    check_all(f, sch)


def _unproduced():
    """chain() whose C reads A instead of B (no producer)."""
    return rewrite_store(chain(), "C", lambda s, v: ir.BufferStore(
        s.buffer, tree.find_realize(chain(), "B").block.body.value, s.indices))


def _split_j(sch, block):
    i, j = _loops(sch, block)
    return sch.split(j, factors=[None, 4])[0]


@pytest.mark.parametrize("make, block, loop, match", [
    (lambda: ops.dense(5, 7, 3), "dense", lambda s: _loops(s, "bias_add")[0],
     "block dense comes before loop i; use compute_at"),
    (lambda: ops.conv2d_bn_relu(1, 2, 5, 5, 3, 3, 3, stride=2, padding=1), "bn_relu",
     lambda s: _loops(s, "conv2d")[4], "producer conv2d has not finished reducing over vrc"),
    (lambda: ops.dense(5, 7, 3), "bias_add",
     lambda s: (s.reorder(_loops(s, "dense")[2], _loops(s, "dense")[1]), _loops(s, "dense")[2])[1],
     "producer dense has not finished reducing over vk .*driven by loop k"),
    (lambda: chain3(), "C", lambda s: _loops(s, "P")[0],
     "block X, which C depends on, lies between loop i and C"),
    (lambda: chain(consumer=lambda A, B, W, i, j: B[i, 6 - j] + W[j]), "C",
     lambda s: _split_j(s, "B"), r"reads B\[vi, 6 - vj\] beyond what one iteration of loop "
                                 "j_0 writes"),
    (_unproduced, "C", lambda s: _loops(s, "B")[0], "writes nothing that block C reads"),
])
def test_reverse_compute_at_errors(make, block, loop, match):
    sch = Schedule(make())
    target = loop(sch)
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        sch.reverse_compute_at(sch.get_block(block), target)
    assert sch.func is before


def test_reverse_compute_at_of_a_flipped_read_with_full_rows_is_legal():
    f = chain(5, 7, consumer=lambda A, B, W, i, j: B[i, 6 - j] + W[j])
    sch, b, (i, j) = schedule(f, "B")
    i0, i1 = sch.split(i, factors=[None, 2])
    sch.reverse_compute_at(sch.get_block("C"), i0)
    assert "T.where(i_0 * 2 + ax0 < 5)" in sch.func.script()
    check_all(f, sch)


# 5. sample_compute_location -------------------------------------------------------------------
def test_sample_compute_location_is_uniform_over_legal_locations():
    f = chain(5, 7)
    counts = collections.Counter()
    results = {}
    for seed in range(200):
        sch = Schedule(f, seed=seed)
        b = sch.get_block("B")
        loc = sch.sample_compute_location(b)
        sch.compute_at(b, loc)
        decision = sch.trace.decisions[1]
        counts[decision] += 1
        results.setdefault(decision, sch)
    # legal: C's loops i (0) and j (1); B's own loops are not; plus root (-1) and inline (-2)
    assert set(counts) == {0, 1, -1, -2}
    assert all(25 <= n <= 75 for n in counts.values()), counts
    assert block_names(results[-2].func) == ["root", "C"]
    assert ir.structural_equal(results[-1].func, f)
    assert "vj = T.axis.spatial(7, ax0)" in results[0].func.script()
    assert "vj = T.axis.spatial(7, j)" in results[1].func.script()
    assert "for ax0" not in results[1].func.script()
    for sch in results.values():
        check_all(f, sch)


def test_sample_compute_location_replays_and_overrides_decisions():
    f = ops.conv2d(1, 3, 9, 9, 4, 3, 3, stride=2, padding=1)
    sch = Schedule(f, seed=5)
    pad = sch.get_block("pad")
    loc = sch.sample_compute_location(pad, decision=2)  # n_1, o, y, ...: y
    sch.compute_at(pad, loc)
    assert "vh = T.axis.spatial(11, y * 2 + ax1)" in sch.func.script()
    check_all(f, sch)
    trace = Trace.from_json(sch.trace.to_json())
    site = trace.sampling_sites()[0]
    # conv2d has 7 loops, all legal for pad (its reduction loops included)
    last = trace.apply(Schedule(f), decisions={site: 6})
    assert 'vw = T.axis.spatial(11, x * 2 + rx)' in last.func.script()
    check_equivalent(f, last.func)
    inlined = trace.apply(Schedule(f), decisions={site: -2})
    assert block_names(inlined.func) == ["root", "conv2d"]
    for bad in (7, -3, "0", True):
        with pytest.raises(ScheduleError, match="sample_compute_location: decision"):
            trace.apply(Schedule(f), decisions={site: bad})


def test_sample_compute_location_inline_refused_for_a_reduction():
    f = ops.softmax(3, 5)
    sch = Schedule(f)
    b = sch.get_block("maxelem")
    with pytest.raises(ScheduleError, match="block cannot be inlined"):
        sch.sample_compute_location(b, decision=-2)
    loc = sch.sample_compute_location(b, decision=-1)
    sch.compute_at(b, loc)
    assert ir.structural_equal(sch.func, f)
    check_round_trip(f, sch)


def test_special_locations_are_refused_outside_compute_at():
    f = chain()
    sch = Schedule(f)
    root = sch.sample_compute_location(sch.get_block("B"), decision=-1)
    with pytest.raises(ScheduleError, match="special compute location 'root'"):
        sch.get(root)
    with pytest.raises(ScheduleError, match="only compute_at accepts it"):
        sch.split(root, factors=[None, 2])
    with pytest.raises(ScheduleError, match="special compute location"):
        sch.reverse_compute_at(sch.get_block("C"), root)


def test_legal_locations_are_the_loops_where_compute_at_succeeds():
    """sample_compute_location checks each loop without moving the block; the loops it finds
    are exactly those where a real compute_at succeeds, on tiled programs of every small
    workload (blocks under loops, before them, reductions, several consumers)."""
    import random

    from space_cases import SMALL
    from tessel.space import make_space
    from tessel.schedule.compute_at import _scope_loops

    space, checked = make_space("auto", tessel.Target("host")), 0
    for name, make in sorted(SMALL.items()):
        f = make()
        rng = random.Random(name)
        for _ in range(3):
            try:
                sch = space.sample(f, rng)
            except Exception:  # noqa: BLE001 - a workload the space cannot sample
                continue
            for block in ir.blocks(sch.func.body):
                if block.name == "root":
                    continue
                rv = sch.get_block(block.name)
                scope = tree.scope_block(tree.block_path(sch.func, block.name))
                moved = []
                for loop in _scope_loops(scope):
                    trial = sch.copy()
                    try:
                        trial.compute_at(rv, trial._new(tessel.schedule.LoopRV, loop.loop_var))
                    except ScheduleError:
                        continue
                    moved.append(loop.loop_var)
                assert sch._legal_locations(rv) == moved, (name, block.name)
                assert sch._legal_locations(rv, limit=1) == moved[:1]
                checked += len(moved)
    assert checked > 50
