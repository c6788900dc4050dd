"""Explicit SIMD, codegen-side unrolling and register promotion: hand-scheduled programs are
compiled, run and compared with numpy; assembly checks show register-blocked FMA code."""
import ctypes
import mmap
import os
import re
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.codegen import asm_for, build, generate_c
from tessel.codegen.passes.affine import Lin
from tessel.codegen.passes.registers import plan_slots
from tessel.codegen.passes.vectorize import Chunk, chunk_plan
from tessel.ir import REDUCE, Buffer, BufferStore, For, IterVar, Var, const, realize
from tessel.arith import block_regions
from tessel.target import Target, host_arch
from isa import ISA_PRESETS, fmas, hot_loop, spills

AVX2 = Target("x86_64-avx2")  # a preset: 8 float lanes, machine-independent source


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


def rand(*shape, dtype="float32", seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def make_block(name, iter_vars, body, init=None, alloc=()):
    reads, writes = block_regions(body, init)
    return ir.Block(name, tuple(iter_vars), reads, writes, body, init, tuple(alloc))


def make_func(name, params, body, alloc=()):
    root = ir.Block("root", (), (), (), body, alloc_buffers=tuple(alloc))
    return ir.PrimFunc(name, tuple(params), realize(root))


def nest(loops, body):
    """Wrap `body` in loops given outermost first as (var, extent, kind)."""
    for var, extent, kind in reversed(loops):
        body = For(var, extent, body, kind=kind)
    return body


def run(func, cache_dir, *inputs):
    mod = build(func, cache_dir=cache_dir)
    outs = [np.zeros(p.shape, p.dtype) for p in func.outputs]
    mod(*inputs, *outs)
    return outs[0] if len(outs) == 1 else outs


def vector_map(n, fn, dtypes=("float32", "float32"), kind="vectorized", name="map"):
    """O[i] = fn(A, i) over one loop of extent n (A has n + 8 elements, for shifted reads)."""
    A, O = Buffer("A", (n + 8,), dtypes[0]), Buffer("O", (n,), dtypes[1])
    i, vi = Var("i"), Var("vi")
    block = make_block("O", [IterVar(vi, n)], BufferStore(O, fn(A, vi), (vi,)))
    return make_func(name, (A, O), For(i, n, realize(block, [i]), kind=kind))


# ---- chunk plans and slots ----

def test_chunk_plan_covers_every_iteration_once():
    for extent in range(1, 70):
        plan = chunk_plan(extent, 8, 4)
        covered = [c.start + k for c in plan for k in range(c.width * c.count)]
        assert covered == list(range(extent)), extent
        assert all(c.width in (8, 4, 1) for c in plan)
    assert chunk_plan(13, 8, 4) == [Chunk(0, 8), Chunk(8, 4), Chunk(12, 1)]
    assert chunk_plan(64, 8, 4) == [Chunk(0, 8, 8)]  # many full vectors: a C loop
    assert chunk_plan(32, 8, 4) == [Chunk(0, 8), Chunk(8, 8), Chunk(16, 8), Chunk(24, 8)]


def test_slots_need_one_base_and_non_overlapping_accesses():
    buf = Buffer("acc", (4, 8), scope="local")

    def at(*accesses):
        return [(None if off is None else Lin(None, off), w) for off, w in accesses]
    slots = plan_slots(buf, at((0, 8), (8, 8), (16, 1), (3, 1)))
    assert slots.vectors == {0: 8, 8: 8} and slots.scalars == (16,)
    assert plan_slots(buf, at((0, 8), (4, 8))) is None  # partial overlap
    assert plan_slots(buf, at((0, 8), (None, 1))) is None  # an access at a varying element
    assert plan_slots(buf, at((30, 8))) is None  # out of the buffer
    # around a loop: one base over variables bound outside it, in bounds for their ranges
    i, k = Var("i"), Var("k")
    row = [(Lin({i: 8}, 0), 8), (Lin({i: 8}, 3), 1)]
    assert plan_slots(buf, row) is None  # needs `outer`
    slots = plan_slots(buf, row, outer={i}, ranges={i: (0, 3)})
    assert slots.base.terms == {i: 8} and slots.vectors == {0: 8} and slots.scalars == ()
    assert plan_slots(buf, row, outer={i}, ranges={i: (0, 4)}) is None  # row 4: outside
    assert plan_slots(buf, row, outer={k}, ranges={i: (0, 3)}) is None  # i bound inside
    assert plan_slots(buf, row + [(Lin({k: 8}), 8)], outer={i, k},
                      ranges={i: (0, 3), k: (0, 3)}) is None  # two bases may alias


# ---- elementwise ----

@pytest.mark.parametrize("n", [1, 3, 4, 7, 8, 12, 13, 16, 33, 100])
def test_elementwise_any_extent(cache_dir, n):
    func = vector_map(n, lambda A, i: A[i] * 2.0 + A[i + 1])
    a = rand(n + 8)
    np.testing.assert_allclose(run(func, cache_dir, a), a[:n] * 2 + a[1:n + 1], rtol=1e-6)
    source = generate_c(func, AVX2)
    assert "#pragma omp simd" not in source
    if n >= 8:
        assert "tessel_f32x8_load(&A[" in source and "tessel_f32x8_store(&O[" in source
    if n in (12, 13):
        assert "tessel_f32x4_load" in source  # the remainder as a narrower vector
    if n == 100:
        assert "for (int32_t i_vec = 0; i_vec < 12; ++i_vec)" in source  # 12 full vectors


def test_int32_vectors(cache_dir):
    n = 37

    def fn(A, i):
        x = A[i] * 3 - A[i + 1]
        return ir.max_(ir.min_(x, 50), -50) + (i * 7) // 4 + (i % 5) + (A[i] // 3) + (A[i] % 4)
    func = vector_map(n, fn, ("int32", "int32"))
    a = np.random.default_rng(1).integers(-100, 100, n + 8).astype(np.int32)
    i = np.arange(n)
    x = a[:n] * 3 - a[1:n + 1]
    ref = np.clip(x, -50, 50) + (i * 7) // 4 + i % 5 + a[:n] // 3 + a[:n] % 4
    np.testing.assert_array_equal(run(func, cache_dir, a), ref)
    source = generate_c(func, AVX2)
    assert "tessel_i32x8_min(" in source and "#pragma omp simd" not in source
    assert "tessel_floordiv_i32(" in source  # a // 3 on signed data goes lane by lane


def test_float64_vectors_use_four_lanes(cache_dir):
    n = 11
    func = vector_map(n, lambda A, i: A[i] * A[i + 2] - 0.5, ("float64", "float64"))
    a = rand(n + 8, dtype="float64")
    np.testing.assert_allclose(run(func, cache_dir, a), a[:n] * a[2:n + 2] - 0.5, rtol=1e-15)
    source = generate_c(func, AVX2)
    assert "tessel_f64x4_load(&A[" in source and "tessel_f32x8" not in source


def test_int64_and_casts(cache_dir):
    n = 19
    func = vector_map(n, lambda A, i: ir.cast("float64", A[i] * 3) + ir.cast("float64", i) * 0.5,
                      ("int64", "float64"))
    a = np.arange(n + 8, dtype=np.int64) - 9
    ref = (a[:n] * 3).astype(np.float64) + np.arange(n) * 0.5
    np.testing.assert_array_equal(run(func, cache_dir, a), ref)
    source = generate_c(func, AVX2)
    assert "__builtin_convertvector(" in source and "tessel_i64x4_load" in source


def test_mask_cast_and_logic(cache_dir):
    n = 21

    def fn(A, i):
        positive = ir.cast("float32", ir.logical_and(A[i] > 0.0, ~(A[i] > 1.0)))
        return positive * A[i] + ir.cast("float32", (i < 5) | (i > 15))
    func = vector_map(n, fn)
    a = rand(n + 8)
    x, i = a[:n], np.arange(n)
    ref = ((x > 0) & ~(x > 1)) * x + ((i < 5) | (i > 15))
    np.testing.assert_allclose(run(func, cache_dir, a), ref, rtol=1e-6)
    assert "#pragma omp simd" not in generate_c(func, AVX2)


# ---- access patterns ----

def test_broadcast_strided_reversed_and_gathered_loads(cache_dir):
    n = 24
    A, S, O = Buffer("A", (3 * n,)), Buffer("S", (4,)), Buffer("O", (4, n))
    k, i, vk, vi = Var("k"), Var("i"), Var("vk"), Var("vi")
    value = (A[vi] * S[vk]  # contiguous times broadcast
             + A[vi * 3 + 1]  # stride 3
             + A[n - 1 - vi]  # stride -1
             + A[(vi * vi) % n]  # no affine form
             + A[vi // 2])  # two lanes per element
    block = make_block("O", [IterVar(vk, 4), IterVar(vi, n)], BufferStore(O, value, (vk, vi)))
    func = make_func("patterns", (A, S, O),
                     nest([(k, 4, "serial"), (i, n, "vectorized")], realize(block, [k, i])))
    a, s = rand(3 * n), rand(4, seed=1)
    j = np.arange(n)
    ref = (np.outer(s, a[:n]) + a[j * 3 + 1] + a[n - 1 - j] + a[(j * j) % n] + a[j // 2])
    np.testing.assert_allclose(run(func, cache_dir, a, s), ref, rtol=1e-5, atol=1e-6)
    source = generate_c(func, AVX2)
    assert "tessel_f32x8_splat(S[k])" in source and "#pragma omp simd" not in source


def test_scatter_store_transposes(cache_dir):
    n, m = 12, 5
    A, T = Buffer("A", (m, n)), Buffer("T", (n, m))
    r, c, vr, vc = Var("r"), Var("c"), Var("vr"), Var("vc")
    block = make_block("T", [IterVar(vr, m), IterVar(vc, n)],
                       BufferStore(T, A[vr, vc] + 1.0, (vc, vr)))
    func = make_func("transpose", (A, T),
                     nest([(r, m, "serial"), (c, n, "vectorized")], realize(block, [r, c])))
    a = rand(m, n)
    np.testing.assert_array_equal(run(func, cache_dir, a), (a + 1).T)
    assert "lanes[7];" in generate_c(func, AVX2)


def test_gathered_in_and_scattered_out_stays_a_scalar_loop(cache_dir):
    """A vectorized loop whose stores and every varying load go lane by lane (here a
    transposed read-modify-write) has no vector form worth its size: it stays a loop under
    `omp simd`, with the reason in a comment, and computes the same."""
    n, m = 12, 5
    T, A = Buffer("T", (n, m)), Buffer("A", (m, n))
    r, c, vr, vc = Var("r"), Var("c"), Var("vr"), Var("vc")
    block = make_block("T", [IterVar(vr, m), IterVar(vc, n)],
                       BufferStore(T, T[vc, vr] + A[vr, (vc * 5) % n], (vc, vr)))
    func = make_func("rmw", (A, T),
                     nest([(r, m, "serial"), (c, n, "vectorized")], realize(block, [r, c])))
    source = generate_c(func, AVX2)
    assert "every varying load go lane by lane" in source and "#pragma omp simd" in source
    assert "lanes[" not in source
    a, t = rand(m, n), rand(n, m, seed=1)
    mod = build(func, cache_dir=cache_dir)
    want = t.copy()
    for i in range(m):
        for j in range(n):
            want[j, i] += a[i, (j * 5) % n]
    mod(a, t)
    np.testing.assert_allclose(t, want, rtol=1e-6)


# ---- selects, conditions, predicates ----

def test_select_with_in_bounds_branches_is_blended(cache_dir):
    n = 20
    func = vector_map(n, lambda A, i: ir.select(i % 3 == 0, A[i], A[i + 8] * 2.0))
    a = rand(n + 8)
    i = np.arange(n)
    ref = np.where(i % 3 == 0, a[:n], a[8:n + 8] * 2)
    np.testing.assert_array_equal(run(func, cache_dir, a), ref)
    assert "tessel_f32x8_select(" in generate_c(func, AVX2)


def test_select_in_a_fused_loop_is_blended(cache_dir):
    """Rows of a fused loop (f // 3, f % 3: a softmax's exponentials inside its rows): the
    select's branches load in bounds for every f < 6, which the proof sees through the
    division and the modulo (affine.Bounded); it was left to omp simd."""
    A, O = Buffer("A", (2, 3, 16)), Buffer("O", (2, 3, 16))
    f, j, vi, vj, vk = Var("f"), Var("j"), Var("vi"), Var("vj"), Var("vk")
    x = A[vi, vj, vk]
    value = ir.select(x < 0.0, const(0.0), x * 2.0)
    block = make_block("O", [IterVar(vi, 2), IterVar(vj, 3), IterVar(vk, 16)],
                       BufferStore(O, value, (vi, vj, vk)))
    func = make_func("rows", (A, O), nest([(f, 6, "serial"), (j, 16, "vectorized")],
                                          realize(block, [f // 3, f % 3, j])))
    a = np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float32)
    np.testing.assert_array_equal(run(func, cache_dir, a).reshape(2, 3, 16),
                                  np.where(a < 0, 0, a * 2))
    source = generate_c(func, AVX2)
    assert "tessel_f32x8_select(" in source and "omp simd" not in source


def padding(n):
    """P[i] = A[i - 1] inside, 0 in the one-element border: the untaken branch of the select
    reads A[-1] and A[n], which must never be touched."""
    A, P = Buffer("A", (n,)), Buffer("P", (n + 2,))
    i, vi = Var("i"), Var("vi")
    value = ir.select(ir.logical_and(vi >= 1, vi <= n), A[vi - 1], 0.0)
    block = make_block("P", [IterVar(vi, n + 2)], BufferStore(P, value, (vi,)))
    return make_func("pad", (A, P), For(i, n + 2, realize(block, [i]), kind="vectorized"))


def guarded_array(n):
    """A float32 array of n elements filling whole pages between two inaccessible pages, or
    None where that cannot be arranged."""
    page = mmap.PAGESIZE
    if (n * 4) % page:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        region = mmap.mmap(-1, n * 4 + 2 * page)
        base = np.frombuffer(region, np.uint8).ctypes.data
        for addr in (base, base + page + n * 4):
            if libc.mprotect(ctypes.c_void_p(addr), ctypes.c_size_t(page), 0) != 0:
                return None
    except (OSError, AttributeError, ValueError):
        return None
    return np.frombuffer(region, np.float32, count=n, offset=page)  # keeps the mapping alive


def test_padding_select_is_never_speculated(cache_dir):
    n = mmap.PAGESIZE // 4
    func = padding(n)
    source = generate_c(func, AVX2)
    assert "a select branch may load A out of bounds" in source and "#pragma omp simd" in source
    a = guarded_array(n)
    if a is None:
        a = rand(n)
    else:
        a[:] = rand(n)
    out = run(func, cache_dir, a)  # a guard page fault would kill the test process
    np.testing.assert_array_equal(out, np.pad(a, 1))


def test_stride_two_loads_are_shuffled_and_stay_in_bounds(cache_dir):
    """A[2i] and A[2i + 3] (a stride-2 conv's input row) are read as two vector loads and a
    shuffle, the second load ending at the last element read: with A between guard pages,
    reading past A's first or last element would kill the test process. The extent leaves
    remainder chunks of every width."""
    n = mmap.PAGESIZE // 4
    m = (n - 3) // 2 + 1  # the last lane of A[2i + 3] reads A[n - 1]
    A, O = Buffer("A", (n,)), Buffer("O", (m,))
    i, vi = Var("i"), Var("vi")
    block = make_block("O", [IterVar(vi, m)],
                       BufferStore(O, A[vi * 2] * 0.5 + A[vi * 2 + 3], (vi,)))
    func = make_func("stride2", (A, O), For(i, m, realize(block, [i]), kind="vectorized"))
    for target in (AVX2, Target("host")):
        assert "_load_s2(&A[" in generate_c(func, target)
    a = guarded_array(n)
    if a is None:
        a = rand(n)
    else:
        a[:] = rand(n)
    j = np.arange(m)
    np.testing.assert_array_equal(run(func, cache_dir, a), a[2 * j] * 0.5 + a[2 * j + 3])


def test_sqrt_falls_back_to_omp_simd(cache_dir):
    n = 19
    func = vector_map(n, lambda A, i: ir.call("sqrt", A[i] * A[i]) + 1.0)
    a = rand(n + 8)
    np.testing.assert_allclose(run(func, cache_dir, a), np.abs(a[:n]) + 1, rtol=1e-6)
    source = generate_c(func, AVX2)
    assert "// loop i: sqrt has no vector form here; left to omp simd" in source
    assert "#pragma omp simd" in source and "tessel_f32x8" not in source


MATH = {  # intrinsic -> (tessel expression, numpy reference, input scale)
    "exp": (lambda x: ir.call("exp", x), np.exp, 10.0),
    "log": (lambda x: ir.call("log", x * x + 0.5), lambda x: np.log(x * x + 0.5), 10.0),
    "tanh": (lambda x: ir.call("tanh", x), np.tanh, 3.0),
    "erf": (lambda x: ir.call("erf", x), None, 3.0),
    "sigmoid": (lambda x: ir.call("sigmoid", x), lambda x: 1 / (1 + np.exp(-x)), 10.0),
    "pow": (lambda x: ir.call("pow", x * x + 0.5, x), lambda x: (x * x + 0.5) ** x, 3.0),
}


@pytest.mark.parametrize("name, dtype", [
    (name, dtype) for name in sorted(MATH) for dtype in ("float32", "float64")
    if dtype == "float64" or name not in ("exp", "sigmoid")])  # (float32: tessel's own)
def test_math_intrinsics_use_the_c_librarys_vector_functions(cache_dir, name, dtype):
    """Through libmvec's 8-lane (AVX2) and 4-lane variants for the full vectors and the
    4-lane remainder, scalar calls for the last lanes; a few ulp from numpy. (float32 exp and
    sigmoid are tessel's own: the next test.)"""
    from math import erf
    from tessel.codegen.passes.vectorize import mvec_symbol
    host = Target("host")
    lanes = host.vector_bits // int(dtype[-2:])
    if mvec_symbol("exp" if name == "sigmoid" else name, dtype, lanes, host) is None:
        pytest.skip("this machine's C library has no vector variant of " + name)
    expr, ref, scale = MATH[name]
    n = 2 * lanes + lanes // 2 + 3  # full vectors, a half vector, scalar lanes
    func = vector_map(n, lambda A, i: expr(A[i]), dtypes=(dtype, dtype))
    a = rand(n + 8, dtype=dtype) * scale
    want = np.vectorize(erf)(a[:n]) if ref is None else ref(a[:n].astype(np.float64))
    got = run(func, cache_dir, a)
    np.testing.assert_allclose(got, want, rtol=4e-6 if dtype == "float32" else 1e-13,
                               atol=1e-7 if dtype == "float32" else 1e-15)
    source = build(func).source
    assert "_ZGV" in source and "omp simd" not in source


EXP_INPUTS = np.concatenate([  # specials, the ends of the range, everywhere between
    np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 88.72, 88.7228, 88.75, -87.33, -87.34, -100.0,
              -103.9, -104.5, -150.0, 1e-30, -1e-30, 20.0, -20.0]),
    np.random.default_rng(0).uniform(-110, 95, 3000),
    np.random.default_rng(1).standard_normal(1000) * 3]).astype(np.float32)


@pytest.mark.parametrize("preset", ["host", "x86_64-avx2", "x86_64-sse", "x86_64-avx512"])
@pytest.mark.parametrize("name, ulps", [("exp", 1.0), ("sigmoid", 3.0)])
def test_float32_exp_and_sigmoid_are_vector_code_of_tessels_own(cache_dir, preset, name, ulps):
    """exp and sigmoid of float32 vectors inline (no library call, which clobbers every
    vector register), for 16, 8 and 4 lanes: within `ulps` of the exact value (exp from
    subnormal results to the overflow; sigmoid where it is a normal number, and 0 to the
    smallest normal below), inf, 0 and NaN where numpy has them."""
    target = Target(preset)
    if target.host_gap():
        pytest.skip(f"{preset} code does not run here")
    x = EXP_INPUTS
    func = vector_map(len(x), lambda A, i: ir.call(name, A[i]))
    mod = build(func, target, cache_dir=cache_dir)
    lanes = target.vector_bits // 32
    assert f"tessel_f32x{lanes}_{name}(" in mod.source and "_ZGV" not in mod.source
    out = np.full(len(x), -1.0, np.float32)
    mod(np.concatenate([x, np.zeros(8, np.float32)]), out)
    with np.errstate(over="ignore"):
        exact = np.exp(x.astype(np.float64)) if name == "exp" else \
            1 / (1 + np.exp(-x.astype(np.float64)))
    want = exact.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
    np.testing.assert_array_equal(out[np.isinf(want)], want[np.isinf(want)])
    finite = np.isfinite(want)
    if name == "sigmoid":
        tiny = x < -87.4  # sigmoid(-87.34) is the smallest normal number
        assert np.all((out[tiny] >= 0) & (out[tiny] < np.finfo(np.float32).tiny))
        finite &= ~tiny
    error = np.abs(out[finite] - exact[finite]) / np.spacing(np.abs(want[finite]))
    assert error.max() <= ulps, f"{error.max():.2f} ulp at x = {x[finite][error.argmax()]}"


def test_vector_math_is_asked_of_the_target():
    """Target.has_vector_function asks this machine's C library only for a target of its
    architecture; another's cannot be asked here, so it has none (no _ZGV call in its code)."""
    other = Target("aarch64-neon" if host_arch() == "x86_64" else "x86_64-avx2")
    assert not other.has_vector_function("_ZGVdN8v_expf")
    func = vector_map(19, lambda A, i: ir.call("tanh", A[i]))
    assert "_ZGV" not in generate_c(func, other)


def test_lane_independent_store_falls_back(cache_dir):
    A, O = Buffer("A", (16,)), Buffer("O", (1,))
    i = Var("i")
    func = make_func("uniform", (A, O), For(i, 16, BufferStore(O, A[3] * 2.0, (const(0),)),
                                            kind="vectorized"))
    a = rand(16)
    np.testing.assert_array_equal(run(func, cache_dir, a), [a[3] * 2])
    assert "every lane stores to the same element of O" in generate_c(func, AVX2)


def _kernel(source: str, name: str) -> str:
    """The C of kernel `name` alone (the entry points after it check allocations with ifs)."""
    return source.split(f"static int32_t {name}(")[1].split("\n}\n")[0]


def _tripled(name, n, tiles, k=None):
    """O = 3 A over n elements, the loop split into `tiles` tiles of 8 under the guard
    j_0 * 8 + j_1 (+ k, a loop of 2 outside the split, when given) < n."""
    A, O = Buffer("A", (n,)), Buffer("O", (n,))
    j0, j1, vj = Var("j_0"), Var("j_1"), Var("vj")
    block = make_block("O", [IterVar(vj, n)], BufferStore(O, A[vj] * 3.0, (vj,)))
    index = j0 * 8 + j1
    guard = (index if k is None else index + k) < n
    loops = ([] if k is None else [(k, 2, "serial")]) + [(j0, tiles, "serial"),
                                                         (j1, 8, "vectorized")]
    return make_func(name, (A, O), nest(loops, realize(block, [index], predicate=guard)))


def test_split_tail_is_peeled_into_narrower_vectors(cache_dir):
    """j split by 8 over N = 13: the first tile runs whole, the guarded last one is peeled
    (tessel.codegen.passes.peel) into the 5 lanes its guard admits: a 4-lane vector and
    one scalar, no guard left."""
    func = _tripled("edge", 13, 2)
    a = rand(13)
    np.testing.assert_array_equal(run(func, cache_dir, a), a * 3)
    source = generate_c(func, AVX2)
    assert "tessel_f32x8_store(&O[0]" in source and "tessel_f32x4_store(&O[8]" in source
    assert "O[12] = A[12] * 3.0f;" in source and "if (" not in _kernel(source, "edge")


def test_peeled_loop_runs_its_full_vectors_unguarded(cache_dir):
    """A split that leaves 188 tiles of 8 over 1500 (a softmax row): 187 unguarded vector
    iterations in a loop, then 4 lanes, where the guard was checked in every tile."""
    func = _tripled("rows", 1500, 188)
    a = rand(1500)
    np.testing.assert_array_equal(run(func, cache_dir, a), a * 3)
    source = generate_c(func, AVX2)
    assert "for (int32_t j_0 = 0; j_0 < 187; ++j_0)" in source
    assert "tessel_f32x4_store(&O[1496]" in source
    assert "if (" not in _kernel(source, "rows")


def test_varying_predicate_runs_full_vectors_and_guards_the_edge(cache_dir):
    """A guard that depends on a loop outside the split (k): not peeled; checked at run
    time in the first and the last lane, the vector code where both hold."""
    func = _tripled("edge", 13, 2, k=Var("k"))
    a = rand(13)
    np.testing.assert_array_equal(run(func, cache_dir, a), a * 3)
    source = generate_c(func, AVX2)
    assert "if (j_0 * 8 + k < 13 && j_0 * 8 + 7 + k < 13) {" in source
    assert "} else {" in source and "tessel_f32x8_store(&O[j_0 * 8]" in source


def _row_tiled_matmul(m, n, k, rows):
    """C = A B with the rows split by `rows` (a partial last tile when they do not divide m),
    the tile's rows unrolled inside the loop over k, the columns in vectors."""
    sch = tessel.Schedule(ops.matmul(m, n, k))
    c = sch.get_block("C")
    i, j, r = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, rows])
    sch.reorder(i0, r, i1, j)
    sch.decompose_reduction(c, r)
    sch.unroll(i1)
    sch.vectorize(j)
    return sch.func


@pytest.mark.parametrize("m, rows", [(10, 4), (13, 6), (1, 4), (24, 6), (5, 6)])
def test_partial_row_tiles_match_numpy(cache_dir, m, rows):
    """Guards of a partial tile hoisted (tessel.codegen.passes.unswitch) or not, at shapes
    where the split divides, leaves one row, or exceeds the extent: the result is numpy's."""
    func = _row_tiled_matmul(m, 16, 7, rows)
    a, b = rand(m, 7), rand(7, 16, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_guards_of_a_partial_tile_leave_the_loop_over_k():
    """10 rows in tiles of 4: the guard `i_0 * 4 + r < 10` of each unrolled row was tested
    at every step of k; it is now tested once per tile at its hardest row, and the tiles
    that pass it run k with no guard; the last tile keeps them."""
    source = _kernel(generate_c(_row_tiled_matmul(10, 16, 7, 4), AVX2), "matmul")
    whole, partial = source.split("if (i_0 * 4 + 3 < 10) {", 1)[1].split("} else {", 1)
    assert "for (int32_t k = 0; k < 7; ++k)" in whole and "if (" not in whole
    assert "if (i_0 * 4 + 2 < 10)" in partial


def test_varying_if_then_else_goes_lane_by_lane(cache_dir):
    n = 16
    A, O = Buffer("A", (n,)), Buffer("O", (n,))
    i = Var("i")
    stmt = ir.IfThenElse(A[i] > 0.0, BufferStore(O, A[i] * 2.0, (i,)),
                         BufferStore(O, -A[i], (i,)))
    func = make_func("branches", (A, O), For(i, n, stmt, kind="vectorized"))
    a = rand(n)
    np.testing.assert_array_equal(run(func, cache_dir, a), np.where(a > 0, a * 2, -a))
    source = generate_c(func, AVX2)
    assert "A[0] > 0.0f && A[1] > 0.0f" in source  # data-dependent: every lane checked


def test_nested_vectorized_loops_fall_back(cache_dir):
    A, O = Buffer("A", (4, 8)), Buffer("O", (4, 8))
    i, j = Var("i"), Var("j")
    func = make_func("nested", (A, O), nest([(i, 4, "vectorized"), (j, 8, "vectorized")],
                                            BufferStore(O, A[i, j] + 1.0, (i, j))))
    a = rand(4, 8)
    np.testing.assert_array_equal(run(func, cache_dir, a), a + 1)
    source = generate_c(func, AVX2)
    assert "#pragma omp simd" in source and "#pragma GCC ivdep" in source


# ---- unrolling ----

def test_unrolled_loop_gets_constant_copies(cache_dir):
    A, O = Buffer("A", (4, 5)), Buffer("O", (4, 5))
    i, j = Var("i"), Var("j")
    func = make_func("unrolled", (A, O), nest([(i, 4, "serial"), (j, 5, "unrolled")],
                                              BufferStore(O, A[i, j] * 2.0, (i, j))))
    a = rand(4, 5)
    np.testing.assert_array_equal(run(func, cache_dir, a), a * 2)
    source = generate_c(func, AVX2)
    assert all(f"O[i * 5 + {v}] = A[i * 5 + {v}] * 2.0f;" in source for v in range(1, 5))
    assert "#pragma GCC unroll" not in source
    big = make_func("big", (A, O), nest([(i, 4, "serial"), (j, 5, "serial")],
                                        BufferStore(O, A[i, j], (i, j))))
    big = big.with_body(realize(ir.Block("root", (), (), (), For(
        Var("u"), 64, big.root.body, kind="unrolled"))))
    assert "#pragma GCC unroll 64" in generate_c(big, AVX2)  # too long to unroll here


# ---- register-tiled matmul ----

def register_tiled_matmul(M, N, K, mr=4, nr=16, init_in_k=False, k_kind="serial"):
    """C = A @ B in mr x nr tiles accumulated in a "local" buffer: loops i0 (parallel), j0,
    then k, i3 (unrolled), j3 (vectorized). Edge tiles are cut by block predicates."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    ni, nj = -(-M // mr), -(-N // nr)
    acc = Buffer("C_local", (mr, nr), scope="local")
    i0, j0, k = Var("i_0"), Var("j_0"), Var("k")
    vi0, vj0 = Var("vi0"), Var("vj0")
    i3, j3 = [Var("i_3") for _ in range(3)], [Var("j_3") for _ in range(3)]

    def inside(n):
        return ir.logical_and(*([vi0 * mr + i3[n] < M] if M % mr else []),
                              *([vj0 * nr + j3[n] < N] if N % nr else []))
    a, b, vk = Var("vi3"), Var("vj3"), Var("vk")
    update = BufferStore(acc, acc[a, b] + A[vi0 * mr + a, vk] * B[vk, vj0 * nr + b], (a, b))
    zero = BufferStore(acc, const(0.0), (a, b))
    update = make_block("C_update", [IterVar(a, mr), IterVar(b, nr), IterVar(vk, K, REDUCE)],
                        update, init=zero if init_in_k else None)
    a2, b2 = Var("vi3"), Var("vj3")
    init = make_block("C_init", [IterVar(a2, mr), IterVar(b2, nr)],
                      BufferStore(acc, const(0.0), (a2, b2)))
    a3, b3 = Var("vi3"), Var("vj3")
    write = make_block("C_write", [IterVar(a3, mr), IterVar(b3, nr)],
                       BufferStore(C, acc[a3, b3], (vi0 * mr + a3, vj0 * nr + b3)))
    stages = [nest([(k, K, k_kind), (i3[1], mr, "unrolled"), (j3[1], nr, "vectorized")],
                   realize(update, [i3[1], j3[1], k], predicate=inside(1))),
              nest([(i3[2], mr, "unrolled"), (j3[2], nr, "vectorized")],
                   realize(write, [i3[2], j3[2]], predicate=inside(2)))]
    if not init_in_k:
        stages.insert(0, nest([(i3[0], mr, "unrolled"), (j3[0], nr, "vectorized")],
                              realize(init, [i3[0], j3[0]])))
    tile = make_block("C_tile", [IterVar(vi0, ni), IterVar(vj0, nj)], ir.seq(*stages),
                      alloc=[acc])
    body = nest([(i0, ni, "parallel"), (j0, nj, "serial")], realize(tile, [i0, j0]))
    return make_func("matmul_register_tile", (A, B, C), body)


@pytest.mark.parametrize("M, N, K, mr, nr", [(13, 20, 9, 4, 16), (6, 16, 5, 6, 16),
                                             (1, 3, 1, 2, 8), (7, 37, 17, 3, 24),
                                             (24, 32, 64, 6, 16)])
@pytest.mark.parametrize("init_in_k", [False, True])
def test_register_tiled_matmul(cache_dir, M, N, K, mr, nr, init_in_k):
    func = register_tiled_matmul(M, N, K, mr, nr, init_in_k)
    a, b = rand(M, K), rand(K, N, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)
    source = generate_c(func, AVX2)
    assert "C_local[" not in source  # promoted: variables, no array
    if M >= mr and N >= 8:
        assert f"tessel_f32x8 C_local_{nr * (mr - 1)} = {{0}};" in source
    else:  # updates of rows past M and lanes past N are known empty here and left out
        assert "C_local_0 = " in source and "C_local_8 = (" not in source


def test_accumulator_indexed_by_a_serial_loop_stays_an_array(cache_dir):
    """With the i3 loops serial, C_local's row is a loop variable: no promotion."""
    def serial_i3(node):
        if isinstance(node, For) and node.kind == "unrolled":
            return For(node.loop_var, node.extent, node.body, kind="serial")
        return None
    func = register_tiled_matmul(8, 16, 4, mr=4, nr=16)
    assert "tessel_f32x8 C_local_0 = {0};" in generate_c(func, AVX2)
    func = func.with_body(ir.transform(func.body, serial_i3))
    source = generate_c(func, AVX2)
    assert "float C_local[64] __attribute__((aligned(64)));" in source
    assert "tessel_f32x8_load(&C_local[" in source  # still vector accesses, in memory
    a, b = rand(8, 4), rand(4, 16, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)


def ssrsrs_matmul(M, N, K, mr=4, nr=8, i2=2, j2=2, k0=2):
    """MetaSchedule's SSRSRS shape with the write cache above the inner tiles:
    i0 (parallel) j0 | k0 i2 j2 | k1 i3 (unrolled) j3 (vectorized). C_local holds the whole
    (i2*mr) x (j2*nr) tile, so in the k1 loop its index is `loop-invariant base + constant`."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    ti, tj, k1 = i2 * mr, j2 * nr, K // k0
    acc = Buffer("C_local", (ti, tj), scope="local")
    i0, j0, vi0, vj0 = Var("i_0"), Var("j_0"), Var("vi0"), Var("vj0")

    def tile_loops(*outer):
        v = [Var(n) for n in ("i_2", "j_2", "i_3", "j_3")]
        kinds = [(v[0], i2, "serial"), (v[1], j2, "serial"), (v[2], mr, "unrolled"),
                 (v[3], nr, "vectorized")]
        return v, list(outer[:1]) + kinds[:2] + list(outer[1:]) + kinds[2:]

    def inside(a, b):
        return ir.logical_and(*([vi0 * ti + a < M] if M % ti else []),
                              *([vj0 * tj + b < N] if N % tj else []))
    a, b = Var("vi"), Var("vj")
    init = make_block("C_init", [IterVar(a, ti), IterVar(b, tj)],
                      BufferStore(acc, const(0.0), (a, b)))
    v, loops = tile_loops()
    s_init = nest(loops, realize(init, [v[0] * mr + v[2], v[1] * nr + v[3]]))
    a, b, vk = Var("vi"), Var("vj"), Var("vk")
    body = BufferStore(acc, acc[a, b] + A[vi0 * ti + a, vk] * B[vk, vj0 * tj + b], (a, b))
    update = make_block("C_update", [IterVar(a, ti), IterVar(b, tj), IterVar(vk, K, REDUCE)],
                        body)
    kk0, kk1 = Var("k_0"), Var("k_1")
    v, loops = tile_loops((kk0, k0, "serial"), (kk1, k1, "serial"))
    rows, cols = v[0] * mr + v[2], v[1] * nr + v[3]
    s_update = nest(loops, realize(update, [rows, cols, kk0 * k1 + kk1],
                                   predicate=inside(rows, cols)))
    a, b = Var("vi"), Var("vj")
    write = make_block("C_write", [IterVar(a, ti), IterVar(b, tj)],
                       BufferStore(C, acc[a, b], (vi0 * ti + a, vj0 * tj + b)))
    v, loops = tile_loops()
    rows, cols = v[0] * mr + v[2], v[1] * nr + v[3]
    s_write = nest(loops, realize(write, [rows, cols], predicate=inside(rows, cols)))
    tile = make_block("C_tile", [IterVar(vi0, -(-M // ti)), IterVar(vj0, -(-N // tj))],
                      ir.seq(s_init, s_update, s_write), alloc=[acc])
    outer = nest([(i0, -(-M // ti), "parallel"), (j0, -(-N // tj), "serial")],
                 realize(tile, [i0, j0]))
    return make_func("matmul_ssrsrs", (A, B, C), outer)


@pytest.mark.parametrize("M, N, K", [(16, 32, 8), (13, 21, 6)])
def test_accumulator_promoted_around_the_inner_reduction_loop(cache_dir, M, N, K):
    func = ssrsrs_matmul(M, N, K)
    a, b = rand(M, K), rand(K, N, seed=1)
    np.testing.assert_allclose(run(func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)
    source = generate_c(func, AVX2)
    # loaded before the k_1 loop, stored back after it; the array stays for the other stages
    assert "tessel_f32x8 C_local_0 = tessel_f32x8_load(&C_local[i_2_1 * 64 + j_2_1 * 8]);" \
        in source
    assert "tessel_f32x8_store(&C_local[i_2_1 * 64 + j_2_1 * 8 + 48], C_local_48);" in source
    assert "float C_local[128]" in source


def test_no_promotion_around_a_loop_that_moves_the_access(cache_dir):
    """Promotion is tried at k_0, i_2, j_2 and k_1; only k_1 keeps the accesses in place."""
    source = generate_c(ssrsrs_matmul(16, 32, 8), AVX2)
    loads = re.findall(r"C_local_\w+ = tessel_f32x8_load\(&C_local\[(.*?)\]\)", source)
    assert loads and all("i_2_1" in x and "k_" not in x for x in loads)
    assert source.count("= tessel_f32x8_load(&C_local[") == 4  # 4 rows of one vector, once


@ISA_PRESETS
@pytest.mark.parametrize("i2, j2", [(2, 1), (2, 2)])
def test_ssrsrs_inner_loop_is_fma_on_registers(target, i2, j2):
    """6 rows x 2 vectors of accumulators (ymm with AVX2, zmm with AVX-512) stay in registers
    through the k loop: 12 FMAs on full vectors, nothing spilled."""
    nr = 2 * target.vector_lanes("float32")
    func = ssrsrs_matmul(48, 4 * nr, 64, mr=6, nr=nr, i2=i2, j2=j2, k0=2)
    loop = hot_loop(asm_for(generate_c(func, target), target))
    assert len(fmas(loop, target)) >= 12, loop
    assert not spills(loop), loop


@ISA_PRESETS
@pytest.mark.parametrize("init_in_k", [False, True])
def test_register_tiled_inner_loop_is_fma_on_registers(target, init_in_k):
    nr = 2 * target.vector_lanes("float32")
    func = register_tiled_matmul(24, 2 * nr, 64, mr=6, nr=nr, init_in_k=init_in_k)
    loop = hot_loop(asm_for(generate_c(func, target), target))
    assert len(fmas(loop, target)) >= 12, loop  # 6 rows x 2 vectors per k
    # the accumulators never touch memory inside the k loop: no vector stores at all there,
    # and no loads or FMAs with a stack operand
    assert not spills(loop), loop


def test_masks_of_other_widths_and_casts_to_bool(cache_dir):
    """An int32 condition selecting float64 values (mask widened), and a float compared
    through a cast to bool."""
    n = 10

    def fn(A, i):
        nonzero = ir.cast("bool", A[i])
        return ir.select(ir.logical_and(i < 6, nonzero), A[i] * 2.0, A[i + 1])
    func = vector_map(n, fn, ("float64", "float64"))
    a = rand(n + 8, dtype="float64")
    a[2] = 0.0
    i = np.arange(n)
    ref = np.where((i < 6) & (a[:n] != 0), a[:n] * 2, a[1:n + 1])
    np.testing.assert_array_equal(run(func, cache_dir, a), ref)
    source = generate_c(func, AVX2)
    assert "__builtin_convertvector(" in source and "tessel_f64x4_select(" in source


@pytest.mark.parametrize("preset", ["x86_64-sse", "x86_64-avx512"])
def test_other_vector_widths(cache_dir, preset):
    """SSE (4 floats) runs on any x86-64 host; AVX-512 (16 floats) is compiled, and run only
    where the host has it."""
    target = Target(preset)
    host = Target("host")
    if host.arch != "x86_64":
        pytest.skip("x86-64 presets")
    func = register_tiled_matmul(13, 20, 9, mr=4, nr=16)
    lanes = target.vector_bits // 32
    source = generate_c(func, target)
    assert f"tessel_f32x{lanes} C_local_0 = {{0}};" in source
    assert "vfmadd" in asm_for(source, target) or preset == "x86_64-sse"
    if preset == "x86_64-avx512" and not host.has("avx512f"):
        return
    a, b = rand(13, 9), rand(9, 20, seed=1)
    out = np.zeros((13, 20), np.float32)
    build(func, target, cache_dir=cache_dir)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


# ---- golden C ----

GOLDEN = Path(__file__).parent / "golden"


def golden_kernels():
    return {"matmul_register_tile": register_tiled_matmul(5, 12, 3, mr=2, nr=8),
            "pad_fallback": padding(6)}


@pytest.mark.parametrize("name", sorted(golden_kernels()))
def test_golden_c(name, cache_dir):
    func = golden_kernels()[name]
    source = generate_c(func, AVX2)
    path = GOLDEN / f"{name}.c"
    if os.environ.get("TESSEL_UPDATE_GOLDEN") == "1":
        path.write_text(source)
    assert path.exists(), f"missing {path}; run with TESSEL_UPDATE_GOLDEN=1 to create it"
    assert source == path.read_text(), f"generated C for {name} changed; review the diff and " \
                                       "rerun with TESSEL_UPDATE_GOLDEN=1 if it is intended"
    assert build(func, cache_dir=cache_dir).lib_path.exists()  # and it compiles here


def test_explicit_auto_unroll_promotes_the_accumulator(cache_dir):
    """MetaSchedule's auto-unroll annotations (pragma_auto_unroll_max_step with
    pragma_unroll_explicit) on the outer loop unroll the serial i3 loops here (4 rows x one
    16-lane vector loop: 4 instances <= 64); without pragma_unroll_explicit they get
    `GCC unroll`, and C_local stays an array."""
    def serial_i3(node):
        if isinstance(node, For) and node.kind == "unrolled":
            return For(node.loop_var, node.extent, node.body, kind="serial")
        return None
    func = register_tiled_matmul(9, 16, 5, mr=4, nr=16)
    func = func.with_body(ir.transform(func.body, serial_i3))
    outer = func.root.body
    for explicit, promoted in ((1, True), (0, False)):
        notes = {"pragma_auto_unroll_max_step": 64, "pragma_unroll_explicit": explicit}
        annotated = For(outer.loop_var, outer.extent, outer.body, outer.kind, annotations=notes)
        annotated = func.with_body(realize(ir.Block("root", (), (), (), annotated)))
        source = generate_c(annotated, AVX2)
        assert ("C_local[" not in source) == promoted
        assert ("#pragma GCC unroll 4" in source) != promoted
        a, b = rand(9, 5), rand(5, 16, seed=1)
        np.testing.assert_allclose(run(annotated, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)


def test_auto_unrolling_past_the_budget_is_cut_until_the_kernel_fits(cache_dir):
    """A kernel whose auto-unroll (max step 512) makes its C longer than `unroll_chars` is
    lowered again under smaller steps: shorter C, loops where copies were, same results."""
    from tessel.codegen.c import UNROLL_CAPS
    host = Target("host")
    func = register_tiled_matmul(48, 32, 12, mr=4, nr=16)
    outer = func.root.body
    notes = {"pragma_auto_unroll_max_step": 512, "pragma_unroll_explicit": 1}
    annotated = For(outer.loop_var, outer.extent, outer.body, outer.kind, annotations=notes)
    annotated = func.with_body(realize(ir.Block("root", (), (), (), annotated)))
    full = generate_c(annotated, host, unroll_chars=None)
    cut = generate_c(annotated, host, unroll_chars=len(full) // 3)
    assert len(cut) < len(full) // 3 < len(full)
    assert cut.count("for (") > full.count("for (")
    assert generate_c(annotated, host) == full  # under the default budget: unchanged
    assert UNROLL_CAPS[-1] == 0  # the last resort unrolls nothing automatically
    from tessel.codegen.compiler import compile_shared
    from tessel.codegen.module import Module
    a, b = rand(48, 12), rand(12, 32, seed=1)
    for source in (full, cut):
        mod = Module(annotated, host, source, compile_shared(source, host, cache_dir=cache_dir))
        out = np.zeros((48, 32), np.float32)
        mod(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_schedule_primitives_reach_registers(cache_dir):
    """The same shape made with the schedule primitives (cache_write "local",
    reverse_compute_at, decompose_reduction, unroll, vectorize) and compact_buffers: the
    accumulator lives in vector variables during the inner reduction loop."""
    import tessel
    from tessel import ops
    M, N, K = 24, 40, 16
    sch = tessel.Schedule(ops.matmul(M, N, K))
    c = sch.get_block("C")
    write = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1, i2 = sch.split(i, [None, 2, 6])
    j0, j1, j2 = sch.split(j, [None, 1, 16])  # 40 = 3 x 16 - 8: predicates
    k0, k1 = sch.split(k, [None, 8])
    sch.reorder(i0, j0, k0, i1, j1, k1, i2, j2)
    sch.reverse_compute_at(write, j0)
    init = sch.decompose_reduction(c, k0)
    sch.unroll(i2)
    sch.vectorize(j2)
    for blk in (init, write):
        sch.vectorize(sch.get_loops(blk)[-1])
    sch.parallel(sch.fuse(i0, j0))
    a, b = rand(M, K), rand(K, N, seed=1)
    np.testing.assert_allclose(run(sch.func, cache_dir, a, b), a @ b, rtol=1e-5, atol=1e-5)
    source = build(sch.func, AVX2, cache_dir=cache_dir).source
    assert re.search(r"tessel_f32x8 C_local_0 = tessel_f32x8_load\(&C_local\[", source)


EDGES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, np.inf, -np.inf,
                  np.nan, 1e30, -1e30, 8388607.5, -8388607.5, 16777217.0, -0.0, 0.0, 3.0],
                 np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["floor", "ceil", "round"])
def test_floor_and_ceil_are_vectors_exact_at_the_edges(cache_dir, fn, dtype):
    """floor, ceil and round (ties to even) through tessel's helpers (the ISA's rounding
    instruction: roundps, vrndscaleps; lanes one by one elsewhere): equal to numpy's at
    halves, beyond 2**23, at infinities, NaN and signed zeros."""
    n = len(EDGES)
    func = vector_map(n, lambda A, i: ir.call(fn, A[i]), (dtype, dtype))
    a = np.concatenate([EDGES, np.zeros(8, np.float32)]).astype(dtype)
    got = run(func, cache_dir, a)
    want = getattr(np, fn)(a[:n])
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    source = generate_c(func, AVX2)
    lanes = 8 if dtype == "float32" else 4
    assert f"tessel_{'f32' if dtype == 'float32' else 'f64'}x{lanes}_{fn}(" in source
    assert "#pragma omp simd" not in source


@pytest.mark.parametrize("narrow", ["uint8", "int8", "int16"])
def test_a_converted_narrow_integer_is_loaded_and_stored_as_whole_vectors(cache_dir, narrow):
    """QuantizeLinear's round-and-saturate into uint8, DequantizeLinear's conversion back:
    the narrow ints are converted at the load and at the store, not a scalar loop."""
    lo, hi = (0, 255) if narrow == "uint8" else (-128, 127) if narrow == "int8" else (-999, 999)
    n = 37
    quant = vector_map(n, lambda A, i: ir.cast(narrow, ir.max_(ir.min_(
        ir.call("floor", A[i] * 40.0 + 0.5), float(hi)), float(lo))), ("float32", narrow))
    a = rand(n + 8)
    want = np.clip(np.floor(a[:n] * 40 + 0.5), lo, hi).astype(narrow)
    np.testing.assert_array_equal(run(quant, cache_dir, a), want)
    dequant = vector_map(n, lambda A, i: ir.cast("float32", A[i]) * 0.25, (narrow, "float32"))
    q = np.random.default_rng(2).integers(lo, hi + 1, n + 8).astype(narrow)
    np.testing.assert_array_equal(run(dequant, cache_dir, q), q[:n].astype(np.float32) * 0.25)
    short = {"uint8": "u8", "int8": "i8", "int16": "i16"}[narrow]
    for func, fn in ((quant, "store(&O["), (dequant, "load(&A[")):
        source = generate_c(func, AVX2)
        assert f"tessel_{short}x8_{fn}" in source and "#pragma omp simd" not in source
    # float -> narrow through int32 (GCC converts a float vector to 8 bits lane by lane)
    assert f", tessel_i32x8), tessel_{short}x8)" in generate_c(quant, AVX2)


@pytest.mark.parametrize("narrow", ["uint8", "int8"])
def test_a_narrow_copy_through_a_select_is_whole_vectors(cache_dir, narrow):
    """A pad stage of uint8 data (a quantized conv's input, padded with its zero point): a
    select of a narrow load and a constant, stored narrow, goes through int32 vectors."""
    n = 37
    pad = vector_map(n, lambda A, i: ir.select(i >= 5, A[i + 2], ir.const(7, narrow)),
                     (narrow, narrow))
    q = np.random.default_rng(3).integers(-100 if narrow == "int8" else 0, 100, n + 8)
    q = q.astype(narrow)
    want = np.where(np.arange(n) >= 5, q[2:n + 2], 7).astype(narrow)
    np.testing.assert_array_equal(run(pad, cache_dir, q), want)
    source = generate_c(pad, AVX2)
    short = {"uint8": "u8", "int8": "i8"}[narrow]
    assert f"tessel_{short}x8_store(&O[" in source and "#pragma omp simd" not in source


def test_a_rounded_value_rounds_from_the_unfused_float(cache_dir):
    """round(a * b + c), vectorized: the sum rounds as numpy's separate multiply and add
    (a fused multiply-add would move ties at 0.5 by an ulp, and the rounding by a whole
    step: a quantized epilogue's one-step differences); kernels without rounding still
    contract into FMA."""
    from tessel import te
    from tessel.schedule import Schedule
    n = 64
    rng = np.random.default_rng(0)
    a = rng.uniform(1, 100, n).astype(np.float32)
    b = rng.uniform(0, 1, n).astype(np.float32)
    c = np.float32(0.5) - a * b  # a * b + c: 0.5 exactly unfused, 0.5 +- an ulp fused
    A, B, C = (te.placeholder((n,), name=x) for x in "ABC")
    funcs = []
    for fn in (te.round, lambda v: v):
        out = te.compute((n,), lambda i, fn=fn: fn(A[i] * B[i] + C[i]), name="O")
        sch = Schedule(te.create_func([A, B, C, out], name="fma"))
        sch.vectorize(sch.get_loops(sch.get_block("O"))[0])
        funcs.append(sch.func)
    rounded = np.zeros(n, np.float32)
    build(funcs[0], cache_dir=cache_dir)(a, b, c, rounded)
    np.testing.assert_array_equal(rounded, np.round(a * b + c))
    assert "fp-contract=off" in generate_c(funcs[0], AVX2)
    assert "fp-contract" not in generate_c(funcs[1], AVX2)

