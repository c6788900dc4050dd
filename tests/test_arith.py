"""Index arithmetic: canonical simplification, constant bounds, proofs (tessel.arith)."""
import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tessel import ir
from tessel.arith import Analyzer, ArithError, const_offset, evaluate, linear_form, simplify
from tessel.ir import Buffer, Range, Var


def s(e, ana=None) -> str:
    return ir.expr_str((ana or Analyzer()).simplify(e))


# 1. canonical sums -----------------------------------------------------------------------
def test_like_terms_collect_and_print_readably():
    i, j = Var("i"), Var("j")
    assert s(i * 4 + j + 0) == "i * 4 + j"
    assert s(j + i * 4) == "i * 4 + j"
    assert s(i + i + j * 2 - j) == "i * 2 + j"
    assert s((i + 1) * 4 - 4) == "i * 4"
    assert s(i - i) == "0"
    assert s(i * 3 + j, Analyzer({i: 1})) == "j"  # a var of extent 1 is its only value
    assert s(3 - i) == "3 - i"
    assert s(0 - i - j) == "0 - i - j"
    assert s(i * 2 - 3) == "i * 2 - 3"
    assert s((i + j) * (i - j)) == "i * i - j * j"


def test_constant_folding_and_float_passthrough():
    A = Buffer("A", (10,))
    x = Var("x")
    assert ir.as_int(simplify(ir.const(3) * 4 + 2 - 7 // 2)) == 11
    assert s(A[x + 1 - 1] * 2.0 + 1.0 * 3.0) == "A[x] * 2.0 + 3.0"
    assert s(ir.call("exp", ir.const(0.0))) == "1.0"
    assert s(ir.cast("float32", x + 0) + 1.0) == 'T.Cast("float32", x) + 1.0'
    y = A[x] * 2.0
    assert Analyzer().simplify(y) is y



def test_a_quantized_value_dequantized_skips_the_narrow_type():
    """float(uint8(clip(round(y) + zp))) is clip(round(y) + zp) itself (an integer in
    uint8's range: ONNX QuantizeLinear then DequantizeLinear), so a requantizing epilogue
    vectorizes; not when the clip leaves the range or the value may not be an integer."""
    A = Buffer("A", (10,))
    x = Var("x")

    def trip(inner, narrow="uint8"):
        return simplify(ir.cast("float32", ir.cast(narrow, inner)))
    for lo, hi, narrow in ((0.0, 255.0, "uint8"), (-128.0, 127.0, "int8")):
        q = ir.min_(ir.max_(ir.call("round", A[x] * 4.0) + 3.0, lo), hi)
        assert trip(q, narrow) == simplify(q)
    assert isinstance(trip(ir.min_(ir.max_(ir.call("floor", A[x]) - 1.0, 0.0), 300.0)),
                      ir.Cast)  # 300 is past uint8
    assert isinstance(trip(ir.min_(ir.max_(A[x] * 0.5, 0.0), 255.0)), ir.Cast)  # 0.5: a fraction
    assert isinstance(trip(ir.call("round", A[x])), ir.Cast)  # unclipped

def test_deterministic_output():
    i, j, k = Var("i"), Var("j"), Var("k")
    e = (k + j * 3 + i * 3) // 2 + ir.min_(j, k) * 5
    assert len({s(e) for _ in range(5)}) == 1
    assert s(e) == s(e, Analyzer())


# 2. floor division and modulo ------------------------------------------------------------
def test_split_then_fuse_round_trip():
    f, n = Var("f"), Var("n")
    assert s((f // 4) * 4 + f % 4, Analyzer({f: 4 * 7})) == "f"
    assert s((f // 4) * 4 + f % 4, Analyzer({f: Range.of(0, n * 4)})) == "f"
    assert s((f // 4) * 4 + f % 4) == "f"  # an identity even without ranges
    three = ((f // 12) * 3 + (f // 4) % 3) * 4 + f % 4
    assert s(three) == "f"
    assert s(f - (f // 4) * 4) == "f % 4"
    assert s(f - f % 4) == "f // 4 * 4"
    assert s(f % 16 - f % 4) == "f // 4 % 4 * 4"


def test_fuse_then_split_round_trip():
    i, j, n = Var("i"), Var("j"), Var("n")
    const_ana = Analyzer({i: 5, j: 7})
    assert s((i * 7 + j) // 7, const_ana) == "i"
    assert s((i * 7 + j) % 7, const_ana) == "j"
    sym_ana = Analyzer({i: Range.of(0, Var("m")), j: Range.of(0, n)})
    assert s((i * n + j) // n, sym_ana) == "i"
    assert s((i * n + j) % n, sym_ana) == "j"
    k = Var("k")
    ana = Analyzer({i: 2, j: 3, k: 4})
    fused = (i * 3 + j) * 4 + k
    assert [s(x, ana) for x in (fused // 12, (fused // 4) % 3, fused % 4)] == ["i", "j", "k"]


@pytest.mark.parametrize("expr, ranges, expected", [
    (lambda x, y: (x * 8 + y) // 8, {}, "x + y // 8"),
    (lambda x, y: (x * 8 + y) % 8, {}, "y % 8"),
    (lambda x, y: (x * 8 + y) // 8, {"y": 8}, "x"),
    (lambda x, y: (x * 8 + y) % 8, {"y": 8}, "y"),
    (lambda x, y: y // 8, {"y": 8}, "0"),
    (lambda x, y: (x // 4) // 8, {}, "x // 32"),
    (lambda x, y: (x % 32) // 4, {}, "x // 4 % 8"),
    (lambda x, y: x * 8 % 8, {}, "0"),
    (lambda x, y: (x * 8 + 3) // 8, {}, "x"),
    (lambda x, y: (x * 8 + y) // 8, {"y": Range.of(8, 8)}, "x + 1"),
    (lambda x, y: (x * 6 + 2) // 4, {}, "(x * 3 + 1) // 2"),
    (lambda x, y: (x // 4 + 1) // 2, {}, "(x + 4) // 8"),
    (lambda x, y: x % 4 % 8, {}, "x % 4"),
    (lambda x, y: x // 4 % 1000, {"x": 64}, "x // 4"),
    (lambda x, y: (x * y) // y, {}, "x"),
    (lambda x, y: (x * y + 3) % y, {"y": Range.of(4, 4)}, "3"),
    (lambda x, y: x // -2, {}, "x // -2"),
    (lambda x, y: x % 0, {}, "x % 0"),
])
def test_floordiv_floormod_rules(expr, ranges, expected):
    x, y = Var("x"), Var("y")
    vs = {"x": x, "y": y}
    ana = Analyzer({vs[k]: r for k, r in ranges.items()})
    assert s(expr(x, y), ana) == expected


def test_nonlinear_and_symbolic_atoms():
    x, y, n = Var("x"), Var("y"), Var("n")
    assert s((x // n) * 2 + x // n) == "x // n * 3"
    index, data, small = Buffer("I", (4,), "int32"), Buffer("A", (10,)), Buffer("U", (4,), "uint8")
    assert s(data[index[x + 1 - 1] * 2 + index[x]]) == "A[I[x] * 3]"  # gathers collect too
    assert s(index[x] - index[x + 0]) == "0"
    assert Analyzer().const_int_bound(small[x] * 2) == (0, 510)
    assert s(ir.cast("int32", small[x]) % 256) == 'T.Cast("int32", U[x])'
    assert s(ir.min_(x, y) + ir.min_(y, x)) == "T.min(x, y) * 2"
    assert s((x + y) // n - (y + x) // n) == "0"


# 3. min / max / select -------------------------------------------------------------------
def test_min_max():
    i, x, y = Var("i"), Var("x"), Var("y")
    ana = Analyzer({i: 10})
    assert s(ir.min_(i, 20), ana) == "i"
    assert s(ir.max_(i, 20), ana) == "20"
    assert s(ir.min_(i, 5), ana) == "T.min(i, 5)"
    assert s(ir.min_(x + 1, x)) == "x"
    assert s(ir.min_(ir.min_(x, 8), 4)) == "T.min(x, 4)"
    assert s(ir.max_(x * 4 + 3, x * 4)) == "x * 4 + 3"
    assert s(ir.min_(x * 4 + y, x * 4 + 7)) == "x * 4 + T.min(y, 7)"
    assert s(ir.min_(x, y)) == s(ir.min_(x, y))


def test_select():
    i, x, y = Var("i"), Var("x"), Var("y")
    ana = Analyzer({i: 10})
    assert s(ir.select(i < 10, x, y), ana) == "x"
    assert s(ir.select(i >= 10, x, y), ana) == "y"
    assert s(ir.select(x < 3, y + 1, 1 + y)) == "y + 1"
    assert ana.const_int_bound(ir.select(x < 3, i, i + 5)) == (0, 14)


# 4. bounds -------------------------------------------------------------------------------
def test_const_int_bound():
    i, j, x, n = Var("i"), Var("j"), Var("x"), Var("n")
    ana = Analyzer({i: 8, j: Range.of(2, 3), n: Range.of(1, 16)})
    assert ana.const_int_bound(i * 4 + 3) == (3, 31)
    assert ana.const_int_bound(i - j) == (-4, 5)
    assert ana.const_int_bound(i * j) == (0, 28)
    assert ana.const_int_bound(i // 3) == (0, 2)
    assert ana.const_int_bound(i % 3) == (0, 2)
    assert ana.const_int_bound((i + 16) % 16) == (0, 7)
    assert ana.const_int_bound(ir.min_(i, j)) == (0, 4)
    assert ana.const_int_bound(ir.max_(i, j)) == (2, 7)
    assert ana.const_int_bound(i - i) == (0, 0)
    assert ana.const_int_bound(x) == (-math.inf, math.inf)
    assert ana.const_int_bound(x % 5) == (0, 4)
    assert ana.const_int_bound(i // n) == (0, 7)
    assert ana.const_int_bound(x * 0 + 7) == (7, 7)
    assert ana.const_int_bound(i < 8) == (1, 1)
    lo, hi = ana.const_int_bound(x + i)
    assert lo == -math.inf and hi == math.inf


def test_bounds_follow_symbolic_ranges():
    i, n = Var("i"), Var("n")
    ana = Analyzer({n: Range.of(1, 10), i: Range.of(0, n)})
    assert ana.const_int_bound(i) == (0, 9)
    assert ana.const_int_bound(i * 2 + n) == (1, 28)


def test_modular_set():
    x, y = Var("x"), Var("y")
    ana = Analyzer()
    assert ana.modular_set(x * 4 + 6) == (4, 2)
    assert ana.modular_set(x * 6 + y * 9 + 1) == (3, 1)
    assert ana.modular_set(ir.const(5)) == (0, 5)


# 5. proofs and predicates ----------------------------------------------------------------
def test_dividing_split_has_no_predicate():
    io, ii = Var("io"), Var("ii")
    ana = Analyzer({io: 8, ii: 8})
    assert ana.can_prove(io * 8 + ii < 64)
    assert ir.as_int(ana.simplify(io * 8 + ii < 64)) == 1
    ana2 = Analyzer({io: 13, ii: 8})  # 100 split by 8: the last tile is partial
    assert not ana2.can_prove(io * 8 + ii < 100)
    assert s(io * 8 + ii < 100, ana2) == "io * 8 + ii < 100"


@pytest.mark.parametrize("cond, expected", [
    (lambda i, j, x, n: i < 8, True),
    (lambda i, j, x, n: i <= 7, True),
    (lambda i, j, x, n: i >= 0, True),
    (lambda i, j, x, n: ir.ne(i, 8), True),
    (lambda i, j, x, n: i * 2 + 1 != 6, True),          # parity
    (lambda i, j, x, n: x * 2 + 3 < x * 2 + 5, True),
    (lambda i, j, x, n: j < n, True),                   # symbolic range j in [0, n)
    (lambda i, j, x, n: j + 1 <= n, True),
    (lambda i, j, x, n: (i < 8) & (j < n), True),
    (lambda i, j, x, n: (x < 3) | (x >= 3), True),
    (lambda i, j, x, n: ir.min_(i, 3) <= 3, True),
    (lambda i, j, x, n: i % 4 < 4, True),
    (lambda i, j, x, n: i < 7, False),
    (lambda i, j, x, n: i > 0, False),
    (lambda i, j, x, n: j < n - 1, False),
    (lambda i, j, x, n: x < x * 2, False),
    (lambda i, j, x, n: x * x >= 1, False),
    (lambda i, j, x, n: ir.eq(x % 4, 0), False),
    (lambda i, j, x, n: (i < 8) & (x < 3), False),
    (lambda i, j, x, n: i // 2 < 3, False),
])
def test_can_prove(cond, expected):
    i, j, x, n = Var("i"), Var("j"), Var("x"), Var("n")
    ana = Analyzer({i: 8, j: Range.of(0, n), n: Range.of(1, 100)})
    assert ana.can_prove(cond(i, j, x, n)) is expected


@pytest.mark.parametrize("cond, expected", [
    (lambda x, y: x * 4 < 10, "x < 3"),
    (lambda x, y: x * 2 + y - 3 >= 0, "x * 2 + y >= 3"),
    (lambda x, y: x <= y, "x <= y"),
    (lambda x, y: y > x, "x < y"),
    (lambda x, y: ir.eq(x * 4, 6), "False"),
    (lambda x, y: ir.eq(x * 4, y * 8 + 4), "x == y * 2 + 1"),
    (lambda x, y: ~(x < 3), "x >= 3"),
    (lambda x, y: ~((x < 3) & (y < 2)), "x >= 3 or y >= 2"),
    (lambda x, y: (x < 3) & (x >= 3), "False"),
    (lambda x, y: (x < 3) & (x < 5), "x < 3"),
    (lambda x, y: (x < 3) | (x < 5), "x < 5"),
    (lambda x, y: (x < y) & (x < y), "x < y"),
])
def test_predicate_simplification(cond, expected):
    assert s(cond(Var("x"), Var("y"))) == expected


def test_scope_binds_temporarily_and_bind_checks_conflicts():
    i = Var("i")
    ana = Analyzer()
    assert not ana.can_prove(i < 4)
    with ana.scope({i: 4}):
        assert ana.can_prove(i < 4)
        with ana.scope({i: 8}):
            assert not ana.can_prove(i < 4)
        assert ana.can_prove(i < 4)
    assert not ana.can_prove(i < 4)
    with ana.scope(assume=(i >= 2) & (i < 6)):
        assert ana.const_int_bound(i) == (2, 5)
    ana.bind(i, 4)
    ana.bind(i, Range.of(0, 4))  # the same range again is fine
    with pytest.raises(ArithError, match="already bound"):
        ana.bind(i, 5)
    ana.update(i, 5)
    assert ana.const_int_bound(i) == (0, 4)


# 6. lowering helpers -----------------------------------------------------------------------
def test_linear_form_and_const_offset():
    i, j = Var("i"), Var("j")
    assert linear_form((i + 1) * 4 - i) == {i: 3, 1: 4}
    assert linear_form(i // 2) is None
    assert const_offset(i * 2 + j + 3, j + i * 2) == 3
    assert const_offset((i + 4) // 4, i // 4) == 1
    assert const_offset(i, j) is None
    assert const_offset(i, ir.Buffer("A", (3,))[0]) is None  # dtype mismatch


def test_evaluate():
    x, y = Var("x"), Var("y")
    A = Buffer("A", (4,))
    assert evaluate((x * 3 - 7) // 2 + (x - 9) % 4, {x: 2}) == -1 + 1
    assert evaluate(ir.select(x < y, x, y) + ir.max_(x, 3), {x: 1, y: 5}) == 4
    assert evaluate(A[x] * 2.0, {x: 1, A: [0.0, 1.5, 0.0, 0.0]}) == 3.0
    assert evaluate((x < 3) & ~(y < 3), {x: 1, y: 3}) is True
    with pytest.raises(KeyError, match="no value"):
        evaluate(x + y, {x: 1})


# 7. property tests: simplification preserves values ------------------------------------
A_, B_, C_, N_ = Var("a"), Var("b"), Var("c"), Var("n")
RANGES = {A_: Range.of(0, 6), B_: Range.of(0, 4), C_: Range.of(-3, 6), N_: Range.of(1, 3)}
POINTS = [dict(zip(RANGES, vals)) for vals in itertools.product(
    *(range(r.min.value, r.min.value + r.extent.value) for r in RANGES.values()))]


def _int_exprs():
    leaves = st.one_of(st.sampled_from(list(RANGES)), st.integers(-9, 9).map(ir.const))

    def grow(sub):
        pair = st.tuples(sub, sub)
        return st.one_of(
            pair.map(lambda t: t[0] + t[1]), pair.map(lambda t: t[0] - t[1]),
            st.tuples(sub, st.integers(-4, 6)).map(lambda t: t[0] * t[1]),
            pair.map(lambda t: t[0] * t[1]),
            st.tuples(sub, st.integers(1, 9)).map(lambda t: t[0] // t[1]),
            st.tuples(sub, st.integers(1, 9)).map(lambda t: t[0] % t[1]),
            st.tuples(sub, st.integers(-4, -1)).map(lambda t: t[0] // t[1]),
            sub.map(lambda e: e // N_), sub.map(lambda e: e % N_),
            pair.map(lambda t: ir.min_(*t)), pair.map(lambda t: ir.max_(*t)),
            st.tuples(sub, sub, sub).map(lambda t: ir.select(t[0] < t[1], t[1], t[2])),
        )
    return st.recursive(leaves, grow, max_leaves=10)


def _bool_exprs():
    ops = st.sampled_from(["<", "<=", ">", ">=", "==", "!="])
    cmp = st.tuples(ops, _int_exprs(), _int_exprs()).map(lambda t: ir.binop(t[0], t[1], t[2]))
    return st.recursive(cmp, lambda sub: st.one_of(
        st.tuples(sub, sub).map(lambda t: t[0] & t[1]),
        st.tuples(sub, sub).map(lambda t: t[0] | t[1]),
        sub.map(lambda e: ~e)), max_leaves=4)


SETTINGS = settings(max_examples=250, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(_int_exprs())
def test_simplify_preserves_values_and_bounds_hold(e):
    ana = Analyzer(RANGES)
    simple = ana.simplify(e)
    lo, hi = ana.const_int_bound(e)
    for env in POINTS:
        value = evaluate(e, env)
        assert evaluate(simple, env) == value, (e, simple, env)
        assert lo <= value <= hi, (e, lo, hi, env)
    again = ana.simplify(simple)
    assert ir.structural_equal(ana.simplify(again), again)


@SETTINGS
@given(_bool_exprs())
def test_predicate_simplification_preserves_truth(cond):
    ana = Analyzer(RANGES)
    simple = ana.simplify(cond)
    proved = ana.can_prove(cond)
    for env in POINTS:
        value = evaluate(cond, env)
        assert evaluate(simple, env) == value, (cond, simple, env)
        assert value or not proved, (cond, env)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5))
def test_split_fuse_identities_exhaustive(outer, inner, extra):
    f, i, j = Var("f"), Var("i"), Var("j")
    ana = Analyzer({f: outer * inner * extra, i: outer, j: inner})
    assert ana.can_prove_equal((f // inner) * inner + f % inner, f)
    assert ana.can_prove_equal((i * inner + j) // inner, i)
    assert ana.can_prove_equal((i * inner + j) % inner, j)
    assert ana.can_prove(i * inner + j < outer * inner)
