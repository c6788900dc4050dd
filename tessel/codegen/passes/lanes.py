"""A vector accumulator's lanes folded as a tree (the pass after register promotion).

A vectorized reduction (tessel.codegen.passes.reductions) ends by folding its vector of
partial results into the scalar, which after unrolling and register promotion reads

    acc = max(acc, %r[0]); acc = max(acc, %r[1]); ...; acc = max(acc, %r[15])

sixteen dependent steps (each a lane extract and a max: some 60 cycles a row, a softmax's
or a layer norm's two reductions a row each). Such a run becomes one `acc = max(acc,
fold_max(%r))`, which the printer writes as log2(lanes) whole-vector steps, each the vector
and its lanes rotated by half the remaining width. max and min are exact in any order (NaN
in any lane is the result's); sums are reassociated, as the vector accumulator already did.
"""
from __future__ import annotations

from tessel.codegen.lowered import LaneFold, LoweredFunc, Register
from tessel.ir import (BinOp, BufferLoad, BufferStore, SeqStmt, Stmt, seq, structural_equal,
                       transform)

FOLDED = ("+", "max", "min")


def fold_lanes(func: LoweredFunc) -> LoweredFunc:
    """`func` with each lane-by-lane fold of a register into one element as a tree."""
    body = transform(func.body, lambda n: _fold_runs(n) if isinstance(n, SeqStmt) else None)
    return func if body is func.body else func.with_body(body)


def _fold_runs(s: SeqStmt) -> Stmt | None:
    items, out, i = s.seq, [], 0
    while i < len(items):
        n = _run(items, i)
        if n:
            first = items[i]
            op, acc, reg = first.value.op, first.value.a, first.value.b
            whole = Register(reg.buffer, reg.start, reg.slot_lanes, reg.dtype)
            out.append(BufferStore(first.buffer, BinOp(op, acc, LaneFold(op, whole, reg.dtype),
                                                       first.value.dtype), first.indices))
            i += n
        else:
            out.append(items[i])
            i += 1
    return seq(*out) if len(out) != len(items) else None


def _run(items: tuple[Stmt, ...], i: int) -> int:
    """The number of statements from items[i] on that fold lanes 0, 1, ... of one register,
    in order and all of them, into one element by one op; 0 when they do not."""
    first = _step(items[i])
    if first is None or first.value.b.lane != 0:
        return 0
    reg = first.value.b
    n = reg.slot_lanes
    if n < 2 or n & (n - 1) or i + n > len(items):
        return 0
    for k in range(1, n):
        step = _step(items[i + k])
        if step is None or step.value.op != first.value.op or step.buffer is not first.buffer \
                or step.value.b.buffer is not reg.buffer or step.value.b.start != reg.start \
                or step.value.b.lane != k or \
                not all(structural_equal(a, b) for a, b in zip(step.indices, first.indices)):
            return 0
    return n


def _step(s: Stmt) -> BufferStore | None:
    """`s` when it is `acc[i] = op(acc[i], %r[lane])` of a float register lane."""
    if not isinstance(s, BufferStore) or not isinstance(s.value, BinOp):
        return None
    v = s.value
    if v.op not in FOLDED or v.dtype not in ("float32", "float64") or \
            not isinstance(v.b, Register) or v.b.lane is None or \
            not isinstance(v.a, BufferLoad) or v.a.buffer is not s.buffer or \
            not all(structural_equal(a, b) for a, b in zip(v.a.indices, s.indices)):
        return None
    return s


__all__ = ["fold_lanes"]
