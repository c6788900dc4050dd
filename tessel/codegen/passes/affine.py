"""Affine index analysis: `linear` and `flat_index` read an index as a `Lin`, an affine form
over loop variables, constants and the lane of a vector chunk. The lowering passes decide
contiguous vector accesses, register promotion and bounds proofs with it."""
from __future__ import annotations

import dataclasses
from typing import Mapping

from tessel.ir import BinOp, Buffer, Expr, IntImm, Var, collect, is_float


def is_nonnegative(e: Expr) -> bool:
    """Provably >= 0: loop and iteration variables range over [0, extent)."""
    if isinstance(e, IntImm):
        return e.value >= 0
    if isinstance(e, Var):
        return True
    if isinstance(e, BinOp) and e.op in ("+", "*", "min"):
        return is_nonnegative(e.a) and is_nonnegative(e.b)
    if isinstance(e, BinOp) and e.op == "max":
        return is_nonnegative(e.a) or is_nonnegative(e.b)
    if isinstance(e, BinOp) and e.op in ("//", "%"):
        return is_nonnegative(e.a) and is_positive_const(e.b)
    return False


def is_positive_const(e: Expr) -> bool:
    """A constant integer above 0 (a divisor that cannot trap and floors as C truncates)."""
    return isinstance(e, IntImm) and e.value > 0


LANE = "<lane>"  # the atom standing for the lane number inside a vector chunk
Atom = object  # a Var, LANE, or the atom_key of an opaque uniform expression


class Lin:
    """An affine form `const + sum(coeff * atom)` with integer coefficients (immutable)."""

    __slots__ = ("terms", "const")

    def __init__(self, terms: Mapping[Atom, int] | None = None, const: int = 0) -> None:
        self.terms = {a: c for a, c in (terms or {}).items() if c != 0}
        self.const = const

    @staticmethod
    def atom(a: Atom) -> "Lin":
        return Lin({a: 1})

    def __add__(self, o: "Lin") -> "Lin":
        terms = dict(self.terms)
        for a, c in o.terms.items():
            terms[a] = terms.get(a, 0) + c
        return Lin(terms, self.const + o.const)

    def scale(self, k: int) -> "Lin":
        return Lin({a: c * k for a, c in self.terms.items()}, self.const * k)

    @property
    def lane(self) -> int:
        """The coefficient of the lane: the access stride across a vector chunk."""
        return self.terms.get(LANE, 0)

    @property
    def is_const(self) -> bool:
        return not self.terms

    def __repr__(self) -> str:
        def label(atom: Atom) -> str:
            return "lane" if atom is LANE else getattr(atom, "name", "expr")
        parts = [f"{c}*{label(a)}" for a, c in self.terms.items()]
        return " + ".join(parts + [str(self.const)])


Env = Mapping[Var, "Lin | None"]  # None: varies across lanes in no affine way


def varies(e: Expr, env: Env) -> bool:
    """Whether `e` may differ between the lanes of a vector chunk."""
    for v in collect(e, Var):
        if v in env and (env[v] is None or env[v].lane != 0):
            return True
    return False


def atom_key(e: Expr) -> object:
    """A hashable key equal for equal expressions (variables and buffers by identity)."""
    if isinstance(e, Var):
        return e
    parts: list[object] = [type(e).__name__]
    for f in dataclasses.fields(e):
        value = getattr(e, f.name)
        if isinstance(value, Expr):
            value = atom_key(value)
        elif isinstance(value, tuple):
            value = tuple(atom_key(v) if isinstance(v, Expr) else v for v in value)
        parts.append(value)
    return tuple(parts)


Ranges = Mapping[Atom, tuple[int, int]]  # [lo, hi] of atoms (loop variables, the lane)


def linear(e: Expr, env: Env, ranges: Ranges | None = None) -> Lin | None:
    """`e` as an affine form; None when it varies across lanes in no affine way. Variables
    missing from `env` and non-affine uniform subexpressions (keyed by `atom_key`) become
    atoms of their own; `ranges` lets floor division and modulo by constants simplify."""
    if isinstance(e, IntImm) and e.dtype != "bool":
        return Lin(None, e.value)
    if isinstance(e, Var):
        return env[e] if e in env else Lin.atom(e)
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "//", "%") and not is_float(e.dtype):
        out = _linear_binop(e, env, ranges or {})
        if out is not None:
            return out
    return None if varies(e, env) else Lin.atom(atom_key(e))


@dataclasses.dataclass(frozen=True)
class Bounded:
    """The atom of a uniform floor division or modulo by a constant that does not simplify
    (the head and the row of a fused loop `i // 197`, `i % 197`), with the range it takes:
    bounds proofs see through it."""

    key: object
    lo: int
    hi: int


def _quotient_atom(e: BinOp, a: Lin, d: int, ranges: Ranges) -> Lin | None:
    """`e` = a // d or a % d that does not simplify, as a Bounded atom when a is uniform
    (no lane term) and its range known and nonnegative; None otherwise."""
    span = interval(a, ranges) if a.lane == 0 else None
    if span is None or span[0] < 0:
        return None
    lo, hi = (span[0] // d, span[1] // d) if e.op == "//" else (0, min(d - 1, span[1]))
    return Lin.atom(Bounded(atom_key(e), lo, hi))


def _linear_binop(e: BinOp, env: Env, ranges: Ranges) -> Lin | None:
    a, b = linear(e.a, env, ranges), linear(e.b, env, ranges)
    if a is None or b is None:
        return None
    if e.op == "+":
        return a + b
    if e.op == "-":
        return a + b.scale(-1)
    if e.op == "*":
        return a.scale(b.const) if b.is_const else b.scale(a.const) if a.is_const else None
    d = b.const
    if not b.is_const or d <= 0:
        return None
    # a = d*q + r with q integral; when 0 <= r < d, a // d = q and a % d = r
    q = Lin({t: c // d for t, c in a.terms.items() if c % d == 0}, a.const // d)
    r = Lin({t: c for t, c in a.terms.items() if c % d}, a.const % d)
    if not r.is_const:
        span = interval(r, ranges)
        if span is None or span[0] < 0 or span[1] >= d:
            return _quotient_atom(e, a, d, ranges)
    return q if e.op == "//" else r


def interval(form: Lin, ranges: Ranges) -> tuple[int, int] | None:
    """[lo, hi] of an affine form over atoms with known ranges; None if an atom has none."""
    lo = hi = form.const
    for a, c in form.terms.items():
        if isinstance(a, Bounded):
            r0, r1 = a.lo, a.hi
        elif a in ranges:
            r0, r1 = ranges[a]
        else:
            return None
        lo, hi = lo + min(c * r0, c * r1), hi + max(c * r0, c * r1)
    return lo, hi


def conjuncts(e: Expr) -> list[Expr]:
    """The terms of a condition's top-level `and`s (the condition itself when it has none)."""
    if isinstance(e, BinOp) and e.op == "and":
        return conjuncts(e.a) + conjuncts(e.b)
    return [e]


def negative_form(c: Expr) -> Lin | None:
    """Condition `c` as `f < 0` with f affine (integers: a <= b is a - b - 1 < 0); None for
    any other condition."""
    if not isinstance(c, BinOp) or c.op not in ("<", "<=", ">", ">="):
        return None
    a, b = linear(c.a, {}), linear(c.b, {})
    if a is None or b is None:
        return None
    f = a + b.scale(-1) if c.op in ("<", "<=") else b + a.scale(-1)
    return f + Lin(None, -1) if c.op in ("<=", ">=") else f


def flat_index(buf: Buffer, indices: tuple[Expr, ...], env: Env,
               ranges: Ranges | None = None) -> Lin | None:
    """The row-major element offset of `buf[indices]` as an affine form."""
    out = Lin()
    for idx, stride in zip(indices, buf.strides):
        form = linear(idx, env, ranges)
        if form is None:
            return None
        out = out + form.scale(stride)
    return out


__all__ = ["LANE", "Lin", "linear", "flat_index", "interval", "is_nonnegative", "is_positive_const",
           "conjuncts", "negative_form"]
