"""Tensor expressions: describe *what* an operator computes, index by index.

    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_func([A, B, C], name="matmul")

`create_func` (lower.py) lowers the expression graph into a `PrimFunc` with one block per
compute.
"""
from __future__ import annotations

import builtins
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tessel import ir
from tessel.arith import Analyzer
from tessel.errors import TesselError
from tessel.ir import Buffer, Expr, IRError, Var
from tessel.ir.expr import ExprLike


class TEError(TesselError, ValueError):
    """A tensor expression is malformed (bad shape, stray reduction, missing argument)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise TEError(msg)


@dataclass(frozen=True, eq=False, repr=False)
class Axis(Var):
    """An index variable over [min, min + extent): a compute axis or a reduction axis."""

    extent: int = 1
    min: int = 0
    kind: str = ir.SPATIAL


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """`combiner` of `source` over `axes` (only where `where` holds). Must be the whole body
    of a compute."""

    combiner: str
    source: Expr
    axes: tuple[Axis, ...]
    where: Expr
    dtype: str

    def identity(self) -> Expr:
        return identity_of(self.combiner, self.dtype)

    def combine(self, acc: Expr, value: Expr) -> Expr:
        return acc + value if self.combiner == "sum" else ir.binop(self.combiner, acc, value)


@dataclass(frozen=True, eq=False)
class ComputeOp:
    axes: tuple[Axis, ...]
    body: Expr
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False, repr=False)
class Tensor(Buffer):
    """A Buffer with the operation that produces it (None for a placeholder)."""

    op: ComputeOp | None = None

    def __repr__(self) -> str:
        kind = "placeholder" if self.op is None else "compute"
        return f"Tensor({self.name}, {self.shape}, {self.dtype}, {kind})"


def identity_of(combiner: str, dtype: str) -> Expr:
    if combiner == "sum":
        return ir.const(0, dtype)
    if ir.is_float(dtype):
        return ir.const(float("-inf") if combiner == "max" else float("inf"), dtype)
    bits = ir.DTYPE_BITS[dtype]
    lo, hi = (0, 2**bits - 1) if dtype.startswith("u") else (-(2**(bits - 1)), 2**(bits - 1) - 1)
    return ir.const(lo if combiner == "max" else hi, dtype)


MAX_EXTENT = 2**31 - 1  # loops and indices are int32 (ir.INDEX_DTYPE)
MAX_BYTES = 2**48  # what a 64-bit machine can address (48-bit virtual addresses)


def _is_int(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)


def _shape(shape: int | Sequence[int], what: str) -> tuple[int, ...]:
    check(_is_int(shape) or isinstance(shape, (list, tuple)),
          f"{what}: shape must be an int or a tuple of ints, got {shape!r}")
    dims = (shape,) if _is_int(shape) else tuple(shape)
    for n in dims:
        check(_is_int(n) and n >= 1, f"{what}: shape {tuple(dims)} must be positive integers")
        check(n <= MAX_EXTENT, f"{what}: shape {dims} has a dimension of {n}; a dimension "
                               f"is at most 2**31 - 1 (indices are 32-bit)")
    return dims


def _check_bytes(what: str, dims: tuple[int, ...], dtype: str) -> None:
    """No buffer larger than a 64-bit machine can address (its size is said)."""
    nbytes = math.prod(dims) * ir.DTYPE_BITS[dtype] // 8
    check(nbytes <= MAX_BYTES, f"{what}: shape {dims} of {dtype} takes {_binary(nbytes)}, "
                               f"more than the 256 TiB (2**48 bytes) a machine can address")


def _binary(nbytes: int) -> str:
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    power = builtins.min(builtins.max(nbytes.bit_length() - 1, 0) // 10, len(units) - 1)
    return f"{nbytes / 1024**power:.4g} {units[power]}"


def placeholder(shape: int | Sequence[int], dtype: str = "float32", name: str = "X") -> Tensor:
    """An input tensor."""
    check(isinstance(name, str) and name != "", f"placeholder: name must be a non-empty str, "
                                                f"got {name!r}")
    dims, dtype = _shape(shape, f"placeholder {name}"), ir.expr.check_dtype(dtype)
    _check_bytes(f"placeholder {name}", dims, dtype)
    return Tensor(name, dims, dtype)


def reduce_axis(dom: int | tuple[int, int], name: str = "k") -> Axis:
    """A reduction axis over range(dom) or range(lo, hi)."""
    ok = _is_int(dom) or isinstance(dom, (list, tuple)) and len(dom) == 2 and \
        builtins.all(map(_is_int, dom))
    check(ok, f"reduce_axis {name}: range must be an int or a pair of ints, got {dom!r}")
    lo, hi = (0, dom) if _is_int(dom) else dom
    check(hi > lo, f"reduce_axis {name}: empty range {dom!r}")
    check(hi - lo <= MAX_EXTENT, f"reduce_axis {name}: range {dom!r} is longer than 2**31 - 1 "
                                 f"(indices are 32-bit)")
    return Axis(name, "int32", hi - lo, lo, ir.REDUCE)


def _axis_names(fcompute: Callable, ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if builtins.any(p.kind == p.VAR_POSITIONAL for p in params) or not params:
        return [f"i{d}" for d in range(ndim)]
    params = [p for p in params if p.default is p.empty and p.kind != p.VAR_KEYWORD]
    check(len(params) == ndim, f"compute over {ndim} dims needs a function of {ndim} indices, "
                               f"got one of {len(params)}")
    return [p.name for p in params]


def _contains_reduce(e: Expr) -> bool:
    return bool(ir.collect(e, Reduce))


def compute(shape: int | Sequence[int], fcompute: Callable[..., ExprLike], name: str = "T",
            attrs: dict[str, Any] | None = None) -> Tensor:
    """A tensor whose element at index (i, j, ...) is fcompute(i, j, ...)."""
    check(isinstance(name, str) and name != "", f"compute: name must be a non-empty str, "
                                                f"got {name!r}")
    dims = _shape(shape, f"compute {name}")
    check(callable(fcompute), f"compute {name}: fcompute must be a function of the indices, "
                              f"got {type(fcompute).__name__}")
    axes = tuple(Axis(n, "int32", extent) for n, extent in zip(_axis_names(fcompute, len(dims)), dims))
    body = ir.convert(fcompute(*axes))
    _check_bytes(f"compute {name}", dims, body.dtype)
    if isinstance(body, Reduce):
        check(not _contains_reduce(body.source), f"compute {name}: nested reduction")
        spatial = set(axes)
        for ax in body.axes:
            check(ax not in spatial, f"compute {name}: axis {ax.name} is both spatial and reduced")
    else:
        check(not _contains_reduce(body), f"compute {name}: a reduction must be the whole body "
              "of a compute; compute it into its own tensor first")
    check_accesses(name, body, axes)
    return Tensor(name, dims, body.dtype, op=ComputeOp(axes, body, dict(attrs or {})))


_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def check_accesses(name: str, body: Expr, axes: Sequence[Axis]) -> None:
    """TEError for a read outside its tensor or an integer division by zero that the compute
    can reach: a kernel would crash or read garbage. A read or division under an
    if_then_else (or a reduction's where=) is checked assuming its condition; one whose
    condition cannot be used (an `or`, a call) is left alone."""
    reduce_axes = body.axes if isinstance(body, Reduce) else ()
    ana = Analyzer({ax: ir.Range(ir.const(ax.min), ir.const(ax.extent))
                    for ax in (*axes, *reduce_axes)})
    source = body.source if isinstance(body, Reduce) else body
    cond = body.where if isinstance(body, Reduce) else None
    _check_under(name, source, cond, ana)


def _check_under(name: str, e: Expr, cond: Expr | None, ana: Any) -> None:
    if cond is not None and not _usable(cond):
        return  # the condition guards this, and we cannot tell how
    with ana.scope(assume=cond):
        _check_expr(name, e, ana)


def _check_expr(name: str, e: Expr, ana: Any) -> None:
    if isinstance(e, ir.Select):
        _check_expr(name, e.cond, ana)
        _check_under(name, e.true_value, e.cond, ana)
        negated = _negate(e.cond)
        if negated is not None:
            _check_under(name, e.false_value, negated, ana)
        return
    if isinstance(e, ir.BufferLoad):
        for dim, (index, extent) in enumerate(zip(e.indices, e.buffer.shape)):
            lo, hi = ana.const_int_bound(index)
            check(not (lo < 0 or hi > int(extent) - 1),
                  f"compute {name}: {ir.expr_str(e)} reads {e.buffer.name} outside its "
                  f"dimension {dim} of {int(extent)} (index {ir.expr_str(index)} ranges over "
                  f"[{lo}, {hi}]); guard the read with te.if_then_else or shrink the compute")
    if isinstance(e, ir.BinOp) and e.op in ("//", "%", "/") and ir.is_int(e.dtype):
        zero_at = _zero_at(e.b, ana)
        detail = "its divisor is 0" if zero_at == "always" else \
            f"{ir.expr_str(e.b)} is 0 {zero_at}"
        check(zero_at is None, f"compute {name}: {ir.expr_str(e)} divides by zero ({detail})")
    for child in ir.children(e):
        if isinstance(child, Expr) and not isinstance(child, Axis):
            _check_expr(name, child, ana)


_ENUMERATED = 1 << 16  # a divisor of one axis is tried at every value of an axis this long


def _zero_at(e: Expr, ana: Any) -> str | None:
    """Where an integer divisor is 0 ("at i = 3", "always"), or None when it never is or that
    cannot be told (a divisor of several axes whose range merely spans 0 is left alone)."""
    lo, hi = ana.const_int_bound(e)
    if not lo <= 0 <= hi:
        return None
    if lo == hi == 0:
        return "always"
    axes = [v for v in ir.free_vars(e) if isinstance(v, Axis)]
    if len(axes) != 1:
        return None
    (axis,) = axes
    first, last = ana.const_int_bound(axis)
    if not (isinstance(first, int) and isinstance(last, int)) or last - first > _ENUMERATED:
        return None
    for value in range(first, last + 1):
        at = ana.simplify(ir.substitute(e, {axis: ir.const(value)}))
        if isinstance(at, ir.IntImm) and at.value == 0:
            return f"at {axis.name} = {value}"
    return None


def _usable(cond: Expr) -> bool:
    """A condition the analyzer can assume: comparisons of one variable with constants, joined
    by `and` (`i + k < 8` bounds no single variable: what it guards is not checked)."""
    if isinstance(cond, ir.BinOp) and cond.op == "and":
        return _usable(cond.a) and _usable(cond.b)
    if isinstance(cond, ir.IntImm):
        return True
    return (isinstance(cond, ir.BinOp) and cond.op in _NEGATED
            and len(ir.free_vars(cond)) <= 1)


def _negate(cond: Expr) -> Expr | None:
    if isinstance(cond, ir.BinOp) and cond.op in _NEGATED:
        return ir.BinOp(_NEGATED[cond.op], cond.a, cond.b, "bool")
    if isinstance(cond, ir.Not):
        return cond.a
    return None


def _reduction(combiner: str, expr: ExprLike, axis, where: ExprLike | None) -> Reduce:
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for ax in axes:
        check(isinstance(ax, Axis) and ax.kind == ir.REDUCE,
              f"{combiner}: axis {ax!r} is not a reduce_axis")
    source = ir.convert(expr)
    cond = ir.const(True) if where is None else ir.convert(where)
    check(cond.dtype == "bool", f"{combiner}: where= must be a boolean condition")
    return Reduce(combiner, source, axes, cond, source.dtype)


def sum(expr: ExprLike, axis, where: ExprLike | None = None) -> Reduce:  # noqa: A001
    return _reduction("sum", expr, axis, where)


def _minmax(name: str, a, b, where) -> Expr:
    if isinstance(b, (Axis, list, tuple)) and (not isinstance(b, Axis) or b.kind == ir.REDUCE):
        return _reduction(name, a, b, where)
    check(where is None, f"{name}(a, b) is elementwise; where= applies only to reductions")
    return ir.binop(name, a, b)


def max(a: ExprLike, axis=None, where: ExprLike | None = None) -> Expr:  # noqa: A001
    """max(expr, axis=k) reduces over k; max(a, b) is the elementwise maximum. A NaN
    operand or element gives NaN (torch.maximum, torch.amax)."""
    return _minmax("max", a, axis, where)


def min(a: ExprLike, axis=None, where: ExprLike | None = None) -> Expr:  # noqa: A001
    """min(expr, axis=k) reduces over k; min(a, b) is the elementwise minimum. A NaN
    operand or element gives NaN (torch.minimum, torch.amin)."""
    return _minmax("min", a, axis, where)


def if_then_else(cond: ExprLike, true_value: ExprLike, false_value: ExprLike) -> Expr:
    return ir.select(cond, true_value, false_value)


def all(*conds: ExprLike) -> Expr:  # noqa: A001
    return ir.logical_and(*conds)


def any(*conds: ExprLike) -> Expr:  # noqa: A001
    out: Expr = ir.const(False)
    for c in conds:
        out = ir.binop("or", out, c)
    return out


def cast(dtype: str, x: ExprLike) -> Expr:
    return ir.cast(dtype, x)


def const(value: int | float, dtype: str | None = None) -> Expr:
    return ir.const(value, dtype)


def _intrinsic(name: str) -> Callable[..., Expr]:
    def fn(*args: ExprLike) -> Expr:
        return ir.call(name, *args)
    fn.__name__ = name
    fn.__doc__ = f"Elementwise {name}."
    return fn


exp, log, sqrt, rsqrt = _intrinsic("exp"), _intrinsic("log"), _intrinsic("sqrt"), _intrinsic("rsqrt")
tanh, erf, sigmoid = _intrinsic("tanh"), _intrinsic("erf"), _intrinsic("sigmoid")
pow, abs = _intrinsic("pow"), _intrinsic("abs")  # noqa: A001
floor, ceil = _intrinsic("floor"), _intrinsic("ceil")
round = _intrinsic("round")  # noqa: A001  (ties to even)


__all__ = ["Axis", "Reduce", "Tensor", "TEError", "placeholder", "compute", "reduce_axis",
           "sum", "max", "min", "if_then_else", "all", "any", "cast", "const", "exp", "log",
           "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "pow", "abs", "floor", "ceil",
           "round", "IRError", "identity_of"]
