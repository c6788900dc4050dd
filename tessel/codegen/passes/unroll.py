"""Loop unrolling: which loops the generator copies out and which it leaves to the compiler.

Loops of extent 1 disappear (their variable is 0).

An "unrolled" loop of extent <= MAX_UNROLL_EXTENT whose copies hold at most UNROLL_BUDGET
stores is copied out here, its variable a constant in each copy (so later passes see
constant element offsets: what register promotion needs). So is a serial loop under a
`pragma_auto_unroll_max_step` annotation with `pragma_unroll_explicit` (TVM's UnrollLoop)
when its nest, counting a vectorized loop once, runs at most max_step times. Other
"unrolled" loops, and serial ones under the annotation within its step count, become serial
loops annotated `pragma_unroll: n` for the compiler (`#pragma GCC unroll n`).
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel.codegen.lowered import LoweredFunc
from tessel.codegen.passes.fold import Mentions, substitute_folding
from tessel.ir import BufferStore, For, IntImm, Stmt, StmtMutator, children, seq

MAX_UNROLL = 65534  # the largest factor `#pragma GCC unroll` accepts
MAX_UNROLL_EXTENT = 32  # "unrolled" loops up to this extent are unrolled here...
UNROLL_BUDGET = 512  # ...when the unrolled nest has at most this many stores


@dataclass(frozen=True)
class _Auto:
    """The auto-unroll annotation in force: max step, and whether unrolled here."""

    max_step: int = 0
    explicit: bool = False


def unroll(func: LoweredFunc, max_step: int | None = None) -> LoweredFunc:
    """`max_step`: a cap on every pragma_auto_unroll_max_step (None: as annotated). Code
    generation lowers a kernel again under a cap when its unrolled C would be too long."""
    return func.with_body(_Unroller(max_step).stmt(func.body))


class _Unroller(StmtMutator):
    def __init__(self, cap: int | None) -> None:
        self.cap = cap
        self.auto = _Auto()  # the annotation in force around the current statement

    def loop(self, s: For) -> Stmt:
        saved = self.auto
        step = s.annotations.get("pragma_auto_unroll_max_step", 0)
        if isinstance(step, int) and step > 0:
            step = step if self.cap is None else min(step, self.cap)
            self.auto = _Auto(max(saved.max_step, step),
                              bool(s.annotations.get("pragma_unroll_explicit", False)))
        out = self.unrolled(s)
        self.auto = saved
        return out

    def unrolled(self, s: For) -> Stmt:
        if s.extent == 1:  # the variable is 0: later passes see constant offsets
            return substitute_folding(self.stmt(s.body),
                                      {s.loop_var: IntImm(0, s.loop_var.dtype)})
        if explicit_unroll(s) or _auto_unroll_here(s, self.auto):
            body = self.stmt(s.body)
            mentions = Mentions([s.loop_var])  # the body is searched once for all copies
            return seq(*(substitute_folding(body, {s.loop_var: IntImm(v, s.loop_var.dtype)},
                                            mentions) for v in range(s.extent)))
        annotations = dict(s.annotations)
        kind = s.kind
        if s.kind == "unrolled" or (s.kind == "serial" and self.auto.max_step
                                    and 1 < trip_count(s) <= self.auto.max_step):
            annotations["pragma_unroll"] = min(s.extent, MAX_UNROLL)
            kind = "serial" if s.kind == "unrolled" else s.kind
        return For(s.loop_var, s.extent, self.stmt(s.body), kind, s.thread, annotations)


def explicit_unroll(s: For) -> bool:
    """Whether loop `s` is copied out here for its own kind ("unrolled")."""
    return (s.kind == "unrolled" and s.extent <= MAX_UNROLL_EXTENT
            and unrolled_stores(s, MAX_UNROLL_EXTENT) <= UNROLL_BUDGET)


def _auto_unroll_here(s: For, auto: _Auto) -> bool:
    return (auto.explicit and s.kind == "serial" and s.extent <= MAX_UNROLL_EXTENT
            and 1 < trip_count(s, vectors=True) <= auto.max_step
            and unrolled_stores(s, MAX_UNROLL_EXTENT) * s.extent <= UNROLL_BUDGET)


def trip_count(s: Stmt, vectors: bool = False) -> int:
    """Iterations of the deepest loop nest in `s`; with `vectors`, a vectorized loop counts
    once."""
    if isinstance(s, For):
        inner = trip_count(s.body, vectors)
        return inner if vectors and s.kind == "vectorized" else s.extent * inner
    return max((trip_count(c, vectors) for c in children(s) if isinstance(c, Stmt)), default=1)


def unrolled_stores(s: Stmt, max_extent: int) -> int:
    """Stores in `s` once its "unrolled" loops of extent <= max_extent are unrolled."""
    if isinstance(s, BufferStore):
        return 1
    inner = sum(unrolled_stores(c, max_extent) for c in children(s) if isinstance(c, Stmt))
    if isinstance(s, For) and s.kind == "unrolled" and s.extent <= max_extent:
        return inner * s.extent
    return inner
