"""Peeling a guarded vector tail (the pass between unrolling and vectorization).

A loop split by the vector width over an extent the width does not divide keeps a guard:

    for o in range(94):                         for o in range(93):
        for l in vectorized(16):                    for l in vectorized(16):
            if o * 16 + l < 1500:         ->            body
                body                            for l_t in vectorized(12):
                                                    body[o := 93, l := l_t]

Every iteration but the last passes the guard in all lanes; the vectorizer cannot know that
inside a loop (it checks the guard chunk by chunk at run time, and a select's branches it
may not evaluate where a lane could load past the buffer), so a softmax's exponentials over
rows of 1500 stayed scalar. Here the guard's conjuncts are affine in the two loops alone
(tessel.codegen.passes.affine); the loop is peeled when all hold before the last iteration,
and the last iteration's vector loop runs only the lanes its guard admits.
"""
from __future__ import annotations

from tessel.codegen.lowered import Comment, LoweredFunc
from tessel.codegen.passes.affine import Lin, conjuncts, interval, negative_form
from tessel.codegen.passes.fold import substitute_folding
from tessel.ir import (Expr, For, IfThenElse, IntImm, SeqStmt, Stmt, Var, seq,
                       transform)


def peel_tails(func: LoweredFunc) -> LoweredFunc:
    """`func` with its guarded vector tails peeled (see the module docstring)."""
    body = transform(func.body, lambda node: _peel(node) if isinstance(node, For) else None)
    return func if body is func.body else func.with_body(body)


def _peel(s: For) -> Stmt | None:
    inner = s.body
    if s.kind != "serial" or s.extent < 2 or not isinstance(inner, For) or \
            inner.kind != "vectorized":
        return None
    parts = list(inner.body.seq) if isinstance(inner.body, SeqStmt) else [inner.body]
    guards = [p for p in parts if isinstance(p, IfThenElse)]
    if len(guards) != 1 or guards[0].else_case is not None or \
            any(not isinstance(p, (IfThenElse, Comment)) for p in parts):
        return None
    guard = guards[0]
    o, lane, last = s.loop_var, inner.loop_var, s.extent - 1
    forms = [_negative_form(c, o, lane) for c in conjuncts(guard.condition)]
    if any(f is None for f in forms):
        return None
    before_last = {o: (0, last - 1), lane: (0, inner.extent - 1)}
    if any(interval(f, before_last)[1] >= 0 for f in forms):
        return None
    # the last iteration: each conjunct `k * lane + c < 0` with k > 0 admits a prefix
    width = inner.extent
    for f in forms:
        k, c = f.terms.get(lane, 0), f.const + f.terms.get(o, 0) * last
        if k <= 0:
            return None
        width = min(width, max(0, -(c // k)))  # the lanes below -c / k
    unguarded = seq(*(guard.then_case if p is guard else p for p in parts))
    main = For(o, last, For(lane, inner.extent, unguarded, inner.kind, inner.thread,
                            dict(inner.annotations)), s.kind, s.thread, dict(s.annotations))
    if last == 1:
        main = substitute_folding(main.body, {o: IntImm(0, o.dtype)})
    if width == 0:
        return main
    tail_lane = Var(f"{lane.name}_t", lane.dtype)
    tail = For(tail_lane, width, substitute_folding(
        unguarded, {o: IntImm(last, o.dtype), lane: tail_lane}), inner.kind, inner.thread,
        dict(inner.annotations))
    return seq(main, tail)


def _negative_form(c: Expr, o: Var, lane: Var) -> Lin | None:
    """`c` as `f < 0` with f affine in `o` and `lane` alone; None for any other condition."""
    f = negative_form(c)
    if f is None or any(atom is not o and atom is not lane for atom in f.terms):
        return None
    return f


__all__ = ["peel_tails"]
