"""Interval and region analysis, and statement simplification (tessel.arith)."""
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessel import ir, te
from tessel.arith import (Analyzer, ArithError, clamp_region, evaluate, int_set, relax_region,
                          simplify_stmt, touched_region, union_regions)
from tessel.ir import Buffer, BufferRegion, Range, Var


def text(e) -> str:
    return ir.expr_str(e)


def ranges_text(region) -> list[tuple[str, str]]:
    region = region.region if isinstance(region, BufferRegion) else region
    return [(text(r.min), text(r.extent)) for r in region]


# 1. int_set ------------------------------------------------------------------------------
@pytest.mark.parametrize("expr, dom, expected", [
    (lambda v: v["i"] * 4 + v["ii"], {"ii": 4}, ("i * 4", "i * 4 + 3")),
    (lambda v: v["h"] * 2 + v["kh"] - 3, {"kh": 7}, ("h * 2 - 3", "h * 2 + 3")),
    (lambda v: v["h"] * 2 + v["kh"] - 3, {"kh": 7, "h": 112}, ("-3", "225")),
    (lambda v: (v["io"] * 32 + v["ii"]) // 8, {"ii": 32}, ("io * 4", "io * 4 + 3")),
    (lambda v: (v["io"] * 8 + v["ii"]) % 16, {"ii": 8}, ("io % 2 * 8", "io % 2 * 8 + 7")),
    (lambda v: (v["io"] * 8 + v["ii"]) % 16, {"ii": 16}, ("0", "15")),
    (lambda v: v["i"] - v["ii"], {"ii": 4}, ("i - 3", "i")),
    (lambda v: ir.min_(v["i"] * 4 + v["ii"], 9), {"ii": 4}, ("T.min(i * 4, 9)",
                                                            "T.min(i * 4 + 3, 9)")),
    (lambda v: v["i"] * v["ii"], {"ii": 4}, (None, None)),  # sign of i unknown
    (lambda v: v["h"] // v["ii"], {"h": 4}, ("0", "3")),  # symbolic divisor: constants
])
def test_int_set(expr, dom, expected):
    v = {name: Var(name) for name in ("i", "ii", "h", "kh", "io")}
    ana = Analyzer({v["ii"]: Range.of(1, 8)})  # the domain overrides this where it has ii
    lo, hi = ana.int_set(expr(v), {v[k]: n for k, n in dom.items()})
    assert (None if lo is None else text(lo), None if hi is None else text(hi)) == expected


def test_int_set_symbolic_domain_and_module_function():
    f, i = Var("f"), Var("i")
    lo, hi = int_set(f // 4, {f: Range.of(i * 8, 8)})
    assert (text(lo), text(hi)) == ("i * 2", "i * 2 + 1")


I_, II_, KK_ = Var("i"), Var("ii"), Var("kk")
DOM = {II_: Range.of(0, 4), KK_: Range.of(-1, 3)}


def _relaxed_exprs():
    leaves = st.one_of(st.sampled_from([I_, II_, KK_]), st.integers(-5, 5).map(ir.const))

    def grow(sub):
        return st.one_of(
            st.tuples(sub, sub).map(lambda t: t[0] + t[1]),
            st.tuples(sub, sub).map(lambda t: t[0] - t[1]),
            st.tuples(sub, st.integers(-3, 4)).map(lambda t: t[0] * t[1]),
            st.tuples(sub, st.integers(1, 8)).map(lambda t: t[0] // t[1]),
            st.tuples(sub, st.integers(1, 8)).map(lambda t: t[0] % t[1]),
            st.tuples(sub, sub).map(lambda t: ir.min_(*t)),
            st.tuples(sub, sub).map(lambda t: ir.max_(*t)),
        )
    return st.recursive(leaves, grow, max_leaves=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_relaxed_exprs())
def test_int_set_contains_every_value(e):
    """Brute force: for each value of the symbolic var, every value over the domain lies in
    [lo, hi]; for affine expressions the ends are attained."""
    lo, hi = Analyzer({I_: Range.of(-2, 6)}).int_set(e, DOM)
    affine = all(isinstance(n, (Var, ir.IntImm)) or n.op in "+-*"
                 for n in ir.collect(e, (Var, ir.IntImm, ir.BinOp)))
    for vi in range(-2, 4):
        values = [evaluate(e, {I_: vi, II_: a, KK_: b})
                  for a, b in itertools.product(range(0, 4), range(-1, 2))]
        low = -float("inf") if lo is None else evaluate(lo, {I_: vi})
        high = float("inf") if hi is None else evaluate(hi, {I_: vi})
        assert low <= min(values) and max(values) <= high, (e, lo, hi, vi)
        if affine and lo is not None and hi is not None:
            assert (low, high) == (min(values), max(values)), (e, lo, hi, vi)


# 2. regions ------------------------------------------------------------------------------
def test_relax_union_clamp():
    i, ii, h, kh = Var("i"), Var("ii"), Var("h"), Var("kh")
    region = relax_region([i * 4 + ii, h * 2 + kh - 3], {ii: 4, kh: 7})
    assert ranges_text(region) == [("i * 4", "4"), ("h * 2 - 3", "7")]
    shifted = relax_region([i * 4 + ii + 1, h * 2 + kh - 3], {ii: 4, kh: 7})
    assert ranges_text(union_regions([region, shifted])) == [("i * 4", "5"), ("h * 2 - 3", "7")]
    clamped = clamp_region(region, (16, 224))
    assert ranges_text(clamped)[1] == ("T.max(h * 2 - 3, 0)",
                                       "T.min(h * 2 + 3, 223) - T.max(h * 2 - 3, 0) + 1")
    ana = Analyzer({i: 4, h: Range.of(2, 100)})
    assert ranges_text(clamp_region(region, (16, 224), ana)) == [("i * 4", "4"),
                                                                  ("h * 2 - 3", "7")]
    A = Buffer("A", (16, 224))
    assert isinstance(clamp_region(BufferRegion(A, region)), BufferRegion)


def test_union_of_unordered_ranges():
    i, j = Var("i"), Var("j")
    regions = [(Range.of(i, 1),), (Range.of(j, 1),)]
    assert ranges_text(union_regions(regions)) == [("T.min(i, j)",
                                                    "T.max(i, j) - T.min(i, j) + 1")]
    assert ranges_text(union_regions(regions, shape=(10,))) == [("0", "10")]


def test_unbounded_dimension_needs_a_shape():
    i, x = Var("i"), Var("x")
    with pytest.raises(ArithError, match="shape"):
        relax_region([i * x], {i: 4})
    assert ranges_text(relax_region([i * x], {i: 4}, shape=(8,))) == [("0", "8")]
    with pytest.raises(ArithError, match="at least one"):
        union_regions([])


# 3. touched regions, checked by running the loop nest --------------------------------------
def _run_accesses(stmt, buffer, env, reads=True, writes=False, out=None):
    """Every index tuple of `buffer` that executing `stmt` under `env` touches."""
    out = set() if out is None else out

    def exprs(e, env):
        if reads:
            for load in ir.collect(e, ir.BufferLoad):
                if load.buffer is buffer:
                    out.add(tuple(evaluate(i, env) for i in load.indices))

    def run(s, env):
        if isinstance(s, ir.For):
            for v in range(s.extent):
                run(s.body, {**env, s.loop_var: v})
        elif isinstance(s, ir.SeqStmt):
            for x in s.seq:
                run(x, env)
        elif isinstance(s, ir.BlockRealize):
            if evaluate(s.predicate, env):
                inner = {**env, **{iv.var: evaluate(v, env)
                                   for iv, v in zip(s.block.iter_vars, s.iter_values)}}
                for part in (s.block.init, s.block.body):
                    if part is not None:
                        run(part, inner)
        elif isinstance(s, ir.BufferStore):
            if writes and s.buffer is buffer:
                out.add(tuple(evaluate(i, env) for i in s.indices))
            exprs(s.value, env)
    run(stmt, env)
    return out


def _check_region(region, touched, env, tight=True):
    assert touched, "nothing touched"
    for d, rng in enumerate(region.region):
        lo, ext = evaluate(rng.min, env), evaluate(rng.extent, env)
        got = [t[d] for t in touched]
        assert lo <= min(got) and max(got) <= lo + ext - 1, (d, lo, ext, min(got), max(got))
        if tight:
            assert (lo, lo + ext - 1) == (min(got), max(got)), (d, lo, ext)


def _loops(stmt):
    return ir.collect(stmt, ir.For)


def _conv(stride=2, pad=3, k=7, size=15, ci=2, co=2):
    A = te.placeholder((1, ci, size, size), name="A")
    P = te.compute((1, ci, size + 2 * pad, size + 2 * pad), lambda n, c, h, w: te.if_then_else(
        (h >= pad) & (h < size + pad) & (w >= pad) & (w < size + pad),
        A[n, c, h - pad, w - pad], 0.0), name="P")
    out = (size + 2 * pad - k) // stride + 1
    rc, rh, rw = te.reduce_axis(ci, "rc"), te.reduce_axis(k, "rh"), te.reduce_axis(k, "rw")
    W = te.placeholder((co, ci, k, k), name="W")
    C = te.compute((1, co, out, out), lambda n, f, y, x: te.sum(
        P[n, rc, y * stride + rh, x * stride + rw] * W[f, rc, rh, rw], axis=[rc, rh, rw]),
        name="C")
    return te.create_func([A, W, C], name="conv")


def test_touched_region_of_strided_conv_under_an_outer_loop():
    func = _conv()
    pad_buf = func.root.alloc_buffers[0]
    conv_nest = func.root.body.seq[1]
    y_loop = _loops(conv_nest)[2]  # for n, f, y, x, rc, rh, rw
    region = touched_region(y_loop.body, pad_buf)
    assert ranges_text(region) == [("n", "1"), ("0", "2"), ("y * 2", "7"), ("0", "21")]
    outer = {v.loop_var: 0 for v in _loops(conv_nest)[:2]}
    for y in range(y_loop.extent):
        env = {**outer, y_loop.loop_var: y}
        _check_region(region, _run_accesses(y_loop.body, pad_buf, env), env)
    whole = touched_region(conv_nest, pad_buf)
    assert ranges_text(whole) == [("0", "1"), ("0", "2"), ("0", "21"), ("0", "21")]


def test_touched_region_of_padding_read_is_conservative():
    func = _conv()
    a_buf = func.params[0]
    pad_nest = func.root.body.seq[0]
    region = touched_region(pad_nest, a_buf)
    assert ranges_text(region)[2] == ("-3", "21")  # the guarded read, unclamped
    _check_region(region, _run_accesses(pad_nest, a_buf, {}), {}, tight=False)
    assert ranges_text(clamp_region(region))[2] == ("0", "15")


def _split_matmul(M=32, N=6, K=5, factor=8):
    """matmul with its i loop split by hand: for io, ii, j, k."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    io, ii, j, k = Var("io"), Var("ii"), Var("j"), Var("k")
    vi, vj, vk = Var("vi"), Var("vj"), Var("vk")
    body = ir.BufferStore(C, C[vi, vj] + A[vi, vk] * B[vk, vj], (vi, vj))
    block = ir.Block("C", (ir.IterVar(vi, M), ir.IterVar(vj, N), ir.IterVar(vk, K, ir.REDUCE)),
                     (), (BufferRegion.point(C, (vi, vj)),), body,
                     init=ir.BufferStore(C, ir.const(0.0), (vi, vj)))
    pred = io * factor + ii < M
    nest = ir.realize(block, (io * factor + ii, j, k), pred)
    for var, ext in reversed([(io, -(-M // factor)), (ii, factor), (j, N), (k, K)]):
        nest = ir.For(var, ext, nest)
    return nest, (A, B, C)


def test_touched_region_of_split_loop():
    nest, (A, B, C) = _split_matmul()
    io_loop = nest
    region = touched_region(io_loop.body, A)
    assert ranges_text(region) == [("io * 8", "8"), ("0", "5")]
    for io in range(io_loop.extent):
        env = {io_loop.loop_var: io}
        _check_region(region, _run_accesses(io_loop.body, A, env), env)
    writes = touched_region(io_loop.body, C, reads=False, writes=True)
    assert ranges_text(writes) == [("io * 8", "8"), ("0", "6")]
    assert touched_region(io_loop.body, Buffer("D", (4,))) is None
    assert touched_region(io_loop.body, B, reads=False, writes=True) is None
    relaxed = touched_region(io_loop.body, A, dom={io_loop.loop_var: io_loop.extent})
    assert ranges_text(relaxed) == [("0", "32"), ("0", "5")]


def test_touched_region_of_fused_loop():
    M, N = 4, 16
    A, B = Buffer("A", (M, N)), Buffer("B", (M, N))
    fo, fi, vi, vj = Var("fo"), Var("fi"), Var("vi"), Var("vj")
    block = ir.Block("B", (ir.IterVar(vi, M), ir.IterVar(vj, N)), (), (),
                     ir.BufferStore(B, A[vi, vj] * 2.0, (vi, vj)))
    f = fo * 8 + fi
    nest = ir.For(fo, M * N // 8, ir.For(fi, 8, ir.realize(block, (f // N, f % N))))
    region = touched_region(nest.body, A)
    assert ranges_text(region) == [("fo // 2", "1"), ("fo % 2 * 8", "8")]
    for fo_value in range(nest.extent):
        env = {fo: fo_value}
        _check_region(region, _run_accesses(nest.body, A, env), env)


def test_touched_region_unions_several_accesses():
    A, B = Buffer("A", (20,)), Buffer("B", (18,))
    io, ii, vi = Var("io"), Var("ii"), Var("vi")
    body = ir.BufferStore(B, A[vi] + A[vi + 1] + A[vi + 2], (vi,))
    block = ir.Block("B", (ir.IterVar(vi, 18),), (), (), body)
    nest = ir.For(io, 6, ir.For(ii, 3, ir.realize(block, (io * 3 + ii,))))
    region = touched_region(nest.body, A)
    assert ranges_text(region) == [("io * 3", "5")]
    for v in range(6):
        _check_region(region, _run_accesses(nest.body, A, {io: v}), {io: v})


# 4. simplify_stmt --------------------------------------------------------------------------
def test_simplify_stmt_drops_a_dividing_split_predicate():
    nest, _ = _split_matmul(M=32, factor=8)
    out = simplify_stmt(nest)
    realize = ir.block_realizes(out)[0]
    assert ir.as_int(realize.predicate) == 1
    assert text(realize.iter_values[0]) == "io * 8 + ii"
    partial, _ = _split_matmul(M=30, factor=8)
    kept = ir.block_realizes(simplify_stmt(partial))[0].predicate
    assert text(kept) == "io * 8 + ii < 30"


def test_simplify_stmt_simplifies_indices_and_keeps_unchanged_trees():
    A, B = Buffer("A", (64,)), Buffer("B", (64,))
    f, vi = Var("f"), Var("vi")
    index = (vi // 4) * 4 + vi % 4
    block = ir.Block("B", (ir.IterVar(vi, 64),), (BufferRegion.point(A, (index,)),), (),
                     ir.BufferStore(B, A[index] * 2.0, (vi + 0 * f,)))
    nest = ir.For(f, 64, ir.realize(block, ((f // 8) * 8 + f % 8,)))
    out = simplify_stmt(nest)
    assert "f // 8" not in ir.stmt_str(out)
    assert "B[vi] = A[vi] * 2.0" in ir.stmt_str(out)
    assert text(out.body.block.reads[0].region[0].min) == "vi"
    assert simplify_stmt(out) is out or ir.structural_equal(simplify_stmt(out), out)
    clean = ir.For(f, 4, ir.BufferStore(B, A[f], (f,)))
    assert simplify_stmt(clean) is clean


def test_simplify_stmt_uses_conditions():
    A = Buffer("A", (16,))
    i = Var("i")
    store = ir.BufferStore(A, ir.const(1.0), (ir.min_(i, 9),))
    guarded = ir.For(i, 16, ir.IfThenElse(i < 10, store,
                                          ir.BufferStore(A, ir.const(2.0), (ir.max_(i, 10),))))
    out = simplify_stmt(guarded)
    assert text(out.body.then_case.indices[0]) == "i"
    assert text(out.body.else_case.indices[0]) == "i"
    dead = ir.For(i, 4, ir.IfThenElse(i < 10, store))
    assert isinstance(simplify_stmt(dead).body, ir.BufferStore)
