"""Substitution with constant folding, for the passes that copy code per iteration or lane."""
from __future__ import annotations

from typing import Any, Mapping

from tessel.ir import BinOp, Expr, IfThenElse, IntImm, Select, SeqStmt, Var, transform
from tessel.ir.expr import binop


def substitute_folding(node: Any, vmap: Mapping[Var, Expr]) -> Any:
    """`node` with variables replaced, and operations on the constants this makes folded (as
    `tessel.ir.binop` folds: x + 0, x * 1, 2 * 3, 3 < 5, ...); a branch or select whose
    condition became a constant is replaced by the side taken."""
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
    return transform(node, fn)
