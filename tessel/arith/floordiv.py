"""Floor division and modulo on canonical sums (the rules of TVM's canonical simplifier).

All rules are exact identities of floor division, for any integer values:
  (c*X + R) // c == X + R // c          (c*X + R) % c == R % c
  (g*A + r) // (g*c) == A // c          (g*A + r) % (g*c) == g*(A % c) + r     for 0 <= r < g
  (x // a) // b == x // (a*b)           (x % (a*b)) // a == (x // a) % b
and with ranges: R // c == k and R % c == R - k*c when R lies in [k*c, (k+1)*c).
Divisions by positive constants become split atoms (see canonical.py), which merge_splits
recombines: (x // 4) * 4 + x % 4 -> x, x - (x // 4) * 4 -> x % 4.
"""
from __future__ import annotations

import itertools
import math

from tessel.arith import bound
from tessel.arith.canonical import Sum
from tessel.ir import Expr, binop


def divide(ana, a: Sum, b: Sum) -> Sum:
    return div_const(ana, a, b.const) if b.is_const else _div_symbolic(ana, "//", a, b)


def modulo(ana, a: Sum, b: Sum) -> Sum:
    return mod_const(ana, a, b.const) if b.is_const else _div_symbolic(ana, "%", a, b)


def _divide_out(s: Sum, c: int) -> tuple[Sum, Sum]:
    """(q, r) with s == c*q + r, r keeping the terms whose coefficient c does not divide."""
    q, r = {}, {}
    for mk, (coef, atoms) in s.terms.items():
        if coef % c == 0:
            q[mk] = (coef // c, atoms)
        else:
            r[mk] = (coef, atoms)
    return Sum(s.dtype, q, s.const // c), Sum(s.dtype, r, s.const % c)


def div_const(ana, s: Sum, c: int) -> Sum:
    """s // c for a constant c."""
    if c == 0:
        return atom(ana, "div", s, Sum(s.dtype, const=0))
    q, r = _divide_out(s, c)
    if r.is_const:
        return q
    if c < 0:
        return q.add(atom(ana, "div", r, Sum(s.dtype, const=c)))
    return q.add(_div_residual(ana, r, c))


def _div_residual(ana, r: Sum, c: int) -> Sum:
    lo, hi = ana.bound_of(r)
    if bound.is_finite(lo) and bound.is_finite(hi) and lo // c == hi // c:
        return Sum(r.dtype, const=lo // c)
    g = math.gcd(r.coef_gcd(), c)
    if g > 1:
        k = r.const % g
        return div_const(ana, r.plus(-k).exact_div(g), c // g)
    split = _lone_split(r)
    if split is not None:
        base, lower, upper = split
        if r.const == 0 and (upper is None or upper % (lower * c) == 0):
            return make_split(ana, base, lower * c, upper)
        if upper is None:  # (x // l + k) // c == (x + k*l) // (l*c)
            return div_const(ana, base.plus(r.const * lower), lower * c)
    return make_split(ana, r, c, None)


def mod_const(ana, s: Sum, c: int) -> Sum:
    """s % c for a constant c."""
    if c == 0:
        return atom(ana, "mod", s, Sum(s.dtype, const=0))
    _, r = _divide_out(s, c)
    if r.is_const:
        return r
    if c < 0:
        return atom(ana, "mod", r, Sum(s.dtype, const=c))
    lo, hi = ana.bound_of(r)
    if bound.is_finite(lo) and bound.is_finite(hi) and lo // c == hi // c:
        return r.plus(-c * (lo // c))
    g = math.gcd(r.coef_gcd(), c)
    if g > 1:
        k = r.const % g
        return mod_const(ana, r.plus(-k).exact_div(g), c // g).scale(g).plus(k)
    split = _lone_split(r)
    if split is not None and r.const == 0:
        base, lower, upper = split
        if upper is None or upper % (lower * c) == 0:
            return make_split(ana, base, lower, lower * c)
    return make_split(ana, r, 1, c)


def _lone_split(r: Sum) -> tuple | None:
    """(base, lower, upper) when r is `split + const` with coefficient 1."""
    if len(r.terms) != 1:
        return None
    (coef, atoms), = r.terms.values()
    if coef != 1 or len(atoms) != 1 or atoms[0].kind != "split":
        return None
    return atoms[0].args


def make_split(ana, base: Sum, lower: int, upper: int | None) -> Sum:
    """The Sum of `(base % upper) // lower` (lower divides upper), simplified by ranges."""
    lo, hi = ana.bound_of(base)
    finite = bound.is_finite(lo) and bound.is_finite(hi)
    if upper is not None and finite and lo // upper == hi // upper:
        return div_const(ana, base.plus(-upper * (lo // upper)), lower)
    if upper is None and lower == 1:
        return base
    if upper is None and finite and lo // lower == hi // lower:
        return Sum(base.dtype, const=lo // lower)
    if upper == lower or (lo >= 0 and hi < lower):
        return Sum(base.dtype)
    key = ("split", base.key, lower, upper)
    made = ana.intern(key, "split", (base, lower, upper), lambda: _split_expr(base, lower, upper))
    return Sum.of_atom(made, base.dtype)


def _split_expr(base: Sum, lower: int, upper: int | None) -> Expr:
    """`x // l`, `x % u`, and `x // l % (u // l)` or, when reading it back would divide
    differently (a constant >= l in x, say), the equal `x % u // l`."""
    e = base.to_expr()
    if upper is None:
        return binop("//", e, lower)
    if lower == 1:
        return binop("%", e, upper)
    clean = (0 <= base.const < lower and math.gcd(base.coef_gcd(), lower) == 1
             and all(c % lower for c in base.coefs()) and _lone_split(base) is None)
    if clean:
        return binop("%", binop("//", e, lower), upper // lower)
    return binop("//", binop("%", e, upper), lower)


def atom(ana, kind: str, a: Sum, b: Sum) -> Sum:
    """An opaque floor division ("div") or modulo ("mod") atom."""
    op = "//" if kind == "div" else "%"
    key = (op, a.key, b.key)
    made = ana.intern(key, kind, (a, b), lambda: binop(op, a.to_expr(), b.to_expr()))
    return Sum.of_atom(made, a.dtype)


def _div_symbolic(ana, op: str, a: Sum, b: Sum) -> Sum:
    """a // b or a % b for a non-constant divisor: terms that are multiples of a
    single-term divisor come out of the division; a remainder in [0, b) is exact."""
    q, r = _quotient(a, b)
    if r.is_const and r.const == 0:
        return q if op == "//" else r
    in_range = ana.prove_nonneg(r) and ana.prove_nonneg(b.add(r, -1).plus(-1))
    if in_range:
        return q if op == "//" else r
    rest = atom(ana, "div" if op == "//" else "mod", r, b)
    return q.add(rest) if op == "//" else rest


def _quotient(a: Sum, b: Sum) -> tuple[Sum, Sum]:
    """(q, r) with a == q*b + r, q collecting the terms of a that b's one term divides."""
    if b.const != 0 or len(b.terms) != 1:
        return Sum(a.dtype), a
    (bc, batoms), = b.terms.values()
    q, r = {}, {}
    for mk, (coef, atoms) in a.terms.items():
        rest = _remove_atoms(atoms, batoms)
        if rest is None or coef % bc:
            r[mk] = (coef, atoms)
        else:
            qk = tuple(sorted(x.id for x in rest))
            q[qk] = (coef // bc, rest)
    qconst = q.pop((), (0, ()))[0]
    return Sum(a.dtype, q, qconst), Sum(a.dtype, r, a.const)


def _remove_atoms(atoms: tuple, remove: tuple) -> tuple | None:
    left = list(atoms)
    for x in remove:
        hit = next((i for i, y in enumerate(left) if y.id == x.id), None)
        if hit is None:
            return None
        del left[hit]
    return tuple(left)


# merging split pieces ---------------------------------------------------------------------
def merge_splits(ana, s: Sum) -> Sum:
    """Recombine pieces of one base: c*(x // 4)*... until no pair merges."""
    for _ in range(16):
        merged = _merge_once(ana, s)
        if merged is None:
            return s
        s = merged
    return s


def _pieces(s: Sum) -> dict:
    groups: dict = {}
    for mk, (c, atoms) in s.terms.items():
        if len(atoms) == 1 and atoms[0].kind == "split":
            base, lower, upper = atoms[0].args
            groups.setdefault(base.key, (base, []))[1].append((mk, c, lower, upper))
    for base, pieces in groups.values():
        lone = base.single_atom()
        if lone is not None and (lone.id,) in s.terms:
            pieces.append(((lone.id,), s.terms[(lone.id,)][0], 1, None))
    return groups


def _merge_once(ana, s: Sum) -> Sum | None:
    if len(s.terms) < 2 or not any(a.kind == "split" for a in s.atoms()):
        return None
    for base, pieces in _pieces(s).values():
        for p, q in itertools.permutations(pieces, 2):
            merged = _merge_pair(p, q)
            if merged is not None:
                coef, lower, upper = merged
                piece = make_split(ana, base, lower, upper).scale(coef)
                return s.without(p[0], q[0]).add(piece)
    return None


def _merge_pair(p: tuple, q: tuple) -> tuple | None:
    """Merge piece p with piece q of the same base, as (coef, lower, upper)."""
    _, c1, l1, u1 = p
    _, c2, l2, u2 = q
    if l1 == l2 and c2 == -c1 and u2 is not None and u2 > l1 and (
            u1 is None or (u1 > u2 and u1 % u2 == 0)):  # x - x % 4 -> (x // 4) * 4
        return (c1 * (u2 // l1), u2, u1)
    if l1 <= l2 or l1 % l2:
        return None
    ratio = l1 // l2
    if u2 == l1 and c1 == c2 * ratio:  # (x // 4 % 3) * 4 + x % 4 -> x % 12
        return (c2, l2, u1)
    if u1 == u2 and c1 == -c2 * ratio:  # x - (x // 4) * 4 -> x % 4
        return (c2, l2, l1)
    return None
