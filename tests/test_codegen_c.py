"""C code generation: every program is compiled, run and compared with numpy."""
import os
import re
from pathlib import Path

import numpy as np
import pytest

from tessel import ir, te
from tessel.codegen import CodegenError, asm_for, build, generate_c
from tessel.codegen.c import float_literal
from tessel.ir import REDUCE, Buffer, BufferStore, For, IterVar, Var, const, realize
from tessel.arith import block_regions
from tessel.target import Target

GOLDEN = Path(__file__).parent / "golden"
RNG_SEED = 0


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


@pytest.fixture(scope="module")
def host():
    return Target("host")


def rand(*shape, dtype="float32", seed=RNG_SEED):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def applied(fn, A):
    """lambda i: fn(A[i]) (te.compute wants a function of exactly the index arguments)."""
    return lambda i: fn(A[i])


def constant(value, dtype):
    return lambda i: te.const(value, dtype)


def run(func, cache_dir, *inputs):
    """Build `func`, call it on `inputs` plus zeroed outputs; return the outputs."""
    mod = build(func, cache_dir=cache_dir)
    outs = [np.zeros(p.shape, np.bool_ if p.dtype == "bool" else p.dtype) for p in func.outputs]
    mod(*inputs, *outs)
    return outs[0] if len(outs) == 1 else outs


# ---- hand-built IR ----

def make_block(name, iter_vars, body, init=None, alloc=()):
    reads, writes = block_regions(body, init)
    return ir.Block(name, tuple(iter_vars), reads, writes, body, init, tuple(alloc))


def make_func(name, params, body, alloc=()):
    root = ir.Block("root", (), (), (), body, alloc_buffers=tuple(alloc))
    return ir.PrimFunc(name, tuple(params), realize(root))


def matmul_split(M=13, N=16, K=9, outer="parallel", inner="vectorized", k_kind="unrolled"):
    """C = A @ B with i split as io * 8 + ii (predicate for M % 8 != 0), j as jo * 8 + ji."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    io, ii, jo, ji, k = (Var(n) for n in ("i_0", "i_1", "j_0", "j_1", "k"))
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    update = BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj))
    block = make_block("C", [IterVar(vi, M), IterVar(vj, N), IterVar(vk, K, REDUCE)],
                       update, init=BufferStore(C, const(0.0), (vi, vj)))
    nest = realize(block, [io * 8 + ii, jo * 8 + ji, k], predicate=io * 8 + ii < M)
    nest = For(ji, 8, nest, kind=inner)
    nest = For(io, -(-M // 8), For(ii, 8, For(jo, N // 8, For(k, K, nest, kind=k_kind))),
               kind=outer)
    return make_func("matmul_split", (A, B, C), nest)


def matmul_local_acc(M=13, N=16, K=9):
    """The write-cache pattern: each (row, 8-column tile) accumulates in a local buffer."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    acc = Buffer("C_local", (8,), scope="local")
    io, ii, jo, k, j1, j2 = (Var(n) for n in ("i_0", "i_1", "j_0", "k", "j_1", "j_1"))
    vi, vjo, vji, vk, vj = Var("vi"), Var("vjo"), Var("vji"), Var("vk"), Var("vj")
    update = make_block("C_local", [IterVar(vji, 8), IterVar(vk, K, REDUCE)],
                        BufferStore(acc, acc[vji] + A[vi, vk] * B[vk, vjo * 8 + vji], (vji,)),
                        init=BufferStore(acc, const(0.0), (vji,)))
    write = make_block("C_write", [IterVar(vj, 8)], BufferStore(C, acc[vj], (vi, vjo * 8 + vj)))
    tile_body = ir.seq(For(k, K, For(j1, 8, realize(update, [j1, k]), kind="vectorized")),
                       For(j2, 8, realize(write, [j2]), kind="vectorized"))
    tile = make_block("C_tile", [IterVar(vi, M), IterVar(vjo, N // 8)], tile_body, alloc=[acc])
    nest = realize(tile, [io * 8 + ii, jo], predicate=io * 8 + ii < M)
    nest = For(io, -(-M // 8), For(ii, 8, For(jo, N // 8, nest)), kind="parallel")
    return make_func("matmul_local_acc", (A, B, C), nest)


def elementwise(n=64, lanes=8, fma=True, kind="vectorized", name="vec_fma"):
    """C[i] (+)= A[i] * B[i] (or A[i] + B[i]) with i split into (n / lanes, lanes)."""
    A, B, C = Buffer("A", (n,)), Buffer("B", (n,)), Buffer("C", (n,))
    io, ii, vi = Var("i_0"), Var("i_1"), Var("vi")
    value = C[vi] + A[vi] * B[vi] if fma else A[vi] + B[vi]
    block = make_block("C", [IterVar(vi, n)], BufferStore(C, value, (vi,)))
    nest = For(io, n // lanes, For(ii, lanes, realize(block, [io * lanes + ii]), kind=kind))
    return make_func(name, (A, B, C), nest)


# ---- naive programs from te ----

def test_naive_matmul(cache_dir):
    A, B = te.placeholder((5, 7), name="A"), te.placeholder((7, 6), name="B")
    k = te.reduce_axis(7, name="k")
    C = te.compute((5, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    a, b = rand(5, 7), rand(7, 6, seed=1)
    out = run(te.create_func([A, B, C], name="matmul"), cache_dir, a, b)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_max_reduction_starts_from_minus_infinity(cache_dir):
    A = te.placeholder((4, 9), name="A")
    k = te.reduce_axis(9, name="k")
    B = te.compute((4,), lambda i: te.max(A[i, k], axis=k), name="B")
    a = -np.abs(rand(4, 9)) - 100.0  # all negative: a zero init would be wrong
    out = run(te.create_func([A, B]), cache_dir, a)
    np.testing.assert_array_equal(out, a.max(axis=1))
    assert "-INFINITY" in generate_c(te.create_func([A, B]), Target("host"))


def test_padded_stencil_select_is_lazy(cache_dir):
    """Padding reads out of bounds in the untaken branch; the select must not evaluate it."""
    H, W = 6, 5
    A = te.placeholder((H, W), name="A")
    P = te.compute((H + 2, W + 2), lambda i, j: te.if_then_else(
        te.all(i >= 1, i <= H, j >= 1, j <= W), A[i - 1, j - 1], 0.0), name="P")
    W3 = te.placeholder((3, 3), name="W")
    r, s = te.reduce_axis(3, name="r"), te.reduce_axis(3, name="s")
    O = te.compute((H, W), lambda i, j: te.sum(P[i + r, j + s] * W3[r, s], axis=[r, s]), name="O")
    a, w = rand(H, W), rand(3, 3, seed=1)
    out = run(te.create_func([A, W3, O], name="conv"), cache_dir, a, w)
    padded = np.pad(a, 1)
    ref = sum(padded[r:r + H, s:s + W] * w[r, s] for r in range(3) for s in range(3))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


def test_softmax_chain_with_exp(cache_dir):
    A = te.placeholder((3, 10), name="A")
    k1, k2 = te.reduce_axis(10, name="k"), te.reduce_axis(10, name="k")
    M = te.compute((3,), lambda i: te.max(A[i, k1], axis=k1), name="M")
    E = te.compute((3, 10), lambda i, j: te.exp(A[i, j] - M[i]), name="E")
    S = te.compute((3,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    O = te.compute((3, 10), lambda i, j: E[i, j] / S[i], name="O")
    a = rand(3, 10) * 5
    out = run(te.create_func([A, O], name="softmax"), cache_dir, a)
    ref = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(out, ref / ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_layer_norm_chain_with_rsqrt(cache_dir):
    n, d = 4, 16
    A = te.placeholder((n, d), name="A")
    k1, k2 = te.reduce_axis(d, name="k"), te.reduce_axis(d, name="k")
    mean = te.compute((n,), lambda i: te.sum(A[i, k1] / float(d), axis=k1), name="mean")
    var = te.compute((n,), lambda i: te.sum(
        (A[i, k2] - mean[i]) * (A[i, k2] - mean[i]) / float(d), axis=k2), name="var")
    O = te.compute((n, d), lambda i, j: (A[i, j] - mean[i]) * te.rsqrt(var[i] + 1e-5), name="O")
    a = rand(n, d) * 3 + 1
    out = run(te.create_func([A, O], name="layer_norm"), cache_dir, a)
    ref = (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_float64_matmul_with_sqrt(cache_dir):
    A = te.placeholder((4, 3), "float64", name="A")
    B = te.placeholder((3, 5), "float64", name="B")
    k = te.reduce_axis(3, name="k")
    C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((4, 5), lambda i, j: te.sqrt(te.abs(C[i, j])) + 0.1, name="D")
    func = te.create_func([A, B, D], name="f64")
    a, b = rand(4, 3, dtype="float64"), rand(3, 5, dtype="float64", seed=1)
    out = run(func, cache_dir, a, b)
    np.testing.assert_allclose(out, np.sqrt(np.abs(a @ b)) + 0.1, rtol=1e-14)
    assert "sqrt(" in generate_c(func, Target("host")) and "0.1f" not in generate_c(
        func, Target("host"))


def test_int8_inputs_accumulate_in_int32(cache_dir):
    A = te.placeholder((6, 40), "int8", name="A")
    B = te.placeholder((40, 7), "int8", name="B")
    k = te.reduce_axis(40, name="k")
    C = te.compute((6, 7), lambda i, j: te.sum(
        te.cast("int32", A[i, k]) * te.cast("int32", B[k, j]), axis=k), name="C")
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (6, 40), dtype=np.int8)
    b = rng.integers(-128, 128, (40, 7), dtype=np.int8)
    out = run(te.create_func([A, B, C], name="qmatmul"), cache_dir, a, b)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))


def test_intrinsics_match_numpy(cache_dir):
    from math import erf
    A = te.placeholder((32,), name="A")
    fns = {
        "exp": (te.exp, np.exp), "log": (te.log, np.log), "sqrt": (te.sqrt, np.sqrt),
        "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x)), "tanh": (te.tanh, np.tanh),
        "erf": (te.erf, np.vectorize(erf)), "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
        "abs": (te.abs, np.abs), "floor": (te.floor, np.floor), "ceil": (te.ceil, np.ceil),
        "round": (te.round, np.round),
        "pow": (lambda x: te.pow(x, 1.5), lambda x: np.power(x, 1.5)),
    }
    outs = [te.compute((32,), applied(f, A), name=name) for name, (f, _) in fns.items()]
    a = np.abs(rand(32)) * 3 + 0.01
    results = run(te.create_func([A, *outs], name="intrinsics"), cache_dir, a)
    for (name, (_, ref)), got in zip(fns.items(), results):
        np.testing.assert_allclose(got, ref(a.astype(np.float64)), rtol=2e-6, atol=1e-7,
                                   err_msg=name)


def test_float16_computes_through_float(cache_dir):
    A = te.placeholder((16,), "float16", name="A")
    B = te.placeholder((16,), "float16", name="B")
    C = te.compute((16,), lambda i: A[i] * B[i] + te.const(0.1, "float16"), name="C")
    func = te.create_func([A, B, C], name="half")
    a, b = rand(16, dtype="float16"), rand(16, dtype="float16", seed=1)
    out = run(func, cache_dir, a, b)
    assert out.dtype == np.float16
    ref = (a.astype(np.float32) * b.astype(np.float32) + np.float32(np.float16(0.1)))
    np.testing.assert_array_equal(out, ref.astype(np.float16))
    assert "_Float16* restrict C" in generate_c(func, Target("host"))


def test_bool_output(cache_dir):
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: te.any(A[i] > 0.5, A[i] < -0.5), name="B")
    a = rand(10)
    out = run(te.create_func([A, B], name="mask"), cache_dir, a)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, np.abs(a) > 0.5)


def test_floordiv_floormod_follow_python_semantics(cache_dir):
    def divisor(j):  # -3, -2, -1, 1, 2, 3, 4: never zero
        return te.if_then_else(j < 3, j - 3, j - 2)
    ops = {
        "div": lambda i, j: (i - 8) // divisor(j),
        "mod": lambda i, j: (i - 8) % divisor(j),
        "div4": lambda i, j: (i - 8 + j) // 4,
        "mod4": lambda i, j: (i - 8 + j) % 4,
        "div_pos": lambda i, j: (i * 7 + j) // 4,  # provably non-negative: plain C
        "div64": lambda i, j: te.cast("int64", i - 8) // te.cast("int64", divisor(j)),
        "mod64": lambda i, j: te.cast("int64", i - 8) % te.cast("int64", divisor(j)),
        "fdiv": lambda i, j: te.cast("float32", i - 8) // te.cast("float32", divisor(j)),
        "fmod": lambda i, j: te.cast("float32", i - 8) % te.cast("float32", divisor(j)),
    }
    outs = [te.compute((17, 7), f, name=name) for name, f in ops.items()]
    func = te.create_func(outs, name="floor_ops")
    results = run(func, cache_dir)
    i, j = np.meshgrid(np.arange(17), np.arange(7), indexing="ij")
    d = np.where(j < 3, j - 3, j - 2)
    refs = [(i - 8) // d, (i - 8) % d, (i - 8 + j) // 4, (i - 8 + j) % 4, (i * 7 + j) // 4,
            (i - 8) // d, (i - 8) % d, (i - 8) // d, (i - 8) % d]
    for name, got, ref in zip(ops, results, refs):
        np.testing.assert_array_equal(got, ref, err_msg=name)
    source = generate_c(func, Target("host"))
    assert "tessel_floordiv_i32(" in source and "tessel_floormod_i64(" in source
    assert "= (i_4 * 7 + j_4) / 4;" in source


# ---- hand-scheduled programs ----

@pytest.mark.parametrize("M", [13, 16])
def test_split_matmul_with_predicate_parallel_vectorized_unrolled(cache_dir, M):
    func = matmul_split(M=M)
    a, b = rand(M, 9), rand(9, 16, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)
    source = generate_c(func, Target("x86_64-avx2", cores=2))
    assert "#pragma omp parallel for num_threads(2) schedule(static)" in source
    # j_1 is one 8-lane vector; the k loop is unrolled here, k a constant in each copy, so
    # the init (at k == 0) is in the first copy only, of the whole tiles' version and of the
    # partial tile's (tessel.codegen.passes.unswitch)
    assert "tessel_f32x8_store(&C[(i_0 * 8 + i_1) * 16 + j_0 * 8]" in source
    assert "#pragma omp simd" not in source
    assert "A[(i_0 * 8 + i_1) * 9 + 8]" in source and "#pragma GCC unroll" not in source
    assert f"if (i_0 * 8 + 7 < {M})" in source and f"if (i_0 * 8 + i_1 < {M})" in source
    assert source.count("tessel_f32x8_splat(0.0f)") == 2


def test_local_accumulator_write_cache(cache_dir):
    func = matmul_local_acc()
    a, b = rand(13, 9), rand(9, 16, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)
    source = generate_c(func, Target("x86_64-avx2"))
    # every access is C_local[lane]: the buffer lives in one vector variable
    assert "tessel_f32x8 C_local_0 = {0};" in source and "C_local[" not in source
    assert "aligned_alloc" not in source


def test_heap_allocations_inside_parallel_loop(cache_dir):
    """A "global" row buffer and a >64 KiB "local" buffer per parallel iteration: both are
    heap-allocated inside the loop body (private to each thread) and freed there."""
    n, big = 6, 20000
    A, O = Buffer("A", (n, big)), Buffer("O", (n, big))
    row, tmp = Buffer("row", (big,)), Buffer("tmp", (big,), scope="local")
    i, j1, j2, vi, va, vb = (Var(x) for x in ("i", "j", "j", "vi", "vj", "vj"))
    load = make_block("row", [IterVar(va, big)], BufferStore(row, A[vi, va] * 2.0, (va,)))
    scale = make_block("tmp", [IterVar(vb, big)], BufferStore(tmp, row[vb] + 1.0, (vb,)))
    k = Var("k")  # the write-back is a plain loop of stores inside the tile block
    body = ir.seq(For(j1, big, realize(load, [j1])), For(j2, big, realize(scale, [j2])),
                  For(k, big, BufferStore(O, tmp[k], (vi, k))))
    tile = make_block("tile", [IterVar(vi, n)], body, alloc=[row, tmp])
    func = make_func("rows", (A, O), For(i, n, realize(tile, [i]), kind="parallel"))
    a = rand(n, big)
    np.testing.assert_allclose(run(func, cache_dir, a), a * 2 + 1, rtol=1e-6)
    source = generate_c(func, Target("host"))
    assert source.count("aligned_alloc(64, 80000)") == 2
    assert "free(tmp);" in source and "#pragma omp atomic write" in source


def test_if_then_else_statement(cache_dir):
    A, B = Buffer("A", (10,)), Buffer("B", (10,))
    i = Var("i")
    branch = ir.IfThenElse(i % 3 == 0, BufferStore(B, A[i] * 2.0, (i,)),
                           BufferStore(B, -A[i], (i,)))
    func = make_func("branches", (A, B), For(i, 10, branch))
    a = rand(10)
    ref = np.where(np.arange(10) % 3 == 0, a * 2, -a)
    np.testing.assert_array_equal(run(func, cache_dir, a), ref)


def test_blocks_in_sequence_get_their_own_scopes(cache_dir):
    """Two blocks under one loop (the compute_at pattern): one after the other, in order."""
    X, O = Buffer("X", (3,)), Buffer("O", (2,))
    v, w, i = Var("v"), Var("w"), Var("i")
    first = make_block("first", [IterVar(v, 2)], BufferStore(O, X[v] + X[v + 1], (v,)))
    second = make_block("second", [IterVar(w, 2)], BufferStore(O, O[w] * 2.0, (w,)))
    func = make_func("two_blocks", (X, O), For(i, 2, ir.seq(realize(first, [i]),
                                                             realize(second, [i]))))
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(run(func, cache_dir, x), (x[:2] + x[1:]) * 2)
    source = generate_c(func, Target("host"))
    assert source.index("// block first") < source.index("// block second")


def test_auto_unroll_annotation_unrolls_inner_loops(cache_dir):
    func = matmul_split(M=16, outer="serial", inner="serial", k_kind="serial")
    outer = func.root.body
    annotated = For(outer.loop_var, outer.extent, outer.body,
                    annotations={"pragma_auto_unroll_max_step": 16})
    func = func.with_body(realize(ir.Block("root", (), (), (), annotated)))
    source = generate_c(func, Target("host"))
    assert "#pragma GCC unroll 8" in source  # the j_1 loop (8 iterations)
    assert "#pragma GCC unroll 9" not in source  # k * j_1 = 72 > 16
    a, b = rand(16, 9), rand(9, 16, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fma", [False, True])
def test_vectorized_loop_becomes_packed_avx(host, fma):
    if not host.has("avx2"):
        pytest.skip("needs an AVX2 host")
    asm = asm_for(generate_c(elementwise(fma=fma), host), host)
    assert re.search(r"\bvfmadd\d+ps\s+[^\n]*%ymm" if fma else r"\bvaddps\s+[^\n]*%ymm", asm)


def test_vectorized_matmul_inner_loop_uses_packed_fma(host):
    if not (host.has("avx2") and host.has("fma")):
        pytest.skip("needs an AVX2+FMA host")
    asm = asm_for(generate_c(matmul_split(M=16, outer="serial", k_kind="serial"), host), host)
    assert re.search(r"\bvfmadd\d+ps\s+[^\n]*%ymm", asm)


# ---- errors ----

def test_nested_parallel_is_rejected():
    func = matmul_split(outer="parallel", inner="parallel")
    with pytest.raises(CodegenError, match="parallel loop j_1 is nested inside parallel loop i_0"):
        generate_c(func, Target("host"))


def test_thread_binding_needs_cuda():
    A = Buffer("A", (32,))
    i = Var("i")
    func = make_func("gpu", (A,), For(i, 32, BufferStore(A, const(1.0), (i,)),
                                      kind="thread_binding", thread="threadIdx.x"))
    with pytest.raises(CodegenError, match="loop i .*threadIdx.x.*CUDA backend"):
        generate_c(func, Target("host"))


def test_vectorized_reduction_is_rejected():
    func = matmul_split(M=16, outer="serial", inner="serial", k_kind="vectorized")
    with pytest.raises(CodegenError, match="vectorized loop k binds reduction variable vk"):
        generate_c(func, Target("host"))


def test_unsupported_node_and_unbound_names_are_rejected():
    A = te.placeholder((4,), name="A")
    k = te.reduce_axis(4, name="k")
    B = Buffer("B", (1,))
    i = Var("i")
    stray = make_func("stray", (B,), BufferStore(B, te.sum(A[k], axis=k), (const(0),)))
    with pytest.raises(CodegenError, match="expression node Reduce"):
        generate_c(stray, Target("host"))
    unbound = make_func("unbound", (B,), BufferStore(B, const(1.0), (i,)))
    with pytest.raises(CodegenError, match="variable i is used outside"):
        generate_c(unbound, Target("host"))
    hidden = make_func("hidden", (B,), BufferStore(Buffer("X", (1,)), const(1.0), (const(0),)))
    with pytest.raises(CodegenError, match="buffer X is neither a parameter"):
        generate_c(hidden, Target("host"))
    hidden_read = make_func("hidden", (B,), BufferStore(B, Buffer("Y", (1,))[0], (const(0),)))
    with pytest.raises(CodegenError, match="buffer Y is neither a parameter"):
        generate_c(hidden_read, Target("host"))


# ---- names, literals, indexing ----

def test_names_are_sanitized_and_unique(cache_dir):
    A, B = Buffer("int", (4, 3)), Buffer("A.out", (4, 3))
    T = Buffer("i", (4, 3), scope="local")
    i, j, i2, j2 = Var("for"), Var("i"), Var("for"), Var("3d")
    fill = BufferStore(T, A[i, j] + 1.0, (i, j))
    copy = BufferStore(B, T[i2, j2] * 2.0, (i2, j2))
    body = ir.seq(For(i, 4, For(j, 3, fill)), For(i2, 4, For(j2, 3, copy)))
    func = make_func("main", (A, B), body, alloc=[T])
    source = generate_c(func, Target("host"))
    for name in ("main_1", "int_1", "A_out", "for_1", "for_2", "i_1", "v3d"):
        assert re.search(rf"\b{name}\b", source), name
    a = rand(4, 3)
    b = np.zeros((4, 3), np.float32)
    build(func, cache_dir=cache_dir)(a, b)
    np.testing.assert_allclose(b, (a + 1) * 2)


@pytest.mark.parametrize("value", [0.1, 1.0, -2.5, 1e-30, 3.4028234663852886e38, 1 / 3,
                                   2.0 ** -149, 123456789.0, 1e10])
def test_float_literals_are_exact(value):
    text32 = float_literal(value, "float32")
    assert text32.endswith("f") and re.search(r"[.e]", text32)
    assert np.float32(float(text32[:-1])) == np.float32(value)
    text64 = float_literal(value, "float64")
    assert float(text64) == value
    assert float_literal(float("inf"), "float32") == "INFINITY"
    assert float_literal(float("-inf"), "float64") == "-INFINITY"
    assert float_literal(float("nan"), "float32") == "NAN"
    assert float_literal(1e39, "float32") == "INFINITY"  # overflows float32


def test_float_constants_round_trip_through_c(cache_dir):
    values = [0.1, 1 / 3, 1e-30, -2.5e38, float("inf"), float("-inf"), 2.0 ** -149]
    for dtype in ("float32", "float64"):
        outs = [te.compute((1,), constant(v, dtype), name=f"c{k}")
                for k, v in enumerate(values)]
        got = run(te.create_func(outs, name="consts"), cache_dir)
        for v, out in zip(values, got):
            assert out[0] == np.array(v, dtype), (dtype, v)
    nan = run(te.create_func([te.compute((1,), lambda i: te.const(float("nan")), "N")]),
              cache_dir)
    assert np.isnan(nan[0])


def test_huge_buffers_use_int64_indexing():
    A = Buffer("A", (65536, 32768))  # 2**31 elements
    i, j = Var("i"), Var("j")
    func = make_func("huge", (A,), For(i, 65536, For(j, 32768, BufferStore(A, const(0.0),
                                                                           (i, j)))))
    source = generate_c(func, Target("host"))
    assert "A[(int64_t)i * 32768 + (int64_t)j] = 0.0f;" in source
    assert "vmov" in asm_for(source, Target("host"))  # compiles (too big to run here)
    S = Buffer("S", (4, 8))
    small = make_func("small", (S,), For(i, 4, For(j, 8, BufferStore(S, const(0.0), (i, j)))))
    assert "S[i * 8 + j] = 0.0f;" in generate_c(small, Target("host"))


# ---- golden C ----

def golden_kernels():
    A, B = te.placeholder((3, 4), name="A"), te.placeholder((4, 2), name="B")
    k = te.reduce_axis(4, name="k")
    C = te.compute((3, 2), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    X = te.placeholder((5,), name="X")
    Y = te.compute((5,), lambda i: te.max(te.exp(X[i]) // 2.0, X[(i + 4) % 5] * -1.5), name="Y")
    return {
        "matmul_naive": te.create_func([A, B, C], name="matmul"),
        "vec_fma": elementwise(n=16),
        "matmul_local_acc": matmul_local_acc(M=5, N=8, K=3),
        "elementwise_chain": te.create_func([X, Y], name="chain"),
    }


@pytest.mark.parametrize("name", sorted(golden_kernels()))
def test_golden_c(name, cache_dir):
    func = golden_kernels()[name]
    source = generate_c(func, Target("x86_64-avx2"))  # a preset: 1 core, machine-independent
    path = GOLDEN / f"{name}.c"
    if os.environ.get("TESSEL_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(source)
    assert path.exists(), f"missing {path}; run with TESSEL_UPDATE_GOLDEN=1 to create it"
    assert source == path.read_text(), f"generated C for {name} changed; review the diff and " \
                                       "rerun with TESSEL_UPDATE_GOLDEN=1 if it is intended"
    assert build(func, cache_dir=cache_dir).lib_path.exists()  # and it compiles here


@pytest.mark.parametrize("target", ["host", "x86_64-avx2"])
def test_select_of_loads_in_constant_loops(cache_dir, target):
    """GCC 12 at -O3 vectorizes `x[i, j] < 0 ? y[i, j] : 0` with masked loads and computes
    wrong values where the inner trip count is not a multiple of the vector width (19 of 105
    over 15x7), and drops two elements of a (3, 2) + (3, 2) concatenation; the target's flags
    (target.py's workarounds) must keep both correct."""
    if target != "host" and "avx2" not in Target("host").features:
        pytest.skip("the x86_64-avx2 preset runs on an AVX2 host only")
    A, B = te.placeholder((3, 2), name="A"), te.placeholder((3, 2), name="B")
    cat = te.compute((6, 2), lambda i, j: te.if_then_else(i < 3, A[i, j], B[i - 3, j]),
                     name="cat")
    X, Y = te.placeholder((15, 7), name="X"), te.placeholder((15, 7), name="Y")
    where = te.compute((15, 7), lambda i, j: te.if_then_else(X[i, j] < 0.0, Y[i, j], X[i, j]),
                       name="where")
    masked = te.compute((15, 7), lambda i, j: te.if_then_else(X[i, j] < 0.0, Y[i, j], 0.0),
                        name="masked")
    a, b, x, y = rand(3, 2), rand(3, 2, seed=1), rand(15, 7, seed=2), rand(15, 7, seed=3)
    for func, inputs, expected in [
            (te.create_func([A, B, cat], name="cat"), (a, b), [np.concatenate([a, b])]),
            (te.create_func([X, Y, where, masked], name="where"), (x, y),
             [np.where(x < 0, y, x), np.where(x < 0, y, 0)])]:
        outs = [np.zeros(e.shape, "float32") for e in expected]
        build(func, Target(target), cache_dir=cache_dir)(*inputs, *outs)
        for out, want in zip(outs, expected):
            np.testing.assert_array_equal(out, want)
