"""Symbolic interval analysis: the bounds of an expression over a domain of some variables.

    int_set(i * 4 + ii, {ii: Range(0, 4)})  ->  (i * 4, i * 4 + 3)

Variables in the domain are relaxed to their ranges; all others stay symbolic. Each term of the
canonical sum is bounded on its own (tight for affine expressions in distinct variables),
monotone atoms (floor division, min, max) map their operand bounds, a modulo that provably does
not wrap keeps its symbolic bounds, and anything else falls back to constant bounds.
"""
from __future__ import annotations

from typing import Mapping, Optional

from tessel.arith import bound, floordiv, rewrite
from tessel.arith.canonical import Atom, Sum
from tessel.ir import Expr, Range, Var

Ends = tuple  # (lo: Sum | None, hi: Sum | None), None meaning unbounded


def int_set(ana, expr: Expr, dom: Mapping[Var, Range]) -> tuple[Optional[Expr], Optional[Expr]]:
    lo, hi = sum_set(ana, ana.sum_of(expr), dom)
    return (None if lo is None else lo.to_expr(), None if hi is None else hi.to_expr())


def sum_set(ana, s: Sum, dom: Mapping[Var, Range]) -> Ends:
    """(lo, hi) Sums bounding s over dom."""
    lo: Sum | None = Sum(s.dtype, const=s.const)
    hi: Sum | None = lo
    for mk, (c, atoms) in s.terms.items():
        if not any(a.vars.intersection(dom) for a in atoms):
            term = Sum(s.dtype, {mk: (c, atoms)})
            lo = None if lo is None else lo.add(term)
            hi = None if hi is None else hi.add(term)
            continue
        tlo, thi = _mono_set(ana, atoms, dom, s.dtype)
        if c < 0:
            tlo, thi = thi, tlo
        lo = None if lo is None or tlo is None else lo.add(tlo, c)
        hi = None if hi is None or thi is None else hi.add(thi, c)
    return _tidy(ana, lo), _tidy(ana, hi)


def _tidy(ana, s: Sum | None) -> Sum | None:
    return None if s is None else floordiv.merge_splits(ana, s)


def _mono_set(ana, atoms: tuple[Atom, ...], dom, dtype: str) -> Ends:
    if len(atoms) == 1:
        return _atom_set(ana, atoms[0], dom)
    dep = [a for a in atoms if a.vars.intersection(dom)]
    if len(dep) == 1:
        rest = [a for a in atoms if a is not dep[0]]
        factor = Sum(dtype, {tuple(sorted(a.id for a in rest)): (1, tuple(rest))})
        sign = ana.bound_of(factor)
        lo, hi = _atom_set(ana, dep[0], dom)
        if sign[0] >= 0 or sign[1] <= 0:
            lo = None if lo is None else lo.mul(factor)
            hi = None if hi is None else hi.mul(factor)
            return (lo, hi) if sign[0] >= 0 else (hi, lo)
    return _constant_set(ana, atoms, dom, dtype)


def _atom_set(ana, atom: Atom, dom) -> Ends:
    kind, args = atom.kind, atom.args
    if kind == "var":
        rng = dom[args[0]]
        lo = ana.sum_of(rng.min)
        return lo, lo.add(ana.sum_of(rng.extent)).plus(-1)
    if kind == "split":
        found = _split_set(ana, *args, dom)
        if found is not None:
            return found
    if kind in ("min", "max"):
        return _minmax_set(ana, kind, [sum_set(ana, s, dom) for s in args])
    if kind == "div" and args[1].is_const and args[1].const > 0:
        lo, hi = sum_set(ana, args[0], dom)
        c = args[1].const
        return (None if lo is None else floordiv.div_const(ana, lo, c),
                None if hi is None else floordiv.div_const(ana, hi, c))
    return _constant_set(ana, (atom,), dom, atom.expr.dtype)


def _split_set(ana, base: Sum, lower: int, upper: int | None, dom) -> Ends | None:
    lo, hi = sum_set(ana, base, dom)
    if lo is None or hi is None:
        return None
    if upper is None:
        return floordiv.div_const(ana, lo, lower), floordiv.div_const(ana, hi, lower)
    wraps = floordiv.div_const(ana, hi, upper).add(floordiv.div_const(ana, lo, upper), -1)
    if not (wraps.is_const and wraps.const == 0):
        return None
    return tuple(floordiv.div_const(ana, floordiv.mod_const(ana, x, upper), lower)
                 for x in (lo, hi))


def _minmax_set(ana, kind: str, sets: list[Ends]) -> Ends:
    los = [lo for lo, _ in sets]
    his = [hi for _, hi in sets]
    if kind == "min":  # min(a, b) <= a_hi even when b is unbounded above
        his = [h for h in his if h is not None] or [None]
        los = [None] if None in los else los
    else:
        los = [lo for lo in los if lo is not None] or [None]
        his = [None] if None in his else his
    lo = None if los[0] is None else rewrite.minmax(ana, kind, los)
    hi = None if his[0] is None else rewrite.minmax(ana, kind, his)
    return lo, hi


def _constant_set(ana, atoms: tuple[Atom, ...], dom, dtype: str) -> Ends:
    """Constant bounds of a product of atoms with the domain bound in the analyzer."""
    with ana.scope(dom):
        b = ana.atom_bound(atoms[0])
        for a in atoms[1:]:
            b = bound.mul(b, ana.atom_bound(a))
    return tuple(Sum(dtype, const=x) if bound.is_finite(x) else None for x in b)
