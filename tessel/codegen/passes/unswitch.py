"""Unswitching the guards of partial tiles (the pass after peeling vector tails).

A loop split by a factor that does not divide its extent leaves a guard on every statement
of the tile, evaluated inside the innermost loops. A register tile of six rows over 1024 rows
keeps `if (i0 * 24 + i1 * 6 + 5 < 1024)` on each of its twelve FMAs, inside the loop over k,
although only the last of 43 row blocks can fail it:

    for x in parallel(1376):                    for x in parallel(1376):
        for i1 in range(4):                         if x // 32 * 24 + 23 < 1024:
            for k in range(256):         ->             (the body without the guards)
                if x // 32 * 24 + i1 * 6 + 5 < 1024:  else:
                    ...                                 (the body as it was)

Each conjunct of a guard that is affine in the loops inside a loop L (their coefficients
read by tessel.codegen.passes.affine) is true for all their values exactly when it holds
at its worst corner: each inner loop at its last iteration where its coefficient raises the
left side, at its first where it lowers it. That corner depends on L's variable and the
loops outside only, and is tested once per iteration of L; where it holds, a copy of L's
body without those conjuncts runs. The copy with the guards stays for the partial tile, and
is searched again one level down (the last row block's whole tiles run unguarded too).
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from tessel.codegen.passes.affine import atom_key, conjuncts, negative_form
from tessel.codegen.passes.fold import substitute_folding
from tessel.codegen.lowered import LoweredFunc
from tessel.ir import (Expr, For, IfThenElse, IntImm, SeqStmt, Stmt, Var, collect,
                       collect_stmts, logical_and, substitute)

MAX_DEPTH = 2  # nested unswitches of one statement: each doubles the code under it
MAX_NODES = 20_000  # a loop body above this size keeps its guards (compile time)


def unswitch_guards(func: LoweredFunc) -> LoweredFunc:
    """`func` with guards hoisted out of the loops they do not depend on (module docstring)."""
    body = _visit(func.body, MAX_DEPTH)
    return func if body is func.body else func.with_body(body)


def _visit(s: Stmt, depth: int) -> Stmt:
    if isinstance(s, For) and s.kind != "vectorized" and depth > 0:
        out = _unswitch(s, depth)
        if out is not None:
            return out
    return _map_stmts(s, lambda c: _visit(c, depth))


def _unswitch(loop: For, depth: int) -> Stmt | None:
    inner = collect_stmts(loop.body, For)
    loops: dict[Var, int] = {}  # a variable bound by loops of two extents: the larger (sound)
    for f in inner:
        loops[f.loop_var] = max(f.extent, loops.get(f.loop_var, 0))
    # guards inside a loop under this one: tested more often than once per iteration here
    # (but a uniform guard inside a vector loop only is tested once per vector anyway)
    nested = {id(g): g for f in inner for g in collect_stmts(f.body, IfThenElse)}
    serial = {id(g) for f in inner if f.kind != "vectorized"
              for g in collect_stmts(f.body, IfThenElse)}
    hoisted: dict[object, tuple[int, Expr]] = {}  # the corner conditions (_keep_hardest)
    lifted: dict[int, tuple[IfThenElse, list[Expr]]] = {}  # guard -> conjuncts that stay
    for guard in nested.values():
        if guard.else_case is not None:
            continue
        stay, corners = [], []
        for c in conjuncts(guard.condition):
            corner = _corner(c, loops)
            if corner is None or not any(v is loop.loop_var for v in collect(corner, Var)) \
                    or (corner is c and id(guard) not in serial):
                stay.append(c)
            else:
                corners.append(corner)
        if corners:
            lifted[id(guard)] = (guard, stay)
            for corner in corners:
                _keep_hardest(hoisted, corner)
    if not lifted or _size(loop.body) > MAX_NODES:
        return None
    cond = logical_and(*[corner for _, corner in hoisted.values()])
    if _never(cond, loop):
        return None

    def strip(s: Stmt) -> Stmt | None:
        hit = lifted.get(id(s))
        if hit is None:
            return None
        guard, stay = hit
        then = _rebuild(guard.then_case, strip)
        return IfThenElse(logical_and(*stay), then) if stay else then
    whole = _visit(_rebuild(loop.body, strip), depth - 1)
    partial = _map_stmts(loop.body, lambda c: _visit(c, depth - 1))
    return For(loop.loop_var, loop.extent, IfThenElse(cond, whole, partial), loop.kind,
               loop.thread, dict(loop.annotations))


def _corner(c: Expr, loops: dict[Var, int]) -> Expr | None:
    """`c` at the corner of the inner loops where it is hardest to meet, if `c` is affine
    in them; None otherwise."""
    inner = [v for v in dict.fromkeys(collect(c, Var)) if v in loops]
    if not inner:
        return c
    form = negative_form(c)
    if form is None:
        return None
    # the inner loops must enter the form as terms of their own, not inside an opaque atom:
    # renamed, every other atom must stay the same
    fresh = {v: Var(f"{v.name}_r", v.dtype) for v in inner}
    renamed = negative_form(substitute(c, fresh))
    ours = {id(v) for v in inner} | {id(v) for v in fresh.values()}
    if renamed is None or {a for a in form.terms if id(a) not in ours} != \
            {a for a in renamed.terms if id(a) not in ours}:
        return None
    corner = {v: IntImm(loops[v] - 1 if form.terms.get(v, 0) > 0 else 0, v.dtype)
              for v in inner}
    return substitute_folding(c, corner)


def _keep_hardest(hoisted: dict[object, tuple[int, Expr]], corner: Expr) -> None:
    """Add `corner` to the conditions; of those `f + k < 0` that differ in k alone (one
    row of a tile each), the one with the largest k implies the others."""
    form = negative_form(corner)
    if form is None:
        hoisted.setdefault(atom_key(corner), (0, corner))
        return
    key = frozenset(form.terms.items())
    if key not in hoisted or hoisted[key][0] < form.const:
        hoisted[key] = (form.const, corner)


def _never(cond: Expr, loop: For) -> bool:
    """Whether the whole-tile copy could never run (false at the loop's first iteration,
    where the split's earlier tiles are the whole ones)."""
    first = substitute_folding(cond, {loop.loop_var: IntImm(0, loop.loop_var.dtype)})
    return isinstance(first, IntImm) and not first.value


def _size(s: Stmt) -> int:
    return len(collect_stmts(s, Stmt))


def _rebuild(s: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt:
    """`s` rebuilt top-down: fn's replacement where it gives one, else the children's."""
    out = fn(s)
    return out if out is not None else _map_stmts(s, lambda c: _rebuild(c, fn))


def _map_stmts(s: Stmt, fn: Callable[[Stmt], Stmt]) -> Stmt:
    """`s` with fn applied to each of its direct child statements."""
    changes = {}
    for f in dataclasses.fields(s):
        value = getattr(s, f.name)
        if isinstance(value, Stmt):
            new = fn(value)
        elif type(value) is tuple and value and all(isinstance(v, Stmt) for v in value):
            new = tuple(fn(v) for v in value)
            if all(a is b for a, b in zip(new, value)):
                new = value
        else:
            continue
        if new is not value:
            changes[f.name] = new
    if not changes:
        return s
    return SeqStmt(changes["seq"]) if isinstance(s, SeqStmt) else \
        dataclasses.replace(s, **changes)


__all__ = ["unswitch_guards"]
