"""The ONNX importer's converters: `CONVERTERS` maps an ONNX op type to its translation.

A converter is `fn(importer, inputs, attrs) -> value`: `inputs` are the node's inputs (a graph
value's name, a `Const` known at import, or None for an absent optional input), `attrs` its
decoded attributes; it adds canonical operators of `tessel.graph.ops` through the
`tessel.graph.frontend.onnx_import.Importer` it is given and returns the value of the node's first
output.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import onnx

from tessel.graph.frontend import onnx_fold
from tessel.graph.frontend.context import Const, Value
from tessel.graph.frontend.onnx_fold import axes_of, reshape_target
from tessel.graph.opdefs.shape import slice_range
from tessel.graph.ops import broadcast_shape

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Importer


Converter = Callable[["Importer", list, dict], Value]


# ---- inputs, padding, windows ----

def _opt(ins: list, index: int) -> Value | None:
    return ins[index] if index < len(ins) else None


def _present(ins: list) -> list[Value]:
    return [v for v in ins if v is not None]


def _same_pads(spatial: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], upper: bool) -> tuple[int, ...]:
    """auto_pad SAME_*: the output keeps ceil(n / stride); odd padding goes at the end
    (SAME_UPPER) or the beginning (SAME_LOWER)."""
    begins, ends = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        total = max(0, (math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n)
        begins.append(total // 2 if upper else total - total // 2)
        ends.append(total - begins[-1])
    return (*begins, *ends)


def _pads(ctx: Importer, attrs: dict, spatial: Sequence[int], kernel: Sequence[int],
          strides: Sequence[int], dilations: Sequence[int]) -> tuple[int, ...]:
    auto, nd = attrs.get("auto_pad", "NOTSET"), len(kernel)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        return _same_pads(spatial, kernel, strides, dilations, auto == "SAME_UPPER")
    ctx.check(auto in ("NOTSET", "VALID"), f"unknown auto_pad {auto!r}")
    return tuple(attrs.get("pads", [0] * 2 * nd)) if auto == "NOTSET" else (0,) * 2 * nd


def _window(attrs: dict, nd: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(attrs.get("strides", [1] * nd)), tuple(attrs.get("dilations", [1] * nd))


# ---- convolution, Gemm, MatMul ----

def _conv(ctx: Importer, ins: list, attrs: dict) -> Value:
    spatial, kernel = ctx.shape(ins[0])[2:], ctx.shape(ins[1])[2:]
    strides, dilations = _window(attrs, len(kernel))
    pads = _pads(ctx, attrs, spatial, kernel, strides, dilations)
    return ctx.out("conv", _present(ins), strides=strides, pads=pads, dilations=dilations,
                   groups=int(attrs.get("group", 1)))


def _transpose_pads(attrs: dict, spatial: Sequence[int], kernel: Sequence[int],
                    strides: Sequence[int], dilations: Sequence[int],
                    opad: list[int]) -> tuple[int, ...]:
    """Explicit pads of a ConvTranspose. An output_shape (or SAME auto_pad) sets them as ONNX
    Runtime does; an output larger than the unpadded one grows `opad` in place."""
    auto, nd = attrs.get("auto_pad", "NOTSET"), len(kernel)
    target = attrs.get("output_shape")
    if target is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [n * s for n, s in zip(spatial, strides)]
    if target is None:
        return tuple(attrs.get("pads", [0] * 2 * nd)) if auto == "NOTSET" else (0,) * 2 * nd
    begins, ends = [], []
    for i, size in enumerate(list(target)[-nd:]):
        full = (spatial[i] - 1) * strides[i] + opad[i] + (kernel[i] - 1) * dilations[i] + 1
        opad[i] += max(0, size - full)
        total = max(0, full - size)
        begins.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        ends.append(total - begins[-1])
    return (*begins, *ends)


def _conv_transpose(ctx: Importer, ins: list, attrs: dict) -> Value:
    spatial, kernel = ctx.shape(ins[0])[2:], ctx.shape(ins[1])[2:]
    strides, dilations = _window(attrs, len(kernel))
    opad = [int(p) for p in attrs.get("output_padding", [0] * len(kernel))]
    pads = _transpose_pads(attrs, spatial, kernel, strides, dilations, opad)
    return ctx.out("conv_transpose", _present(ins), strides=strides, pads=pads,
                   output_padding=tuple(opad), dilations=dilations,
                   groups=int(attrs.get("group", 1)))


def _row_bias(ctx: Importer, c: Value | None, beta: float, n: int) -> Const | None:
    """Gemm's C as a dense bias (N,), when it is a constant that broadcasts along rows."""
    if not isinstance(c, Const) or c.array.ndim > 2 or c.array.size not in (1, n):
        return None
    if c.array.ndim == 2 and c.array.shape[0] != 1:
        return None
    if beta == 1.0 and c.array.shape == (n,) and c.array.dtype == np.float32:
        return c
    row = np.broadcast_to(c.array.reshape(-1), (n,)) * np.float32(beta)
    return ctx.derive(c, row.astype(np.float32), "bias")


def _scaled(ctx: Importer, v: Value, factor: float) -> Value:
    if factor == 1.0:
        return v
    if isinstance(v, Const):
        return ctx.derive(v, v.array * np.float32(factor), "scaled")
    return ctx.emit("mul", [v, ctx.scalar(factor)])


def _gemm(ctx: Importer, ins: list, attrs: dict) -> Value:
    """alpha * A' B' + beta * C as dense(A', W) with W = B' transposed to (N, K)."""
    x = ctx.transpose(ins[0], (1, 0)) if attrs.get("transA", 0) else ins[0]
    w = ins[1] if attrs.get("transB", 0) else ctx.transpose(ins[1], (1, 0))
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    c = _opt(ins, 2) if beta != 0.0 else None
    bias = _row_bias(ctx, c, beta, ctx.shape(w)[0]) if alpha == 1.0 else None
    if bias is not None or (c is None and alpha == 1.0):
        return ctx.out("dense", _present([x, w, bias]))
    y = ctx.emit("dense", [x, w])
    if c is None:
        return ctx.out("mul", [y, ctx.scalar(alpha)])
    if alpha != 1.0:
        y = ctx.emit("mul", [y, ctx.scalar(alpha)])
    return ctx.out("add", [y, _scaled(ctx, c, beta)])


def _matmul(ctx: Importer, ins: list, attrs: dict) -> Value:
    """numpy matmul: a constant 2-D right operand makes a dense layer; 1-D operands get a
    unit axis (removed again from the result)."""
    a, b = ins
    sa, sb = ctx.shape(a), ctx.shape(b)
    if isinstance(b, Const) and len(sb) == 2:
        return ctx.out("dense", [a, ctx.transpose(b, (1, 0))])
    if len(sa) >= 2 and len(sb) >= 2:
        return ctx.out("matmul", [a, b])
    a2 = ctx.reshape(a, (1, *sa)) if len(sa) == 1 else a
    y = ctx.emit("matmul", [a2, ctx.reshape(b, (*sb, 1)) if len(sb) == 1 else b])
    ys = ctx.shape(y)
    shape = ys[:-2] + (ys[-2:-1] if len(sa) > 1 else ()) + (ys[-1:] if len(sb) > 1 else ())
    return ctx.reshape(y, shape, final=True)


# ---- elementwise, normalization, pooling ----

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


def _batch_norm(ctx: Importer, ins: list, attrs: dict) -> Value:
    ctx.check(not attrs.get("training_mode", 0) and attrs.get("spatial", 1) == 1,
              "only the inference form (training_mode=0, spatial=1) is supported")
    return ctx.out("batch_norm", ins[:5], epsilon=float(attrs.get("epsilon", 1e-5)))


def _pool(op: str) -> Converter:
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        strides, dilations = _window(attrs, len(kernel))
        ctx.check(all(d == 1 for d in dilations),
                  f"dilated pooling ({dilations}) is not supported")
        pads = _pads(ctx, attrs, ctx.shape(ins[0])[2:], kernel, strides, dilations)
        extra = {"count_include_pad": bool(attrs.get("count_include_pad", 0))} \
            if op == "avg_pool" else {}
        return ctx.out(op, ins[:1], kernel=kernel, strides=strides, pads=pads,
                       ceil_mode=bool(attrs.get("ceil_mode", 0)), **extra)
    return convert


def _global_max_pool(ctx: Importer, ins: list, attrs: dict) -> Value:
    spatial = ctx.shape(ins[0])[2:]
    return ctx.out("max_pool", ins[:1], kernel=spatial, strides=(1,) * len(spatial))


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


# ---- layout and shapes ----

def _flatten(ctx: Importer, ins: list, attrs: dict) -> Value:
    shape = ctx.shape(ins[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return ctx.reshape(ins[0], (math.prod(shape[:axis]), math.prod(shape[axis:])), final=True)


def _reshape(ctx: Importer, ins: list, attrs: dict) -> Value:
    spec = attrs["shape"] if "shape" in attrs else ctx.const(ins, 1, "shape")
    target = reshape_target(ctx.shape(ins[0]), spec, attrs.get("allowzero", 0), ctx.label)
    return ctx.reshape(ins[0], target, final=True)


def _reshape_axes(shape_of: Callable[..., tuple[int, ...]]) -> Converter:
    """Squeeze and Unsqueeze: a reshape to `shape_of(shape, axes, label)`."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        axes = axes_of(attrs, [None, ctx.const(ins, 1, "axes")], 1)
        return ctx.reshape(ins[0], shape_of(ctx.shape(ins[0]), axes, ctx.label), final=True)
    return convert


def _transpose(ctx: Importer, ins: list, attrs: dict) -> Value:
    perm = attrs.get("perm", list(range(len(ctx.shape(ins[0]))))[::-1])
    return ctx.transpose(ins[0], perm, final=True)


def _softmax(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Before opset 13, Softmax flattens axes [axis, rank) into one and normalizes over it."""
    x, shape = ins[0], ctx.shape(ins[0])
    if ctx.opset >= 13:
        return ctx.out("softmax", [x], axis=int(attrs.get("axis", -1)))
    axis = int(attrs.get("axis", 1)) % len(shape)
    if axis == len(shape) - 1:
        return ctx.out("softmax", [x], axis=axis)
    flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return ctx.reshape(ctx.emit("softmax", [flat], axis=1), shape, final=True)


def _layer_norm(ctx: Importer, ins: list, attrs: dict) -> Value:
    return ctx.out("layer_norm", _present(ins[:3]), axis=int(attrs.get("axis", -1)),
                   epsilon=float(attrs.get("epsilon", 1e-5)))


def _dropout(ctx: Importer, ins: list, attrs: dict) -> Value:
    training = ctx.const(ins, 2, "training_mode")
    ctx.check(training is None or not training.any(), "training mode is not supported")
    return ins[0]


def _cast(ctx: Importer, ins: list, attrs: dict) -> Value:
    ctx.check(attrs["to"] == onnx.TensorProto.FLOAT, f"casting a computed tensor to "
              f"{onnx.TensorProto.DataType.Name(attrs['to'])} is not supported (tessel "
              f"computes in float32)")
    return ins[0]


def _shape_of(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Shape and Size of a computed tensor are known at import: shapes are static."""
    stand_in = np.broadcast_to(np.float32(0), ctx.shape(ins[0]))  # no memory
    return Const(ctx.out_name, onnx_fold.fold(ctx.op_type, [stand_in], attrs, ctx.label))


def _expand(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Expand of a computed tensor: add zeros of the broadcast axes' shape."""
    shape = ctx.shape(ins[0])
    target = broadcast_shape([shape, tuple(int(d) for d in ctx.const(ins, 1, "shape"))],
                             ctx.label)
    if target == shape:
        return ins[0]
    padded = (1,) * (len(target) - len(shape)) + shape
    zeros = np.zeros([t if n == 1 else 1 for t, n in zip(target, padded)], np.float32)
    return ctx.out("add", [ins[0], ctx.new_const(zeros, "zeros")])


def _slice(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Slice: starts, ends, axes and steps are attributes before opset 10, constant inputs
    since; numpy's clamping of out-of-range bounds (ONNX's too), negative steps included."""
    shape = ctx.shape(ins[0])
    given = [None, *(ctx.const(ins, k, what) for k, what in
                     ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))]
    starts, ends = attrs.get("starts", given[1]), attrs.get("ends", given[2])
    ctx.check(starts is not None and ends is not None, "needs starts and ends")
    axes = onnx_fold.axes_of(attrs, given, 3) or list(range(len(starts)))
    steps = [1] * len(starts) if given[4] is None else given[4]
    ranges = [range(n) for n in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        ctx.check(-len(shape) <= int(axis) < len(shape) and int(step) != 0,
                  f"axis {int(axis)} or step {int(step)} does not fit shape {shape}")
        n = shape[int(axis)]
        ranges[int(axis)] = slice_range(n, int(start), int(end), int(step))
    return ctx.slice(ins[0], ranges, final=True)


def _split(ctx: Importer, ins: list, attrs: dict) -> list[Value]:
    """Split into the sizes `split` gives (an attribute before opset 13, an input since), else
    into the node's outputs (`num_outputs` since opset 18): equal parts, the last smaller."""
    shape = ctx.shape(ins[0])
    axis = int(attrs.get("axis", 0))
    ctx.check(-len(shape) <= axis < len(shape), f"axis {axis} out of range for {shape}")
    axis %= len(shape)
    sizes = attrs.get("split", ctx.const(ins, 1, "split"))
    if sizes is None:
        parts = int(attrs.get("num_outputs", ctx.n_outputs))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(parts)]
    return ctx.split(ins[0], axis, [int(n) for n in sizes])


# ONNX operators that are one canonical unary operator with default attributes
UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Exp": "exp",
         "Log": "log", "Sqrt": "sqrt", "Neg": "neg", "Abs": "abs", "HardSwish": "hardswish"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
           "Max": "maximum", "Min": "minimum", "Sum": "add"}

CONVERTERS: dict[str, Converter] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "Gemm": _gemm, "MatMul": _matmul,
    **{k: _variadic(op) for k, op in _BINARY.items()},
    **{k: _unary(op) for k, op in UNARY.items()},
    "Gelu": _unary("gelu", approximate="none"), "LeakyRelu": _unary("leaky_relu", alpha=0.01),
    "Clip": _clip, "Reciprocal": lambda ctx, ins, attrs: ctx.out("div", [ctx.scalar(1.0), ins[0]]),
    "BatchNormalization": _batch_norm, "MaxPool": _pool("max_pool"),
    "AveragePool": _pool("avg_pool"), "GlobalMaxPool": _global_max_pool,
    "GlobalAveragePool": lambda ctx, ins, attrs: ctx.out("global_avg_pool", ins[:1]),
    "ReduceMean": _reduce(False), "ReduceSum": _reduce(True),
    "ReduceSumSquare": _reduce(True, square=True), "Flatten": _flatten, "Reshape": _reshape,
    "Squeeze": _reshape_axes(onnx_fold.squeeze_shape),
    "Unsqueeze": _reshape_axes(onnx_fold.unsqueeze_shape), "Transpose": _transpose,
    "Concat": lambda ctx, ins, attrs: ctx.out("concat", ins, axis=int(attrs["axis"])),
    "Softmax": _softmax, "LayerNormalization": _layer_norm,
    "Identity": lambda ctx, ins, attrs: ins[0], "Dropout": _dropout, "Cast": _cast,
    "Shape": _shape_of, "Size": _shape_of, "Expand": _expand, "Slice": _slice, "Split": _split,
}
