"""Reductions and normalizations: means, softmax, layer norm (the stage structures of
`ops.global_avg_pool2d`, `ops.softmax` and `ops.layer_norm`)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (REQUIRED, Arg, Attrs, Example, axis_of, define,
                                      elementwise, f64)
from tessel.ops import reference as ref

Index = tuple[ir.Expr, ...]
X3 = (3, 5, 7)


def _keep_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A reduction's output shape: (1,) when no axis is kept, so every stage has an axis."""
    return shape or (1,)


def _expand(kept: Index, axes: Sequence[int], reduced: Sequence[ir.Expr], rank: int) -> Index:
    """The full index of a rank-`rank` tensor: `reduced` at `axes`, `kept` elsewhere in order
    (`kept` is the index of a stage built by `_keep_shape`: ignored when no axis is kept)."""
    kept_iter, red_iter = iter(kept), iter(reduced)
    return tuple(next(red_iter) if d in axes else next(kept_iter) for d in range(rank))


def _drop(idx: Index, axes: Sequence[int]) -> Index:
    """The index into a `_keep_shape` stage of `idx` with `axes` removed."""
    kept = tuple(i for d, i in enumerate(idx) if d not in axes)
    return kept or (ir.const(0),)


def _reduce_axes(sizes: Sequence[int], prefix: str) -> list[te.Axis]:
    if len(sizes) == 1:
        return [te.reduce_axis(sizes[0], name=prefix)]
    return [te.reduce_axis(n, name=f"{prefix}{d}") for d, n in enumerate(sizes)]


def _mean(x: te.Tensor, axes: Sequence[int], keepdims: bool, name: str) -> te.Tensor:
    """Stages as ops.global_avg_pool2d: `{name}_sum` over `axes`, then `name` = sum / count."""
    kept = tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keepdims else \
        _keep_shape(tuple(n for d, n in enumerate(x.shape) if d not in axes))
    rk = _reduce_axes([x.shape[d] for d in axes], "r")

    def body(*idx: ir.Expr) -> ir.Expr:
        if keepdims:
            full = tuple(rk[list(axes).index(d)] if d in axes else i for d, i in enumerate(idx))
        else:
            full = _expand(idx, axes, rk, x.ndim)
        return te.sum(x[full], axis=rk)

    total = te.compute(kept, body, name=f"{name}_sum")
    count = float(math.prod(x.shape[d] for d in axes))
    return elementwise(kept, lambda i: total[i] / count, name)


# ---- global_avg_pool ----

def _global_pool_infer(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) >= 3, f"node {label} (global_avg_pool): data must be 3-d or more, got {x}")
    return (*x[:2], *(1,) * (len(x) - 2))


def _global_pool_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x = f64(args[0])
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


define("global_avg_pool", "reduce", _global_pool_infer,
       lambda args, a, name, out: _mean(args[0], range(2, args[0].ndim), True, name),
       _global_pool_reference, layout="channelwise",
       blocked=("reduce_mean", dict(axes=(2, 3), keepdims=True)),  # 2-d: NCHW[b]c's H and W
       torch=lambda t, x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
       examples=[Example(((2, 3, 7, 9),)), Example(((2, 3, 7),)), Example(((1, 3, 5, 7, 3),))])


# ---- reduce_mean ----

def _reduce_mean_infer(inputs, attrs, label):
    x = inputs[0].shape
    axes = sorted({axis_of(label, "reduce_mean", a, len(x)) for a in attrs["axes"]})
    attrs["axes"] = tuple(axes)
    if attrs["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(x))
    return tuple(n for i, n in enumerate(x) if i not in axes) or (1,)


def _reduce_mean_torch(t, x, *, axes, keepdims):
    out = t.mean(x, dim=axes, keepdim=keepdims)
    return out.reshape(1) if out.dim() == 0 else out


define("reduce_mean", "reduce", _reduce_mean_infer,
       lambda args, a, name, out: _mean(args[0], a["axes"], a["keepdims"], name),
       lambda args, a, out: f64(args[0]).mean(axis=tuple(a["axes"])).reshape(out.shape),
       attrs=dict(axes=REQUIRED, keepdims=True), layout="barrier", torch=_reduce_mean_torch,
       examples=[Example((X3,), dict(axes=(1,))), Example((X3,), dict(axes=(0, 2), keepdims=False)),
                 Example((X3,), dict(axes=(0, 1, 2), keepdims=False)),
                 Example(((2, 3, 5, 7),), dict(axes=(-1, -2)))])


# ---- softmax ----

def _softmax_infer(inputs, attrs, label):
    attrs["axis"] = axis_of(label, "softmax", attrs["axis"], len(inputs[0].shape))
    return inputs[0].shape


def _softmax_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages as ops.softmax: {name}_maxelem, {name}_exp, {name}_expsum, then name."""
    x, = args
    axis, rank = a["axis"], x.ndim
    red = _keep_shape(tuple(n for d, n in enumerate(x.shape) if d != axis))

    def row_reduce(src: te.Tensor, combiner: Callable[..., ir.Expr], stage: str) -> te.Tensor:
        k = te.reduce_axis(x.shape[axis], name="k")
        return te.compute(red, lambda *r: combiner(src[_expand(r, [axis], [k], rank)], axis=k),
                          name=f"{name}_{stage}")

    maxelem = row_reduce(x, te.max, "maxelem")
    ex = elementwise(x.shape, lambda i: te.exp(x[i] - maxelem[_drop(i, [axis])]), f"{name}_exp")
    expsum = row_reduce(ex, te.sum, "expsum")
    return elementwise(x.shape, lambda i: ex[i] / expsum[_drop(i, [axis])], name)


define("softmax", "reduce", _softmax_infer, _softmax_lower,
       lambda args, a, out: ref.softmax(f64(args[0]), a["axis"]), attrs=dict(axis=-1),
       layout="barrier", torch=lambda t, x, axis: t.softmax(x, axis),
       examples=[Example(((7, 13),)), Example((X3,), dict(axis=1)), Example(((11,),))])


# ---- layer_norm ----

def _layer_norm_infer(inputs, attrs, label):
    x = inputs[0].shape
    axis = attrs["axis"] = axis_of(label, "layer_norm", attrs["axis"], len(x))
    for t in inputs[1:]:
        check(t.shape == x[axis:], f"node {label} (layer_norm): scale/bias must be "
                                   f"{x[axis:]}, got {t.shape}")
    return x


def _layer_norm_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages as ops.layer_norm: {name}_mean, {name}_var (over axes axis..end), then name."""
    x, scale, *bias = args
    axis, rank = a["axis"], x.ndim
    axes, inner = list(range(axis, rank)), x.shape[axis:]
    lead, inv_n, eps = _keep_shape(x.shape[:axis]), 1.0 / math.prod(inner), float(a["epsilon"])

    def row(fn: Callable[[ir.Expr, Index], ir.Expr], stage: str) -> te.Tensor:
        rk = _reduce_axes(inner, "k")
        return te.compute(lead, lambda *r: te.sum(fn(x[_expand(r, axes, rk, rank)], r), axis=rk),
                          name=f"{name}_{stage}")

    mean = row(lambda v, r: v * inv_n, "mean")
    var = row(lambda v, r: (v - mean[r]) * (v - mean[r]) * inv_n, "var")

    def body(i: Index) -> ir.Expr:
        r, j = _drop(i, axes), i[axis:]
        y = (x[i] - mean[r]) * te.rsqrt(var[r] + eps) * scale[j]
        return y + bias[0][j] if bias else y

    return elementwise(x.shape, body, name)


def _layer_norm_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, axis = args[0], a["axis"]
    rows = x.reshape(math.prod(x.shape[:axis]), -1)
    params = [p.reshape(-1) for p in args[1:]]
    return ref.layer_norm(f64(rows), *params, eps=a["epsilon"]).reshape(x.shape)


define("layer_norm", "reduce", _layer_norm_infer, _layer_norm_lower, _layer_norm_reference,
       attrs=dict(axis=-1, epsilon=1e-5), inputs=(2, 3), layout="barrier",
       torch=lambda t, x, scale, bias=None, *, axis, epsilon: t.nn.functional.layer_norm(
           x, x.shape[axis:], scale, bias, epsilon),
       examples=[Example(((7, 13), (13,), (13,))),
                 Example((X3, (5, 7)), dict(axis=1, epsilon=1e-3)),
                 Example(((2, 3, 5), (2, 3, 5), (2, 3, 5)), dict(axis=0))])
