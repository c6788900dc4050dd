"""ONNX converters of the network layers: convolutions, Gemm, MatMul and Einsum, pooling, the
normalizations, softmax (`NN`, merged into `onnx_import.CONVERTERS`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tessel.graph.frontend.context import Const, Value
from tessel.graph.frontend.einsum import einsum
from tessel.graph.frontend.onnx_convert_quant import (integer_conv, qlinear_conv, quantized_conv,
                                                      quantized_max_pool)

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer


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


def _conv_attrs(ctx: Importer, x: Value, w: Value, attrs: dict) -> dict:
    """strides, pads, dilations and groups of a Conv-like node of data x and weight w."""
    spatial, kernel = ctx.shape(x)[2:], ctx.shape(w)[2:]
    strides, dilations = _window(attrs, len(kernel))
    return dict(strides=strides, pads=_pads(ctx, attrs, spatial, kernel, strides, dilations),
                dilations=dilations, groups=int(attrs.get("group", 1)))


def _conv(ctx: Importer, ins: list, attrs: dict) -> Value:
    conv = _conv_attrs(ctx, ins[0], ins[1], attrs)
    int8 = quantized_conv(ctx, ins[0], ins[1], ins[2] if len(ins) > 2 else None, **conv)
    if int8 is not None:
        return int8
    return ctx.out("conv", _present(ins), **conv)


def _conv_integer(ctx: Importer, ins: list, attrs: dict) -> Value:
    return integer_conv(ctx, ins[0], ins[1], _opt(ins, 2), _opt(ins, 3), True,
                        **_conv_attrs(ctx, ins[0], ins[1], attrs))


def _qlinear_conv(ctx: Importer, ins: list, attrs: dict) -> Value:
    return qlinear_conv(ctx, ins, **_conv_attrs(ctx, ins[0], ins[3], attrs))


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


def _moments(ctx: Importer, x: Value, axes: Sequence[int], n: int = 2) -> list[Value]:
    """The mean of `x` over `axes` and (n=2) its biased variance, those axes kept as 1."""
    axes = tuple(axes)
    mean = ctx.emit("reduce_mean", [x], axes=axes, keepdims=True)
    if n == 1:
        return [mean]
    diff = ctx.emit("sub", [x, mean])
    return [mean, ctx.emit("reduce_mean", [ctx.emit("mul", [diff, diff])], axes=axes,
                           keepdims=True)]


def _batch_norm(ctx: Importer, ins: list, attrs: dict) -> Value | list[Value]:
    """BatchNormalization; in training mode (opset 14) normalized with the batch's mean and
    variance over every axis but the channels, which update the running ones (its outputs 1
    and 2, where read): input * momentum + batch * (1 - momentum)."""
    ctx.check(attrs.get("spatial", 1) == 1, "only spatial=1 (one statistic per channel) is "
                                            "supported")
    eps = float(attrs.get("epsilon", 1e-5))
    if not attrs.get("training_mode", 0):
        return ctx.out("batch_norm", ins[:5], epsilon=eps)
    shape = ctx.shape(ins[0])
    stats = _moments(ctx, ins[0], [d for d in range(len(shape)) if d != 1])
    mean, var = (ctx.reshape(v, shape[1:2]) for v in stats)
    y = ctx.out("batch_norm", [*ins[:3], mean, var], epsilon=eps)
    if not (ctx.wants(1) or ctx.wants(2)):
        return y
    momentum = float(attrs.get("momentum", 0.9))
    return [y, *(ctx.emit("add", [ctx.emit("mul", [old, ctx.scalar(momentum)]),
                                  ctx.emit("mul", [new, ctx.scalar(1.0 - momentum)])])
                 for old, new in ((ins[3], mean), (ins[4], var)))]


def _pool(op: str) -> Converter:
    """MaxPool and AveragePool; MaxPool's optional output Indices is max_pool_indices."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value | list[Value]:
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        strides, dilations = _window(attrs, len(kernel))
        pads = _pads(ctx, attrs, ctx.shape(ins[0])[2:], kernel, strides, dilations)
        window = dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations,
                      ceil_mode=bool(attrs.get("ceil_mode", 0)))
        if op == "avg_pool":
            return ctx.out(op, ins[:1], **window,
                           count_include_pad=bool(attrs.get("count_include_pad", 0)))
        if not ctx.wants(1):
            int8 = quantized_max_pool(ctx, ins[0], window)
            return int8 if int8 is not None else ctx.out(op, ins[:1], **window)
        y = ctx.out(op, ins[:1], **window)
        return [y, ctx.emit("max_pool_indices", ins[:1], **window,
                            storage_order=int(attrs.get("storage_order", 0)))]
    return convert


def _global_max_pool(ctx: Importer, ins: list, attrs: dict) -> Value:
    spatial = ctx.shape(ins[0])[2:]
    return ctx.out("max_pool", ins[:1], kernel=spatial, strides=(1,) * len(spatial))


def _softmax(op: str) -> Converter:
    """Softmax and LogSoftmax; before opset 13 they flatten axes [axis, rank) into one and
    normalize over it."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        x, shape = ins[0], ctx.shape(ins[0])
        if ctx.opset >= 13:
            return ctx.out(op, [x], axis=int(attrs.get("axis", -1)))
        axis = int(attrs.get("axis", 1)) % len(shape)
        if axis == len(shape) - 1:
            return ctx.out(op, [x], axis=axis)
        flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        return ctx.reshape(ctx.emit(op, [flat], axis=1), shape, final=True)
    return convert


def _layer_norm(ctx: Importer, ins: list, attrs: dict) -> Value | list[Value]:
    """LayerNormalization; its optional outputs Mean and InvStdDev (training graphs), where
    read, are the statistics over axes axis..end, kept as 1, apart from Y's fused kernel."""
    axis, eps = int(attrs.get("axis", -1)), float(attrs.get("epsilon", 1e-5))
    y = ctx.out("layer_norm", _present(ins[:3]), axis=axis, epsilon=eps)
    if not (ctx.wants(1) or ctx.wants(2)):
        return y
    rank = len(ctx.shape(ins[0]))
    stats = _moments(ctx, ins[0], range(axis % rank, rank), 2 if ctx.wants(2) else 1)
    if len(stats) == 1:
        return [y, *stats]
    var_eps = ctx.emit("add", [stats[1], ctx.scalar(eps)])
    return [y, stats[0], ctx.emit("pow", [var_eps, ctx.scalar(-0.5)])]


def _instance_norm(ctx: Importer, ins: list, attrs: dict) -> Value:
    return ctx.out("instance_norm", ins[:3], epsilon=float(attrs.get("epsilon", 1e-5)))


def _per_channel(ctx: Importer, v: Value, groups: int, channels: int) -> Value:
    """GroupNormalization-18's scale or bias of one value per group as one per channel."""
    if ctx.shape(v) == (channels,):
        return v
    ctx.check(ctx.shape(v) == (groups,), f"scale and bias must have {groups} (num_groups) or "
                                         f"{channels} (channels) values, got {ctx.shape(v)}")
    if isinstance(v, Const):
        return ctx.derive(v, np.repeat(v.array, channels // groups), "per_channel")
    zeros = ctx.new_const(np.zeros((groups, channels // groups), np.float32), "zeros")
    spread = ctx.emit("add", [ctx.reshape(v, (groups, 1)), zeros])
    return ctx.reshape(spread, (channels,))


def _group_norm(ctx: Importer, ins: list, attrs: dict) -> Value:
    """GroupNormalization: scale and bias per group (opset 18) or per channel (opset 21)."""
    groups, channels = int(attrs["num_groups"]), ctx.shape(ins[0])[1]
    ctx.check(groups >= 1 and channels % groups == 0,
              f"{channels} channels do not split into num_groups={groups}")
    scale, bias = (_per_channel(ctx, v, groups, channels) for v in ins[1:3])
    return ctx.out("group_norm", [ins[0], scale, bias], groups=groups,
                   epsilon=float(attrs.get("epsilon", 1e-5)))


def _lrn(ctx: Importer, ins: list, attrs: dict) -> Value:
    return ctx.out("lrn", ins[:1], size=int(attrs["size"]),
                   alpha=float(attrs.get("alpha", 1e-4)), beta=float(attrs.get("beta", 0.75)),
                   bias=float(attrs.get("bias", 1.0)))


NN: dict[str, Converter] = {
    "Conv": _conv, "ConvInteger": _conv_integer, "QLinearConv": _qlinear_conv,
    "ConvTranspose": _conv_transpose, "Gemm": _gemm, "MatMul": _matmul,
    "Einsum": lambda ctx, ins, attrs: einsum(ctx, str(attrs["equation"]), ins),
    "BatchNormalization": _batch_norm, "MaxPool": _pool("max_pool"),
    "AveragePool": _pool("avg_pool"), "GlobalMaxPool": _global_max_pool,
    "GlobalAveragePool": lambda ctx, ins, attrs: ctx.out("global_avg_pool", ins[:1]),
    "Softmax": _softmax("softmax"), "LogSoftmax": _softmax("log_softmax"),
    "LayerNormalization": _layer_norm,
    "InstanceNormalization": _instance_norm, "GroupNormalization": _group_norm, "LRN": _lrn,
}
