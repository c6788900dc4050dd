"""Elementwise operators: binary arithmetic (numpy broadcasting; a float or a literal operand
is an immediate; add, sub, mul, div, maximum, minimum, neg, abs and clip also on integers,
division truncating as ONNX's; pow of any two number dtypes, in the base's), unary math, and
batch normalization (inference form, channels on axis 1)."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (Arg, Attrs, DTypeRule, Example, bcast, broadcast_shape,
                                      define, elementwise, exact, f64, floats, numbers,
                                      same_shape)
from tessel.ops import reference as ref

X3 = (3, 5, 7)  # the examples' usual odd shape


# ---- binary ----

def _value(arg: Arg, idx: tuple[ir.Expr, ...], out: tuple[int, ...]) -> ir.Expr:
    if isinstance(arg, te.Tensor):
        return arg[bcast(idx, arg.shape, out)]
    return arg if isinstance(arg, ir.Expr) else ir.const(float(arg), "float32")


def binary(name: str, te_fn: Callable[[ir.Expr, ir.Expr], ir.Expr],
           np_fn: Callable[[np.ndarray, np.ndarray], np.ndarray], torch_fn, *examples: Example,
           domains: dict[int, str] | None = None, finite: bool = True,
           dtype: DTypeRule = floats) -> None:
    """Define a binary elementwise operator from its scalar te and numpy functions (the numpy
    one gets float64 for floats, integers as they are)."""
    def infer(inputs, attrs, label):
        return broadcast_shape([t.shape for t in inputs], label)

    def lower(args: list[Arg], attrs: Attrs, stage: str, out: TensorType) -> te.Tensor:
        check(any(isinstance(v, te.Tensor) for v in args),
              f"lowering {stage} ({name}): both inputs are floats; fold the constant instead")
        return elementwise(out.shape, lambda i: te_fn(*(_value(v, i, out.shape) for v in args)),
                           stage)

    define(name, "elemwise", infer, lower,
           lambda args, attrs, out: np_fn(exact(args[0]), exact(args[1])),
           layout="broadcast", inputs=(2, 2), scalars=True, examples=examples,
           torch=torch_fn, domains=domains or {}, finite=finite, dtype=dtype)


def divide(u: ir.Expr, v: ir.Expr) -> ir.Expr:
    """u / v; on integers truncated toward zero (ONNX's Div, C's), and 0 where v is 0 (the
    hardware would trap)."""
    if ir.is_float(u.dtype):
        return u / v
    zero, one = ir.const(0, u.dtype), ir.const(1, u.dtype)
    safe = te.if_then_else(v == zero, one, v)
    q = u // safe  # floor
    if not u.dtype.startswith("u"):  # floor -> trunc where the signs differ and it is inexact
        inexact = (u - q * safe != zero) & ((u < zero) != (safe < zero))
        q = te.if_then_else(inexact, q + one, q)
    return te.if_then_else(v == zero, zero, q)


def divide_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's true division on floats; on integers as `_divide`."""
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        return np.divide(a, b)
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    q = np.where((a - q * safe != 0) & ((a < 0) != (safe < 0)), q + 1, q)
    return np.where(b == 0, 0, q)


def _pow(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """x ** y in x's dtype; float exponents that torch special-cases become products, sqrt or
    rsqrt. An integer operand computes in float64 (exact up to 2 ** 53, as onnxruntime's
    std::pow), an integer result truncated toward zero."""
    if x.dtype != "float32" or y.dtype != "float32":
        return te.cast(x.dtype, te.pow(te.cast("float64", x), te.cast("float64", y)))
    if isinstance(y, ir.FloatImm):
        special = {1.0: lambda: x, 2.0: lambda: x * x, 3.0: lambda: x * x * x,
                   0.5: lambda: te.sqrt(x), -0.5: lambda: te.rsqrt(x),
                   -1.0: lambda: 1.0 / x, -2.0: lambda: 1.0 / (x * x)}
        if y.value in special:
            return special[y.value]()
    return te.pow(x, y)


binary("add", lambda u, v: u + v, np.add, lambda t, a, b: a + b,
       Example((X3, X3)), Example((X3, (5, 1))), Example((X3, ())), dtype=numbers)
binary("sub", lambda u, v: u - v, np.subtract, lambda t, a, b: a - b,
       Example(((7,), X3)), Example((1.0, X3)), dtype=numbers)
binary("mul", lambda u, v: u * v, np.multiply, lambda t, a, b: a * b,
       Example(((2, 3, 5, 7), (3, 1, 1))), Example((0.5, X3)), dtype=numbers)
binary("div", divide, divide_np, lambda t, a, b: a / b,
       Example((X3, 8.0)), Example((X3, (1, 5, 1))), Example((3.0, X3)), domains={1: "nonzero"},
       dtype=numbers)


def _base_dtype(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    """Pow's rule (ONNX's): any numbers, the result in the base's dtype."""
    for t in inputs:
        numbers([t], attrs, label)
    return inputs[0].dtype


binary("pow", _pow, lambda a, b: np.power(f64(a), f64(b)),
       lambda t, a, b: a.double() ** b.double(),
       *(Example((X3, e)) for e in (2.0, 3.0, 0.5, -0.5, 1.7)), Example((X3, X3)),
       Example((X3, X3), dtypes=("int64", "uint8")),
       Example((X3, (7,)), dtypes=("int32", "uint16")),
       Example((X3, X3), dtypes=("float32", "int32")), domains={0: "positive"}, finite=False,
       dtype=_base_dtype)
binary("maximum", te.max, np.maximum, lambda t, a, b: t.maximum(a, b),
       Example((X3, (1, 7))), Example((X3, 0.25)), dtype=numbers)
binary("minimum", te.min, np.minimum, lambda t, a, b: t.minimum(a, b),
       Example(((5, 1), X3)), Example((-0.5, X3)), dtype=numbers)


# ---- unary ----

def unary(name: str, te_fn: Callable[[ir.Expr, Attrs], ir.Expr],
          np_fn: Callable[[np.ndarray, Attrs], np.ndarray], torch_fn, *examples: Example,
          attrs: Attrs | None = None, domain: str = "any", finite: bool = True,
          dtype: DTypeRule = floats) -> None:
    """Define a unary elementwise operator from its scalar te and numpy functions (each also
    given the node's attributes; the numpy one float64 for floats, integers as they are)."""
    def lower(args: list[Arg], a: Attrs, stage: str, out: TensorType) -> te.Tensor:
        x, = args
        return elementwise(x.shape, lambda i: te_fn(x[i], a), stage)

    define(name, "elemwise", same_shape, lower,
           lambda args, a, out: np_fn(exact(args[0]), a), layout="channelwise", attrs=attrs,
           examples=examples or (Example((X3,)),), torch=torch_fn,
           domains={} if domain == "any" else {0: domain}, finite=finite, dtype=dtype)


def erf_f64(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # scipy is optional: math.erf is exact but slower
        return ref.erf_f64(x).astype(np.float64)
    return erf(x)


def _gelu_te(v: ir.Expr, approximate: str) -> ir.Expr:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (v + 0.044715 * (v * v * v))
        return 0.5 * v * (1.0 + te.tanh(inner))
    check(approximate == "none", f"gelu: approximate must be 'none' or 'tanh', "
                                 f"got {approximate!r}")
    return 0.5 * v * (1.0 + te.erf(v * math.sqrt(0.5)))  # as ops.gelu


def _gelu_np(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    check(approximate == "none", f"gelu: approximate must be 'none' or 'tanh', "
                                 f"got {approximate!r}")
    return 0.5 * x * (1.0 + erf_f64(x / math.sqrt(2.0)))


def _clip_te(v: ir.Expr, lo: float | None, hi: float | None) -> ir.Expr:
    """max(v, lo) then min(.., hi), each bound an immediate of v's dtype (an integer's must
    be integral)."""
    for bound in (lo, hi):
        check(ir.is_float(v.dtype) or bound is None or float(bound).is_integer(),
              f"clip: the bound {bound} of {v.dtype} values is no integer; cast them first")
    if lo is not None:
        v = te.max(v, ir.const(lo, v.dtype))
    return v if hi is None else te.min(v, ir.const(hi, v.dtype))


def _clip_np(x: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray:
    if lo is not None:
        x = np.maximum(x, lo)
    return x if hi is None else np.minimum(x, hi)


unary("relu", lambda v, a: te.max(v, 0.0), lambda x, a: np.maximum(x, 0.0),
      lambda t, x: t.relu(x))
unary("sigmoid", lambda v, a: te.sigmoid(v), lambda x, a: ref.sigmoid(x),
      lambda t, x: t.sigmoid(x))
unary("silu", lambda v, a: v * te.sigmoid(v), lambda x, a: x * ref.sigmoid(x),
      lambda t, x: t.nn.functional.silu(x))  # x * sigmoid(x), one reader of x: it fuses
unary("tanh", lambda v, a: te.tanh(v), lambda x, a: np.tanh(x), lambda t, x: t.tanh(x))
unary("erf", lambda v, a: te.erf(v), lambda x, a: erf_f64(x), lambda t, x: t.erf(x))
unary("exp", lambda v, a: te.exp(v), lambda x, a: np.exp(x), lambda t, x: t.exp(x), finite=False)
unary("log", lambda v, a: te.log(v), lambda x, a: np.log(x), lambda t, x: t.log(x),
      domain="positive", finite=False)
unary("sqrt", lambda v, a: te.sqrt(v), lambda x, a: np.sqrt(x), lambda t, x: t.sqrt(x),
      domain="positive", finite=False)
unary("neg", lambda v, a: -v, lambda x, a: -x, lambda t, x: -x, dtype=numbers)
unary("abs", lambda v, a: te.abs(v) if ir.is_float(v.dtype) else te.max(v, -v),
      lambda x, a: np.abs(x), lambda t, x: t.abs(x), dtype=numbers)
unary("gelu", lambda v, a: _gelu_te(v, a["approximate"]),
      lambda x, a: _gelu_np(x, a["approximate"]),
      lambda t, x, approximate: t.nn.functional.gelu(x, approximate=approximate),
      Example((X3,)), Example((X3,), dict(approximate="tanh")), attrs=dict(approximate="none"))
unary("clip", lambda v, a: _clip_te(v, a["min"], a["max"]),
      lambda x, a: _clip_np(x, a["min"], a["max"]),
      lambda t, x, min, max: t.clamp(x, min, max),
      Example((X3,), dict(min=-0.5, max=0.5)), Example((X3,), dict(max=0.3)),
      Example((X3,), dict(min=0.1)), Example((X3,), dict(min=-2, max=1), dtypes=("int8",)),
      Example((X3,), dict(max=2), dtypes=("int64",)), attrs=dict(min=None, max=None),
      dtype=numbers)
unary("leaky_relu", lambda v, a: te.if_then_else(v > 0.0, v, v * float(a["alpha"])),
      lambda x, a: np.where(x > 0, x, x * a["alpha"]),
      lambda t, x, alpha: t.nn.functional.leaky_relu(x, alpha),
      Example((X3,)), Example((X3,), dict(alpha=0.2)), attrs=dict(alpha=0.01))

unary("hardswish", lambda v, a: v * _clip_te(v + 3.0, 0.0, 6.0) * (1.0 / 6.0),
      lambda x, a: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
      lambda t, x: t.nn.functional.hardswish(x), Example(((2, 3, 9, 7),)))


# ---- batch normalization ----

def _batch_norm_infer(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) >= 2, f"node {label} (batch_norm): data must have a channel axis, got {x}")
    for t in inputs[1:]:
        check(t.shape == (x[1],), f"node {label} (batch_norm): parameters must be ({x[1]},), "
                                  f"got {t.shape}")
    return x


def _batch_norm_lower(args: list[Arg], a: Attrs, stage: str, out: TensorType) -> te.Tensor:
    """One stage, as ops.batch_norm: (x - mean) * (scale * rsqrt(var + eps)) + bias."""
    x, scale, bias, mean, var = args
    eps = float(a["epsilon"])
    return elementwise(x.shape, lambda i: (x[i] - mean[i[1]]) * (
        scale[i[1]] * te.rsqrt(var[i[1]] + eps)) + bias[i[1]], stage)


_BN = ((5,),) * 4
define("batch_norm", "elemwise", _batch_norm_infer, _batch_norm_lower,
       lambda args, a, out: ref.batch_norm_f64(f64(args[0]), *args[1:], a["epsilon"]),
       attrs=dict(epsilon=1e-5), inputs=(5, 5), layout="channelwise",
       examples=[Example(((2, 5, 3, 7), *_BN), dict(epsilon=1e-3)),
                 Example(((3, 5, 7), *_BN)), Example(((3, 5), *_BN))],
       torch=lambda t, x, s, b, m, v, epsilon: t.nn.functional.batch_norm(
           x, m, v, s, b, False, 0.0, epsilon),
       domains={4: "positive"}, param_names=("data", "gamma", "beta", "mean", "var"))
