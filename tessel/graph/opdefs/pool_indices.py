"""max_pool_indices: where each window of a max pooling took its maximum (ONNX MaxPool's
Indices output, torch's return_indices), as int64 flat indices into the whole input: the batch
and channel axes row-major, the spatial axes row-major or, with storage_order 1, column-major.
The padding never wins; among equal maxima the first tap in row-major order does."""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType
from tessel.graph.opdefs.base import REQUIRED, Arg, Attrs, Example, define, elementwise, numbers
from tessel.graph.opdefs.nn import pool_after, pool_infer, pool_reference
from tessel.ops import nn
from tessel.ops import reference as ref


def _flat(coords: Sequence, sizes: Sequence[int], column_major: bool):
    """The flat index of `coords` (ir expressions or numpy arrays) in an array of `sizes`."""
    order = range(len(sizes)) if column_major else reversed(range(len(sizes)))
    total, stride = 0, 1
    for d in order:
        total, stride = coords[d] * stride + total, stride * sizes[d]
    return total


def _unflat(index, sizes: Sequence[int]) -> list:
    """The coordinates of a row-major flat `index` in an array of `sizes`."""
    coords = []
    for n in reversed(sizes):
        coords.insert(0, index % n)
        index = index // n
    return coords


def _first_tap(x: te.Tensor, top: te.Tensor, a: Attrs, name: str) -> te.Tensor:
    """The row-major spatial index of the first tap of each window inside `x` that equals
    the window's maximum `top` (reads clamped into x; the taps outside never count)."""
    sizes, nd = x.shape[2:], x.ndim - 2
    rk = [te.reduce_axis(k, name=f"r{d}") for d, k in enumerate(a["kernel"])]

    def body(n: ir.Expr, c: ir.Expr, *ys: ir.Expr) -> ir.Expr:
        taps = [y * s + r * dl - b for y, s, r, dl, b in
                zip(ys, a["strides"], rk, a["dilations"], a["pads"][:nd])]
        inside = [t >= 0 for t in taps] + [t < size for t, size in zip(taps, sizes)]
        at = tuple(te.min(te.max(t, 0), size - 1) for t, size in zip(taps, sizes))
        hit = te.all(*inside, x[(n, c, *at)] == top[(n, c, *ys)])
        return te.min(_flat([te.cast("int64", t) for t in taps], sizes, False), axis=rk,
                      where=hit)

    return te.compute(top.shape, body, name=name)


def _lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages: max_pool's ({name}_max, [{name}_max_pad]), {name}_first (`_first_tap`), then
    name: the channel's offset plus the first tap's index in `storage_order`."""
    x, = args
    nd, out_sp, sizes = x.ndim - 2, out.shape[2:], x.shape[2:]
    top = nn.pool_stages("max_pool", x, a["kernel"], a["strides"], a["pads"][:nd], out_sp,
                         te.identity_of("max", x.dtype), te.max, f"{name}_max",
                         pad_after=pool_after(x, a, out_sp), pad_name=f"{name}_max_pad",
                         dilation=a["dilations"])
    first = _first_tap(x, top, a, f"{name}_first")

    def body(i: tuple[ir.Expr, ...]) -> ir.Expr:
        spatial = first[i]
        if a["storage_order"]:
            spatial = _flat(_unflat(spatial, sizes), sizes, True)
        channel = te.cast("int64", i[0] * x.shape[1] + i[1])
        return channel * ir.const(math.prod(sizes), "int64") + spatial

    return elementwise(out.shape, body, name)


def _reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, nd, sizes = args[0], args[0].ndim - 2, args[0].shape[2:]
    top = pool_reference(args, a, out, is_max=True)
    after = pool_after(x, a, out.shape[2:])
    pads = [(0, 0)] * 2 + [(b, e) for b, e in zip(a["pads"][:nd], after)]
    where = np.broadcast_to(np.arange(math.prod(sizes)).reshape(sizes), x.shape)
    windows = [ref.sliding_windows(np.pad(v, pads, constant_values=fill), a["kernel"],
                                   a["strides"], a["dilations"])
               for v, fill in ((x, 0), (where, -1))]
    cut = (slice(None),) * 2 + tuple(slice(o) for o in out.shape[2:])
    values, taps = (w[cut] for w in windows)
    axes, spread = tuple(range(-nd, 0)), top.reshape(top.shape + (1,) * nd)
    first = np.where((values == spread) & (taps >= 0), taps, np.iinfo(np.int64).max).min(axes)
    if a["storage_order"]:
        first = _flat(_unflat(first, sizes), sizes, True)
    channels = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * nd)
    return channels * math.prod(sizes) + first


def _torch(t, x, *, kernel, strides, pads, ceil_mode, dilations, storage_order):
    nd, sizes = x.dim() - 2, x.shape[2:]
    pool = getattr(t.nn.functional, f"max_pool{nd}d")
    _, first = pool(x, kernel, strides, pads[:nd], dilations, ceil_mode=ceil_mode,
                    return_indices=True)  # (symmetric pads only)
    if storage_order:
        first = _flat(_unflat(first, sizes), sizes, True)
    channels = t.arange(x.shape[0] * x.shape[1]).reshape(*x.shape[:2], *(1,) * nd)
    return channels * math.prod(sizes) + first


def _dtype(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    numbers(inputs, attrs, label)
    return "int64"


define("max_pool_indices", "reduce", pool_infer, _lower, _reference,
       attrs=dict(kernel=REQUIRED, strides=None, pads=None, ceil_mode=False, dilations=None,
                  storage_order=0), layout="barrier", torch=_torch, dtype=_dtype,
       examples=[Example(((2, 3, 7, 9),), dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1)),
                         dtypes=("float32",)),
                 Example(((1, 2, 7, 6),), dict(kernel=(2, 3), strides=(2, 1), ceil_mode=True,
                                               storage_order=1), dtypes=("float32",)),
                 Example(((1, 2, 13),), dict(kernel=(3,), dilations=(2,), pads=(1, 1),
                                             storage_order=1), dtypes=("int32",)),
                 Example(((1, 2, 4, 5, 6),), dict(kernel=(2, 2, 3), strides=(1, 2, 2),
                                                  storage_order=1), dtypes=("float32",))])
