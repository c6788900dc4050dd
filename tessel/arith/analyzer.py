"""The Analyzer: variable ranges plus every integer query that depends on them.

    ana = Analyzer({i: 8, j: 8, k: Range.of(0, n)})
    ana.simplify((i * 8 + j) // 8)          # -> i
    ana.simplify((f // 4) * 4 + f % 4)      # -> f
    ana.const_int_bound(i * 4 + 3)          # -> (3, 31)
    ana.can_prove(k < n)                    # -> True (symbolic ranges work too)
    with ana.scope({t: 4}):                 # t bound only inside the block
        ...

Results are memoized per scope; binding a variable or entering/leaving a scope starts a fresh
memo, so a cached answer never outlives the ranges it was derived under.
"""
from __future__ import annotations

import itertools
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping, Union

from tessel.arith import bound, canon, intset, rewrite
from tessel.arith.bound import INF, Interval
from tessel.arith.canonical import Atom, Sum
from tessel.errors import TesselError
from tessel.ir import Expr, IntImm, Range, Var, convert, is_int, is_true
from tessel.ir.visitor import free_vars

RangeLike = Union[Range, int, Expr]
_GC_LIMIT = 200_000


class ArithError(TesselError, ValueError):
    """An arithmetic query was malformed (bad range, unbounded region without a shape)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ArithError(msg)


def as_range(r: RangeLike) -> Range:
    """A Range from a Range, or an extent (int or Expr) meaning [0, extent)."""
    if isinstance(r, Range):
        return r
    check(isinstance(r, (int, Expr)) and not isinstance(r, bool),
          f"expected a Range or an extent, got {r!r}")
    return Range.of(0, r)


class Analyzer:
    """Variable ranges and the queries that use them: simplify, const_int_bound, can_prove,
    modular_set, int_set. One analyzer per transformation is the usual lifetime."""

    def __init__(self, ranges: Mapping[Var, RangeLike] | None = None) -> None:
        self._ranges: dict[Var, Range] = {}
        self._assumed: dict[Var, Interval] = {}
        self._atoms: dict[tuple, Atom] = {}
        self._ids = itertools.count()
        self._memo: dict[int, tuple] = {}     # id(expr) -> (expr, Sum | Expr)
        self._bounds: dict[int, Interval] = {}  # atom id -> interval
        self._saved: list[tuple] = []
        self._visiting: set[Var] = set()
        for v, r in (ranges or {}).items():
            self.bind(v, r)

    # 1. ranges -------------------------------------------------------------------------
    def bind(self, var: Var, rng: RangeLike) -> None:
        """var ranges over `rng` (a Range, or an extent for [0, extent)). Rebinding a var to a
        different range raises; use `update` to override or `scope` to bind temporarily."""
        rng = as_range(rng)
        old = self._ranges.get(var)
        if old is not None and not self._same_range(old, rng):
            raise ArithError(f"{var.name} is already bound to a different range; use update()")
        self.update(var, rng)

    def update(self, var: Var, rng: RangeLike) -> None:
        """Bind var to `rng`, replacing any earlier range."""
        self._ranges[var] = as_range(rng)
        self._memo, self._bounds = {}, {}

    @contextmanager
    def scope(self, ranges: Mapping[Var, RangeLike] | None = None,
              assume: Expr | None = None) -> Iterator["Analyzer"]:
        """Bind `ranges` (overriding) and assume `assume` holds, only inside the with-block.

        Assumptions are conjunctions of comparisons; those that bound one variable by
        constants (`i < 10`, `i * 2 + j >= 4` with j bounded) tighten that variable."""
        self._saved.append((self._ranges, self._assumed, self._memo, self._bounds))
        self._ranges, self._assumed = dict(self._ranges), dict(self._assumed)
        self._memo, self._bounds = {}, {}
        try:
            for v, r in (ranges or {}).items():
                self._ranges[v] = as_range(r)
            if assume is not None:
                rewrite.assume_bounds(self, convert(assume))
            yield self
        finally:
            self._ranges, self._assumed, self._memo, self._bounds = self._saved.pop()

    def _same_range(self, a: Range, b: Range) -> bool:
        return all(self.sum_of(x).key == self.sum_of(y).key
                   for x, y in ((a.min, b.min), (a.extent, b.extent)))

    # 2. queries ------------------------------------------------------------------------
    def simplify(self, expr: Expr | int) -> Expr:
        """Canonical form of an integer expression (`i * 4 + j`), simplified predicates, and
        constant folding elsewhere (float arithmetic is otherwise left as written)."""
        self._maybe_gc()
        return canon.simplify_any(self, convert(expr))

    def const_int_bound(self, expr: Expr | int) -> tuple:
        """(lo, hi), inclusive; an open end is -math.inf / math.inf."""
        self._maybe_gc()
        e = convert(expr)
        if is_int(e.dtype):
            return self.bound_of(self.sum_of(e))
        if e.dtype == "bool":
            s = canon.simplify_any(self, e)
            return (s.value, s.value) if isinstance(s, IntImm) else (0, 1)
        return (-INF, INF)

    def can_prove(self, cond: Expr | bool) -> bool:
        """True only when `cond` holds for every value of the bound variables. False means
        "could not prove", not "false"."""
        s = self.simplify(convert(cond))
        return is_true(s)

    def can_prove_equal(self, a: Expr | int, b: Expr | int) -> bool:
        return self.sum_of(convert(a)).key == self.sum_of(convert(b)).key

    def modular_set(self, expr: Expr | int) -> tuple[int, int]:
        """(coeff, base) with expr == coeff * k + base for some integer k (coeff 0: constant)."""
        s = self.sum_of(convert(expr))
        g = s.coef_gcd()
        return (g, s.const % g if g else s.const)

    def int_set(self, expr: Expr, dom: Mapping[Var, RangeLike]) -> tuple:
        """(min_expr, max_expr) of expr when the vars of `dom` range over their domains and
        other vars stay symbolic; None for an end that cannot be bounded."""
        self._maybe_gc()
        return intset.int_set(self, convert(expr), {v: as_range(r) for v, r in dom.items()})

    # 3. internals shared by the rule modules --------------------------------------------
    def sum_of(self, e: Expr) -> Sum:
        """The canonical Sum of an integer expression (memoized)."""
        return canon.to_sum(self, e)

    def simp(self, e: Expr) -> Expr:
        """simplify without the public entry checks, for the rule modules."""
        return canon.simplify_any(self, e)

    def intern(self, key: tuple, kind: str, args: tuple, make_expr: Callable[[], Expr]) -> Atom:
        atom = self._atoms.get(key)
        if atom is None:
            expr = make_expr()
            vars_ = frozenset((expr,)) if isinstance(expr, Var) else frozenset(free_vars(expr))
            atom = Atom(next(self._ids), kind, args, expr, vars_)
            self._atoms[key] = atom
        return atom

    def bound_of(self, s: Sum) -> Interval:
        lo = hi = s.const
        for coef, atoms in s.terms.values():
            b = self.atom_bound(atoms[0])
            for a in atoms[1:]:
                b = bound.mul(b, self.atom_bound(a))
            b = bound.scale(b, coef)
            lo, hi = lo + b[0], hi + b[1]
        return (lo, hi)

    def atom_bound(self, atom: Atom) -> Interval:
        b = self._bounds.get(atom.id)
        if b is None:
            b = self._bounds[atom.id] = canon.atom_bound(self, atom)
        return b

    def var_bound(self, var: Var) -> Interval:
        b = bound.dtype_range(var.dtype)
        rng = self._ranges.get(var)
        if rng is not None and var not in self._visiting:
            self._visiting.add(var)
            try:
                lo = self.sum_of(rng.min)
                hi = lo.add(self.sum_of(rng.extent)).plus(-1)
                b = bound.intersect(b, (self.bound_of(lo)[0], self.bound_of(hi)[1]))
            finally:
                self._visiting.discard(var)
        if var in self._assumed:
            b = bound.intersect(b, self._assumed[var])
        return b

    def prove_nonneg(self, s: Sum, depth: int = 2) -> bool:
        """Whether s >= 0 always: constant bounds first, then (for symbolic ranges such as
        j in [0, n)) substituting each linear var by its worst-case end, `depth` times."""
        if self.bound_of(s)[0] >= 0:
            return True
        if depth == 0:
            return False
        lower = self._lower_substitute(s)
        return lower is not None and self.prove_nonneg(lower, depth - 1)

    def _lower_substitute(self, s: Sum) -> Sum | None:
        out, changed = s, False
        for mk, (c, atoms) in s.terms.items():
            if len(atoms) != 1 or atoms[0].kind != "var":
                continue
            v = atoms[0].args[0]
            rng = self._ranges.get(v)
            if rng is None or (isinstance(rng.min, IntImm) and isinstance(rng.extent, IntImm)):
                continue
            if any(v in a.vars for k2, (_, a2) in s.terms.items() if k2 != mk for a in a2):
                continue
            lo = self.sum_of(rng.min)
            out = out.add(Sum.of_atom(atoms[0], s.dtype), -c)
            out = out.add(lo if c > 0 else lo.add(self.sum_of(rng.extent)).plus(-1), c)
            changed = True
        return out if changed else None

    def _maybe_gc(self) -> None:
        """Drop interned atoms and memos once they grow large (atom ids stay unique)."""
        if len(self._atoms) + len(self._memo) < _GC_LIMIT or self._visiting:
            return
        self._atoms.clear()
        for state in self._saved + [(None, None, self._memo, self._bounds)]:
            state[2].clear()
            state[3].clear()
