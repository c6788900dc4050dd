"""Statements under an analyzer: `simplify_stmt` simplifies every index expression of a tree,
binding loop vars on the way down; `analyzer_at` knows the ranges along a path into one."""
from __future__ import annotations

import dataclasses

from tessel.arith.analyzer import Analyzer
from tessel.ir import (Block, BlockRealize, BufferRegion, BufferStore, Expr, For, IfThenElse,
                       IntImm, SeqStmt, Stmt, seq)
from tessel.ir.expr import logical_not


def simplify_stmt(stmt: Stmt, analyzer: Analyzer | None = None) -> Stmt:
    """stmt with simplified load/store indices, values, block bindings, predicates, read/write
    regions and conditions. Inside a loop its var ranges over [0, extent); inside a block its
    iter vars range over theirs; inside `if c` the analyzer assumes c. Unchanged subtrees are
    returned as they were (same objects)."""
    return _StmtSimplifier(analyzer or Analyzer()).stmt(stmt)


def analyzer_at(path: list) -> Analyzer:
    """An analyzer knowing the ranges of the loops and block iter vars along `path`."""
    ana = Analyzer()
    for node in path:
        if isinstance(node, For):
            ana.update(node.loop_var, node.extent)
        elif isinstance(node, Block):
            for iv in node.iter_vars:
                ana.update(iv.var, iv.extent)
    return ana


def _replace(node, **changes):
    same = all(getattr(node, k) is v for k, v in changes.items())
    return node if same else dataclasses.replace(node, **changes)


def _same_tuple(new: tuple, old: tuple) -> tuple:
    return old if all(a is b for a, b in zip(new, old)) else new


class _StmtSimplifier:
    def __init__(self, ana: Analyzer) -> None:
        self.ana = ana

    def e(self, x: Expr) -> Expr:
        return self.ana.simp(x)

    def exprs(self, xs: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return _same_tuple(tuple(self.e(x) for x in xs), xs)

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            with self.ana.scope({s.loop_var: s.extent}):
                return _replace(s, body=self.stmt(s.body))
        if isinstance(s, SeqStmt):
            parts = tuple(self.stmt(x) for x in s.seq)
            return s if all(a is b for a, b in zip(parts, s.seq)) else seq(*parts)
        if isinstance(s, BufferStore):
            return _replace(s, value=self.e(s.value), indices=self.exprs(s.indices))
        if isinstance(s, BlockRealize):
            return _replace(s, iter_values=self.exprs(s.iter_values),
                            predicate=self.e(s.predicate), block=self.stmt(s.block))
        if isinstance(s, Block):
            return self.block(s)
        if isinstance(s, IfThenElse):
            return self.if_then_else(s)
        return s

    def block(self, b: Block) -> Block:
        with self.ana.scope({iv.var: iv.extent for iv in b.iter_vars}):
            return _replace(b, reads=self.regions(b.reads), writes=self.regions(b.writes),
                            body=self.stmt(b.body),
                            init=None if b.init is None else self.stmt(b.init))

    def regions(self, regions: tuple[BufferRegion, ...]) -> tuple[BufferRegion, ...]:
        out = []
        for r in regions:
            ranges = tuple(_replace(rng, min=self.e(rng.min), extent=self.e(rng.extent))
                           for rng in r.region)
            out.append(_replace(r, region=_same_tuple(ranges, r.region)))
        return _same_tuple(tuple(out), regions)

    def if_then_else(self, s: IfThenElse) -> Stmt:
        cond = self.e(s.condition)
        if isinstance(cond, IntImm):
            taken = s.then_case if cond.value else s.else_case
            return self.stmt(taken) if taken is not None else seq()
        with self.ana.scope(assume=cond):
            then_case = self.stmt(s.then_case)
        else_case = None
        if s.else_case is not None:
            with self.ana.scope(assume=logical_not(cond)):
                else_case = self.stmt(s.else_case)
        return _replace(s, condition=cond, then_case=then_case, else_case=else_case)

