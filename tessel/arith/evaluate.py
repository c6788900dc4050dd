"""Reference evaluation of IR expressions on Python numbers (for tests and constant checks)."""
from __future__ import annotations

import math
from typing import Any, Mapping

from tessel.ir import BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not, Select, Var
from tessel.ir.expr import eval_intrinsic, eval_minmax, is_float

_BINARY = {
    "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
    "//": lambda x, y: x // y, "%": lambda x, y: x % y,
    "min": lambda x, y: eval_minmax("min", x, y), "max": lambda x, y: eval_minmax("max", x, y),
    "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
    ">=": lambda x, y: x >= y, "==": lambda x, y: x == y, "!=": lambda x, y: x != y,
}


def evaluate(expr: Expr, env: Mapping[Any, Any]) -> int | float | bool:
    """The value of expr. `env` maps each Var to a number and each Buffer read to an array
    (a numpy array or nested lists). `//` and `%` are floor division and
    floor modulo; integer `/` truncates toward zero; `and`/`or`/select short-circuit."""
    if isinstance(expr, (IntImm, FloatImm)):
        return bool(expr.value) if expr.dtype == "bool" else expr.value
    if isinstance(expr, Var):
        if expr not in env:
            raise KeyError(f"no value for variable {expr.name}")
        return env[expr]
    if isinstance(expr, BinOp):
        return _binop(expr, env)
    if isinstance(expr, Not):
        return not evaluate(expr.a, env)
    if isinstance(expr, Select):
        branch = expr.true_value if evaluate(expr.cond, env) else expr.false_value
        return evaluate(branch, env)
    if isinstance(expr, Cast):
        return _cast(evaluate(expr.value, env), expr.dtype)
    if isinstance(expr, Call):
        return eval_intrinsic(expr.name, *(evaluate(a, env) for a in expr.args))
    if isinstance(expr, BufferLoad):
        idx = tuple(int(evaluate(i, env)) for i in expr.indices)
        return _index(env[expr.buffer], idx)
    raise TypeError(f"cannot evaluate {type(expr).__name__}")


def _binop(e: BinOp, env: Mapping[Any, Any]) -> int | float | bool:
    if e.op == "and":
        return bool(evaluate(e.a, env)) and bool(evaluate(e.b, env))
    if e.op == "or":
        return bool(evaluate(e.a, env)) or bool(evaluate(e.b, env))
    x, y = evaluate(e.a, env), evaluate(e.b, env)
    if e.op == "/":
        return x / y if is_float(e.dtype) else int(x / y) if y else _zero_div(e)
    if e.op in ("//", "%") and y == 0:
        _zero_div(e)
    out = _BINARY[e.op](x, y)
    if is_float(e.dtype) and e.op in ("//", "%"):
        return float(out)
    return out


def _index(array: Any, idx: tuple[int, ...]) -> Any:
    try:
        return array[idx]
    except TypeError:  # nested sequences such as lists of lists
        for i in idx:
            array = array[i]
        return array


def _zero_div(e: BinOp):
    raise ZeroDivisionError(f"division by zero in {e!r}")


def _cast(value, dtype: str):
    if dtype == "bool":
        return bool(value)
    if is_float(dtype):
        return float(value)
    return int(math.trunc(value))
