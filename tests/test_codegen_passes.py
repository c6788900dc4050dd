"""Golden tests of code generation's lowering passes, one pass at a time: IR in, the expected
lowered IR out (compared structurally, names aside), and of the C printer: lowered IR in, the
expected C statements out. The end-to-end tests (compiled, run, checked against numpy) are in
test_codegen_c.py and test_codegen_simd.py."""
from tessel import ir
from tessel.arith import block_regions
from tessel.codegen.c import print_c
from tessel.codegen.lowered import (Allocate, Broadcast, Comment, LoweredFunc, Prefetch,
                                    Promote, Ramp,
                                    Register, RegisterStore, VectorLoad, VectorOp, VectorStore,
                                    lowered_str)
from tessel.codegen.passes import (lower_blocks, prefetch_streams, promote_registers, unroll,
                                   vectorize)
from tessel.codegen.passes.fold import Mentions, substitute_folding
from tessel.codegen.passes.blocks import STACK_LIMIT_BYTES
from tessel.ir import (REDUCE, Buffer, BufferLoad, BufferStore, For, IfThenElse, IntImm,
                       IterVar, Var, const, realize, seq, structural_equal)
from tessel.target import Target

AVX2 = Target("x86_64-avx2")  # 8 float lanes


def make_block(name, iter_vars, body, init=None, alloc=()):
    reads, writes = block_regions(body, init)
    return ir.Block(name, tuple(iter_vars), reads, writes, body, init, tuple(alloc))


def make_func(name, params, body, alloc=()):
    root = ir.Block("root", (), (), (), body, alloc_buffers=tuple(alloc))
    return ir.PrimFunc(name, tuple(params), realize(root))


def lowered(params, body, outputs=None):
    return LoweredFunc("f", tuple(params), tuple(outputs or params[-1:]), body)


def assert_lowers_to(got, expected):
    assert structural_equal(got.body, expected), \
        f"got:\n{lowered_str(got.body)}\nexpected:\n{lowered_str(expected)}"


# ---- lower_blocks ----

def test_blocks_become_substituted_statements_with_branches_and_allocations():
    """A reduction block under a predicate: its variables become their bindings, the init a
    branch on the reduction variable being 0, the predicate a branch, allocations nodes."""
    A, C = Buffer("A", (6, 4)), Buffer("C", (6,))
    tmp = Buffer("tmp", (2,), scope="local")
    i0, i1, k = Var("i0"), Var("i1"), Var("k")
    vi, vk = Var("vi"), Var("vk")
    block = make_block("C", [IterVar(vi, 6), IterVar(vk, 4, REDUCE)],
                       BufferStore(C, C[vi] + A[vi, vk], (vi,)),
                       init=BufferStore(C, const(0.0), (vi,)), alloc=[tmp])
    body = For(i0, 2, For(i1, 4, For(k, 4, realize(block, [i0 * 4 + i1, k], i0 * 4 + i1 < 6))))
    got = lower_blocks(make_func("f", (A, C), body))

    i = i0 * 4 + i1
    inner = seq(IfThenElse(k == const(0), BufferStore(C, const(0.0), (i,))),
                BufferStore(C, C[i] + A[i, k], (i,)))
    expected = For(i0, 2, For(i1, 4, For(k, 4, seq(
        Comment("block C"), IfThenElse(i < 6, Allocate(tmp, inner, "stack"))))))
    assert_lowers_to(got, expected)
    assert got.outputs == (C,)


def test_large_buffers_go_to_the_heap_small_ones_to_the_stack():
    # a small intermediate ("global" scope, e.g. a row of softmax's exp computed under the
    # row loop) lives on the stack as a "local" one does: no allocation per iteration
    X, O = Buffer("X", (4,)), Buffer("O", (4,))
    big, glob = Buffer("big", (20000,), scope="local"), Buffer("glob", (4,))
    i, v = Var("i"), Var("v")
    block = make_block("O", [IterVar(v, 4)], BufferStore(O, X[v], (v,)))
    func = make_func("f", (X, O), For(i, 4, realize(block, [i])), alloc=[big, glob])
    got = lower_blocks(func)
    assert [(a.buffer.name, a.storage) for a in ir.collect(got.body, Allocate)] == \
        [("big", "heap"), ("glob", "stack")]
    huge = Buffer("huge", (STACK_LIMIT_BYTES // 4 + 1,))
    func = make_func("f", (X, O), For(i, 4, realize(block, [i])), alloc=[huge])
    assert [a.storage for a in ir.collect(lower_blocks(func).body, Allocate)] == ["heap"]


# ---- unroll ----

def test_unrolled_loop_is_copied_with_constants_and_folded():
    A, O = Buffer("A", (3, 8)), Buffer("O", (3, 8))
    j, i = Var("j"), Var("i")
    store = BufferStore(O, A[i, j] * 2.0, (i, j))
    got = unroll(lowered((A, O), For(j, 8, For(i, 3, store, kind="unrolled"))))
    copies = [BufferStore(O, A[c, j] * 2.0, (IntImm(c), j)) for c in range(3)]
    assert_lowers_to(got, For(j, 8, seq(*copies)))


def test_substitution_told_what_mentions_the_variable_skips_the_rest_and_folds_the_same():
    A, B, O = Buffer("A", (4, 8)), Buffer("B", (8,)), Buffer("O", (4, 8))
    i, j, k = Var("i"), Var("j"), Var("k")
    uniform = B[j + k] * 3.0  # mentions no i: shared, not rebuilt
    store = BufferStore(O, A[i * 2 + 0, j] + uniform, (i + 1 - 1, j))
    body = IfThenElse(i < 2, store, BufferStore(O, uniform, (i, j)))
    mentions = Mentions([i])
    assert mentions(store) and not mentions(uniform) and not mentions(B)
    for c in range(4):
        plain = substitute_folding(body, {i: IntImm(c)})
        pruned = substitute_folding(body, {i: IntImm(c)}, mentions)
        assert structural_equal(plain, pruned)
        # the branch folds to the side taken, its index to the constant, and the part that
        # does not mention i is the same object
        assert isinstance(pruned, BufferStore) and pruned.indices[0].value == c
        assert (pruned.value.b if c < 2 else pruned.value) is uniform


def test_loops_too_long_to_copy_get_a_pragma_and_extent_one_loops_vanish():
    A, O = Buffer("A", (64,)), Buffer("O", (64,))
    i, z = Var("i"), Var("z")
    body = For(z, 1, For(i, 64, BufferStore(O, A[i + z], (i + z,)), kind="unrolled"))
    got = unroll(lowered((A, O), body))
    expected = For(i, 64, BufferStore(O, A[i], (i,)), annotations={"pragma_unroll": 64})
    assert_lowers_to(got, expected)


def test_auto_unroll_with_explicit_flag_copies_small_serial_nests():
    A, O = Buffer("A", (2, 3)), Buffer("O", (2, 3))
    i, j = Var("i"), Var("j")
    inner = For(j, 3, BufferStore(O, A[i, j], (i, j)))
    notes = {"pragma_auto_unroll_max_step": 16, "pragma_unroll_explicit": True}
    got = unroll(lowered((A, O), For(i, 2, inner, annotations=notes)))
    stores = [BufferStore(O, A[a, b], (IntImm(a), IntImm(b))) for a in range(2) for b in range(3)]
    assert_lowers_to(got, seq(*stores))
    notes["pragma_unroll_explicit"] = False  # the compiler unrolls: an annotation
    got = unroll(lowered((A, O), For(i, 2, inner, annotations=notes)))
    assert got.body.annotations["pragma_unroll"] == 2


# ---- vectorize ----

def test_vectorized_loop_becomes_vector_chunks():
    """20 iterations of 8 lanes: two full vectors, a 4-lane vector, no scalar tail."""
    A, O = Buffer("A", (20,)), Buffer("O", (20,))
    i = Var("i")
    got = vectorize(lowered((A, O), For(i, 20, BufferStore(O, A[i] + 1.0, (i,)),
                                        kind="vectorized")), AVX2)

    def chunk(start, lanes):
        value = VectorOp("+", (VectorLoad(A, (IntImm(start),), lanes, "float32"),
                               Broadcast(const(1.0), lanes, "float32")), lanes, "float32")
        return VectorStore(O, (IntImm(start),), value)
    assert_lowers_to(got, seq(chunk(0, 8), chunk(8, 8), chunk(16, 4)))


def test_many_full_vectors_loop_over_chunks_and_the_loop_variable_is_a_ramp():
    O = Buffer("O", (64,), "int32")
    i = Var("i")
    got = vectorize(lowered((O,), For(i, 64, BufferStore(O, i * 1, (i,)), kind="vectorized")),
                    AVX2)
    loop = got.body
    assert isinstance(loop, For) and loop.extent == 8 and loop.annotations == {"vector_chunks": 8}
    base = loop.loop_var * 8
    assert_lowers_to(got, For(loop.loop_var, 8, VectorStore(O, (base,), Ramp(base, 1, 8, "int32")),
                              annotations={"vector_chunks": 8}))


def test_a_body_with_no_vector_form_is_left_to_omp_simd_with_the_reason():
    A, O = Buffer("A", (16,)), Buffer("O", (16,))
    i = Var("i")
    loop = For(i, 16, BufferStore(O, ir.Call("sqrt", (A[i],), "float32"), (i,)),
               kind="vectorized")
    got = vectorize(lowered((A, O), loop), AVX2)
    expected = seq(Comment("loop i: sqrt has no vector form here; left to omp simd"),
                   For(i, 16, loop.body, kind="vectorized", annotations={"simd": "omp"}))
    assert_lowers_to(got, expected)


def test_varying_condition_runs_vectors_where_every_lane_holds_else_lane_by_lane():
    A, O = Buffer("A", (16,)), Buffer("O", (13,))
    j0, j1 = Var("j0"), Var("j1")
    j = j0 * 8 + j1
    loop = For(j0, 2, For(j1, 8, IfThenElse(j < 13, BufferStore(O, A[j], (j,))),
                          kind="vectorized"))
    got = vectorize(lowered((A, O), loop), AVX2)
    lane0 = j0 * 8
    vector = VectorStore(O, (lane0,), VectorLoad(A, (lane0,), 8, "float32"))
    lanes = [IfThenElse(j0 * 8 + k < 13, BufferStore(O, A[j0 * 8 + k], (j0 * 8 + k,)))
             for k in range(8)]
    expected = For(j0, 2, IfThenElse((lane0 < 13) & (j0 * 8 + 7 < 13), vector, seq(*lanes)))
    assert_lowers_to(got, expected)


# ---- registers ----

def test_local_buffer_at_constant_elements_becomes_variables():
    B, O = Buffer("B", (4, 8)), Buffer("O", (8,))
    acc = Buffer("acc", (8,), scope="local")
    k = Var("k")
    zero = VectorStore(acc, (IntImm(0),), Broadcast(const(0.0), 8, "float32"))
    update = VectorStore(acc, (IntImm(0),), VectorOp(
        "+", (VectorLoad(acc, (IntImm(0),), 8, "float32"),
              VectorLoad(B, (k, IntImm(0)), 8, "float32")), 8, "float32"))
    out = VectorStore(O, (IntImm(0),), VectorLoad(acc, (IntImm(0),), 8, "float32"))
    body = Allocate(acc, seq(zero, For(k, 4, update), out), "stack")
    got = promote_registers(lowered((B, O), body))

    reg = Register(acc, 0, 8, "float32")
    expected = Allocate(acc, seq(
        RegisterStore(reg, Broadcast(const(0.0), 8, "float32")),
        For(k, 4, RegisterStore(reg, VectorOp("+", (reg, VectorLoad(B, (k, IntImm(0)), 8,
                                                                     "float32")), 8, "float32"))),
        VectorStore(O, (IntImm(0),), reg)), "registers", ((0, 8),))
    assert_lowers_to(got, expected)


def test_accumulator_reached_at_an_invariant_base_is_promoted_around_the_loop():
    """acc[i, 0:8] in a k loop inside an i loop: variables during the k loop only."""
    B, O = Buffer("B", (4, 8)), Buffer("O", (3, 8))
    acc = Buffer("acc", (3, 8), scope="local")
    i, k = Var("i"), Var("k")
    load = VectorLoad(acc, (i, IntImm(0)), 8, "float32")
    update = VectorStore(acc, (i, IntImm(0)), VectorOp(
        "+", (load, VectorLoad(B, (k, IntImm(0)), 8, "float32")), 8, "float32"))
    body = Allocate(acc, For(i, 3, seq(For(k, 4, update),
                                       VectorStore(O, (i, IntImm(0)), load))), "stack")
    got = promote_registers(lowered((B, O), body))
    promote = ir.collect(got.body, Promote)
    assert len(promote) == 1 and promote[0].slots == ((0, 8),)
    assert structural_equal(promote[0].base, i * 8)
    reg = Register(acc, 0, 8, "float32")
    assert structural_equal(promote[0].body.body, RegisterStore(reg, VectorOp(
        "+", (reg, VectorLoad(B, (k, IntImm(0)), 8, "float32")), 8, "float32")))


def test_buffers_with_moving_accesses_stay_arrays():
    O = Buffer("O", (8,))
    acc = Buffer("acc", (8,), scope="local")
    i = Var("i")
    body = Allocate(acc, For(i, 8, seq(BufferStore(acc, const(1.0), (i,)),
                                       BufferStore(O, BufferLoad(acc, (i,), "float32"), (i,)))),
                    "stack")
    got = promote_registers(lowered((O,), body))
    assert_lowers_to(got, body)


# ---- prefetch_streams ----

def register_tile(k0_extent=3, k1_extent=256, lanes=16, vectors=2, weight_scope="global"):
    """A dense layer's register tile as register promotion leaves it: for k0 (the reduction's
    outer loop), for j (two column tiles), acc[j] promoted around for k1, reading a packed
    weight W[j, k0 * k1_extent + k1, 0:vectors * lanes] and broadcasting A[k0, k1]."""
    width = lanes * vectors
    K = k0_extent * k1_extent
    W = Buffer("W", (2, K, width), scope=weight_scope)
    A, O = Buffer("A", (k0_extent, k1_extent)), Buffer("O", (2, width))
    acc = Buffer("acc", (2, width), scope="local")
    k0, j, k1 = Var("k0"), Var("j"), Var("k1")
    row = k0 * k1_extent + k1
    updates = [RegisterStore(Register(acc, v * lanes, lanes, "float32"), VectorOp("+", (
        Register(acc, v * lanes, lanes, "float32"),
        VectorOp("*", (Broadcast(BufferLoad(A, (k0, k1), "float32"), lanes, "float32"),
                       VectorLoad(W, (j, row, IntImm(v * lanes)), lanes, "float32")),
                 lanes, "float32")), lanes, "float32")) for v in range(vectors)]
    slots = tuple((v * lanes, lanes) for v in range(vectors))
    tile = Promote(acc, j * width, slots, For(k1, k1_extent, seq(*updates)))
    body = Allocate(acc, For(k0, k0_extent, For(j, 2, tile)), "stack")
    return lowered((A, W, O), body, outputs=(O,)), W, (k0, j, k1)


def test_a_register_tile_prefetches_its_weight_rows_of_the_next_reduction_chunk():
    """Two 64-byte vectors a row: two prefetches, each 256 rows of 128 bytes ahead (the next
    k0, not the next j: j is the accumulators' own loop)."""
    func, W, (k0, j, k1) = register_tile()
    got = prefetch_streams(func)
    loop = [f for f in ir.collect(got.body, For) if f.loop_var is k1][0]
    lines = [s for s in loop.body.seq if isinstance(s, Prefetch)]
    assert [(p.buffer, p.offset) for p in lines] == [(W, 256 * 128)] * 2
    for p, v in zip(lines, (0, 1)):
        assert all(map(structural_equal, p.indices, (j, k0 * 256 + k1, IntImm(v * 16))))
    source = print_c(got, Target("x86_64-avx512"))
    assert "__builtin_prefetch((const void*)((uintptr_t)&W[j * 24576 + (k0 * 256 + k1) * 32]" \
           " + 32768), 0, 2);" in source


def test_one_prefetch_per_cache_line_of_the_stream():
    """Two 8-lane vectors of a 64-byte row (AVX2) share one line: one prefetch."""
    func, W, _ = register_tile(lanes=8)
    lines = ir.collect(prefetch_streams(func).body, Prefetch)
    assert [(p.buffer, p.offset) for p in lines] == [(W, 256 * 64)]


def test_a_loop_over_output_tiles_is_no_stream_to_lead():
    """The accumulators allocated inside a loop over column tiles j0 and copied out by it:
    the weight moves with j0, but j0's next iteration is a neighbouring tile (attention's
    q k^T over 64-long rows: nothing to prefetch)."""
    W, O = Buffer("W", (256, 64)), Buffer("O", (4, 16))
    acc = Buffer("acc", (16,), scope="local")
    j0, k = Var("j0"), Var("k")
    reg = Register(acc, 0, 16, "float32")
    tile = Promote(acc, IntImm(0), ((0, 16),), For(k, 64, RegisterStore(reg, VectorOp(
        "+", (reg, VectorLoad(W, (k, j0 * 16), 16, "float32")), 16, "float32"))))
    copy = VectorStore(O, (j0, IntImm(0)), VectorLoad(acc, (IntImm(0),), 16, "float32"))
    body = For(j0, 4, Allocate(acc, seq(tile, copy), "stack"))
    assert not ir.collect(prefetch_streams(lowered((W, O), body)).body, Prefetch)


def test_no_prefetch_without_a_stream_to_lead():
    """An unsplit reduction (no loop around the tile moves the weight: its next rows are the
    next iteration's own), a short one, and a local operand: nothing to prefetch."""
    for func, _, _ in (register_tile(k0_extent=1), register_tile(k1_extent=8),
                       register_tile(weight_scope="local")):
        assert not ir.collect(prefetch_streams(func).body, Prefetch)


def test_no_prefetch_of_a_block_the_kernel_packed_itself():
    """W a heap block of the kernel's own (an operand it packs on every call, GMM's B): it
    has just written it, in the caches; the same tile reading W as a parameter (a weight
    packed once, outside the calls) is led."""
    func, W, _ = register_tile()
    A, _, O = func.params
    own = lowered((A, O), Allocate(W, func.body, "heap"), outputs=(O,))
    assert not ir.collect(prefetch_streams(own).body, Prefetch)
    assert ir.collect(prefetch_streams(func).body, Prefetch)



def conv_tile(channel_blocks=64, pixels=7, input_param=True):
    """A blocked 1x1 convolution's register tile, its accumulators variables: for rco (input
    channel blocks), for rci (16 channels), acc[p] += X[rco, p, rci] * W[rco * 16 + rci]
    for `pixels` pixels, X a parameter (an activation: 196 pixels a channel block, 12544
    bytes from one block to the next) or a block the kernel wrote."""
    X = Buffer("X", (channel_blocks, 196, 16))
    W, O = Buffer("W", (channel_blocks * 16, 16)), Buffer("O", (pixels, 16))
    acc = Buffer("acc", (pixels, 16), scope="local")
    rco, rci = Var("rco"), Var("rci")
    regs = [Register(acc, p * 16, 16, "float32") for p in range(pixels)]
    updates = [RegisterStore(r, VectorOp("+", (r, VectorOp("*", (
        Broadcast(BufferLoad(X, (rco, IntImm(p), rci), "float32"), 16, "float32"),
        VectorLoad(W, (rco * 16 + rci, IntImm(0)), 16, "float32")), 16, "float32")),
        16, "float32")) for p, r in enumerate(regs)]
    stores = [VectorStore(O, (IntImm(p), IntImm(0)), r) for p, r in enumerate(regs)]
    tile = Allocate(acc, seq(For(rco, channel_blocks, For(rci, 16, seq(*updates))), *stores),
                    "registers", tuple((p * 16, 16) for p in range(pixels)))
    body = tile if input_param else Allocate(X, tile, "heap")
    return lowered((X, W, O) if input_param else (W, O), body), X, rco


def test_a_tile_reads_a_far_striding_activation_two_channel_blocks_ahead():
    """X steps 12544 bytes a channel block, past what the hardware prefetchers follow: each
    line the body reads of it (7 pixels of 16 channels: 7 lines) is prefetched from the block
    AHEAD = 2 on. W steps 1 KiB a block, a stream they follow: not prefetched."""
    func, X, rco = conv_tile()
    got = prefetch_streams(func)
    loop = [f for f in ir.collect(got.body, For) if f.loop_var is rco][0]
    lines = [s for s in loop.body.seq if isinstance(s, Prefetch)]
    assert [(p.buffer, p.offset) for p in lines] == [(X, 2 * 196 * 16 * 4)] * 7
    for p, pixel in zip(lines, range(7)):
        assert all(map(structural_equal, p.indices, (rco, IntImm(pixel), IntImm(0))))
    source = print_c(got, AVX2)
    assert "__builtin_prefetch((const void*)((uintptr_t)&X[rco * 3136 + 96] + 25088), 0, 2);" \
        in source


def test_no_far_prefetch_for_a_short_loop_or_an_operand_the_kernel_wrote():
    """Four channel blocks (the loop reads little ahead), or X a block of the kernel's own
    (it has just written it: in the caches): nothing to prefetch."""
    for func, _, _ in (conv_tile(channel_blocks=4), conv_tile(input_param=False)):
        assert not ir.collect(prefetch_streams(func).body, Prefetch)


# ---- the C printer ----

def kernel_body(source):
    start = source.index("static int32_t")
    return source[source.index("{", start) + 2:source.index("\n    return 0;", start)]


def test_printer_writes_lowered_ir_as_it_stands():
    A, O = Buffer("A", (16,)), Buffer("O", (16,))
    acc = Buffer("acc", (8,), scope="local")
    c = Var("c")
    reg = Register(acc, 0, 8, "float32")
    body = seq(
        Comment("block O"),
        For(c, 2, Allocate(acc, seq(
            RegisterStore(reg, VectorLoad(A, (c * 8,), 8, "float32")),
            VectorStore(O, (c * 8,), VectorOp("*", (reg, Broadcast(const(2.0), 8, "float32")),
                                              8, "float32"))), "registers", ((0, 8),)),
            kind="parallel"))
    source = print_c(lowered((A, O), body), AVX2)
    assert kernel_body(source) == """\
    // block O
    #pragma omp parallel for num_threads(TESSEL_THREADS) schedule(static)
    for (int32_t c = 0; c < 2; ++c) {
        {
            tessel_f32x8 acc_0 = {0};
            acc_0 = tessel_f32x8_load(&A[c * 8]);
            tessel_f32x8_store(&O[c * 8], (acc_0 * tessel_f32x8_splat(2.0f)));
        }
    }"""
    assert "typedef float tessel_f32x8 __attribute__((vector_size(32)));" in source


def test_printer_loads_and_stores_back_a_promoted_range():
    B, O = Buffer("B", (4, 8)), Buffer("O", (3, 8))
    acc = Buffer("acc", (3, 8), scope="local")
    i, k = Var("i"), Var("k")
    reg = Register(acc, 0, 8, "float32")
    body = Allocate(acc, For(i, 3, Promote(acc, i * 8, ((0, 8),), For(k, 4, RegisterStore(
        reg, VectorOp("+", (reg, VectorLoad(B, (k, IntImm(0)), 8, "float32")), 8, "float32"))))),
        "stack")
    source = print_c(lowered((B, O), body, outputs=(O,)), AVX2)
    assert kernel_body(source) == """\
    {
        float acc[24] __attribute__((aligned(64)));
        for (int32_t i = 0; i < 3; ++i) {
            tessel_f32x8 acc_0 = tessel_f32x8_load(&acc[i * 8]);
            for (int32_t k = 0; k < 4; ++k) {
                acc_0 = (acc_0 + tessel_f32x8_load(&B[k * 8]));
            }
            tessel_f32x8_store(&acc[i * 8], acc_0);
        }
    }"""


def test_lowered_text_names_every_node():
    A, O = Buffer("A", (8,)), Buffer("O", (8,))
    i = Var("i")
    got = vectorize(lowered((A, O), For(i, 8, BufferStore(O, A[i] * 3.0, (i,)),
                                        kind="vectorized")), AVX2)
    assert lowered_str(got) == ("def f(A: float32[8], O: float32[8]):\n"
                                "    O[0:+8] = v*(A[0:+8], broadcast(3.0, 8))")
