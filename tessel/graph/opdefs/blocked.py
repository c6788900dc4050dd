"""Operators on blocked channel layouts (NCHW[b]c): data (N, C/b, H, W, b), the channel
axis split into C/b blocks of b channels that sit innermost, next to each other in memory.

A convolution in this layout reads and writes whole vectors of channels: its register tile
holds b output channels of a few output pixels, its weight is stored in the order it is read,
and a stride-2 window steps over whole vectors, not over every other float. The layout pass
(tessel.graph.layout) puts convolutions into it and lets the layout flow through the
operators that do not care (elementwise math, residual adds, pooling), so a network converts
at its boundaries, not between layers:

- `to_blocked` / `from_blocked`: NC[D]HW <-> NC[D]HW[b]c; a channel count that is not a
  multiple of b is padded with zero channels up to one (to_blocked), and from_blocked's
  `channels` keeps only the first ones (the layout pass pads a conv's 24 channels to two
  whole vectors of 16, as ONNX Runtime's NCHWc transformer does);
- `conv_blocked`: a 2-d convolution, data (N, C/ib, H, W, ib), weight (O/ob, C/g/ib', KH, KW,
  ib', ob) (ib' = ib for groups=1 and for a grouped conv, whose groups read and write whole
  blocks (output block o reads the input blocks of its group); groups=C, depthwise, has
  ib' = 1, one input channel per output channel, and ib = ob), optional bias (O,); output
  (N, O/ob, H', W', ob). A plain NCHW tensor is NCHW[1]c as it lies in memory (a reshape), so
  a network's first convolution reads its input with ib = 1;
- `max_pool_blocked`: max pooling over the two spatial axes of (N, C/b, H, W, b).

Their numpy references unblock, compute the plain operator's reference and block again, so
the registry test checks the lowerings against the plain operators' semantics.
"""
from __future__ import annotations

import numpy as np

from tessel import te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (REQUIRED, Arg, Attrs, Example, define, elementwise, f64,
                                      numbers, same)
from tessel.graph.opdefs.nn import (conv_infer, conv_integer_reference, conv_integer_torch,
                                    conv_reference, conv_torch, integer_product, pool_after,
                                    pool_infer, pool_reference, pool_torch)
from tessel.ops.common import named, pad_tensor


# ---- numpy layout helpers (also the layout pass's weight transforms) ----

def block_array(x: np.ndarray, block: int) -> np.ndarray:
    """(N, C, *S) -> (N, C/block, *S, block)."""
    n, c, *sp = x.shape
    return np.ascontiguousarray(np.moveaxis(x.reshape(n, c // block, block, *sp), 2, -1))


def unblock_array(x: np.ndarray) -> np.ndarray:
    """(N, C/b, *S, b) -> (N, C, *S)."""
    n, cb, *sp, b = x.shape
    return np.ascontiguousarray(np.moveaxis(x, -1, 2).reshape(n, cb * b, *sp))


def block_weight(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW (I = C/groups) -> (O/ob, I/ib, KH, KW, ib, ob), the order a blocked conv reads."""
    o, i, kh, kw = w.shape
    w = w.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
    return np.ascontiguousarray(w.transpose(0, 2, 4, 5, 3, 1))


def unblock_weight(w: np.ndarray) -> np.ndarray:
    oo, io, kh, kw, ib, ob = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3).reshape(oo * ob, io * ib, kh, kw))


# ---- to_blocked / from_blocked ----

def _to_blocked_infer(inputs, attrs, label):
    x, b = inputs[0].shape, attrs["block"]
    check(isinstance(b, int) and b >= 1, f"node {label} (to_blocked): block must be a "
                                         f"positive int, got {b!r}")
    check(len(x) >= 3, f"node {label} (to_blocked): data {x} needs a channel axis (1) and "
                       f"spatial axes")
    return (x[0], -(-x[1] // b), *x[2:], b)


def _to_blocked_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    b, channels = a["block"], x.shape[1]

    def value(i):
        c = i[1] * b + i[-1]
        return x[(i[0], c, *i[2:-1])]
    if channels % b == 0:
        return elementwise(out.shape, value, name)
    return elementwise(out.shape, lambda i: te.if_then_else(  # zeros past the channels
        i[1] * b + i[-1] < channels, value(i), te.const(0, x.dtype)), name)


def _to_blocked_reference(args, a, out):
    return block_array(pad_channels(args[0], out.shape[1] * out.shape[-1]), a["block"])


def _from_blocked_infer(inputs, attrs, label):
    x, channels = inputs[0].shape, attrs["channels"]
    check(len(x) >= 4, f"node {label} (from_blocked): data {x} must be (N, C/b, *spatial, b)")
    full = x[1] * x[-1]
    check(channels is None or (isinstance(channels, int) and 1 <= channels <= full),
          f"node {label} (from_blocked): channels must be None or an int in [1, {full}] (the "
          f"data's {full} channels), got {channels!r}")
    return (x[0], full if channels is None else channels, *x[2:-1])


def _from_blocked_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    b = x.shape[-1]
    return elementwise(out.shape, lambda i: x[(i[0], i[1] // b, *i[2:], i[1] % b)], name)


def pad_channels(x: np.ndarray, channels: int, fill: float = 0.0) -> np.ndarray:
    """x (N, C, ...) with channels C..`channels` filled with `fill` (x itself when C fits)."""
    if x.shape[1] == channels:
        return x
    widths = [(0, 0)] * x.ndim
    widths[1] = (0, channels - x.shape[1])
    return np.pad(x, widths, constant_values=fill)


def torch_block(t, x, block):
    n, c, *sp = x.shape
    full = -(-c // block) * block
    if full != c:
        x = t.cat([x, x.new_zeros((n, full - c, *sp))], dim=1)
    return x.reshape(n, full // block, block, *sp).movedim(2, -1)


def torch_unblock(t, x, channels=None):
    n, cb, *sp, b = x.shape
    y = x.movedim(-1, 2).reshape(n, cb * b, *sp)
    return y if channels is None else y[:, :channels]


define("to_blocked", "injective", _to_blocked_infer, _to_blocked_lower, _to_blocked_reference,
       attrs=dict(block=REQUIRED), layout="barrier", dtype=same, torch=torch_block,
       examples=[Example(((2, 12, 5, 3),), dict(block=4)),
                 Example(((1, 16, 3),), dict(block=16)),
                 Example(((1, 6, 3, 2),), dict(block=4))])  # padded to 8
define("from_blocked", "injective", _from_blocked_infer, _from_blocked_lower,
       lambda args, a, out: unblock_array(args[0])[:, :out.shape[1]], attrs=dict(channels=None),
       layout="barrier", dtype=same, torch=torch_unblock,
       examples=[Example(((2, 3, 5, 3, 4),)), Example(((1, 1, 3, 8),)),
                 Example(((1, 2, 3, 2, 4),), dict(channels=6))])


# ---- conv_blocked ----

def _plain_conv_types(inputs: list[TensorType], attrs: Attrs, label: str
                      ) -> tuple[TensorType, TensorType]:
    """The NCHW data and OIHW weight types a blocked conv's operands stand for."""
    x, w = inputs[0].shape, inputs[1].shape
    check(len(x) == 5 and len(w) == 6, f"node {label} (conv_blocked): data {x} must be (N, "
                                       f"C/ib, H, W, ib) and weight {w} (O/ob, I/ib, KH, KW, "
                                       f"ib, ob)")
    groups, channels = attrs["groups"], x[1] * x[4]
    if groups == 1:
        check(w[1] * w[4] == channels and w[4] == x[4],
              f"node {label} (conv_blocked): weight {w} does not read data {x} (groups=1)")
    elif w[4] > 1:  # grouped: whole blocks in and out in each group
        check(channels % groups == 0 and w[1] * w[4] * groups == channels and w[4] == x[4]
              and (w[0] * w[5]) % groups == 0 and (w[0] * w[5] // groups) % w[5] == 0,
              f"node {label} (conv_blocked): groups={groups} of weight {w} must each read "
              f"whole blocks of data {x} and write whole blocks")
    else:
        check(groups == channels and w[0] * w[5] == channels and w[1] == w[4] == 1
              and w[5] == x[4], f"node {label} (conv_blocked): groups={groups} must be 1 or "
                                f"the {channels} channels (depthwise, weight (C/b, 1, KH, KW, "
                                f"1, b) of the data's block), got weight {w}")
    return (TensorType((x[0], channels, x[2], x[3])),
            TensorType((w[0] * w[5], w[1] * w[4], w[2], w[3])))


def _conv_blocked_infer(inputs, attrs, label):
    """The output type; the plain conv's inference checks and fills strides, pads, dilations."""
    data, weight = _plain_conv_types(inputs, attrs, label)
    plain = [data, weight]
    if len(inputs) > 2:
        plain.append(inputs[2])
    n, o, *sp = conv_infer(plain, attrs, label)
    ob = inputs[1].shape[5]
    return (n, o // ob, *sp, ob)


def _conv_blocked_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, w, *bias = args
    stage = f"{name}_conv" if bias else name
    return with_channel_bias(blocked_conv(x, w, a, stage, out.shape), bias, name)


def blocked_conv(x: te.Tensor, w: te.Tensor, a: Attrs, name: str, shape: tuple[int, ...],
                 dtype: str | None = None, pad_value: int | float = 0) -> te.Tensor:
    """The blocked convolution stage `name` of data x by weight w (attrs `a`), its data padded
    with `pad_value`, its products (and sum) in `dtype` (default x's: an integer conv widens
    its 8-bit operands to int32)."""
    stride, dil, pads = a["strides"], a["dilations"], a["pads"]
    depthwise = a["groups"] != 1 and w.shape[4] == 1
    # a grouped conv's output block o reads the input blocks of its group
    per_group = w.shape[0] // a["groups"] if a["groups"] != 1 and not depthwise else None
    ib = x.shape[4]
    cob = w.shape[1]  # the input blocks one output block reads: all, or its group's
    kh, kw = w.shape[2], w.shape[3]
    padded = pad_tensor(x, (0, 0, pads[0], pads[1], 0), (0, 0, pads[2], pads[3], 0),
                        pad_value, ("n", "c", "h", "w", "b"), name=f"{name}_pad")
    dtype = dtype or x.dtype

    def wide(v: te.Expr) -> te.Expr:
        return v if v.dtype == dtype else te.cast(dtype, v)
    ry, rx = te.reduce_axis(kh, name="ry"), te.reduce_axis(kw, name="rx")
    if depthwise:
        def body(n, o, y, x_, oi):
            win = padded[n, o, y * stride[0] + ry * dil[0], x_ * stride[1] + rx * dil[1], oi]
            return te.sum(wide(win) * wide(w[o, 0, ry, rx, 0, oi]), axis=[ry, rx])
    else:
        rco = te.reduce_axis(cob, name="rco") if cob > 1 else None
        rci = te.reduce_axis(ib, name="rci") if ib > 1 else None
        raxes = [r for r in (rco, rci) if r is not None] + [ry, rx]

        def body(n, o, y, x_, oi):
            co = rco if rco is not None else 0
            c_in = co if per_group is None else o // per_group * cob + co
            ci = rci if rci is not None else 0
            win = padded[n, c_in, y * stride[0] + ry * dil[0], x_ * stride[1] + rx * dil[1], ci]
            return te.sum(wide(win) * wide(w[o, co, ry, rx, ci, oi]), axis=raxes)

    return te.compute(shape, named(body, ("n", "o", "y", "x", "oi")), name=name)


def with_channel_bias(y: te.Tensor, bias: list[Arg], name: str) -> te.Tensor:
    """y (N, K/b, H, W, b) plus a bias (K,) along its blocked channels, as the stage `name`;
    y itself without a bias (then y is the stage `name`)."""
    if not bias:
        return y
    b, ob = bias[0], y.shape[4]
    return elementwise(y.shape, lambda i: y[i] + b[i[1] * ob + i[4]], name)


def _conv_blocked_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    plain = [unblock_array(f64(args[0])), unblock_weight(args[1]), *args[2:]]
    return block_array(conv_reference(plain, a, out), out.shape[-1])


def _conv_blocked_torch(t, x, w, b=None, *, strides, pads, dilations, groups):
    plain_w = torch_unblock_weight(w)
    y = conv_torch(t, torch_unblock(t, x), plain_w, b, strides=strides, pads=pads,
                    dilations=dilations, groups=groups)
    return torch_block(t, y, w.shape[5])


def torch_unblock_weight(w):
    """(O/ob, I/ib, KH, KW, ib, ob) -> OIHW, a torch tensor (unblock_weight's twin)."""
    oo, io, kh, kw, ib, ob = w.shape
    return w.permute(0, 5, 1, 4, 2, 3).reshape(oo * ob, io * ib, kh, kw)


define("conv_blocked", "anchor", _conv_blocked_infer, _conv_blocked_lower,
       _conv_blocked_reference, attrs=dict(strides=None, pads=None, dilations=None, groups=1),
       inputs=(2, 3), layout="anchor", torch=_conv_blocked_torch, examples=[
           # plain input (ib = 1), blocked input, bias, stride, dilation, depthwise
           Example(((1, 3, 9, 7, 1), (2, 3, 3, 3, 1, 4), (8,)), dict(pads=(1, 1, 1, 1))),
           Example(((1, 2, 9, 7, 4), (3, 2, 3, 3, 4, 4)), dict(strides=(2, 2),
                                                               pads=(1, 0, 1, 1))),
           Example(((2, 3, 8, 9, 2), (1, 3, 1, 1, 2, 8))),
           Example(((1, 2, 11, 9, 4), (2, 1, 3, 3, 1, 4), (8,)),
                   dict(pads=(1, 1, 1, 1), groups=8)),
           Example(((1, 3, 9, 9, 4), (3, 1, 3, 3, 1, 4)),
                   dict(strides=(2, 2), pads=(1, 1, 1, 1), dilations=(2, 1), groups=12)),
           # grouped: 3 groups of 8 input channels (2 blocks) and 8 outputs (2 blocks), bias
           Example(((1, 6, 7, 9, 4), (6, 2, 3, 3, 4, 4), (24,)),
                   dict(pads=(1, 1, 1, 1), groups=3)),
           Example(((1, 4, 9, 7, 4), (4, 1, 3, 3, 4, 4)), dict(strides=(2, 2), groups=4))])


# ---- conv_integer_blocked ----

def _conv_integer_blocked_lower(args: list[Arg], a: Attrs, name: str, out: TensorType
                                ) -> te.Tensor:
    """conv_integer in blocked layouts: 8-bit data (N, C/ib, H, W, ib) by 8-bit weight
    (O/ob, C/ib, KH, KW, ib, ob) into int32 (N, O/ob, H', W', ob), padded with `pad_value`.
    Both operands hold their channels innermost, as the dot-product intrinsics read them
    (groups of 4 input channels of a pixel, one vector of output channels): the int8 tiling
    packs only the weight, once, and the epilogue stores whole vectors."""
    x, w = args
    return blocked_conv(x, w, a, name, out.shape, "int32", int(a["pad_value"]))


def _conv_integer_blocked_reference(args: list[np.ndarray], a: Attrs, out: TensorType
                                    ) -> np.ndarray:
    plain = [unblock_array(args[0]), unblock_weight(args[1])]
    return block_array(conv_integer_reference(plain, a, out), out.shape[-1])


def _conv_integer_blocked_torch(t, x, w, *, strides, pads, dilations, groups, pad_value):
    plain_w = torch_unblock_weight(w)
    y = conv_integer_torch(t, torch_unblock(t, x), plain_w, strides=strides, pads=pads,
                           dilations=dilations, groups=groups, pad_value=pad_value)
    return torch_block(t, y, w.shape[5])


define("conv_integer_blocked", "anchor", _conv_blocked_infer, _conv_integer_blocked_lower,
       _conv_integer_blocked_reference,
       attrs=dict(strides=None, pads=None, dilations=None, groups=1, pad_value=0),
       inputs=(2, 2), layout="anchor", dtype=integer_product,
       torch=_conv_integer_blocked_torch, examples=[
           # the stem's 3 channels padded to a block of 4; blocked data, stride 2, 1x1
           Example(((1, 1, 9, 7, 4), (2, 1, 3, 3, 4, 8)), dict(pads=(1, 1, 1, 1), pad_value=9),
                   dtypes=("uint8", "int8")),
           Example(((1, 2, 9, 7, 8), (1, 2, 3, 3, 8, 16)),
                   dict(strides=(2, 2), pads=(1, 0, 1, 1), pad_value=128),
                   dtypes=("uint8", "int8")),
           Example(((2, 3, 8, 9, 4), (2, 3, 1, 1, 4, 8)), dict(strides=(2, 2)),
                   dtypes=("int8", "int8"))])


# ---- max_pool_blocked ----

def _pool_blocked_infer(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) == 5, f"node {label} (max_pool_blocked): data {x} must be (N, C/b, H, W, b)")
    plain = TensorType((x[0], x[1] * x[4], x[2], x[3]))
    n, c, *sp = pool_infer([plain], attrs, label)
    return (x[0], x[1], *sp, x[4])


def _pool_blocked_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    plain = te.placeholder((x.shape[0], x.shape[1], x.shape[2], x.shape[3]), x.dtype)
    after = pool_after(plain, a, out.shape[2:4])
    low = te.identity_of("max", x.dtype)
    padded = pad_tensor(x, (0, 0, a["pads"][0], a["pads"][1], 0), (0, 0, *after, 0), low,
                        ("n", "c", "h", "w", "b"), name=f"{name}_pad")
    ry, rx = te.reduce_axis(a["kernel"][0], name="ry"), te.reduce_axis(a["kernel"][1], name="rx")
    sy, sx = a["strides"]
    dy, dx = a["dilations"]
    taps = (ry if dy == 1 else ry * dy, rx if dx == 1 else rx * dx)

    def body(n, c, y, x_, b):
        return te.max(padded[n, c, y * sy + taps[0], x_ * sx + taps[1], b], axis=[ry, rx])

    return te.compute(out.shape, named(body, ("n", "c", "y", "x", "b")), name=name)


def _pool_blocked_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x = unblock_array(args[0])
    plain_out = TensorType((out.shape[0], out.shape[1] * out.shape[4], *out.shape[2:4]))
    return block_array(pool_reference([x], a, plain_out, is_max=True), out.shape[4])


def _pool_blocked_torch(t, x, *, kernel, strides, pads, ceil_mode, dilations):
    y = pool_torch(t, torch_unblock(t, x), kernel=kernel, strides=strides, pads=pads,
                    ceil_mode=ceil_mode, dilations=dilations)
    return torch_block(t, y, x.shape[-1])


define("max_pool_blocked", "reduce", _pool_blocked_infer, _pool_blocked_lower,
       _pool_blocked_reference, attrs=dict(kernel=REQUIRED, strides=None, pads=None,
                                            ceil_mode=False, dilations=None),
       layout="channelwise", torch=_pool_blocked_torch, dtype=numbers, examples=[
           Example(((1, 2, 7, 9, 4),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
           Example(((1, 3, 11, 13, 2),), dict(kernel=(3, 2), strides=(2, 2),
                                              pads=(1, 1, 1, 1), ceil_mode=True)),
           Example(((1, 2, 9, 8, 4),), dict(kernel=(3, 2), pads=(1, 0, 1, 1),
                                            dilations=(2, 3)))])


__all__ = ["block_array", "unblock_array", "block_weight", "unblock_weight"]
