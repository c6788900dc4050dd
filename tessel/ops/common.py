"""Shared pieces of the operator library: argument checks, the padding stage, `make_func`.

Every factory validates its arguments before building anything and raises `OpError` (a
ValueError) naming the operator and the offending argument.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

from tessel import ir, te
from tessel.errors import TesselError
from tessel.te.expr import MAX_EXTENT


class OpError(TesselError, ValueError):
    """An operator factory was given arguments that describe no valid computation."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise OpError(msg)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def positive(op: str, **dims: Any) -> None:
    """Each named size must be an int >= 1 that an index can reach (te.expr.MAX_EXTENT); the
    buffers' bytes are te's to check (te.expr.MAX_BYTES)."""
    for name, v in dims.items():
        check(_is_int(v) and v >= 1, f"{op}: {name} must be a positive int, got {v!r}")
        check(v <= MAX_EXTENT, f"{op}: {name} = {v} is more than 2**31 - 1 (indices are "
                               f"32-bit)")


def ints(op: str, name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    """`value` (an int, or a sequence of n ints) as an n-tuple of ints >= minimum."""
    values = (value,) * n if _is_int(value) else value
    ok = isinstance(values, (list, tuple)) and len(values) == n and all(map(_is_int, values))
    check(ok, f"{op}: {name} must be an int or a sequence of {n} ints, got {value!r}")
    check(all(v >= minimum for v in values), f"{op}: {name} must be >= {minimum}, got {value!r}")
    return tuple(values)


def shape_arg(op: str, shape: Any) -> tuple[int, ...]:
    dims = (shape,) if _is_int(shape) else shape
    ok = isinstance(dims, (list, tuple)) and len(dims) >= 1 and all(map(_is_int, dims))
    check(ok and all(d >= 1 for d in dims),
          f"{op}: shape must be an int or a non-empty sequence of positive ints, got {shape!r}")
    check(max(dims) <= MAX_EXTENT, f"{op}: shape {tuple(dims)} has a dimension of more than "
                                   f"2**31 - 1 (indices are 32-bit)")
    return tuple(dims)


def dtype_arg(op: str, dtype: str, name: str = "dtype", floating: bool = False) -> str:
    check(dtype in ir.DTYPE_BITS and dtype != "bool",
          f"{op}: unknown {name} {dtype!r}; expected one of "
          f"{sorted(d for d in ir.DTYPE_BITS if d != 'bool')}")
    check(not floating or ir.is_float(dtype), f"{op}: {name} must be floating-point, got {dtype!r}")
    return dtype


def out_dtype_arg(op: str, dtype: str, out_dtype: str | None) -> str:
    """The accumulation/output dtype: `dtype` by default; int inputs may widen (int8 -> int32)."""
    out = dtype if out_dtype is None else dtype_arg(op, out_dtype, "out_dtype")
    check(ir.is_float(out) == ir.is_float(dtype) and ir.DTYPE_BITS[out] >= ir.DTYPE_BITS[dtype],
          f"{op}: out_dtype {out!r} must be a {'float' if ir.is_float(dtype) else 'int'} type at "
          f"least as wide as dtype {dtype!r}")
    return out


def named(fn: Callable[..., Any], names: Sequence[str]) -> Callable[..., Any]:
    """`fn(*indices)` with a signature naming its parameters, so te.compute names the axes."""
    def wrapper(*args: Any) -> Any:
        return fn(*args)
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return wrapper


def pad_tensor(x: te.Tensor, before: Sequence[int], after: Sequence[int],
               value: float | int | ir.Expr = 0, names: Sequence[str] | None = None,
               name: str = "pad") -> te.Tensor:
    """A stage that pads x with `value`; x itself when nothing is padded.

    Only the chosen branch of the if_then_else is evaluated, and it reads x only inside
    bounds, so no read ever leaves x.
    """
    if not any(before) and not any(after):
        return x
    shape = tuple(n + b + a for n, b, a in zip(x.shape, before, after))
    fill = value if isinstance(value, ir.Expr) else ir.const(value, x.dtype)

    def body(*idx: ir.Expr) -> ir.Expr:
        conds = []
        for i, n, b, a in zip(idx, x.shape, before, after):
            if b > 0:
                conds.append(i >= b)
            if a > 0:
                conds.append(i < b + n)
        inner = x[tuple(i - b for i, b in zip(idx, before))]
        return te.if_then_else(te.all(*conds), inner, fill)

    names = names or [f"i{d}" for d in range(len(shape))]
    return te.compute(shape, named(body, names), name=name)


def jsonable(value: Any) -> Any:
    """Tuples become lists, so attrs survive a JSON round trip unchanged."""
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    return value


def make_func(op: str, args: Sequence[te.Tensor], op_args: dict[str, Any]) -> ir.PrimFunc:
    """The PrimFunc of factory `op`; attrs record how to rebuild it: ops.<op>(**attrs["args"])."""
    attrs = {"op": op, "args": {k: jsonable(v) for k, v in op_args.items()}}
    return te.create_func(list(args), name=op, attrs=attrs)
