"""Elementwise operators on any shape: activations, add/multiply, bias_add, constant pad.

Each takes the tensor shape (an int or a sequence) and returns a one-stage PrimFunc with
params (inputs..., out); the output stage is named after the operator.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from tessel import ir, te
from tessel.ops import reference as ref
from tessel.ops.common import (check, dtype_arg, ints, make_func, pad_tensor, shape_arg)
from tessel.ops.registry import define

IntOrSeq = int | Sequence[int]


def _unary(op: str, fn: Callable[[ir.Expr], ir.Expr], shape: IntOrSeq, dtype: str,
           floating: bool = True) -> ir.PrimFunc:
    shape = shape_arg(op, shape)
    dtype = dtype_arg(op, dtype, floating=floating)
    x = te.placeholder(shape, dtype, name="x")
    out = te.compute(shape, lambda *i: fn(x[i]), name=op)
    return make_func(op, [x, out], dict(shape=shape, dtype=dtype))


@define(ref.relu)
def relu(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    """max(x, 0)."""
    return _unary("relu", lambda v: te.max(v, 0), shape, dtype, floating=False)


@define(ref.sigmoid)
def sigmoid(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    """1 / (1 + exp(-x)), as the sigmoid intrinsic."""
    return _unary("sigmoid", te.sigmoid, shape, dtype)


@define(ref.tanh)
def tanh(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    return _unary("tanh", te.tanh, shape, dtype)


@define(ref.gelu)
def gelu(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    """Exact (erf) GELU: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return _unary("gelu", lambda v: 0.5 * v * (1.0 + te.erf(v * math.sqrt(0.5))), shape, dtype)


def _binary(op: str, fn: Callable[[ir.Expr, ir.Expr], ir.Expr], shape: IntOrSeq,
            dtype: str) -> ir.PrimFunc:
    shape = shape_arg(op, shape)
    dtype = dtype_arg(op, dtype)
    a = te.placeholder(shape, dtype, name="a")
    b = te.placeholder(shape, dtype, name="b")
    out = te.compute(shape, lambda *i: fn(a[i], b[i]), name=op)
    return make_func(op, [a, b, out], dict(shape=shape, dtype=dtype))


@define(ref.add)
def add(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    """a + b of one shape: params (a, b, out)."""
    return _binary("add", lambda u, v: u + v, shape, dtype)


@define(ref.multiply)
def multiply(shape: IntOrSeq, dtype: str = "float32") -> ir.PrimFunc:
    """a * b of one shape: params (a, b, out)."""
    return _binary("multiply", lambda u, v: u * v, shape, dtype)


@define(ref.bias_add, "axis")
def bias_add(shape: IntOrSeq, axis: int = 1, dtype: str = "float32") -> ir.PrimFunc:
    """x plus a vector along `axis`: params (x (shape), bias (shape[axis],), out)."""
    op = "bias_add"
    shape = shape_arg(op, shape)
    check(isinstance(axis, int) and -len(shape) <= axis < len(shape),
          f"{op}: axis {axis!r} out of range for a {len(shape)}-d shape {shape}")
    axis %= len(shape)
    dtype = dtype_arg(op, dtype)
    x = te.placeholder(shape, dtype, name="x")
    b = te.placeholder((shape[axis],), dtype, name="bias")
    out = te.compute(shape, lambda *i: x[i] + b[i[axis]], name=op)
    return make_func(op, [x, b, out], dict(shape=shape, axis=axis, dtype=dtype))


@define(ref.pad, "pad_before", "pad_after", "value")
def pad(shape: IntOrSeq, pad_before: IntOrSeq, pad_after: IntOrSeq | None = None,
        value: float = 0.0, dtype: str = "float32") -> ir.PrimFunc:
    """Constant padding: pad_before[d] / pad_after[d] elements before / after axis d (an int
    pads every axis; pad_after defaults to pad_before). Params (x, pad)."""
    op = "pad"
    shape = shape_arg(op, shape)
    before = ints(op, "pad_before", pad_before, len(shape), 0)
    after = before if pad_after is None else ints(op, "pad_after", pad_after, len(shape), 0)
    dtype = dtype_arg(op, dtype)
    check(isinstance(value, (int, float)) and not isinstance(value, bool),
          f"{op}: value must be a number, got {value!r}")
    check(ir.is_float(dtype) or float(value) == int(value),
          f"{op}: value {value!r} is not representable in {dtype}")
    x = te.placeholder(shape, dtype, name="x")
    fill = ir.const(value if ir.is_float(dtype) else int(value), dtype)
    out = pad_tensor(x, before, after, fill)
    if out is x:  # nothing to pad: still a stage of its own, a copy
        out = te.compute(shape, lambda *i: x[i], name="pad")
    return make_func(op, [x, out], dict(shape=shape, pad_before=before, pad_after=after,
                                        value=value, dtype=dtype))


__all__ = ["relu", "sigmoid", "tanh", "gelu", "add", "multiply", "bias_add", "pad"]
