"""Canonical form of integer expressions: a sum of coefficient × monomial, plus a constant.

A monomial is a product of *atoms*. An atom is a variable or an expression the sum cannot see
into: floor division and modulo, min, max, loads, selects, casts. The Analyzer interns atoms,
so equal atoms share one id and like terms collect.

Division and modulo by a positive constant use TVM's *split* form: the atom
`split(base, lower, upper)` stands for `(base % upper) // lower`, where `lower` divides
`upper` and `upper` None means no modulo. `x // 4`, `x % 4` and `(x // 4) % 8` are all splits
of x, which lets `(x // 4) * 4 + x % 4` merge back into `x` (see floordiv.merge_splits).
"""
from __future__ import annotations

import math
from typing import Iterator

from tessel.ir import Expr, binop, const

MonoKey = tuple  # sorted atom ids
Term = tuple  # (coef: int, atoms: tuple[Atom, ...])


class Atom:
    """An interned leaf of the canonical form.

    kind is "var" (args: (var,)), "split" (args: (base Sum, lower, upper)), "min"/"max"
    (args: operand Sums), or "opaque" (anything else; args: the operand Sums if any).
    `expr` is the printable expression; `vars` the variables it mentions.
    """

    __slots__ = ("id", "kind", "args", "expr", "vars")

    def __init__(self, id: int, kind: str, args: tuple, expr: Expr, vars: frozenset) -> None:
        self.id, self.kind, self.args, self.expr, self.vars = id, kind, args, expr, vars

    def __repr__(self) -> str:
        return f"Atom({self.id}, {self.kind}, {self.expr!r})"


class Sum:
    """`sum(coef * prod(atoms)) + const`, immutable by convention (never mutate `terms`).

    Terms keep insertion order, which is first appearance in the simplified expression, so
    printing is deterministic.
    """

    __slots__ = ("dtype", "terms", "const", "_key", "_expr")

    def __init__(self, dtype: str, terms: dict | None = None, const: int = 0) -> None:
        self.dtype = dtype
        self.terms: dict[MonoKey, Term] = terms if terms is not None else {}
        self.const = const
        self._key: tuple | None = None
        self._expr: Expr | None = None

    @staticmethod
    def of_atom(atom: Atom, dtype: str, coef: int = 1) -> "Sum":
        return Sum(dtype, {(atom.id,): (coef, (atom,))})

    @property
    def is_const(self) -> bool:
        return not self.terms

    @property
    def key(self) -> tuple:
        """Hashable identity: equal keys mean equal sums (up to term order)."""
        if self._key is None:
            items = tuple(sorted((k, c) for k, (c, _) in self.terms.items()))
            self._key = (self.const, items)
        return self._key

    def coefs(self) -> Iterator[int]:
        return (c for c, _ in self.terms.values())

    def coef_gcd(self) -> int:
        """gcd of the term coefficients (0 for a constant)."""
        return math.gcd(*self.coefs()) if self.terms else 0

    def single_atom(self) -> Atom | None:
        """The atom when the sum is exactly `1 * atom`."""
        if self.const != 0 or len(self.terms) != 1:
            return None
        (coef, atoms), = self.terms.values()
        return atoms[0] if coef == 1 and len(atoms) == 1 else None

    def atoms(self) -> Iterator[Atom]:
        for _, atoms in self.terms.values():
            yield from atoms

    # arithmetic -------------------------------------------------------------------------
    def add(self, other: "Sum", k: int = 1) -> "Sum":
        """self + k * other."""
        if not other.terms:
            return self.plus(k * other.const)
        terms = dict(self.terms)
        for mk, (c, atoms) in other.terms.items():
            old = terms.get(mk)
            coef = (old[0] if old else 0) + k * c
            if coef:
                terms[mk] = (coef, old[1] if old else atoms)
            elif old:
                del terms[mk]
        return Sum(self.dtype, terms, self.const + k * other.const)

    def plus(self, c: int) -> "Sum":
        return Sum(self.dtype, self.terms, self.const + c) if c else self

    def scale(self, k: int) -> "Sum":
        if k == 1:
            return self
        if k == 0:
            return Sum(self.dtype)
        return Sum(self.dtype, {mk: (c * k, a) for mk, (c, a) in self.terms.items()},
                   self.const * k)

    def exact_div(self, g: int) -> "Sum":
        """self / g, for a g that divides every coefficient and the constant."""
        return Sum(self.dtype, {mk: (c // g, a) for mk, (c, a) in self.terms.items()},
                   self.const // g)

    def without(self, *keys: MonoKey) -> "Sum":
        return Sum(self.dtype, {k: t for k, t in self.terms.items() if k not in keys},
                   self.const)

    def mul(self, other: "Sum") -> "Sum":
        """The distributed product."""
        out = Sum(self.dtype)
        for ka, (ca, aa) in self._items():
            for kb, (cb, ab) in other._items():
                mk = tuple(sorted(ka + kb))
                out = out.add(Sum(self.dtype, {mk: (ca * cb, aa + ab)} if mk else {},
                                  0 if mk else ca * cb))
        return out

    def _items(self) -> Iterator[tuple[MonoKey, Term]]:
        yield from self.terms.items()
        if self.const:
            yield (), (self.const, ())

    # printing ---------------------------------------------------------------------------
    def to_expr(self) -> Expr:
        """`i * 4 + j - 3`: positive terms first, larger coefficients first, then first
        appearance; the constant last (first when every term is negative)."""
        if self._expr is None:
            self._expr = self._build()
        return self._expr

    def _build(self) -> Expr:
        dt = self.dtype
        items = sorted(self.terms.values(), key=lambda t: (t[0] < 0, -abs(t[0])))
        out: Expr | None = None
        const_used = False
        for coef, atoms in items:
            mono = atoms[0].expr
            for a in atoms[1:]:
                mono = binop("*", mono, a.expr)
            mag = binop("*", mono, const(abs(coef), dt))
            if out is None and coef > 0:
                out = mag
            elif out is None:
                const_used = self.const > 0
                out = binop("-", const(max(self.const, 0), dt), mag)
            else:
                out = binop("+" if coef > 0 else "-", out, mag)
        if out is None:
            return const(self.const, dt)
        if self.const and not const_used:
            out = binop("+" if self.const > 0 else "-", out, const(abs(self.const), dt))
        return out

    def __repr__(self) -> str:
        return f"Sum({self.to_expr()!r})"
