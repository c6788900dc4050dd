"""ONNX converters of quantized models (`QUANT`, merged into `onnx_import.CONVERTERS`):
QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul; and the
integer convolutions that ConvInteger, QLinearConv and QDQ Convs become (onnx_convert_nn).

Quantization is affine: real = (q - zero_point) * scale, per tensor or per slice along `axis`.
QuantizeLinear rounds half to even and saturates to the zero point's type (uint8 without
one); both directions are elementwise graph operators (div, round, add, clip, cast; cast,
sub, mul), which fuse into the kernels around them. A DequantizeLinear of a constant (a
weight) folds at import (onnx_fold).

MatMulInteger is the int32 product (A - a_zp) @ (B - b_zp). Where B is a constant without a
zero point (int8 weights are symmetric, as onnxruntime's quantizers make them), it is the
graph operator matmul_integer on the 8-bit operands themselves, which the int8 dot-product
intrinsics compute (tessel.intrin), minus a_zp times B's column sums (a constant): the
correction is elementwise and fuses into the product's kernel. Otherwise each operand is
widened to int32 and its zero point subtracted first (exact, without the intrinsics).
QLinearMatMul is that product scaled by a_scale * b_scale and quantized to y's scale and
zero point.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tessel.graph.frontend.context import Const, Value

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer

_RANGE = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
          "int16": (-32768, 32767)}


def _along(ctx: Importer, v: Value, axis: int, rank: int) -> Value:
    """A scale or zero point: a scalar as is, a 1-D one shaped to broadcast along `axis`."""
    shape = ctx.shape(v)
    if len(shape) == 0 or shape == (1,) and rank != 1:
        return ctx.reshape(v, ())
    ctx.check(len(shape) == 1, f"a scale or zero point of shape {shape}: only per-tensor and "
                               f"per-axis (1-D) quantization is supported (not blocked)")
    dims = [1] * rank
    dims[axis % rank] = shape[0]
    return ctx.reshape(v, dims)


def _as(ctx: Importer, v: Value, dtype: str) -> Value:
    """`v` in `dtype`: a constant converted at import, a graph value through a cast node."""
    if ctx.dtype(v) == dtype:
        return v
    if isinstance(v, Const):
        return ctx.derive(v, v.array.astype(dtype), dtype)
    return ctx.emit("cast", [v], to=dtype)


def _zero(ctx: Importer, zp: Value | None) -> bool:
    return zp is None or isinstance(zp, Const) and not np.any(zp.array)


def quantize(ctx: Importer, x: Value, scale: Value, zp: Value | None, axis: int,
             dtype: str) -> Value:
    """saturate(round_half_even(x / scale) + zp) in `dtype`: the node's output."""
    ctx.check(dtype in _RANGE, f"quantizing to {dtype} is not supported; tessel quantizes to "
                               f"{', '.join(_RANGE)}")
    rank = len(ctx.shape(x))
    q = ctx.emit("round", [ctx.emit("div", [x, _along(ctx, _as(ctx, scale, "float32"), axis,
                                                          rank)])])
    if not _zero(ctx, zp):
        q = ctx.emit("add", [q, _along(ctx, _as(ctx, zp, "float32"), axis, rank)])
    lo, hi = _RANGE[dtype]
    return ctx.out("cast", [ctx.emit("clip", [q], min=float(lo), max=float(hi))], to=dtype)


def _quantize_linear(ctx: Importer, ins: list, attrs: dict) -> Value:
    zp = ins[2] if len(ins) > 2 else None
    dtype = ctx.dtype(zp) if zp is not None else "uint8"
    return quantize(ctx, ins[0], ins[1], zp, int(attrs.get("axis", 1)), dtype)


def _dequantize_linear(ctx: Importer, ins: list, attrs: dict) -> Value:
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    axis, rank = int(attrs.get("axis", 1)), len(ctx.shape(x))
    if isinstance(scale, Const) and (zp is None or isinstance(zp, Const)):
        ctx.dequantized[ctx.out_name] = (x, scale.array, None if zp is None else zp.array, axis)
    return _dequantize(ctx, x, scale, zp, axis, rank)


def _dequantize(ctx: Importer, x: Value, scale: Value, zp: Value | None, axis: int,
                rank: int) -> Value:
    """(float(x) - zp) * scale, the node's output."""
    y = _as(ctx, x, "float32")
    if not _zero(ctx, zp):
        y = ctx.emit("sub", [y, _along(ctx, _as(ctx, zp, "float32"), axis, rank)])
    return ctx.out("mul", [y, _along(ctx, _as(ctx, scale, "float32"), axis, rank)])


def _dynamic_quantize_linear(ctx: Importer, ins: list, attrs: dict) -> list[Value]:
    """uint8 with a scale and zero point from the data's range (0 included), computed on
    every run: scale = (max - min) / 255, zero point = saturate(round(-min / scale))."""
    x = ins[0]
    axes = tuple(range(len(ctx.shape(x))))
    hi = ctx.emit("maximum", [ctx.reshape(ctx.emit("reduce_max", [x], axes=axes,
                                                   keepdims=False), ()), ctx.scalar(0.0)])
    lo = ctx.emit("minimum", [ctx.reshape(ctx.emit("reduce_min", [x], axes=axes,
                                                   keepdims=False), ()), ctx.scalar(0.0)])
    scale = ctx.emit("div", [ctx.emit("sub", [hi, lo]), ctx.scalar(255.0)])
    zp_f = ctx.emit("clip", [ctx.emit("round", [ctx.emit("div", [ctx.emit("neg", [lo]), scale])])],
                    min=0.0, max=255.0)
    zp = ctx.emit("cast", [zp_f], to="uint8")
    q = ctx.emit("add", [ctx.emit("round", [ctx.emit("div", [x, scale])]), zp_f])
    y = ctx.out("cast", [ctx.emit("clip", [q], min=0.0, max=255.0)], to="uint8")
    return [y, scale, zp]


def integer_product(ctx: Importer, a: Value, b: Value, a_zp: Value | None,
                    b_zp: Value | None, final: bool) -> Value:
    """int32 (a - a_zp) @ (b - b_zp) (the node's output when `final`)."""
    done = ctx.out if final else ctx.emit
    a_shape = ctx.shape(a)
    a_scalar = a_zp is None or len(ctx.shape(a_zp)) == 0 or ctx.shape(a_zp) == (1,)
    if isinstance(b, Const) and _zero(ctx, b_zp) and a_scalar:
        if _zero(ctx, a_zp):
            return done("matmul_integer", [a, b])
        product = ctx.emit("matmul_integer", [a, b])
        sums = ctx.derive(b, b.array.astype(np.int64).sum(axis=-2).astype(np.int32), "colsum")
        shift = ctx.emit("mul", [_as(ctx, ctx.reshape(a_zp, ()), "int32"), sums])
        return done("sub", [product, shift])
    wide = []
    for v, zp, axis in ((a, a_zp, len(a_shape) - 2), (b, b_zp, len(ctx.shape(b)) - 1)):
        v32 = _as(ctx, v, "int32")
        if not _zero(ctx, zp):  # a's per row (axis -2), b's per column (axis -1)
            v32 = ctx.emit("sub", [v32, _along(ctx, _as(ctx, zp, "int32"), axis,
                                               len(ctx.shape(v)))])
        wide.append(v32)
    return done("matmul_integer", wide)


def _matmul_integer(ctx: Importer, ins: list, attrs: dict) -> Value:
    zps = [ins[i] if len(ins) > i else None for i in (2, 3)]
    return integer_product(ctx, ins[0], ins[1], *zps, final=True)


def _qlinear_matmul(ctx: Importer, ins: list, attrs: dict) -> Value:
    a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp = ins
    acc = _as(ctx, integer_product(ctx, a, b, a_zp, b_zp, final=False), "float32")
    scale = ctx.emit("mul", [_along(ctx, _as(ctx, a_scale, "float32"), -1, 1),
                             _along(ctx, _as(ctx, b_scale, "float32"), -1, 1)])
    real = ctx.emit("mul", [acc, scale])
    return quantize(ctx, real, y_scale, y_zp, -1, ctx.dtype(y_zp))


def quantized_conv(ctx: Importer, x: Value, w: Value, bias: Value | None,
                   **conv: object) -> Value | None:
    """A convolution of DequantizeLinear(x_q) (per-tensor) by DequantizeLinear(w_q) (int8,
    per-tensor or per output channel, no zero point) in int8: conv_integer(x_q, w_q), its
    input padded with x's zero point (the real 0), minus zero point x the weight's sums, times
    x_scale x w_scale, plus the bias; None where the pattern does not hold."""
    qx = ctx.dequantized.get(x) if isinstance(x, str) else None
    qw = ctx.dequantized.get(w.name) if isinstance(w, Const) else None
    if qx is None or qw is None:
        return None
    x_q, sx, zx, _ = qx
    w_q, sw, zw, axis = qw
    out_channels = ctx.shape(w)[0]
    if not (ctx.dtype(x_q) in ("uint8", "int8") and isinstance(w_q, Const)
            and w_q.array.dtype == np.int8 and np.size(sx) == 1
            and (zx is None or np.size(zx) == 1) and (zw is None or not np.any(zw))
            and (np.size(sw) == 1 or (axis == 0 and np.size(sw) == out_channels))):
        return None
    zero = 0 if zx is None else int(np.asarray(zx).reshape(()))
    ones = (1,) * (len(ctx.shape(w)) - 2)
    acc = _shifted_conv(ctx, x_q, w_q, zero, ctx.emit, conv)
    scale = (np.float32(np.asarray(sx).reshape(())) * np.asarray(sw, np.float32).reshape(-1)
             * np.ones(out_channels, np.float32))
    real = ctx.emit("cast", [acc], to="float32")
    scaled = (ctx.emit if bias is not None else ctx.out)("mul", [real, ctx.new_const(
        scale.reshape((1, out_channels, *ones)), "scale")])
    if bias is None:
        return scaled
    return ctx.out("add", [scaled, ctx.reshape(bias, (1, out_channels, *ones))])


def quantized_max_pool(ctx: Importer, x: Value, window: dict) -> Value | None:
    """MaxPool(DequantizeLinear(x_q)) as DequantizeLinear(MaxPool(x_q)), the pool reading and
    writing the 8-bit data (a QDQ ResNet's stem wrote its 112 x 112 x 64 output as floats
    for the pool): exact, since dequantizing with a positive scale keeps the order and the
    pool's padding (the 8-bit type's least value) never wins. None where it does not hold
    (a per-channel or non-positive scale)."""
    q = ctx.dequantized.get(x) if isinstance(x, str) else None
    if q is None:
        return None
    x_q, scale, zp, axis = q
    if np.size(scale) != 1 or not float(np.asarray(scale).reshape(())) > 0 or \
            (zp is not None and np.size(zp) != 1):
        return None
    pooled = ctx.emit("max_pool", [x_q], **window)
    zero = None if zp is None else ctx.scalar(float(np.asarray(zp).reshape(())))
    out = _dequantize(ctx, pooled, ctx.scalar(float(np.asarray(scale).reshape(()))), zero, 1,
                      len(ctx.shape(pooled)))
    ctx.dequantized[ctx.out_name] = (pooled, scale, zp, axis)
    return out


def _shifted_conv(ctx: Importer, x: Value, w: Const, zero: int, done, conv: dict) -> Value:
    """int32 conv(x - zero, w) of a constant 8-bit weight: conv_integer on x itself, padded
    with `zero` (the real 0), minus zero x the weight's sums per output channel."""
    if not zero:
        return done("conv_integer", [x, w], pad_value=0, **conv)
    acc = ctx.emit("conv_integer", [x, w], pad_value=zero, **conv)
    out_channels, rank = ctx.shape(w)[0], len(ctx.shape(w))
    sums = w.array.astype(np.int64).reshape(out_channels, -1).sum(axis=1) * zero
    return done("sub", [acc, ctx.new_const(sums.astype(np.int32).reshape(
        (1, out_channels) + (1,) * (rank - 2)), "zero_shift")])


def integer_conv(ctx: Importer, x: Value, w: Value, x_zp: Value | None, w_zp: Value | None,
                 final: bool, **conv: object) -> Value:
    """int32 conv(x - x_zp, w - w_zp), padded with the real 0 (ONNX ConvInteger): on the 8-bit
    operands themselves where w is a constant without a zero point and x's is a constant
    (_shifted_conv: the dot-product intrinsics compute it), else each operand widened to
    int32 and its zero point (w's per output channel) subtracted first."""
    done = ctx.out if final else ctx.emit
    rank = len(ctx.shape(w))
    if isinstance(w, Const) and _zero(ctx, w_zp) and (x_zp is None or isinstance(x_zp, Const)):
        ctx.check(x_zp is None or np.size(x_zp.array) == 1,
                  f"x_zero_point of shape {ctx.shape(x_zp)}: a conv's input zero point is "
                  f"per tensor")
        zero = 0 if x_zp is None else int(x_zp.array.reshape(()))
        return _shifted_conv(ctx, x, w, zero, done, conv)
    wide = []
    for v, zp, axis in ((x, x_zp, 1), (w, w_zp, 0)):
        v32 = _as(ctx, v, "int32")
        if not _zero(ctx, zp):
            v32 = ctx.emit("sub", [v32, _along(ctx, _as(ctx, zp, "int32"), axis, rank)])
        wide.append(v32)
    return done("conv_integer", wide, pad_value=0, **conv)


def qlinear_conv(ctx: Importer, ins: list, **conv: object) -> Value:
    """ONNX QLinearConv: the integer conv plus the int32 bias, scaled by x_scale x w_scale (w's
    per output channel) and quantized to y's scale and zero point."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, *bias = ins
    acc = integer_conv(ctx, x, w, x_zp, w_zp, False, **conv)
    rank, out_channels = len(ctx.shape(w)), ctx.shape(w)[0]
    if bias and bias[0] is not None:
        acc = ctx.emit("add", [acc, ctx.reshape(_as(ctx, bias[0], "int32"),
                                                (1, out_channels) + (1,) * (rank - 2))])
    scale = ctx.emit("mul", [_along(ctx, _as(ctx, x_scale, "float32"), 1, rank),
                             _along(ctx, _as(ctx, w_scale, "float32"), 1, rank)])
    real = ctx.emit("mul", [_as(ctx, acc, "float32"), scale])
    return quantize(ctx, real, y_scale, y_zp, 1, ctx.dtype(y_zp))


QUANT: dict[str, Converter] = {
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear, "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
}

__all__ = ["QUANT", "quantize", "integer_product", "quantized_conv", "integer_conv",
           "qlinear_conv", "quantized_max_pool"]
