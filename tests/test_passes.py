"""compact_buffers: allocation sites, compacted shapes and indices, and semantics preserved on
naive workloads, scheduled programs and hand-written loop nests."""
import re

import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.ir import Block, Buffer, BufferStore, For, IterVar, Var, const, realize
from tessel.arith import block_regions
from tessel.codegen.passes import compact_buffers
from tessel.schedule import Schedule


def run(func, compact=True, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func, compact=compact)(*inputs, *outs)
    return inputs, outs


def check_equivalent(original, scheduled):
    """The compacted scheduled program computes what the uncompacted original does."""
    _, expected = run(original, compact=False)
    _, got = run(scheduled)
    assert len(expected) == len(got) >= 1
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


NAIVE = [
    lambda: ops.conv1d(1, 3, 11, 4, 3, stride=2, padding=1),
    lambda: ops.conv2d(1, 3, 9, 9, 4, 3, 3, stride=2, padding=3, dilation=2),
    lambda: ops.conv3d(1, 2, 5, 7, 7, 3, 3, 3, 3, stride=2, padding=1),
    lambda: ops.depthwise_conv2d(1, 3, 7, 7, 3, 3, padding=1),
    lambda: ops.conv2d(1, 4, 7, 7, 6, 3, 3, stride=2, padding=1, groups=2),
    lambda: ops.conv2d_transpose(1, 3, 3, 3, 2, 4, 4, stride=2, padding=1),
    lambda: ops.conv2d_bn_relu(1, 3, 9, 9, 4, 3, 3, stride=2, padding=1),
    lambda: ops.transpose_batch_matmul(1, 5, 3, 4),
    lambda: ops.layer_norm(5, 7),
    lambda: ops.softmax(5, 7),
    lambda: ops.matmul(5, 7, 3),
    lambda: ops.dense(5, 7, 3),
    lambda: ops.avg_pool2d(1, 2, 7, 7, 3, 2, 1),
]


@pytest.mark.parametrize("make", NAIVE)
def test_naive_workloads_are_left_alone_and_correct(make):
    func = make()
    assert compact_buffers(func) is func  # every intermediate spans two root-level nests
    inputs = ops.reference_inputs(func, seed=1)
    out = np.zeros(func.outputs[0].shape, func.outputs[0].dtype)
    tessel.build(func)(*inputs, out)
    np.testing.assert_allclose(out, ops.run_reference(func, *inputs), rtol=1e-4, atol=1e-4)


def tiled_write_cache(M=13, N=20, K=7):
    f = ops.matmul(M, N, K)
    sch = Schedule(f)
    c = sch.get_block("C")
    out = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, factors=[None, 2, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, i1, k, i2, j1)
    sch.reverse_compute_at(out, j0)
    sch.decompose_reduction(c, k)
    sch.parallel(i0)
    sch.vectorize(j1)
    return f, sch


def test_write_cache_shrinks_to_a_tile_inside_the_tile_loop():
    f, sch = tiled_write_cache()
    g = compact_buffers(sch.func)
    assert all(b.name != "C_local" for b in g.root.alloc_buffers)
    j0 = next(l for l in ir.collect(g.body, For) if l.loop_var.name == "j_0")
    alloc = j0.body.block
    assert alloc.name == "C_local_alloc" and not alloc.iter_vars
    assert [(b.name, b.shape, b.scope) for b in alloc.alloc_buffers] == \
        [("C_local", (8, 8), "local")]
    text = g.script()
    assert "C_local[i_1 * 4 + i_2, j_1] = 0.0" in text
    assert "C_local[i_1 * 4 + i_2_1, j_1_1] = C_local[i_1 * 4 + i_2_1, j_1_1] + " in text
    assert "C[v0, v1] = C_local[ax0, ax1]" in text
    # indices use only loop vars inside the allocation point
    inside = {l.loop_var for l in ir.collect(j0.body, For)}
    for load in ir.collect(g.body, ir.BufferLoad):
        if load.buffer.name == "C_local":
            assert ir.free_vars(load.indices[0]) | ir.free_vars(load.indices[1]) <= inside
    source = tessel.build(sch.func).source
    assert re.search(r"C_local\[64\]", source[source.index("omp parallel for"):])
    check_equivalent(f, sch.func)
    assert ir.structural_equal(compact_buffers(g), g)  # idempotent


def test_read_caches_under_the_reduction_tile_loop():
    f = ops.matmul(13, 19, 11)
    sch = Schedule(f)
    c = sch.get_block("C")
    a, b = sch.cache_read(c, 0, "local"), sch.cache_read(c, 1, "local")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.compute_at(a, k0)
    sch.compute_at(b, k0)
    g = compact_buffers(sch.func)
    k0_loop = next(l for l in ir.collect(g.body, For) if l.loop_var.name == "k_0")
    shapes = {buf.name: buf.shape for buf in k0_loop.body.block.alloc_buffers}
    assert shapes == {"A_local": (4, 4), "B_local": (4, 8)}
    assert "A_local[i_1, k_1] * B_local[k_1, j_1]" in g.script()
    check_equivalent(f, sch.func)


def test_padding_computed_at_a_row_tile_is_shrunk():
    f = ops.conv2d(1, 3, 11, 11, 5, 3, 3, stride=1, padding=1)
    sch = Schedule(f)
    n, o, y, x, rc, ry, rx = sch.get_loops(sch.get_block("conv2d"))
    y0, y1 = sch.split(y, factors=[None, 4])
    sch.compute_at(sch.get_block("pad"), y0)
    g = compact_buffers(sch.func)
    pads = [buf for blk in ir.blocks(g.body) for buf in blk.alloc_buffers if buf.name == "pad"]
    assert [p.shape for p in pads] == [(1, 3, 6, 13)]
    check_equivalent(f, sch.func)


def test_rfactor_and_layout_programs_stay_correct():
    f = ops.softmax(7, 29)
    sch = Schedule(f)
    for name in ("maxelem", "expsum"):
        block = sch.get_block(name)
        i, k = sch.get_loops(block)
        k0, k1 = sch.split(k, factors=[None, 8])
        sch.parallel(sch.get_loops(sch.rfactor(k1, 0))[2])
    check_equivalent(f, sch.func)
    g = ops.matmul(11, 29, 6)
    s2 = Schedule(g)
    copy = s2.cache_read(s2.get_block("C"), 1, "global")
    s2.transform_layout(copy, 0, "write", "lambda k, n: (n // 8, k, n % 8)")
    check_equivalent(g, s2.func)


def prefix_sum(M=4, N=6):
    """O[i, k] = sum(A[i, :k + 1]) through T[i], accumulated over k by a reduction block R
    while a block S under the same k loop reads it: T must outlive each k iteration."""
    A, O, T = Buffer("A", (M, N)), Buffer("O", (M, N)), Buffer("T", (M,))
    i, k, vi, vk, si, sk = Var("i"), Var("k"), Var("vi"), Var("vk"), Var("si"), Var("sk")
    update = BufferStore(T, T[vi] + A[vi, vk], (vi,))
    init = BufferStore(T, const(0.0), (vi,))
    reads, writes = block_regions(update, init)
    r = Block("R", (IterVar(vi, M), IterVar(vk, N, "reduce")), reads, writes, update, init)
    copy = BufferStore(O, T[si], (si, sk))
    reads, writes = block_regions(copy)
    s = Block("S", (IterVar(si, M), IterVar(sk, N)), reads, writes, copy)
    body = For(i, M, For(k, N, ir.seq(realize(r, [i, k]), realize(s, [i, k]))))
    root = Block("root", (), (), (), body, alloc_buffers=(T,))
    return ir.PrimFunc("prefix_sum", (A, O), realize(root))


def test_a_reduction_buffer_stays_above_its_reduction_loop():
    f = prefix_sum()
    g = compact_buffers(f)
    i_loop = g.root.body
    assert i_loop.loop_var.name == "i" and isinstance(i_loop.body, ir.BlockRealize)
    assert [(b.name, b.shape) for b in i_loop.body.block.alloc_buffers] == [("T", (1,))]
    assert "T[0] = T[0] + A[vi, vk]" in g.script()
    (a,), (o,) = run(f)
    np.testing.assert_allclose(o, np.cumsum(a, axis=1), rtol=1e-5, atol=1e-5)


def previous_element(n=5):
    """O[i] = A[i - 1] (0 for i = 0) through a scratch T[0] that a bare loop carries from
    one iteration to the next: no block describes the accesses, so T must not move."""
    A, O, T = Buffer("A", (n,)), Buffer("O", (n,)), Buffer("T", (1,), scope="local")
    i = Var("i")
    body = For(i, n, ir.seq(BufferStore(O, ir.select(i > 0, T[0], 0.0), (i,)),
                            BufferStore(T, A[i], (const(0),))))
    root = Block("root", (), (), (), body, alloc_buffers=(T,))
    return ir.PrimFunc("previous", (A, O), realize(root))


def test_unstructured_loops_keep_their_allocation():
    f = previous_element()
    assert compact_buffers(f) is f
    (a,), (o,) = run(f)
    np.testing.assert_allclose(o, np.concatenate([[0.0], a[:-1]]), rtol=0, atol=0)


def test_a_buffer_used_in_one_block_moves_into_it():
    n = 6
    A, O, T = Buffer("A", (n,)), Buffer("O", (n,)), Buffer("T", (n, 3))
    i, vi = Var("i"), Var("vi")
    body = ir.seq(BufferStore(T, A[vi] * 2.0, (vi, const(1))),
                  BufferStore(O, T[vi, 1] + 1.0, (vi,)))
    reads, writes = block_regions(body)
    block = Block("B", (IterVar(vi, n),), reads, writes, body)
    root = Block("root", (), (), (), For(i, n, realize(block, [i])), alloc_buffers=(T,))
    f = ir.PrimFunc("scratch", (A, O), realize(root))
    g = compact_buffers(f)
    assert g.root.alloc_buffers == ()
    inner = ir.collect(g.body, Block)[1]
    assert [(b.name, b.shape) for b in inner.alloc_buffers] == [("T", (1, 1))]
    assert "O[vi] = T[0, 0] + 1.0" in g.script()
    (a,), (o,) = run(f)
    np.testing.assert_allclose(o, a * 2 + 1, rtol=1e-6)


def test_a_local_accumulator_puts_its_vector_dimension_last():
    """An NCHW convolution vectorized over output channels (the channel-vector design):
    its local accumulator is laid out [y, x, o] so that the lanes are contiguous; the
    generated C has whole-vector accumulator accesses in the reduction, and the program
    computes what the unscheduled one does (odd sizes, a tail tile)."""
    f = ops.conv2d(1, 5, 7, 7, 32, 3, 3, padding=1)
    sch = Schedule(f)
    conv = sch.get_block("conv2d")
    write = sch.cache_write(conv, 0, "local")
    n, o, y, x, rc, ry, rx = sch.get_loops(conv)
    o0, o1 = sch.split(o, [None, 16])
    y0, y1 = sch.split(y, [None, 7])
    sch.reorder(n, o0, y0, rc, ry, rx, y1, x, o1)
    sch.reverse_compute_at(write, y0)
    sch.decompose_reduction(conv, rc)
    sch.vectorize(o1)
    g = compact_buffers(sch.func)
    local = next(b for blk in ir.blocks(g.body) for b in blk.alloc_buffers
                 if b.name == "conv2d_local")
    assert local.shape == (1, 7, 7, 16)  # n, y, x, then the 16 channels of the tile
    assert "conv2d_local[0, vy_1, vx_1, o_1_1] = conv2d_local[0, vy_1, vx_1, o_1_1] + " in g.script()
    assert ir.structural_equal(compact_buffers(g), g)  # idempotent
    source = tessel.build(sch.func).source
    reduction = source[source.index("for (int32_t rc"):]
    assert "_load(&conv2d_local[" in reduction and "lanes" not in reduction.split("}")[0]
    check_equivalent(f, sch.func)
