"""ONNX converters of elementwise math and reductions (`MATH`, merged into
`onnx_import.CONVERTERS`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.graph.frontend.context import Value
from tessel.graph.frontend.onnx_fold import axes_of
from tessel.graph.opdefs.activation import SELU_ALPHA, SELU_GAMMA

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
    """Clip's bounds: attributes before opset 11, optional inputs since. Constant bounds make
    a clip, an absent one float32's lowest or largest value, as the ONNX spec and ONNX Runtime
    have it: Clip(inf, min=0) is 3.4e38 (torch.clamp's inf passes); integers have no absent
    bound. A computed bound makes min(max(x, min), max), the spec's formula (max wins where
    min > max)."""
    bounds = [ins[i] if i < len(ins) else None for i in (1, 2)]
    if any(isinstance(b, str) for b in bounds):
        return _clip_computed(ctx, ins[0], *bounds)
    lo = attrs["min"] if "min" in attrs else ctx.const(ins, 1, "min")
    hi = attrs["max"] if "max" in attrs else ctx.const(ins, 2, "max")
    if ctx.dtype(ins[0]) != "float32":
        return ctx.out("clip", ins[:1], min=None if lo is None else int(lo),
                       max=None if hi is None else int(hi))
    largest = float(np.finfo(np.float32).max)
    return ctx.out("clip", ins[:1], min=-largest if lo is None else float(lo),
                   max=largest if hi is None else float(hi))


def _clip_computed(ctx: Importer, x: Value, lo: Value | None, hi: Value | None) -> Value:
    steps = [(op, b) for op, b in (("maximum", lo), ("minimum", hi)) if b is not None]
    for i, (op, bound) in enumerate(steps):
        x = (ctx.out if i == len(steps) - 1 else ctx.emit)(op, [x, bound])
    return x


def _reduce_none(ctx: Importer, op: str, x: Value) -> Value:
    """A reduction over no axes (noop_with_empty_axes): what it does to each element alone."""
    if op == "reduce_sum_square":
        return ctx.out("mul", [x, x])
    unary = {"reduce_l1": "abs", "reduce_l2": "abs", "reduce_log_sum": "log"}.get(op)
    return x if unary is None else ctx.out(unary, [x])


def _reduce(op: str) -> Converter:
    """ReduceMean, ReduceSum, ReduceMax, ...: axes from the attribute (before opset 18; 13 for
    ReduceSum) or the constant input; none means every axis, or no axis with
    noop_with_empty_axes. Without keepdims, a reduction of every axis is a scalar."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        shape = ctx.shape(ins[0])
        axes = axes_of(attrs, [None, ctx.const(ins, 1, "axes")], 1)
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return _reduce_none(ctx, op, ins[0])
        axes, keep = tuple(axes or range(len(shape))), bool(attrs.get("keepdims", 1))
        if keep or len({a % len(shape) for a in axes}) < len(shape):
            return ctx.out(op, ins[:1], axes=axes, keepdims=keep)
        return ctx.reshape(ctx.emit(op, ins[:1], axes=axes, keepdims=keep), (), final=True)
    return convert


def _cumsum(ctx: Importer, ins: list, attrs: dict) -> Value:
    axis = ctx.const(ins, 1, "axis")
    ctx.check(axis is not None and np.asarray(axis).size == 1, "needs a single axis")
    return ctx.out("cumsum", ins[:1], axis=int(np.asarray(axis).reshape(())),
                   exclusive=int(attrs.get("exclusive", 0)), reverse=int(attrs.get("reverse", 0)))


# ONNX operators that are one canonical unary operator with default attributes
UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
         "Log": "log", "Sqrt": "sqrt", "Neg": "neg", "Abs": "abs", "HardSwish": "hardswish",
         "Softplus": "softplus", "Softsign": "softsign", "Sign": "sign", "Floor": "floor",
         "Ceil": "ceil", "Round": "round"}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
          "Max": "maximum", "Min": "minimum", "Sum": "add"}
REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum",
          "ReduceSumSquare": "reduce_sum_square", "ReduceMax": "reduce_max",
          "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod", "ReduceL1": "reduce_l1",
          "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
          "ReduceLogSumExp": "reduce_log_sum_exp"}

MATH: dict[str, Converter] = {
    **{k: _variadic(op) for k, op in BINARY.items()},
    **{k: _unary(op) for k, op in UNARY.items()},
    **{k: _reduce(op) for k, op in REDUCE.items()},
    "Gelu": _unary("gelu", approximate="none"), "LeakyRelu": _unary("leaky_relu", alpha=0.01),
    "Mish": _unary("mish"),  # (opset 18)
    "Elu": _unary("elu", alpha=1.0), "Celu": _unary("celu", alpha=1.0),
    "Selu": _unary("selu", alpha=SELU_ALPHA, gamma=SELU_GAMMA),
    "ThresholdedRelu": _unary("thresholded_relu", alpha=1.0),
    "HardSigmoid": _unary("hard_sigmoid", alpha=0.2, beta=0.5),
    "PRelu": lambda ctx, ins, attrs: ctx.out("prelu", ins[:2]),
    "Clip": _clip, "CumSum": _cumsum,
    "Reciprocal": lambda ctx, ins, attrs: ctx.out("div", [ctx.scalar(1.0), ins[0]]),
}
