"""Scalar expressions of the loop-nest IR.

Nodes are immutable. Equality and hashing are by identity (two `Var("i")` are different
variables); structural comparison lives in `tessel.ir.structural`. Python operators build
expressions: `i * 4 + j`, `x < 0`, `a // 8`, `-x`, `k % 2 == 0`. As in TVM, `a == b` builds an
expression whose truth value (in `if`, dict lookups, `in`) is object identity, so nodes still
work as dict keys; any other expression refuses a truth value.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from tessel.errors import TesselError

if TYPE_CHECKING:
    from tessel.ir.buffer import Buffer

DTYPE_BITS = {
    "bool": 8, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32,
    "int64": 64, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
}
INDEX_DTYPE = "int32"


class IRError(TesselError, TypeError):
    """An IR node was built from operands that do not fit together."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise IRError(msg)


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def numpy_dtype(dtype: str):
    """The numpy dtype of an IR dtype ("bool" is numpy's bool_; "bfloat16" is ml_dtypes')."""
    import numpy as np
    if dtype == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(np.bool_ if dtype == "bool" else dtype)


def is_int(dtype: str) -> bool:
    return dtype.startswith("int") or dtype.startswith("uint")


def check_dtype(dtype: str) -> str:
    check(dtype in DTYPE_BITS, f"unknown dtype {dtype!r}; expected one of {sorted(DTYPE_BITS)}")
    return dtype


ExprLike = Union["Expr", int, float, bool]


class Expr:
    """Base of all scalar expressions. Subclasses are frozen dataclasses with a `dtype`."""

    __slots__ = ()
    dtype: str

    def __add__(self, o: ExprLike) -> Expr: return binop("+", self, o)
    def __radd__(self, o: ExprLike) -> Expr: return binop("+", o, self)
    def __sub__(self, o: ExprLike) -> Expr: return binop("-", self, o)
    def __rsub__(self, o: ExprLike) -> Expr: return binop("-", o, self)
    def __mul__(self, o: ExprLike) -> Expr: return binop("*", self, o)
    def __rmul__(self, o: ExprLike) -> Expr: return binop("*", o, self)
    def __truediv__(self, o: ExprLike) -> Expr: return binop("/", self, o)
    def __rtruediv__(self, o: ExprLike) -> Expr: return binop("/", o, self)
    def __floordiv__(self, o: ExprLike) -> Expr: return binop("//", self, o)
    def __rfloordiv__(self, o: ExprLike) -> Expr: return binop("//", o, self)
    def __mod__(self, o: ExprLike) -> Expr: return binop("%", self, o)
    def __rmod__(self, o: ExprLike) -> Expr: return binop("%", o, self)
    def __lt__(self, o: ExprLike) -> Expr: return binop("<", self, o)
    def __le__(self, o: ExprLike) -> Expr: return binop("<=", self, o)
    def __gt__(self, o: ExprLike) -> Expr: return binop(">", self, o)
    def __ge__(self, o: ExprLike) -> Expr: return binop(">=", self, o)
    def __and__(self, o: ExprLike) -> Expr: return binop("and", self, o)
    def __rand__(self, o: ExprLike) -> Expr: return binop("and", o, self)
    def __or__(self, o: ExprLike) -> Expr: return binop("or", self, o)
    def __ror__(self, o: ExprLike) -> Expr: return binop("or", o, self)
    def __eq__(self, o: ExprLike) -> Expr: return binop("==", self, o)  # type: ignore[override]
    def __ne__(self, o: ExprLike) -> Expr: return binop("!=", self, o)  # type: ignore[override]
    def __invert__(self) -> Expr: return logical_not(self)
    def astype(self, dtype: str) -> Expr: return cast(dtype, self)
    def __neg__(self) -> Expr: return binop("-", const(0, self.dtype), self)

    def __bool__(self) -> bool:
        raise IRError("an IR expression has no truth value; use ir.eq/logical ops to build "
                      "conditions, and structural_equal to compare expressions")

    def __repr__(self) -> str:
        from tessel.ir.printer import expr_str
        return expr_str(self)

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False, repr=False)
class Var(Expr):
    """A scalar variable: a loop variable, a block iteration variable or a parameter."""

    name: str
    dtype: str = INDEX_DTYPE


@dataclass(frozen=True, eq=False, repr=False)
class IntImm(Expr):
    value: int
    dtype: str = INDEX_DTYPE

    def __bool__(self) -> bool:
        if self.dtype == "bool":  # a folded comparison
            return bool(self.value)
        return Expr.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class FloatImm(Expr):
    value: float
    dtype: str = "float32"


@dataclass(frozen=True, eq=False, repr=False)
class BinOp(Expr):
    """`a <op> b`. Arithmetic ops: + - * / // % min max; comparisons: < <= > >= == !=;
    logic: and or. `//` and `%` are floor division and floor modulo (Python semantics);
    min and max of floats propagate NaN from either operand (torch.maximum, np.maximum,
    ONNX Runtime's Relu, Max, Clip): `eval_minmax`."""

    op: str
    a: Expr
    b: Expr
    dtype: str

    def __bool__(self) -> bool:
        if self.op in ("==", "!="):  # Python asked `a == b` as a question: identity
            return (self.a is self.b) == (self.op == "==")
        return Expr.__bool__(self)


@dataclass(frozen=True, eq=False, repr=False)
class Not(Expr):
    a: Expr
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Select(Expr):
    """`true_value if cond else false_value`; only the chosen branch is evaluated."""

    cond: Expr
    true_value: Expr
    false_value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Cast(Expr):
    value: Expr
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Call(Expr):
    """A pure math intrinsic such as exp, sqrt or pow (see INTRINSICS)."""

    name: str
    args: tuple[Expr, ...]
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class BufferLoad(Expr):
    buffer: "Buffer"
    indices: tuple[Expr, ...]
    dtype: str


ARITH_OPS = ("+", "-", "*", "/", "//", "%", "min", "max")
CMP_OPS = ("<", "<=", ">", ">=", "==", "!=")
LOGIC_OPS = ("and", "or")
# name -> number of arguments; all take and return one floating dtype
INTRINSICS = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "tanh": 1, "erf": 1, "sigmoid": 1,
    "abs": 1, "floor": 1, "ceil": 1, "round": 1, "pow": 2,
}  # round: to the nearest integer, ties to even (ONNX, numpy, torch; C's nearbyint)


def const(value: int | float | bool, dtype: str | None = None) -> Expr:
    """A literal; the dtype defaults to int32 for ints, float32 for floats, bool for bools."""
    if isinstance(value, bool) and dtype in (None, "bool"):
        return IntImm(int(value), "bool")
    if dtype is None:
        dtype = "float32" if isinstance(value, float) else INDEX_DTYPE
    check_dtype(dtype)
    if is_float(dtype):
        return FloatImm(_round_to(float(value), dtype), dtype)
    check(isinstance(value, int) or float(value) == int(value),  # (2**63 - 1 is no float)
          f"cannot make a {dtype} constant from {value!r}")
    return IntImm(int(value), dtype)


def _round_to(value: float, dtype: str) -> float:
    """The nearest value representable in `dtype` (so float32 0.1 is stored as such)."""
    import numpy as np
    return float(np.asarray(value, dtype=numpy_dtype(dtype))) if dtype != "float64" else value


def convert(value: ExprLike, like: str | None = None) -> Expr:
    """Turn a Python number into a constant of dtype `like` (or its default dtype)."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, (bool, int, float)) or hasattr(value, "dtype"):
        if like is not None and isinstance(value, float) and not is_float(like):
            raise IRError(f"float constant {value!r} used with an {like} operand; cast first")
        return const(value.item() if hasattr(value, "item") else value, like)
    raise IRError(f"cannot use {type(value).__name__} {value!r} in an IR expression")


def _operands(a: ExprLike, b: ExprLike) -> tuple[Expr, Expr]:
    if not isinstance(a, Expr):
        b = convert(b)
        a = convert(a, b.dtype)
    else:
        b = convert(b, a.dtype)
    if a.dtype != b.dtype:
        raise IRError(f"operand dtypes differ: {a!r} is {a.dtype}, {b!r} is {b.dtype}; "
                      "insert a cast")
    return a, b


def _fold(op: str, x: int | float, y: int | float, dtype: str) -> Expr | None:
    if op in ("//", "%", "/") and y == 0:
        return None
    if op == "/" and not is_float(dtype):
        return None
    if op in ("//", "%") and is_float(dtype):
        return None
    fns = {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "/": lambda: x / y,
           "//": lambda: x // y, "%": lambda: x % y, "min": lambda: eval_minmax("min", x, y),
           "max": lambda: eval_minmax("max", x, y)}
    if op in fns:
        return const(fns[op](), dtype)
    cmp = {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y, "==": x == y, "!=": x != y,
           "and": bool(x) and bool(y), "or": bool(x) or bool(y)}
    return const(bool(cmp[op]))


def _imm(e: Expr) -> int | float | None:
    return e.value if isinstance(e, (IntImm, FloatImm)) else None


def binop(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build `a op b`, folding constants and the identities x+0, x*1, x*0 (ints), x//1, x%1."""
    a, b = _operands(a, b)
    ca, cb = _imm(a), _imm(b)
    if op in LOGIC_OPS:
        check(a.dtype == "bool", f"'{op}' needs boolean operands, got {a.dtype}")
    elif op == "/" and not is_float(a.dtype):
        raise IRError(f"'/' on {a.dtype} operands; use '//' (floor division) for integers")
    elif op not in ARITH_OPS + CMP_OPS:
        raise IRError(f"unknown binary operator {op!r}")
    if ca is not None and cb is not None:
        folded = _fold(op, ca, cb, a.dtype)
        if folded is not None:
            return folded
    simple = _identity(op, a, b, ca, cb)
    if simple is not None:
        return simple
    dtype = "bool" if op in CMP_OPS else a.dtype
    return BinOp(op, a, b, dtype)


def _identity(op: str, a: Expr, b: Expr, ca, cb) -> Expr | None:
    integer = is_int(a.dtype)
    if op == "+":
        return b if ca == 0 else a if cb == 0 else None
    if op == "-":
        return a if cb == 0 else None
    if op == "*":
        if ca == 1:
            return b
        if cb == 1:
            return a
        if integer and (ca == 0 or cb == 0):
            return const(0, a.dtype)
    if op in ("//", "/") and cb == 1:
        return a
    if op == "%" and cb == 1 and integer:
        return const(0, a.dtype)
    if op in ("%", "//") and integer and isinstance(cb, int) and cb > 1:
        aligned = _aligned(a, cb)
        if aligned is not None:  # (x * k + r) with c | k: floor semantics, any sign of x
            x, k, r = aligned
            if op == "%":
                return const(r % cb, a.dtype)
            return binop("+", binop("*", x, const(k // cb, a.dtype)), const(r // cb, a.dtype))
    if op == "and":
        return b if ca == 1 else a if cb == 1 else (const(False) if 0 in (ca, cb) else None)
    if op == "or":
        return a if cb == 0 else b if ca == 0 else (const(True) if 1 in (ca, cb) else None)
    return None


def _aligned(a: Expr, c: int) -> tuple[Expr, int, int] | None:
    """(x, k, r) when `a` is x * k + r (or x * k, k * x) with constants k, r and c dividing k:
    a loop split by c with its inner loop a constant (y = yo * 4 + 2) reads as a multiple
    of c plus a remainder, so y % 4 and y // 4 fold (to 2 and yo)."""
    r = 0
    if isinstance(a, BinOp) and a.op == "+" and isinstance(a.b, IntImm):
        a, r = a.a, a.b.value
    if not (isinstance(a, BinOp) and a.op == "*"):
        return None
    x, k = (a.a, a.b.value) if isinstance(a.b, IntImm) else (
        (a.b, a.a.value) if isinstance(a.a, IntImm) else (None, 0))
    return (x, k, r) if x is not None and k % c == 0 else None


def eq(a: ExprLike, b: ExprLike) -> Expr:
    return binop("==", a, b)


def ne(a: ExprLike, b: ExprLike) -> Expr:
    return binop("!=", a, b)


def min_(a: ExprLike, b: ExprLike) -> Expr:
    return binop("min", a, b)


def max_(a: ExprLike, b: ExprLike) -> Expr:
    return binop("max", a, b)


def logical_and(*conds: ExprLike) -> Expr:
    out: Expr = const(True)
    for c in conds:
        out = binop("and", out, c)
    return out


def logical_not(a: ExprLike) -> Expr:
    a = convert(a)
    check(a.dtype == "bool", f"'not' needs a boolean operand, got {a.dtype}")
    if isinstance(a, IntImm):
        return const(not a.value)
    return Not(a)


def select(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> Expr:
    cond = convert(cond)
    check(cond.dtype == "bool", f"select condition must be boolean, got {cond.dtype}")
    t, f = _operands(true_value, false_value)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Select(cond, t, f, t.dtype)


def cast(dtype: str, value: ExprLike) -> Expr:
    check_dtype(dtype)
    value = convert(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, (IntImm, FloatImm)):
        v = value.value
        return const(v if is_float(dtype) else int(v) if dtype != "bool" else bool(v), dtype)
    return Cast(value, dtype)


def call(name: str, *args: ExprLike) -> Expr:
    """A math intrinsic; constant arguments are evaluated right away."""
    check(name in INTRINSICS, f"unknown intrinsic {name!r}; known: {sorted(INTRINSICS)}")
    check(len(args) == INTRINSICS[name],
          f"{name} takes {INTRINSICS[name]} argument(s), got {len(args)}")
    first = convert(args[0], "float32")
    exprs = tuple([first] + [convert(a, first.dtype) for a in args[1:]])
    for e in exprs:
        check(is_float(e.dtype), f"{name} needs floating-point arguments, got {e.dtype}")
        check(e.dtype == first.dtype, f"{name} arguments have different dtypes")
    return Call(name, exprs, first.dtype)


def eval_intrinsic(name: str, *xs: float) -> float:
    """Reference semantics of an intrinsic on Python floats (used by tests and folding)."""
    table = {
        "exp": math.exp, "log": math.log, "sqrt": math.sqrt, "tanh": math.tanh,
        "erf": math.erf, "abs": abs, "floor": math.floor, "ceil": math.ceil, "pow": math.pow,
        "round": lambda x: float(round(x)) if math.isfinite(x) else x,
        "rsqrt": lambda x: 1.0 / math.sqrt(x), "sigmoid": lambda x: 1.0 / (1.0 + math.exp(-x)),
    }
    return table[name](*xs)


def eval_minmax(op: str, x: int | float, y: int | float) -> int | float:
    """Reference semantics of min and max: a NaN operand (either one) is the result."""
    if x != x:
        return x
    if y != y:
        return y
    return min(x, y) if op == "min" else max(x, y)


def is_true(e: Expr) -> bool:
    """Whether `e` is the constant true (a nonzero integer constant)."""
    return isinstance(e, IntImm) and bool(e.value)


def as_int(e: ExprLike) -> int | None:
    """The value of an integer constant, else None."""
    if isinstance(e, int):
        return e
    return e.value if isinstance(e, IntImm) else None
