"""Convolutions, matrix products and pooling: the anchors of fused groups, and their windows.

Layouts are PyTorch's (NC[D]HW data, OI[D]HW conv weights); `pads` list the padding before
each spatial axis, then after each (ONNX order). The te stages are those of `tessel.ops`
(`nn.conv_stages`, `nn.conv_transpose_stages`, `nn.pool_stages`, dense as
`ops.linalg.dense`), so a lone conv node lowers to the very workload of `ops.conv2d`.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (INTS, REQUIRED, Arg, Attrs, Example, bcast,
                                      broadcast_shape, define, elementwise, f64, ints, numbers,
                                      ravel, split_pads, unravel)
from tessel.ops import nn
from tessel.ops import reference as ref
from tessel.ops.common import named

Index = tuple[ir.Expr, ...]


def _torch_pads(pads: Sequence[int]) -> list[int]:
    """ONNX pads (begins, then ends) as torch's F.pad list (last axis first)."""
    nd = len(pads) // 2
    return [p for d in reversed(range(nd)) for p in (pads[d], pads[d + nd])]


def _bias_add(out: te.Tensor, bias: te.Tensor, axis: int, name: str) -> te.Tensor:
    return elementwise(out.shape, lambda i: out[i] + bias[i[axis]], name)


def _channel_bias(out: np.ndarray, args: list[np.ndarray]) -> np.ndarray:
    if len(args) < 3:
        return out
    return out + f64(args[2]).reshape((-1,) + (1,) * (out.ndim - 2))


# ---- conv ----

def conv_infer(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    nd = len(x) - 2
    check(1 <= nd <= 3 and len(w) == len(x),
          f"node {label} (conv): data {x} and weight {w} must both be 3-d, 4-d or 5-d")
    strides = ints(label, "conv", "strides", attrs["strides"] or (1,) * nd, nd)
    dil = ints(label, "conv", "dilations", attrs["dilations"] or (1,) * nd, nd)
    pads = ints(label, "conv", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    attrs.update(strides=strides, dilations=dil, pads=pads)
    g = attrs["groups"]
    check(x[1] == w[1] * g and w[0] % g == 0,
          f"node {label} (conv): {x[1]} input channels do not fit weight {w} with groups={g}")
    if len(inputs) > 2:
        check(inputs[2].shape == (w[0],), f"node {label} (conv): bias {inputs[2].shape} "
                                          f"must be ({w[0]},)")
    out = [(n + pads[i] + pads[i + nd] - dil[i] * (k - 1) - 1) // strides[i] + 1
           for i, (n, k) in enumerate(zip(x[2:], w[2:]))]
    check(all(o >= 1 for o in out), f"node {label} (conv): kernel {w[2:]} larger than the "
                                     f"padded input {x[2:]}")
    return (x[0], w[0], *out)


def _conv_lower(args: list[Arg], a: Attrs, name: str, out_type: TensorType) -> te.Tensor:
    x, w, *bias = args
    nd = x.ndim - 2
    stage = f"{name}_conv" if bias else name
    out = nn.conv_stages("conv", x, w, a["strides"], a["pads"][:nd], a["dilations"],
                         a["groups"], x.dtype, stage, pad_after=a["pads"][nd:],
                         pad_name=f"{name}_pad")
    return _bias_add(out, bias[0], 1, name) if bias else out


def conv_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, w = f64(args[0]), args[1]
    before, after = split_pads(a["pads"])
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)))
    nd = x.ndim - 2
    y = ref.conv_nd(x, w, a["strides"], (0,) * nd, a["dilations"], a["groups"])
    return _channel_bias(y, args)


def conv_torch(t, x, w, b=None, *, strides, pads, dilations, groups):
    conv = getattr(t.nn.functional, f"conv{x.dim() - 2}d")
    return conv(t.nn.functional.pad(x, _torch_pads(pads)), w, b, strides, 0, dilations, groups)


_CONV_ATTRS = dict(strides=None, pads=None, dilations=None, groups=1)
define("conv", "anchor", conv_infer, _conv_lower, conv_reference, attrs=_CONV_ATTRS,
       inputs=(2, 3), layout="anchor", blocked=("conv_blocked", {}), torch=conv_torch, examples=[
           # bias, groups, depthwise, dilation, strides, asymmetric pads, 1-3 spatial axes
           Example(((1, 3, 9, 7), (5, 3, 3, 3), (5,)), dict(pads=(1, 1, 1, 1))),
           Example(((1, 6, 11, 9), (9, 2, 3, 3)), dict(strides=(2, 2), dilations=(2, 2),
                                                        groups=3)),
           Example(((1, 3, 9, 7), (5, 3, 2, 3)), dict(strides=(2, 1), pads=(0, 1, 2, 1))),
           Example(((2, 5, 9, 7), (5, 1, 3, 3), (5,)), dict(pads=(1, 1, 1, 1), groups=5)),
           Example(((1, 3, 7, 9), (5, 3, 1, 1))),
           Example(((2, 3, 13), (5, 3, 3)), dict(strides=(2,), pads=(1, 2), dilations=(2,))),
           Example(((1, 3, 5, 7, 6), (5, 3, 3, 2, 3), (5,)),
                   dict(strides=(1, 2, 2), pads=(1, 0, 1, 1, 1, 0)))])


# ---- conv_transpose ----

def integer_product(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    """Two 8-bit (or wider) integer operands, each its own dtype; an int32 product."""
    for t in inputs:
        check(t.dtype in INTS and t.dtype not in ("int64", "uint64", "uint32"),
              f"node {label}: {t.dtype} operands are not supported; it takes int8, uint8, "
              f"int16, uint16 or int32")
    return "int32"


def _conv_integer_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """ONNX ConvInteger's product in int32, its input padded with `pad_value` (the input's
    zero point: QDQ's real 0), so the int8 dot-product intrinsics compute it."""
    x, w = args
    nd = x.ndim - 2
    return nn.conv_stages("conv", x, w, a["strides"], a["pads"][:nd], a["dilations"],
                          a["groups"], "int32", name, pad_after=a["pads"][nd:],
                          pad_name=f"{name}_pad", pad_value=int(a["pad_value"]))


def conv_integer_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, w = args[0].astype(np.int64), args[1].astype(np.int64)
    before, after = split_pads(a["pads"])
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)), constant_values=a["pad_value"])
    nd = x.ndim - 2
    return ref.conv_nd(x, w, a["strides"], (0,) * nd, a["dilations"], a["groups"])


def conv_integer_torch(t, x, w, *, strides, pads, dilations, groups, pad_value):
    conv = getattr(t.nn.functional, f"conv{x.dim() - 2}d")
    x = t.nn.functional.pad(x.to(t.float64), _torch_pads(pads), value=float(pad_value))
    return conv(x, w.to(t.float64), None, strides, 0, dilations, groups).round().to(t.int32)


define("conv_integer", "anchor", conv_infer, _conv_integer_lower, conv_integer_reference,
       attrs={**_CONV_ATTRS, "pad_value": 0}, inputs=(2, 2), layout="anchor",
       blocked=("conv_integer_blocked", {}),
       dtype=integer_product, torch=conv_integer_torch, examples=[
           Example(((1, 8, 9, 7), (16, 8, 3, 3)), dict(pads=(1, 1, 1, 1), pad_value=7),
                   dtypes=("uint8", "int8")),
           Example(((1, 4, 11, 9), (8, 4, 1, 1)), dict(strides=(2, 2)), dtypes=("uint8", "int8")),
       ])


def _conv_transpose_infer(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    nd = len(x) - 2
    check(1 <= nd <= 3 and len(w) == len(x), f"node {label} (conv_transpose): data {x} and "
                                             f"weight {w} ranks do not match")
    g = attrs["groups"]
    check(x[1] == w[0] and x[1] % g == 0, f"node {label} (conv_transpose): {x[1]} input "
                                          f"channels do not fit weight {w} (groups={g})")
    strides = ints(label, "conv_transpose", "strides", attrs["strides"] or (1,) * nd, nd)
    dil = ints(label, "conv_transpose", "dilations", attrs["dilations"] or (1,) * nd, nd)
    pads = ints(label, "conv_transpose", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    opad = ints(label, "conv_transpose", "output_padding",
                attrs["output_padding"] or (0,) * nd, nd)
    attrs.update(strides=strides, dilations=dil, pads=pads, output_padding=opad)
    out = [(n - 1) * s - pads[i] - pads[i + nd] + d * (k - 1) + op + 1
           for i, (n, k, s, d, op) in enumerate(zip(x[2:], w[2:], strides, dil, opad))]
    return (x[0], w[1] * g, *out)


def _conv_transpose_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, w, *bias = args
    stage = f"{name}_conv" if bias else name
    nd = x.ndim - 2
    y = nn.conv_transpose_stages(x, w, a["strides"], a["pads"][:nd], out.shape[2:],
                                 a["dilations"], a["groups"], stage, pad_name=f"{name}_pad")
    return _bias_add(y, bias[0], 1, name) if bias else y


def _conv_transpose_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, w = args[0], args[1]
    full = ref.scatter_taps(x, w, a["strides"], a["dilations"], a["groups"],
                            a["output_padding"])  # (O, N, *uncropped)
    before, after = split_pads(a["pads"])
    crop = tuple(slice(b, n - e) for b, e, n in zip(before, after, full.shape[2:]))
    return _channel_bias(full[(slice(None), slice(None)) + crop].swapaxes(0, 1), args)


def _conv_transpose_torch(t, x, w, b=None, *, strides, pads, output_padding, dilations, groups):
    nd = x.dim() - 2
    full = getattr(t.nn.functional, f"conv_transpose{nd}d")(
        x, w, b, strides, 0, output_padding, groups, dilations)
    crop = [slice(pads[d], full.shape[2 + d] - pads[d + nd]) for d in range(nd)]
    return full[(slice(None), slice(None), *crop)]


define("conv_transpose", "anchor", _conv_transpose_infer, _conv_transpose_lower,
       _conv_transpose_reference, attrs={**_CONV_ATTRS, "output_padding": None},
       inputs=(2, 3), layout="anchor", torch=_conv_transpose_torch, examples=[
           Example(((1, 3, 5, 7), (3, 5, 3, 3), (5,)),
                   dict(strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 0))),
           Example(((1, 4, 5, 3), (4, 3, 3, 2)),
                   dict(strides=(2, 3), pads=(1, 0, 0, 2), dilations=(2, 1), groups=2)),
           Example(((2, 3, 7), (3, 5, 3)), dict(strides=(3,), pads=(2, 1))),
           Example(((1, 2, 3, 5, 4), (2, 3, 3, 3, 2)),
                   dict(strides=(1, 2, 2), pads=(1, 0, 1, 0, 1, 0), output_padding=(0, 1, 0)))])


# ---- products ----

def _mm_names(rank: int) -> tuple[str, ...]:
    """Axis names of a product's output: b0, b1, ... (batch), then i, j (j alone at rank 1)."""
    return tuple(f"b{d}" for d in range(rank - 2)) + ("i", "j")[-rank:]


def _dense_infer(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    check(len(w) == 2 and x[-1] == w[1], f"node {label} (dense): data {x} and weight {w} "
                                         f"(N, K) disagree on K")
    if len(inputs) > 2:
        check(inputs[2].shape == (w[0],), f"node {label} (dense): bias must be ({w[0]},)")
    return (*x[:-1], w[0])


def _dense_lower(args: list[Arg], a: Attrs, name: str, out_type: TensorType) -> te.Tensor:
    """ops.linalg.dense over every leading axis of x: out[..., j] = sum_k x[..., k] w[j, k]."""
    x, w, *bias = args
    k = te.reduce_axis(x.shape[-1], name="k")
    shape = (*x.shape[:-1], w.shape[0])
    lead, rows = x.shape[:-1], math.prod(x.shape[:-1])
    if sum(n > 1 for n in lead) > 1 and rows <= w.shape[0]:
        # ConvNeXt's (1, 7, 7, 768) x (3072, 768): one row axis of 49, not 7 rows of 7 in a
        # parallel loop over 7, each streaming the whole weight (a product with fewer rows
        # than columns keeps its rows inside its tasks: tessel.space.priors._rows_in_task);
        # ConvNeXt-T's 7 x 7 and 14 x 14 stages on a 2-core Xeon 35.4 -> 23.0 ms a run
        flat = product((rows, w.shape[0]), lambda i, j: te.sum(
            x[(*unravel(i, lead), k)] * w[j, k], axis=k), f"{name}_rows")
        bias_of = (lambda i: bias[0][i[-1]]) if bias else (lambda i: 0.0)
        return elementwise(shape, lambda i: flat[ravel(i[:-1], lead), i[-1]] + bias_of(i),
                           name)

    def body(*idx: ir.Expr) -> ir.Expr:
        return te.sum(x[(*idx[:-1], k)] * w[idx[-1], k], axis=k)

    out = product(shape, body, f"{name}_dense" if bias else name)
    return _bias_add(out, bias[0], len(shape) - 1, name) if bias else out


def product(shape: tuple[int, ...], body, name: str, columns_read: bool = False) -> te.Tensor:
    """The matrix product `body` (of the output indices) over `shape`; where its rows or
    columns tile badly (padded_rows, padded_columns) it is computed over more of them, the
    extra ones reading the last row or column, and cropped by a copy the kernel fuses. With
    `columns_read`, `body` reads the padded columns itself (its operand is padded already:
    _matmul_lower) and only the rows are clamped."""
    names = _mm_names(len(shape))
    full = (*shape[:-2], padded_rows(shape[-2]), padded_columns(shape[-1])) \
        if len(shape) >= 2 else (padded_columns(shape[0]),)
    if full == shape:
        return te.compute(shape, named(body, names), name=name)
    last = shape[-2:]
    clamp = (True, not columns_read)[-len(last):]

    def clamped(*idx: ir.Expr) -> ir.Expr:
        edge = tuple(te.min(i, n - 1) if f != n and c else i
                     for i, n, f, c in zip(idx[-2:], last, full[-2:], clamp))
        return body(*idx[:-2], *edge)

    padded = te.compute(full, named(clamped, names), name=f"{name}_padded")
    return elementwise(shape, lambda i: padded[i], name)


def padded_rows(n: int) -> int:
    """The rows a product computes for `n` output rows: `n`, or when `n` has no divisor from
    4 to 12 (ViT's 197 tokens, a prime: a register tile one row high reloads every weight
    vector per row; a dense over 197 rows ran at 73 GFLOP/s, over 196 or 200 at 205) the
    next multiple of 8."""
    if n <= 16 or any(n % d == 0 for d in range(4, 13)):
        return n
    return -(-n // 8) * 8


def padded_columns(n: int) -> int:
    """The columns (the vector axis) a product computes for `n` output columns: `n`, or when
    not even AVX2's 8 lanes divide it the next multiple of 16 (whole vectors of 8 or 16:
    ViT's 197 attention columns were tiled one lane wide). A multiple of 8 stays: padding
    2600 LSTM gate columns to 2608 = 16 x 163 left its matrix-vector product one
    accumulator chain (3.4 -> 11 ms a sequence)."""
    return n if n <= 16 or n % 8 == 0 else -(-n // 16) * 16


def _dense_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    y = f64(args[0]) @ f64(args[1]).T
    return y + f64(args[2]) if len(args) > 2 else y


define("dense", "anchor", _dense_infer, _dense_lower, _dense_reference, inputs=(2, 3),
       layout="barrier", torch=lambda t, x, w, b=None: t.nn.functional.linear(x, w, b),
       examples=[Example(((7, 5), (3, 5), (3,))), Example(((2, 3, 5), (7, 5))),
                 Example(((5,), (3, 5), (3,))),
                 Example(((1, 17, 6), (29, 6), (29,))),  # 17 rows, 29 columns: padded
                 Example(((1, 3, 5, 6), (29, 6), (29,))),  # rows of (3, 5) made one axis
                 Example(((2, 3, 4), (13, 4)))])


def _matmul_infer(inputs, attrs, label):
    a, b = inputs[0].shape, inputs[1].shape
    check(len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2],
          f"node {label} (matmul): shapes {a} and {b} do not multiply")
    return (*broadcast_shape([a[:-2], b[:-2]], label), a[-2], b[-1])


def _matmul_body(x: te.Tensor, y: te.Tensor, out: TensorType, to: str | None = None):
    """The body of x @ y (numpy's broadcasting batch axes), of its operands cast `to` a
    wider dtype when given."""
    k = te.reduce_axis(x.shape[-1], name="k")
    batch = out.shape[:-2]

    def body(*idx: ir.Expr) -> ir.Expr:
        b, i, j = idx[:-2], idx[-2], idx[-1]
        xb, yb = bcast(b, x.shape[:-2], batch), bcast(b, y.shape[:-2], batch)
        left, right = x[(*xb, i, k)], y[(*yb, k, j)]
        if to is not None:
            left, right = te.cast(to, left), te.cast(to, right)
        return te.sum(left * right, axis=k)
    return body


# MetaSchedule's block annotation that keeps AutoInline off a block (space.rules.inline)
NO_INLINE = {"meta_schedule.inline_rule": "disable"}


def _matmul_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """x @ y; where the columns are padded (padded_columns), over a copy of y whose extra
    columns repeat its last one, kept a stage of its own (not inlined): a read of y through a
    clamp of its column is no vector load, and attention's keys, read transposed, were
    gathered one lane at a time (ViT's q k^T over 197 keys: 16 scalar loads a step, 67
    GFLOP/s on a 2-core Xeon)."""
    x, y = args
    n = y.shape[-1]
    wide = padded_columns(n)
    if len(out.shape) < 2 or wide == n:
        return product(out.shape, _matmul_body(x, y, out), name)
    columns = te.compute((*y.shape[:-1], wide),
                         lambda *i: y[(*i[:-1], te.min(i[-1], n - 1))],
                         name=f"{name}_columns", attrs=NO_INLINE)
    return product(out.shape, _matmul_body(x, columns, out), name, columns_read=True)


define("matmul", "anchor", _matmul_infer, _matmul_lower,
       lambda args, a, out: np.matmul(f64(args[0]), f64(args[1])), inputs=(2, 2),
       layout="barrier", folds_transposes=True, torch=lambda t, a, b: t.matmul(a, b),
       examples=[Example(((7, 5), (5, 3))), Example(((2, 7, 5), (5, 3))),
                 Example(((2, 1, 7, 5), (3, 5, 11))), Example(((7, 5), (3, 5, 2))),
                 Example(((2, 19, 5), (5, 23)))])  # padded rows and columns


def _matmul_integer_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """ONNX MatMulInteger without zero points: int32(x) @ int32(y), in the form the int8
    dot-product intrinsics match (tessel.intrin), so u8 x s8 products tile around them."""
    body = _matmul_body(args[0], args[1], out, "int32")
    return te.compute(out.shape, named(body, _mm_names(len(out.shape))), name=name)


define("matmul_integer", "anchor", _matmul_infer, _matmul_integer_lower,
       lambda args, a, out: np.matmul(args[0].astype(np.int64), args[1].astype(np.int64)),
       inputs=(2, 2), layout="barrier", dtype=integer_product,
       torch=lambda t, a, b: t.matmul(a.to(t.int64), b.to(t.int64)).to(t.int32),
       examples=[Example(((7, 5), (5, 3)), dtypes=("uint8", "int8")),
                 Example(((2, 7, 20), (20, 32)), dtypes=("uint8", "int8")),
                 Example(((3, 9), (9, 4)), dtypes=("int8", "int8"))])


# ---- pooling ----

def _spans(a: Attrs) -> tuple[int, ...]:
    """Each window's extent along each spatial axis: its taps are `dilations` apart."""
    return tuple(d * (k - 1) + 1 for k, d in zip(a["kernel"], a["dilations"]))


def pool_infer(inputs, attrs, label):
    x = inputs[0].shape
    nd = len(x) - 2
    check(1 <= nd <= 3, f"node {label} (pool): data must be 3-d to 5-d, got {x}")
    kernel = ints(label, "pool", "kernel", attrs["kernel"], nd)
    strides = ints(label, "pool", "strides", attrs["strides"] or kernel, nd)
    pads = ints(label, "pool", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    dilations = ints(label, "pool", "dilations", attrs["dilations"] or (1,) * nd, nd)
    attrs.update(kernel=kernel, strides=strides, pads=pads, dilations=dilations)
    rnd = math.ceil if attrs["ceil_mode"] else math.floor
    out = []
    for i, (n, span) in enumerate(zip(x[2:], _spans(attrs))):
        size = rnd((n + pads[i] + pads[i + nd] - span) / strides[i]) + 1
        if attrs["ceil_mode"] and (size - 1) * strides[i] >= n + pads[i]:
            size -= 1  # the last window must start inside the input or its left padding
        out.append(size)
    check(all(o >= 1 for o in out), f"node {label} (pool): window {_spans(attrs)} larger "
                                     f"than the padded input {x[2:]}")
    return (*x[:2], *out)


def pool_after(x: te.Tensor, a: Attrs, out_sp: Sequence[int]) -> tuple[int, ...]:
    """Padding after each spatial axis, grown so that ceil_mode's last windows fit."""
    nd, sizes = x.ndim - 2, x.shape[2:]
    return tuple(max(e, (o - 1) * s + span - b - n) for n, span, s, b, e, o in zip(
        sizes, _spans(a), a["strides"], a["pads"][:nd], a["pads"][nd:], out_sp))


def _max_pool_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    nd, out_sp = x.ndim - 2, out.shape[2:]
    return nn.pool_stages("max_pool", x, a["kernel"], a["strides"], a["pads"][:nd], out_sp,
                          te.identity_of("max", x.dtype), te.max, name,
                          pad_after=pool_after(x, a, out_sp), pad_name=f"{name}_pad",
                          dilation=a["dilations"])


def _window_count(y: ir.Expr, k: int, s: int, b: int, lo: int, hi: int, d: int) -> ir.Expr:
    """How many of the k taps (d apart) of window y (starting at y * s - b) lie in [lo, hi)."""
    start = y * s - b
    if d == 1:
        return te.min(start + k, hi) - te.max(start, lo)
    first = te.max((lo - start + d - 1) // d, 0)  # the first tap at or after lo
    last = te.min((hi - 1 - start) // d, k - 1)  # the last tap before hi
    return te.max(last - first + 1, 0)


def _avg_divisor(idx: Index, x: te.Tensor, a: Attrs, out_sp: Sequence[int]) -> ir.Expr | float:
    """The divisor of each window's sum: the taps inside the input, plus the padded ones with
    count_include_pad (only up to the declared padding, as in torch and onnxruntime)."""
    nd = x.ndim - 2
    total: ir.Expr | int = 1
    for d, (n, k, s, b, e, o, dil, span) in enumerate(zip(
            x.shape[2:], a["kernel"], a["strides"], a["pads"][:nd], a["pads"][nd:], out_sp,
            a["dilations"], _spans(a))):
        lo, hi = (-b, n + e) if a["count_include_pad"] else (0, n)
        starts = [y * s - b for y in range(o)]
        if all(st >= lo and st + span <= hi for st in starts):
            total = total * k
        else:
            total = _window_count(idx[2 + d], k, s, b, lo, hi, dil) * total
    return float(total) if isinstance(total, int) else te.cast("float32", total)


def _avg_pool_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages as ops.avg_pool2d: [pad,] sum, then the sum over the window count."""
    x, = args
    nd, out_sp = x.ndim - 2, out.shape[2:]
    total = nn.pool_stages("avg_pool", x, a["kernel"], a["strides"], a["pads"][:nd], out_sp,
                           0, te.sum, f"{name}_sum", pad_after=pool_after(x, a, out_sp),
                           pad_name=f"{name}_pad", dilation=a["dilations"])
    return elementwise(total.shape, lambda i: total[i] / _avg_divisor(i, x, a, out_sp), name)


def _pool_padding(x: np.ndarray, a: Attrs, out_sp: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) per spatial axis; after grows so that ceil_mode's last windows fit."""
    before, after = split_pads(a["pads"])
    return [(b, max(e, (o - 1) * s + span - b - n)) for n, span, s, b, e, o in
            zip(x.shape[2:], _spans(a), a["strides"], before, after, out_sp)]


def _window_counts(a: Attrs, sizes: Sequence[int], out_sp: Sequence[int]) -> np.ndarray:
    """How many elements avg_pool divides each window's sum by, as an (*out_sp) array."""
    before, after = split_pads(a["pads"])
    counts = np.ones((), np.float64)
    for n, k, s, b, e, o, d in zip(sizes, a["kernel"], a["strides"], before, after, out_sp,
                                   a["dilations"]):
        lo, hi = (-b, n + e) if a["count_include_pad"] else (0, n)
        taps = (np.arange(o) * s - b)[:, None] + np.arange(k) * d
        axis = ((taps >= lo) & (taps < hi)).sum(axis=1)
        counts = np.multiply.outer(counts, axis.astype(np.float64))
    return counts


def pool_reference(args: list[np.ndarray], a: Attrs, out: TensorType,
                    is_max: bool) -> np.ndarray:
    out_sp = out.shape[2:]
    x = args[0] if is_max else f64(args[0])
    fill = (-np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min) if is_max else 0.0
    padded = np.pad(x, [(0, 0), (0, 0)] + _pool_padding(x, a, out_sp), constant_values=fill)
    nd = x.ndim - 2
    windows = ref.sliding_windows(padded, a["kernel"], a["strides"], a["dilations"])
    windows = windows[(slice(None), slice(None)) + tuple(slice(o) for o in out_sp)]
    axes = tuple(range(-nd, 0))
    if is_max:
        return windows.max(axis=axes)
    return windows.sum(axis=axes) / _window_counts(a, x.shape[2:], out_sp)


def _sum_pool_torch(t, x, kernel, strides, dilations, ceil_mode):
    """Window sums (avg_pool with divisor 1; 1-d pools run as 2-d ones; dilated windows as a
    convolution with ones, over the windows torch's max pooling takes)."""
    F = t.nn.functional
    if any(d != 1 for d in dilations):
        nd = len(kernel)
        out = getattr(F, f"max_pool{nd}d")(x, kernel, strides, 0, dilations, ceil_mode).shape
        extra = [max(0, (o - 1) * s + d * (k - 1) + 1 - n) for o, s, d, k, n in
                 zip(out[2:], strides, dilations, kernel, x.shape[2:])]
        x = F.pad(x, [p for e in reversed(extra) for p in (0, e)])
        ones = t.ones((1, 1, *kernel), dtype=x.dtype)
        y = getattr(F, f"conv{nd}d")(x.reshape(-1, 1, *x.shape[2:]), ones, stride=strides,
                                     dilation=dilations)
        return y.reshape(out)
    if x.dim() == 3:
        return _sum_pool_torch(t, x.unsqueeze(2), (1, *kernel), (1, *strides), (1, 1),
                               ceil_mode).squeeze(2)
    pool = getattr(F, f"avg_pool{x.dim() - 2}d")
    return pool(x, kernel, strides, 0, ceil_mode, True, divisor_override=1)


def pool_torch(t, x, *, kernel, strides, pads, ceil_mode, dilations=None,
               count_include_pad=None):
    F, nd = t.nn.functional, x.dim() - 2
    before, after, dil = pads[:nd], pads[nd:], tuple(dilations or (1,) * nd)
    if count_include_pad is None:  # max
        pool = getattr(F, f"max_pool{nd}d")
        if before == after:
            return pool(x, kernel, strides, before, dil, ceil_mode=ceil_mode)
        padded = F.pad(x, _torch_pads(pads), value=-math.inf)
        return pool(padded, kernel, strides, 0, dil, ceil_mode=ceil_mode)
    if before == after and dil == (1,) * nd:
        pool = getattr(F, f"avg_pool{nd}d")
        return pool(x, kernel, strides, before, ceil_mode, count_include_pad)
    # asymmetric or dilated average: sums over the padded input / counts of what counts
    sums = _sum_pool_torch(t, F.pad(x, _torch_pads(pads)), kernel, strides, dil, ceil_mode)
    ones = F.pad(t.ones_like(x), _torch_pads(pads), value=float(count_include_pad))
    return sums / _sum_pool_torch(t, ones, kernel, strides, dil, ceil_mode)


_POOL_ATTRS = dict(kernel=REQUIRED, strides=None, pads=None, ceil_mode=False, dilations=None)
define("max_pool", "reduce", pool_infer, _max_pool_lower,
       lambda args, a, out: pool_reference(args, a, out, is_max=True), attrs=_POOL_ATTRS,
       layout="channelwise", blocked=("max_pool_blocked", {}), torch=pool_torch, dtype=numbers,
       examples=[
           # padding, strides, ceil_mode (incl. a dropped last window), 1-3 spatial axes
           Example(((1, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
           Example(((1, 3, 11, 13),), dict(kernel=(3, 2), strides=(2, 2), pads=(1, 1, 1, 1),
                                           ceil_mode=True)),
           Example(((2, 3, 7, 9),), dict(kernel=(2, 3), pads=(0, 1, 1, 0))),
           Example(((1, 3, 13),), dict(kernel=(3,), strides=(2,), ceil_mode=True)),
           Example(((1, 2, 5, 7, 6),), dict(kernel=(2, 3, 2), strides=(1, 2, 2),
                                            pads=(0, 1, 1) * 2)),
           # dilated windows: padded, ceil_mode, 1-d
           Example(((1, 3, 11, 13),), dict(kernel=(3, 2), strides=(2, 1), pads=(1, 1, 1, 1),
                                           dilations=(2, 3), ceil_mode=True)),
           Example(((2, 2, 13),), dict(kernel=(3,), strides=(2,), dilations=(3,)))])
define("avg_pool", "reduce", pool_infer, _avg_pool_lower,
       lambda args, a, out: pool_reference(args, a, out, is_max=False),
       attrs={**_POOL_ATTRS, "count_include_pad": False}, layout="channelwise",
       torch=pool_torch, examples=[
           Example(((1, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
           Example(((1, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                         count_include_pad=True)),
           Example(((2, 3, 7, 9),), dict(kernel=(3, 2))),
           Example(((1, 3, 11, 13),), dict(kernel=(3, 2), strides=(2, 2), pads=(1, 1, 1, 1),
                                           ceil_mode=True, count_include_pad=True)),
           Example(((1, 3, 11, 13),), dict(kernel=(3, 3), strides=(2, 2), ceil_mode=True)),
           Example(((1, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(0, 1, 2, 1))),
           Example(((1, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(0, 1, 2, 1),
                                         count_include_pad=True)),
           Example(((1, 3, 13),), dict(kernel=(3,), strides=(2,), pads=(1, 1), ceil_mode=True)),
           Example(((1, 2, 5, 7, 6),), dict(kernel=(2, 3, 3), strides=(1, 2, 2),
                                            pads=(1,) * 6)),
           # dilated windows: partial ones (padding, ceil_mode) with and without their padding
           Example(((1, 3, 11, 13),), dict(kernel=(3, 2), strides=(2, 3), pads=(2, 1, 1, 2),
                                           dilations=(2, 3), ceil_mode=True)),
           Example(((1, 3, 11, 13),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 2, 2, 1),
                                           dilations=(3, 2), ceil_mode=True,
                                           count_include_pad=True)),
           Example(((1, 2, 4, 5, 6),), dict(kernel=(2, 2, 2), dilations=(2, 2, 3)))])
