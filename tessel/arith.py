"""Integer index arithmetic (placeholder kernel; extended by the arith work)."""
from __future__ import annotations

from tessel import ir
from tessel.ir import BinOp, Expr, IntImm, Var


def linear_form(e: Expr) -> dict[object, int] | None:
    """e as {var: coef, 1: const} when e is affine in its variables, else None."""
    if isinstance(e, IntImm):
        return {1: e.value}
    if isinstance(e, Var):
        return {e: 1}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v != 0}
    if isinstance(e, BinOp) and e.op == "*":
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        for x, y in ((a, b), (b, a)):
            if set(y) <= {1}:
                c = y.get(1, 0)
                return {k: v * c for k, v in x.items() if v * c != 0}
    return None


def const_offset(a: Expr, b: Expr) -> int | None:
    """a - b when it is a constant, else None."""
    fa, fb = linear_form(a), linear_form(b)
    if fa is None or fb is None:
        return 0 if a is b else None
    diff = dict(fa)
    for k, v in fb.items():
        diff[k] = diff.get(k, 0) - v
    diff = {k: v for k, v in diff.items() if v != 0}
    return diff.get(1, 0) if set(diff) <= {1} else None
