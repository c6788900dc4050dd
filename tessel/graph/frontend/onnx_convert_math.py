"""ONNX converters of elementwise math and reductions (`MATH`, merged into
`onnx_import.CONVERTERS`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.graph.frontend.context import Value
from tessel.graph.frontend.onnx_fold import axes_of

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer


def _variadic(op: str) -> Converter:
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        acc = ins[0]
        for i, v in enumerate(ins[1:], 2):
            acc = (ctx.out if i == len(ins) else ctx.emit)(op, [acc, v])
        return acc
    return convert


def _unary(op: str, **defaults: Any) -> Converter:
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        return ctx.out(op, ins[:1], **{k: type(d)(attrs.get(k, d)) for k, d in defaults.items()})
    return convert


def _clip(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Clip's bounds: attributes before opset 11, optional constant inputs since. An absent
    bound is float32's lowest or largest value, as the ONNX spec and ONNX Runtime have it:
    Clip(inf, min=0) is 3.4e38 (torch.clamp's inf passes)."""
    lo = attrs["min"] if "min" in attrs else ctx.const(ins, 1, "min")
    hi = attrs["max"] if "max" in attrs else ctx.const(ins, 2, "max")
    largest = float(np.finfo(np.float32).max)
    return ctx.out("clip", ins[:1], min=-largest if lo is None else float(lo),
                   max=largest if hi is None else float(hi))


def _reduce(total: bool, square: bool = False) -> Converter:
    """ReduceMean, and ReduceSum as the mean times the count (as the torch importer's sum);
    ReduceSumSquare sums x * x."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        shape = ctx.shape(ins[0])
        if square:
            ins = [ctx.emit("mul", [ins[0], ins[0]]), *ins[1:]]
        axes = axes_of(attrs, [None, ctx.const(ins, 1, "axes")], 1)
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return ins[0]
        axes, keep = tuple(axes or range(len(shape))), bool(attrs.get("keepdims", 1))
        scalar = not keep and len({a % len(shape) for a in axes}) == len(shape)
        if not total and not scalar:
            return ctx.out("reduce_mean", ins[:1], axes=axes, keepdims=keep)
        out = ctx.emit("reduce_mean", ins[:1], axes=axes, keepdims=keep)
        if total:
            count = math.prod(shape[a % len(shape)] for a in set(axes))
            out = (ctx.emit if scalar else ctx.out)("mul", [out, ctx.scalar(float(count))])
        # ONNX: a full reduction without keepdims is a scalar
        return ctx.reshape(out, (), final=True) if scalar else out
    return convert


# ONNX operators that are one canonical unary operator with default attributes
UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
         "Log": "log", "Sqrt": "sqrt", "Neg": "neg", "Abs": "abs", "HardSwish": "hardswish"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
          "Max": "maximum", "Min": "minimum", "Sum": "add"}

MATH: dict[str, Converter] = {
    **{k: _variadic(op) for k, op in BINARY.items()},
    **{k: _unary(op) for k, op in UNARY.items()},
    "Gelu": _unary("gelu", approximate="none"), "LeakyRelu": _unary("leaky_relu", alpha=0.01),
    "Clip": _clip, "Reciprocal": lambda ctx, ins, attrs: ctx.out("div", [ctx.scalar(1.0), ins[0]]),
    "ReduceMean": _reduce(False), "ReduceSum": _reduce(True),
    "ReduceSumSquare": _reduce(True, square=True),
}
