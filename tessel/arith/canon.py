"""Expression -> canonical form: the dispatch behind Analyzer.simplify.

Integer expressions become a `Sum` (to_sum); boolean and float expressions are rebuilt with
simplified children (simplify_any), comparisons of integers going through rewrite.compare.
"""
from __future__ import annotations

from tessel import ir
from tessel.arith import bound, floordiv, rewrite
from tessel.arith.bound import Interval
from tessel.arith.canonical import Atom, Sum
from tessel.ir import (BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Select, Var,
                       binop, call, cast, const, is_float, is_int, select)
from tessel.ir.expr import CMP_OPS, LOGIC_OPS, eval_intrinsic

_DISTRIBUTE_LIMIT = 16  # largest term count of a product that is multiplied out


def to_sum(ana, e: Expr) -> Sum:
    hit = ana._memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    s = _to_sum(ana, e)
    if s.terms:
        lo, hi = ana.bound_of(s)
        if lo == hi:  # a single possible value, e.g. a var of extent 1
            s = Sum(s.dtype, const=lo)
    ana._memo[id(e)] = (e, s)
    return s


def _to_sum(ana, e: Expr) -> Sum:
    if isinstance(e, IntImm):
        return Sum(e.dtype, const=e.value)
    if isinstance(e, Var):
        return Sum.of_atom(ana.intern(("var", id(e)), "var", (e,), lambda: e), e.dtype)
    if isinstance(e, BinOp):
        return _binop(ana, e.op, to_sum(ana, e.a), to_sum(ana, e.b))
    if isinstance(e, Select):
        return _select(ana, e)
    if isinstance(e, Cast):
        return _cast(ana, e)
    return _opaque(ana, e)


def _binop(ana, op: str, a: Sum, b: Sum) -> Sum:
    if op in ("+", "-"):
        return floordiv.merge_splits(ana, a.add(b, 1 if op == "+" else -1))
    if op == "*":
        return _mul(ana, a, b)
    if op == "//":
        return floordiv.divide(ana, a, b)
    if op == "%":
        return floordiv.modulo(ana, a, b)
    if op in ("min", "max"):
        return rewrite.minmax(ana, op, [a, b])
    key = (op, a.key, b.key)  # integer "/" stays as written
    return Sum.of_atom(ana.intern(key, "opaque", (a, b),
                                  lambda: binop(op, a.to_expr(), b.to_expr())), a.dtype)


def _mul(ana, a: Sum, b: Sum) -> Sum:
    if a.is_const:
        return b.scale(a.const)
    if b.is_const:
        return a.scale(b.const)
    size = (len(a.terms) + bool(a.const)) * (len(b.terms) + bool(b.const))
    if size <= _DISTRIBUTE_LIMIT:
        return a.mul(b)
    key = ("*", frozenset((a.key, b.key)))
    return Sum.of_atom(ana.intern(key, "mul", (a, b),
                                  lambda: binop("*", a.to_expr(), b.to_expr())), a.dtype)


def _select(ana, e: Select) -> Sum:
    cond = simplify_any(ana, e.cond)
    if isinstance(cond, IntImm):
        return to_sum(ana, e.true_value if cond.value else e.false_value)
    t, f = to_sum(ana, e.true_value), to_sum(ana, e.false_value)
    if t.key == f.key:
        return t
    key = ("select", child_key(ana, cond), t.key, f.key)
    atom = ana.intern(key, "select", (t, f),
                      lambda: select(cond, t.to_expr(), f.to_expr()))
    return Sum.of_atom(atom, e.dtype)


def _cast(ana, e: Cast) -> Sum:
    if is_int(e.value.dtype):
        inner = to_sum(ana, e.value)
        if inner.is_const:
            return Sum(e.dtype, const=inner.const)
        key = ("cast", e.dtype, inner.key)
        atom = ana.intern(key, "cast", (inner,), lambda: cast(e.dtype, inner.to_expr()))
        return Sum.of_atom(atom, e.dtype)
    value = simplify_any(ana, e.value)
    if isinstance(value, (IntImm, FloatImm)):
        return Sum(e.dtype, const=int(value.value))
    key = ("cast", e.dtype, child_key(ana, value))
    atom = ana.intern(key, "cast", (), lambda: cast(e.dtype, value))
    return Sum.of_atom(atom, e.dtype)


def _opaque(ana, e: Expr) -> Sum:
    rebuilt = _rebuild(ana, e)
    atom = ana.intern(("opaque", node_key(ana, rebuilt)), "opaque", (), lambda: rebuilt)
    return Sum.of_atom(atom, e.dtype)


# non-integer expressions ----------------------------------------------------------------
def simplify_any(ana, e: Expr) -> Expr:
    """The simplified form of any expression."""
    if is_int(e.dtype):
        return to_sum(ana, e).to_expr()
    hit = ana._memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    out = _simplify_other(ana, e)
    ana._memo[id(e)] = (e, out)
    return out


def _simplify_other(ana, e: Expr) -> Expr:
    if isinstance(e, BinOp):
        if e.op in CMP_OPS and is_int(e.a.dtype):
            return rewrite.compare(ana, e.op, to_sum(ana, e.a), to_sum(ana, e.b))
        if e.op in LOGIC_OPS:
            return rewrite.logic(ana, e.op, simplify_any(ana, e.a), simplify_any(ana, e.b))
    if isinstance(e, Not):
        return rewrite.negate(ana, simplify_any(ana, e.a))
    if isinstance(e, Select):
        cond = simplify_any(ana, e.cond)
        if isinstance(cond, IntImm):
            return simplify_any(ana, e.true_value if cond.value else e.false_value)
    if isinstance(e, Call):
        return _fold_call(_rebuild(ana, e))
    return _rebuild(ana, e)


def _fold_call(e: Expr) -> Expr:
    if isinstance(e, Call) and all(isinstance(a, FloatImm) for a in e.args):
        try:
            return const(float(eval_intrinsic(e.name, *(a.value for a in e.args))), e.dtype)
        except (ValueError, OverflowError, ZeroDivisionError):
            return e
    return e


def _rebuild(ana, e: Expr) -> Expr:
    """e with simplified children; e itself when nothing changed (keeps sharing)."""
    if isinstance(e, BinOp):
        a, b = simplify_any(ana, e.a), simplify_any(ana, e.b)
        return e if a is e.a and b is e.b else binop(e.op, a, b)
    if isinstance(e, Select):
        parts = [simplify_any(ana, x) for x in (e.cond, e.true_value, e.false_value)]
        same = all(p is x for p, x in zip(parts, (e.cond, e.true_value, e.false_value)))
        return e if same else select(*parts)
    if isinstance(e, Cast):
        v = simplify_any(ana, e.value)
        through = _integral_round_trip(e.dtype, v)
        if through is not None:
            return through
        return e if v is e.value else cast(e.dtype, v)
    if isinstance(e, Call):
        args = tuple(simplify_any(ana, a) for a in e.args)
        return e if all(x is y for x, y in zip(args, e.args)) else call(e.name, *args)
    if isinstance(e, BufferLoad):
        idx = tuple(simplify_any(ana, i) for i in e.indices)
        same = all(x is y for x, y in zip(idx, e.indices))
        return e if same else BufferLoad(e.buffer, idx, e.dtype)
    if isinstance(e, Not):
        a = simplify_any(ana, e.a)
        return e if a is e.a else Not(a)
    return e


def _integral_round_trip(dtype: str, v: Expr) -> Expr | None:
    """float(intN(x)) as x itself when x is a float that holds an integer in intN's range:
    a quantized value dequantized again (ONNX QuantizeLinear's clip(round(y)) into uint8,
    then DequantizeLinear's float of it) needs no trip through the narrow type, which has no
    vector form of its own in the middle of an expression; None when it does not hold."""
    if not (isinstance(v, Cast) and is_int(v.dtype) and is_float(dtype)
            and is_float(v.value.dtype) and ir.DTYPE_BITS[v.dtype] < 64):
        return None
    span = _integral_span(v.value)
    bits = ir.DTYPE_BITS[v.dtype]
    lo, hi = (0, 2 ** bits - 1) if v.dtype.startswith("u") else (-2 ** (bits - 1),
                                                                  2 ** (bits - 1) - 1)
    if span is None or span[0] < lo or span[1] > hi:
        return None
    return v.value if v.value.dtype == dtype else cast(dtype, v.value)


def _integral_span(e: Expr) -> tuple[float, float] | None:
    """(lo, hi) of a float expression whose every value is an integer (or NaN), None when
    that is not evident from its form: a rounding, an integer constant, a cast of an
    integer, min and max of those."""
    inf = float("inf")
    if isinstance(e, FloatImm):
        return (e.value, e.value) if float(e.value).is_integer() else None
    if isinstance(e, Call) and e.name in ("round", "floor", "ceil"):
        return (-inf, inf)
    if isinstance(e, Cast) and is_int(e.value.dtype):
        return (-inf, inf)
    if isinstance(e, BinOp) and e.op in ("min", "max", "+", "-"):
        a, b = _integral_span(e.a), _integral_span(e.b)
        if a is None or b is None:
            return None
        if e.op == "+":  # (a zero point added to a rounded value: exact below 2**24)
            return (a[0] + b[0], a[1] + b[1])
        if e.op == "-":
            return (a[0] - b[1], a[1] - b[0])
        pick = min if e.op == "min" else max
        return (pick(a[0], b[0]), pick(a[1], b[1]))
    return None


def child_key(ana, e: Expr) -> tuple:
    """A hashable structural key of a simplified expression (variables by identity);
    integer parts are keyed by their canonical sums."""
    if is_int(e.dtype):
        return ("s",) + to_sum(ana, e).key
    return node_key(ana, e)


def node_key(ana, e: Expr) -> tuple:
    """child_key of e's own node, whatever its dtype (children through child_key)."""
    if isinstance(e, Var):
        return ("v", id(e))
    if isinstance(e, (IntImm, FloatImm)):
        return ("c", e.value, e.dtype)
    if isinstance(e, BinOp):
        return (e.op, child_key(ana, e.a), child_key(ana, e.b))
    if isinstance(e, Not):
        return ("not", child_key(ana, e.a))
    if isinstance(e, Select):
        return ("sel",) + tuple(child_key(ana, x) for x in (e.cond, e.true_value, e.false_value))
    if isinstance(e, Cast):
        return ("cast", e.dtype, child_key(ana, e.value))
    if isinstance(e, Call):
        return ("call", e.name) + tuple(child_key(ana, a) for a in e.args)
    if isinstance(e, BufferLoad):
        return ("load", id(e.buffer)) + tuple(child_key(ana, i) for i in e.indices)
    return ("id", id(e))


# bounds of atoms --------------------------------------------------------------------------
def atom_bound(ana, atom: Atom) -> Interval:
    kind, args = atom.kind, atom.args
    if kind == "var":
        return ana.var_bound(args[0])
    if kind == "split":
        base, lower, upper = args
        b = ana.bound_of(base)
        return bound.floordiv(b if upper is None else bound.floormod(b, upper), lower)
    if kind in ("min", "max"):
        fn = bound.min_ if kind == "min" else bound.max_
        out = ana.bound_of(args[0])
        for s in args[1:]:
            out = fn(out, ana.bound_of(s))
        return out
    if kind in ("div", "mod"):
        fn = bound.floordiv_interval if kind == "div" else bound.floormod_interval
        return fn(ana.bound_of(args[0]), ana.bound_of(args[1]))
    if kind == "select":
        return bound.union(ana.bound_of(args[0]), ana.bound_of(args[1]))
    if kind == "mul":
        return bound.mul(ana.bound_of(args[0]), ana.bound_of(args[1]))
    own = bound.dtype_range(atom.expr.dtype)
    if kind == "cast" and args:
        return bound.intersect(own, ana.bound_of(args[0]))
    if kind == "cast" and atom.expr.value.dtype == "bool":
        return (0, 1)
    return own

