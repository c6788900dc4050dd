"""Affine views of index expressions, used by lowering to detect block regions."""
from __future__ import annotations

from tessel.arith.analyzer import Analyzer
from tessel.ir import Expr, IRError, Var, is_int, uses_var


def linear_form(e: Expr, analyzer: Analyzer | None = None) -> dict[object, int] | None:
    """e as {var: coef, ..., 1: const} when its canonical form is affine in its variables,
    else None. Zero coefficients are left out (the constant too, when it is 0)."""
    if not is_int(e.dtype):
        return None
    s = (analyzer or Analyzer()).sum_of(e)
    out: dict[object, int] = {}
    for coef, atoms in s.terms.values():
        if len(atoms) != 1 or atoms[0].kind != "var":
            return None
        var: Var = atoms[0].args[0]
        out[var] = coef
    if s.const:
        out[1] = s.const
    return out


def steps_by_one(e: Expr, var: Var) -> bool:
    """Whether `e` moves by one as `var` counts (affine, coefficient 1), or does not use it."""
    if not uses_var(e, var):
        return True
    form = linear_form(e)
    return form is not None and form.get(var, 0) == 1


def const_offset(a: Expr, b: Expr, analyzer: Analyzer | None = None) -> int | None:
    """a - b when it simplifies to a constant, else None."""
    if a is b:
        return 0
    try:
        diff = (analyzer or Analyzer()).sum_of(a - b)
    except IRError:
        return None
    return diff.const if diff.is_const else None
