"""Convolutions and pooling in PyTorch layouts (NC[D]HW data, OI[D]HW weights).

Padding is a stage of its own (a tensor named "pad", built with if_then_else as in TVM's
topi) only when some padding is non-zero. Convolutions are cross-correlations, as in
torch.nn.functional; `conv2d_transpose` dilates and pads its input in one "pad" stage and then
runs a direct convolution with the flipped kernel, which is exact for every stride, padding,
output_padding and dilation.
"""
from __future__ import annotations

from typing import Sequence

from tessel import ir, te
from tessel.ops import reference as ref
from tessel.ops.common import (check, dtype_arg, ints, make_func, named, out_dtype_arg,
                               pad_tensor, positive)
from tessel.ops.registry import define

IntOrSeq = int | Sequence[int]
# per spatial rank: (data axis names, output axis names, kernel reduce axis names)
_AXES = {1: (("l",), ("x",), ("rx",)),
         2: (("h", "w"), ("y", "x"), ("ry", "rx")),
         3: (("d", "h", "w"), ("z", "y", "x"), ("rz", "ry", "rx"))}


def _geometry(op: str, sizes, kernel, stride, padding, dilation,
              pad_after=None) -> tuple[int, ...]:
    """Output sizes of a convolution with `padding` before each axis and `pad_after` (default:
    `padding`) after it; raises when a dilated kernel does not fit the input."""
    out = []
    labels = ("L",) if len(sizes) == 1 else "DHW"[-len(sizes):]
    after = padding if pad_after is None else pad_after
    for ax, n, k, s, p, a, d in zip(labels, sizes, kernel, stride, padding, after, dilation):
        span = d * (k - 1) + 1
        pads = f"2 * {p}" if p == a else f"{p} + {a}"
        check(n + p + a >= span,
              f"{op}: kernel larger than padded input along {ax}: kernel {k} with dilation {d} "
              f"spans {span}, but the input is {n} + {pads} padding = {n + p + a} "
              f"(output size would be <= 0)")
        out.append((n + p + a - span) // s + 1)
    return tuple(out)


def _groups(op: str, C: int, O: int, groups: int) -> None:
    positive(op, groups=groups)
    check(C % groups == 0, f"{op}: in channels C={C} not divisible by groups={groups}")
    check(O % groups == 0, f"{op}: out channels O={O} not divisible by groups={groups}")


def conv_stages(op: str, data: te.Tensor, weight: te.Tensor, stride, padding, dilation,
                groups: int, out_dtype: str, name: str, pad_after=None,
                pad_name: str = "pad", pad_value: int | float = 0) -> te.Tensor:
    """Grouped nd cross-correlation of validated arguments, after an optional pad stage
    `pad_name` (`padding` before each spatial axis, `pad_after`, default `padding`, after)
    that pads with `pad_value` (a quantized input's zero point: the real value 0)."""
    nd = data.ndim - 2
    in_names, out_names, r_names = _AXES[nd]
    (N, C), O, kernel = data.shape[:2], weight.shape[0], weight.shape[2:]
    after = tuple(padding if pad_after is None else pad_after)
    out_sp = _geometry(op, data.shape[2:], kernel, stride, padding, dilation, after)
    cg, og = C // groups, O // groups
    padded = pad_tensor(data, (0, 0) + tuple(padding), (0, 0) + after, pad_value,
                        ("n", "c") + in_names, name=pad_name)
    rc = te.reduce_axis(cg, name="rc") if cg > 1 else None
    rk = [te.reduce_axis(k, name=n) for k, n in zip(kernel, r_names)]
    raxes = ([rc] if rc is not None else []) + rk

    def body(n, o, *ys):
        c_in = rc if rc is not None else 0
        chan = c_in if groups == 1 else (o // og) * cg + c_in
        idx = [y * s + r * d for y, r, s, d in zip(ys, rk, stride, dilation)]
        a = te.cast(out_dtype, padded[(n, chan, *idx)])
        b = te.cast(out_dtype, weight[(o, c_in, *rk)])
        return te.sum(a * b, axis=raxes)

    return te.compute((N, O) + out_sp, named(body, ("n", "o") + out_names), name=name)


def _conv_nd(op: str, nd: int, N, C, sizes, O, kernel, stride, padding, dilation, groups,
             dtype, out_dtype, name: str | None = None, b_dtype: str | None = None) -> tuple:
    """conv1d/2d/3d of sizes already checked positive: validate the rest; return the tensors
    data (N, C, *sizes), weight (O, C/groups, *kernel) (of `b_dtype`, by default `dtype`:
    uint8 data and int8 weights in a quantized model), the output, and the normalized args
    (b_dtype among them only when it differs)."""
    stride = ints(op, "stride", stride, nd, 1)
    padding = ints(op, "padding", padding, nd, 0)
    dilation = ints(op, "dilation", dilation, nd, 1)
    _groups(op, C, O, groups)
    dtype = dtype_arg(op, dtype)
    out_dtype = out_dtype_arg(op, dtype, out_dtype)
    weights = dtype if b_dtype is None else dtype_arg(op, b_dtype, "b_dtype")
    check(ir.is_float(weights) == ir.is_float(dtype),
          f"{op}: b_dtype {weights!r} and dtype {dtype!r} must both be float or both int")
    out_dtype_arg(op, weights, out_dtype)
    data = te.placeholder((N, C) + tuple(sizes), dtype, name="data")
    weight = te.placeholder((O, C // groups) + tuple(kernel), weights, name="weight")
    out = conv_stages(op, data, weight, stride, padding, dilation, groups, out_dtype,
                      name or op)
    extra = {} if weights == dtype else {"b_dtype": weights}
    return data, weight, out, dict(stride=stride, padding=padding, dilation=dilation,
                                   groups=groups, dtype=dtype, out_dtype=out_dtype, **extra)


@define(ref.conv1d, "stride", "padding", "dilation", "groups")
def conv1d(N: int, C: int, L: int, O: int, K: int, stride: IntOrSeq = 1, padding: IntOrSeq = 0,
           dilation: IntOrSeq = 1, groups: int = 1, dtype: str = "float32",
           out_dtype: str | None = None) -> ir.PrimFunc:
    """Params (data (N, C, L), weight (O, C/groups, K), conv1d (N, O, L_out))."""
    positive("conv1d", N=N, C=C, L=L, O=O, K=K)
    *tensors, rest = _conv_nd("conv1d", 1, N, C, (L,), O, (K,), stride, padding, dilation,
                              groups, dtype, out_dtype)
    return make_func("conv1d", tensors, dict(N=N, C=C, L=L, O=O, K=K, **rest))


@define(ref.conv2d, "stride", "padding", "dilation", "groups")
def conv2d(N: int, C: int, H: int, W: int, O: int, KH: int, KW: int, stride: IntOrSeq = 1,
           padding: IntOrSeq = 0, dilation: IntOrSeq = 1, groups: int = 1,
           dtype: str = "float32", out_dtype: str | None = None,
           b_dtype: str | None = None) -> ir.PrimFunc:
    """Params (data (N, C, H, W), weight (O, C/groups, KH, KW), conv2d (N, O, H_out, W_out));
    the weight of `b_dtype` (default `dtype`)."""
    positive("conv2d", N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW)
    *tensors, rest = _conv_nd("conv2d", 2, N, C, (H, W), O, (KH, KW), stride, padding,
                              dilation, groups, dtype, out_dtype, b_dtype=b_dtype)
    return make_func("conv2d", tensors, dict(N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW, **rest))


@define(ref.conv3d, "stride", "padding", "dilation", "groups")
def conv3d(N: int, C: int, D: int, H: int, W: int, O: int, KD: int, KH: int, KW: int,
           stride: IntOrSeq = 1, padding: IntOrSeq = 0, dilation: IntOrSeq = 1, groups: int = 1,
           dtype: str = "float32", out_dtype: str | None = None) -> ir.PrimFunc:
    """Params (data (N, C, D, H, W), weight (O, C/groups, KD, KH, KW), conv3d (N, O, ...))."""
    positive("conv3d", N=N, C=C, D=D, H=H, W=W, O=O, KD=KD, KH=KH, KW=KW)
    *tensors, rest = _conv_nd("conv3d", 3, N, C, (D, H, W), O, (KD, KH, KW), stride, padding,
                              dilation, groups, dtype, out_dtype)
    return make_func("conv3d", tensors,
                     dict(N=N, C=C, D=D, H=H, W=W, O=O, KD=KD, KH=KH, KW=KW, **rest))


@define(ref.depthwise_conv2d, "stride", "padding", "dilation")
def depthwise_conv2d(N: int, C: int, H: int, W: int, KH: int, KW: int, stride: IntOrSeq = 1,
                     padding: IntOrSeq = 0, dilation: IntOrSeq = 1, dtype: str = "float32",
                     out_dtype: str | None = None) -> ir.PrimFunc:
    """conv2d with groups=C: params (data (N, C, H, W), weight (C, 1, KH, KW), out (N, C, ..))."""
    positive("depthwise_conv2d", N=N, C=C, H=H, W=W, KH=KH, KW=KW)
    *tensors, rest = _conv_nd("depthwise_conv2d", 2, N, C, (H, W), C, (KH, KW), stride,
                              padding, dilation, C, dtype, out_dtype)
    del rest["groups"]
    return make_func("depthwise_conv2d", tensors,
                     dict(N=N, C=C, H=H, W=W, KH=KH, KW=KW, **rest))


@define(ref.conv2d_bn_relu, "stride", "padding", "eps")
def conv2d_bn_relu(N: int, C: int, H: int, W: int, O: int, KH: int, KW: int,
                   stride: IntOrSeq = 1, padding: IntOrSeq = 0, eps: float = 1e-5,
                   dtype: str = "float32") -> ir.PrimFunc:
    """relu(batch_norm(conv2d(data, weight))) with inference batch norm over the O channels.

    Params (data, weight, gamma, beta, mean, var (each (O,)), out); stages [pad,] conv2d,
    bn_relu = max((conv2d - mean) * gamma * rsqrt(var + eps) + beta, 0).
    """
    op = "conv2d_bn_relu"
    positive(op, N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW)
    dtype = dtype_arg(op, dtype, floating=True)
    check(isinstance(eps, (int, float)) and eps >= 0, f"{op}: eps must be >= 0, got {eps!r}")
    data, weight, conv, rest = _conv_nd(op, 2, N, C, (H, W), O, (KH, KW), stride, padding, 1,
                                        1, dtype, None, name="conv2d")
    gamma, beta, mean, var = (te.placeholder((O,), dtype, name=n)
                              for n in ("gamma", "beta", "mean", "var"))
    out = te.compute(conv.shape, lambda n, o, y, x: te.max(
        (conv[n, o, y, x] - mean[o]) * (gamma[o] * te.rsqrt(var[o] + float(eps))) + beta[o],
        0.0), name="bn_relu")
    return make_func(op, [data, weight, gamma, beta, mean, var, out],
                     dict(N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW, stride=rest["stride"],
                          padding=rest["padding"], eps=float(eps), dtype=dtype))


def _transpose_geometry(op, sizes, kernel, stride, padding, output_padding, dilation):
    out = []
    for ax, n, k, s, p, op_, d in zip("HW", sizes, kernel, stride, padding, output_padding,
                                      dilation):
        check(op_ < max(s, d), f"{op}: output_padding {op_} along {ax} must be smaller than "
                               f"stride {s} or dilation {d}")
        size = (n - 1) * s - 2 * p + d * (k - 1) + op_ + 1
        check(size >= 1, f"{op}: padding {p} along {ax} too large: output size would be "
                         f"{size} <= 0 (input {n}, kernel {k}, stride {s}, dilation {d})")
        out.append(size)
    return tuple(out)


def _dilate_pad(data: te.Tensor, stride, lead, out_sp, span, name: str = "pad") -> te.Tensor:
    """pad[n, c, h, w] = data[n, c, (h - lead) / s, ...] where that divides and is in bounds,
    else 0: the zero-inserted, padded (or cropped, when lead < 0) input of a transposed
    convolution with any number of spatial axes."""
    shape = data.shape[:2] + tuple(o + sp - 1 for o, sp in zip(out_sp, span))
    if all(s == 1 and p == 0 for s, p in zip(stride, lead)) and shape == data.shape:
        return data

    def body(n, c, *hs):
        conds, idx = [], []
        for h, size, s, p, ext in zip(hs, data.shape[2:], stride, lead, shape[2:]):
            t = h - p if p >= 0 else h + (-p)
            if p > 0:
                conds.append(t >= 0)
            if s > 1:
                conds.append(ir.eq(t % s, 0))
            if ext - 1 - p > (size - 1) * s:
                conds.append(t < (size - 1) * s + 1)
            idx.append(t // s)
        return te.if_then_else(te.all(*conds), data[(n, c, *idx)], ir.const(0, data.dtype))

    return te.compute(shape, named(body, ("n", "c") + _AXES[data.ndim - 2][0]), name=name)


def conv_transpose_stages(data: te.Tensor, weight: te.Tensor, stride, pad_before, out_sp,
                          dilation, groups: int, name: str,
                          pad_name: str = "pad") -> te.Tensor:
    """Transposed nd convolution of validated arguments with output sizes `out_sp` (which fix
    the padding after each axis): a `_dilate_pad` stage, then a direct convolution with the
    flipped kernel. weight is (C, O/groups, *kernel)."""
    nd = data.ndim - 2
    _, out_names, r_names = _AXES[nd]
    C, og, kernel = data.shape[1], weight.shape[1], weight.shape[2:]
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    lead = tuple(sp - 1 - p for sp, p in zip(span, pad_before))
    padded = _dilate_pad(data, stride, lead, out_sp, span, name=pad_name)
    cg = C // groups
    rc = te.reduce_axis(cg, name="rc")
    rk = [te.reduce_axis(k, name=n) for k, n in zip(kernel, r_names)]

    def body(n, o, *ys):
        chan = rc if groups == 1 else (o // og) * cg + rc
        a = padded[(n, chan, *(y + r * d for y, r, d in zip(ys, rk, dilation)))]
        b = weight[(chan, o if groups == 1 else o % og, *(k - 1 - r for k, r in zip(kernel, rk)))]
        return te.sum(a * b, axis=[rc, *rk])

    return te.compute((data.shape[0], og * groups) + tuple(out_sp),
                      named(body, ("n", "o") + out_names), name=name)


@define(ref.conv2d_transpose, "stride", "padding", "output_padding", "dilation", "groups")
def conv2d_transpose(N: int, C: int, H: int, W: int, O: int, KH: int, KW: int,
                     stride: IntOrSeq = 1, padding: IntOrSeq = 0, output_padding: IntOrSeq = 0,
                     dilation: IntOrSeq = 1, groups: int = 1,
                     dtype: str = "float32") -> ir.PrimFunc:
    """torch conv_transpose2d: params (data (N, C, H, W), weight (C, O/groups, KH, KW), out
    (N, O, H_out, W_out)), H_out = (H - 1) * stride - 2 * padding + dilation * (KH - 1) +
    output_padding + 1."""
    op = "conv2d_transpose"
    positive(op, N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW)
    stride, padding = ints(op, "stride", stride, 2, 1), ints(op, "padding", padding, 2, 0)
    output_padding = ints(op, "output_padding", output_padding, 2, 0)
    dilation = ints(op, "dilation", dilation, 2, 1)
    _groups(op, C, O, groups)
    dtype = dtype_arg(op, dtype)
    out_sp = _transpose_geometry(op, (H, W), (KH, KW), stride, padding, output_padding, dilation)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    weight = te.placeholder((C, O // groups, KH, KW), dtype, name="weight")
    out = conv_transpose_stages(data, weight, stride, padding, out_sp, dilation, groups,
                                name=op)
    return make_func(op, [data, weight, out],
                     dict(N=N, C=C, H=H, W=W, O=O, KH=KH, KW=KW, stride=stride, padding=padding,
                          output_padding=output_padding, dilation=dilation, groups=groups,
                          dtype=dtype))


def _pool_args(op, N, C, H, W, kernel, stride, padding):
    positive(op, N=N, C=C, H=H, W=W)
    kernel = ints(op, "kernel", kernel, 2, 1)
    stride = kernel if stride is None else ints(op, "stride", stride, 2, 1)
    padding = ints(op, "padding", padding, 2, 0)
    for ax, k, p in zip("HW", kernel, padding):
        check(2 * p <= k, f"{op}: padding {p} along {ax} must be at most half the kernel {k}")
    out_sp = _geometry(op, (H, W), kernel, stride, padding, (1, 1))
    return kernel, stride, padding, out_sp


def pool_stages(op: str, data: te.Tensor, kernel, stride, padding, out_sp, fill, combiner,
                name, pad_after=None, pad_name: str = "pad", dilation=None) -> te.Tensor:
    """`combiner` over each window of an nd pooling, after an optional pad stage `pad_name`
    filled with `fill` (`padding` before each spatial axis, `pad_after`, default `padding`,
    after); window taps `dilation` apart (default 1: the taps of a window are adjacent)."""
    in_names, out_names, r_names = _AXES[data.ndim - 2]
    after = tuple(padding if pad_after is None else pad_after)
    padded = pad_tensor(data, (0, 0) + tuple(padding), (0, 0) + after, fill,
                        ("n", "c") + in_names, name=pad_name)
    rk = [te.reduce_axis(k, name=n) for k, n in zip(kernel, r_names)]
    dilation = tuple(dilation or (1,) * len(kernel))

    def body(n, c, *ys):
        idx = (y * s + (r if d == 1 else r * d) for y, s, r, d in zip(ys, stride, rk, dilation))
        return combiner(padded[(n, c, *idx)], axis=rk)

    return te.compute(data.shape[:2] + tuple(out_sp), named(body, ("n", "c") + out_names),
                      name=name)


@define(ref.max_pool2d, "kernel", "stride", "padding")
def max_pool2d(N: int, C: int, H: int, W: int, kernel: IntOrSeq, stride: IntOrSeq | None = None,
               padding: IntOrSeq = 0, dtype: str = "float32") -> ir.PrimFunc:
    """Window maximum (padding never wins); stride defaults to kernel. Params (data, out)."""
    op = "max_pool2d"
    kernel, stride, padding, out_sp = _pool_args(op, N, C, H, W, kernel, stride, padding)
    dtype = dtype_arg(op, dtype)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    out = pool_stages(op, data, kernel, stride, padding, out_sp, te.identity_of("max", dtype),
                      te.max, name=op)
    return make_func(op, [data, out], dict(N=N, C=C, H=H, W=W, kernel=kernel, stride=stride,
                                           padding=padding, dtype=dtype))


@define(ref.avg_pool2d, "kernel", "stride", "padding")
def avg_pool2d(N: int, C: int, H: int, W: int, kernel: IntOrSeq, stride: IntOrSeq | None = None,
               padding: IntOrSeq = 0, dtype: str = "float32") -> ir.PrimFunc:
    """Window mean counting padded zeros (count_include_pad=True): stages [pad,] pool_sum,
    avg_pool2d. Params (data, out)."""
    op = "avg_pool2d"
    kernel, stride, padding, out_sp = _pool_args(op, N, C, H, W, kernel, stride, padding)
    dtype = dtype_arg(op, dtype, floating=True)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    total = pool_stages(op, data, kernel, stride, padding, out_sp, 0, te.sum, name="pool_sum")
    count = float(kernel[0] * kernel[1])
    out = te.compute(total.shape, lambda n, c, y, x: total[n, c, y, x] / count, name=op)
    return make_func(op, [data, out], dict(N=N, C=C, H=H, W=W, kernel=kernel, stride=stride,
                                           padding=padding, dtype=dtype))


@define(ref.global_avg_pool2d)
def global_avg_pool2d(N: int, C: int, H: int, W: int, dtype: str = "float32") -> ir.PrimFunc:
    """Mean over H and W: params (data (N, C, H, W), out (N, C, 1, 1))."""
    op = "global_avg_pool2d"
    positive(op, N=N, C=C, H=H, W=W)
    dtype = dtype_arg(op, dtype, floating=True)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    ry, rx = te.reduce_axis(H, name="ry"), te.reduce_axis(W, name="rx")
    total = te.compute((N, C, 1, 1), lambda n, c, i, j: te.sum(data[n, c, ry, rx], axis=[ry, rx]),
                       name="pool_sum")
    out = te.compute((N, C, 1, 1), lambda n, c, i, j: total[n, c, i, j] / float(H * W), name=op)
    return make_func(op, [data, out], dict(N=N, C=C, H=H, W=W, dtype=dtype))


__all__ = ["conv1d", "conv2d", "conv3d", "depthwise_conv2d", "conv2d_transpose",
           "conv2d_bn_relu", "max_pool2d", "avg_pool2d", "global_avg_pool2d",
           "conv_stages", "conv_transpose_stages", "pool_stages"]
