"""min/max, comparisons and boolean logic over canonical sums.

An integer comparison is normalized to `s < 0` or `s == 0` for s = lhs - rhs, decided by
bounds when possible, and otherwise printed with positive terms on the left:
`io * 8 + ii < 64`, `h * 2 + kh >= 3`, `i <= j`.
"""
from __future__ import annotations

from tessel.arith import bound
from tessel.arith.canonical import Sum
from tessel.ir import BinOp, Expr, IntImm, Not, binop, const, is_int

_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


# min / max -------------------------------------------------------------------------------
def minmax(ana, op: str, operands: list[Sum]) -> Sum:
    """min or max of the operands: nested ones flattened, constants folded, operands that
    provably never win dropped, terms shared by all operands pulled out."""
    dtype = operands[0].dtype
    flat: list[Sum] = []
    for s in operands:
        lone = s.single_atom()
        flat.extend(lone.args if lone is not None and lone.kind == op else (s,))
    pick = min if op == "min" else max
    consts = [s.const for s in flat if s.is_const]
    unique: dict[tuple, Sum] = {}
    for s in flat:
        if not s.is_const:
            unique.setdefault(s.key, s)
    ops = list(unique.values()) + ([Sum(dtype, const=pick(consts))] if consts else [])
    ops = _drop_dominated(ana, op, ops)
    if len(ops) == 1:
        return ops[0]
    common = _common_part(ops)
    if common is not None:
        return common.add(minmax(ana, op, [o.add(common, -1) for o in ops]))
    key = (op, frozenset(o.key for o in ops))

    def expr() -> Expr:
        out = ops[0].to_expr()
        for o in ops[1:]:
            out = binop(op, out, o.to_expr())
        return out
    return Sum.of_atom(ana.intern(key, op, tuple(ops), expr), dtype)


def _beats(ana, op: str, p: Sum, q: Sum) -> bool:
    """p makes q redundant: p <= q for min, p >= q for max."""
    return ana.prove_nonneg(q.add(p, -1) if op == "min" else p.add(q, -1))


def _drop_dominated(ana, op: str, ops: list[Sum]) -> list[Sum]:
    keep: list[Sum] = []
    for o in ops:
        if any(_beats(ana, op, k, o) for k in keep):
            continue
        keep = [k for k in keep if not _beats(ana, op, o, k)] + [o]
    return keep


def _common_part(ops: list[Sum]) -> Sum | None:
    first = ops[0]
    terms = {mk: t for mk, t in first.terms.items()
             if all(o.terms.get(mk, (None,))[0] == t[0] for o in ops[1:])}
    c = first.const if all(o.const == first.const for o in ops) else 0
    return Sum(first.dtype, terms, c) if terms or c else None


# comparisons -----------------------------------------------------------------------------
def compare(ana, op: str, a: Sum, b: Sum) -> Expr:
    s = a.add(b, -1)
    if op in (">", ">="):
        s, op = s.scale(-1), "<" if op == ">" else "<="
    if op == "<=":
        s, op = s.plus(-1), "<"
    if op == "<":
        return _less_than_zero(ana, s)
    return _equal_zero(ana, s, negate=(op == "!="))


def _less_than_zero(ana, s: Sum) -> Expr:
    if s.is_const:
        return const(s.const < 0)
    lo, hi = ana.bound_of(s)
    if hi < 0 or ana.prove_nonneg(s.scale(-1).plus(-1)):
        return const(True)
    if lo >= 0 or ana.prove_nonneg(s):
        return const(False)
    g = s.coef_gcd()
    if g > 1:  # g*t + c < 0  <=>  t < ceil(-c / g)
        s = s.plus(-s.const).exact_div(g).plus(s.const // g)
    pos, neg = _split_signs(s)
    if pos.terms:
        if neg.terms and s.const == -1:
            return binop("<=", pos.to_expr(), neg.to_expr())
        return binop("<", pos.to_expr(), neg.plus(-s.const).to_expr())
    return binop(">=", neg.to_expr(), const(s.const + 1, s.dtype))


def _equal_zero(ana, s: Sum, negate: bool) -> Expr:
    if s.is_const:
        return const((s.const == 0) != negate)
    lo, hi = ana.bound_of(s)
    differ = lo > 0 or hi < 0 or s.const % s.coef_gcd() != 0
    if differ or ana.prove_nonneg(s.plus(-1)) or ana.prove_nonneg(s.scale(-1).plus(-1)):
        return const(negate)
    if lo == hi == 0:
        return const(not negate)
    s = s.exact_div(s.coef_gcd())
    if not any(c > 0 for c in s.coefs()):
        s = s.scale(-1)
    pos, neg = _split_signs(s)
    return binop("!=" if negate else "==", pos.to_expr(), neg.plus(-s.const).to_expr())


def _split_signs(s: Sum) -> tuple[Sum, Sum]:
    """(positive terms, negated negative terms), constants dropped."""
    pos = {mk: t for mk, t in s.terms.items() if t[0] > 0}
    neg = {mk: (-c, a) for mk, (c, a) in s.terms.items() if c < 0}
    return Sum(s.dtype, pos), Sum(s.dtype, neg)


def comparison_sum(ana, e: Expr) -> tuple[str, Sum] | None:
    """("lt", s) for s < 0 or ("eq", s) for s == 0, when e is an integer < <= > >= ==."""
    if not (isinstance(e, BinOp) and e.op in _NEGATE and e.op != "!=" and is_int(e.a.dtype)):
        return None
    s = ana.sum_of(e.a).add(ana.sum_of(e.b), -1)
    if e.op in (">", ">="):
        s = s.scale(-1)
    if e.op in ("<=", ">="):
        s = s.plus(-1)
    return ("eq" if e.op == "==" else "lt"), s


# boolean logic ---------------------------------------------------------------------------
def logic(ana, op: str, a: Expr, b: Expr) -> Expr:
    absorbing = 0 if op == "and" else 1
    for x, y in ((a, b), (b, a)):
        if isinstance(x, IntImm):
            return const(bool(absorbing)) if x.value == absorbing else y
    ka, kb = ana_key(ana, a), ana_key(ana, b)
    if ka == kb:
        return a
    if ka == ("not", kb) or kb == ("not", ka):
        return const(op == "or")
    related = _related_bounds(ana, op, a, b)
    return related if related is not None else binop(op, a, b)


def _related_bounds(ana, op: str, a: Expr, b: Expr) -> Expr | None:
    """`s1 < 0 op s2 < 0` when s2 - s1 or s1 + s2 is constant: one side implies the other
    (x < 3 and x < 5 -> x < 3), or they contradict / cover everything."""
    ca, cb = comparison_sum(ana, a), comparison_sum(ana, b)
    if ca is None or cb is None or ca[0] != "lt" or cb[0] != "lt":
        return None
    s1, s2 = ca[1], cb[1]
    diff, total = s2.add(s1, -1), s2.add(s1)
    if diff.is_const:  # diff <= 0: a implies b; diff >= 0: b implies a
        a_implies_b = diff.const <= 0
        return (a if a_implies_b else b) if op == "and" else (b if a_implies_b else a)
    if total.is_const and op == "and" and total.const >= -1:
        return const(False)
    if total.is_const and op == "or" and total.const <= -1:
        return const(True)
    return None


def negate(ana, a: Expr) -> Expr:
    """not a, pushed into comparisons and through and/or (De Morgan)."""
    if isinstance(a, IntImm):
        return const(not a.value)
    if isinstance(a, Not):
        return a.a
    if isinstance(a, BinOp) and a.op in _NEGATE and is_int(a.a.dtype):
        return compare(ana, _NEGATE[a.op], ana.sum_of(a.a), ana.sum_of(a.b))
    if isinstance(a, BinOp) and a.op in ("and", "or"):
        other = "or" if a.op == "and" else "and"
        return logic(ana, other, negate(ana, a.a), negate(ana, a.b))
    return Not(a)


def ana_key(ana, e: Expr) -> tuple:
    from tessel.arith.canon import child_key
    return child_key(ana, e)


# assumptions -----------------------------------------------------------------------------
def assume_bounds(ana, cond: Expr) -> None:
    """Tighten variable bounds from the conjuncts of cond of the form c*v + rest < 0 or == 0,
    where rest has constant bounds."""
    cond = ana.simp(cond)
    if isinstance(cond, BinOp) and cond.op == "and":
        assume_bounds(ana, cond.a)
        assume_bounds(ana, cond.b)
        return
    found = comparison_sum(ana, cond)
    if found is None:
        return
    kind, s = found
    for mk, (c, atoms) in s.terms.items():
        if len(atoms) == 1 and atoms[0].kind == "var" and c in (1, -1):
            v = atoms[0].args[0]
            rest = ana.bound_of(s.without(mk))
            if kind == "eq":  # c*v == -rest
                new = bound.scale(bound.neg(rest), c)
            elif c == 1:  # v < -rest
                new = (-bound.INF, -rest[0] - 1)
            else:  # v > rest
                new = (rest[0] + 1, bound.INF)
            old = ana._assumed.get(v, bound.EVERYTHING)
            ana._assumed[v] = bound.intersect(old, new)
            ana._memo, ana._bounds = {}, {}
