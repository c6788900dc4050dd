"""Substitution with constant folding, for the passes that copy code per iteration or lane."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from tessel.ir import (BinOp, Expr, IfThenElse, IntImm, Select, SeqStmt, Var, children,
                       transform)
from tessel.ir.expr import binop


class Mentions:
    """Whether a node mentions any of `variables`, remembered per node: a body substituted
    once per lane or per unrolled copy is searched once, and `substitute_folding` leaves the
    parts that do not mention them untouched without looking inside."""

    def __init__(self, variables: Iterable[Var]) -> None:
        self.variables = frozenset(variables)
        self.memo: dict[int, tuple[Any, bool]] = {}

    def __call__(self, node: Any) -> bool:
        hit = self.memo.get(id(node))
        if hit is None:
            found = (node in self.variables if isinstance(node, Var)
                     else any(self(c) for c in children(node)))
            hit = self.memo[id(node)] = (node, found)  # holding node keeps its id unique
        return hit[1]


def substitute_folding(node: Any, vmap: Mapping[Var, Expr],
                       mentions: Mentions | None = None) -> Any:
    """`node` with variables replaced, and operations on the constants this makes folded (as
    `tessel.ir.binop` folds: x + 0, x * 1, 2 * 3, 3 < 5, ...); a branch or select whose
    condition became a constant is replaced by the side taken. With `mentions` (of vmap's
    variables), subtrees that mention none of them are kept as they are."""
    if not vmap:
        return node

    def fn(n: Any) -> Any:
        if isinstance(n, Var):
            return vmap.get(n)
        if isinstance(n, BinOp) and (isinstance(n.a, IntImm) or isinstance(n.b, IntImm)):
            return binop(n.op, n.a, n.b)
        if isinstance(n, IfThenElse) and isinstance(n.condition, IntImm):
            taken = n.then_case if n.condition.value else n.else_case
            return SeqStmt(()) if taken is None else taken
        if isinstance(n, Select) and isinstance(n.cond, IntImm):
            return n.true_value if n.cond.value else n.false_value
        return None
    return transform(node, fn, None if mentions is None else (lambda n: not mentions(n)))
