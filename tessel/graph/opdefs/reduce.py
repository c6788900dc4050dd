"""Reductions and normalizations: reduce_{mean, sum, sum_square, max, min, prod, l1, l2,
log_sum, log_sum_exp} over `axes` (ONNX's Reduce* and torch's sum, amax, prod, norm, logsumexp;
sum and sum_square also of integers, max and min of any dtype), softmax and log_softmax, layer
norm (the stage structures of `ops.global_avg_pool2d`, `ops.softmax` and `ops.layer_norm`)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (REQUIRED, Arg, Attrs, Example, axis_of, define,
                                      elementwise, exact, f64, floats, numbers, same)
from tessel.ops import reference as ref
from tessel.ops.norm import shifted_exp

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


def _reduced_shape(shape: tuple[int, ...], axes: Sequence[int], keepdims: bool
                   ) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return _keep_shape(tuple(n for d, n in enumerate(shape) if d not in axes))


def _reduce_stage(x: te.Tensor, axes: Sequence[int], keepdims: bool,
                  combiner: Callable[..., ir.Expr], fn: Callable[[ir.Expr, Index], ir.Expr],
                  name: str, prefix: str = "r") -> te.Tensor:
    """One reduction stage: `combiner` (te.sum, te.max, te.min) over `axes` of fn(element,
    the stage's index)."""
    axes = list(axes)
    rk = _reduce_axes([x.shape[d] for d in axes], prefix)

    def body(*idx: ir.Expr) -> ir.Expr:
        if keepdims:
            full = tuple(rk[axes.index(d)] if d in axes else i for d, i in enumerate(idx))
        else:
            full = _expand(idx, axes, rk, x.ndim)
        return combiner(fn(x[full], idx), axis=rk)

    return te.compute(_reduced_shape(x.shape, axes, keepdims), body, name=name)


def _mean(x: te.Tensor, axes: Sequence[int], keepdims: bool, name: str) -> te.Tensor:
    """Stages as ops.global_avg_pool2d: `{name}_sum` over `axes`, then `name` = sum / count."""
    total = _reduce_stage(x, axes, keepdims, te.sum, lambda v, r: v, f"{name}_sum")
    count = float(math.prod(x.shape[d] for d in axes))
    return elementwise(total.shape, lambda i: total[i] / count, name)


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


# ---- reduce_mean, reduce_sum, reduce_max, ... ----

def _reduce_infer(op: str):
    def infer(inputs, attrs, label):
        x = inputs[0].shape
        axes = sorted({axis_of(label, op, a, len(x)) for a in attrs["axes"]})
        attrs["axes"] = tuple(axes)
        return _reduced_shape(x, axes, attrs["keepdims"])
    return infer


def _finite_or_zero(m: ir.Expr) -> ir.Expr:
    return te.if_then_else(te.abs(m) < float("inf"), m, 0.0)


def _log_sum_exp(x: te.Tensor, axes: Sequence[int], keep: bool, name: str) -> te.Tensor:
    """{name}_maxelem, {name}_expsum = sum(exp(x - max)), then log(expsum) + max (a max of
    +-inf shifts by 0: all -inf gives -inf, an inf gives inf)."""
    top = _reduce_stage(x, axes, keep, te.max, lambda v, r: v, f"{name}_maxelem")
    expsum = _reduce_stage(x, axes, keep, te.sum,
                           lambda v, r: te.exp(v - _finite_or_zero(top[r])), f"{name}_expsum")
    return elementwise(top.shape, lambda i: te.log(expsum[i]) + _finite_or_zero(top[i]), name)


def _prod(x: te.Tensor, axes: Sequence[int], keep: bool, name: str) -> te.Tensor:
    """te has no product combiner: exp of {name}_logsum (the sum of log |x|; a 0 makes it
    -inf, so the product 0), its sign from {name}_negatives (the count of x < 0)."""
    logs = _reduce_stage(x, axes, keep, te.sum, lambda v, r: te.log(te.abs(v)), f"{name}_logsum")
    negs = _reduce_stage(x, axes, keep, te.sum, lambda v, r: te.if_then_else(v < 0.0, 1.0, 0.0),
                         f"{name}_negatives")
    odd = lambda n: n - 2.0 * te.floor(n * 0.5)  # noqa: E731
    return elementwise(logs.shape, lambda i: te.exp(logs[i]) * (1.0 - 2.0 * odd(negs[i])), name)


def _one(combiner: Callable[..., ir.Expr], fn: Callable[[ir.Expr], ir.Expr],
         then: Callable[[ir.Expr], ir.Expr] | None = None, stage: str = "") -> Callable:
    """A reduction of one stage (`combiner` of fn(x)), or two: `{name}_{stage}`, then `then`."""
    def lower(x: te.Tensor, axes: Sequence[int], keep: bool, name: str) -> te.Tensor:
        if then is None:
            return _reduce_stage(x, axes, keep, combiner, lambda v, r: fn(v), name)
        red = _reduce_stage(x, axes, keep, combiner, lambda v, r: fn(v), f"{name}_{stage}")
        return elementwise(red.shape, lambda i: then(red[i]), name)
    return lower


def _extreme(combiner: Callable[..., ir.Expr]) -> Callable:
    """reduce_max or reduce_min; of bools, over their bytes ({name}_bytes), then != 0."""
    def lower(x: te.Tensor, axes: Sequence[int], keep: bool, name: str) -> te.Tensor:
        if x.dtype != "bool":
            return _reduce_stage(x, axes, keep, combiner, lambda v, r: v, name)
        red = _reduce_stage(x, axes, keep, combiner, lambda v, r: te.cast("uint8", v),
                            f"{name}_bytes")
        return elementwise(red.shape, lambda i: red[i] != ir.const(0, "uint8"), name)
    return lower


def _oracle(fn):
    """A torch oracle from fn(torch, x, dims, keepdim): a full reduction gives (1,)."""
    def oracle(t, x, *, axes, keepdims):
        out = fn(t, x, tuple(axes), keepdims)
        return out.reshape(1) if out.dim() == 0 else out
    return oracle


def _log_sum_exp_np(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    top = x.max(axes, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return np.log(np.exp(x - top).sum(axes, keepdims=True)) + top


def _torch_prod(t, x, dims, keep):
    for d in sorted(dims, reverse=True):
        x = x.prod(d, keepdim=keep)
    return x


_EXAMPLES = (Example((X3,), dict(axes=(1,))), Example((X3,), dict(axes=(0, 2), keepdims=False)),
             Example((X3,), dict(axes=(0, 1, 2), keepdims=False)),
             Example(((2, 3, 5, 7),), dict(axes=(-1, -2))))
_NORM = lambda p: lambda t, x, d, k: t.linalg.vector_norm(x, p, d, k)  # noqa: E731
# name -> (lowering (x, axes, keepdims, name), numpy (x, axes as a tuple), torch (t, x, dims,
# keepdim), the inputs its examples draw)
REDUCTIONS = {
    "reduce_mean": (_mean, lambda x, a: x.mean(a), lambda t, x, d, k: t.mean(x, d, k), "any"),
    "reduce_sum": (_one(te.sum, lambda v: v), lambda x, a: x.sum(a),
                   lambda t, x, d, k: t.sum(x, d, k), "any"),
    "reduce_sum_square": (_one(te.sum, lambda v: v * v), lambda x, a: (x * x).sum(a),
                          lambda t, x, d, k: t.sum(x * x, d, k), "any"),
    "reduce_max": (_extreme(te.max), lambda x, a: x.max(a),
                   lambda t, x, d, k: t.amax(x, d, k), "any"),
    "reduce_min": (_extreme(te.min), lambda x, a: x.min(a),
                   lambda t, x, d, k: t.amin(x, d, k), "any"),
    "reduce_prod": (_prod, lambda x, a: x.prod(a), _torch_prod, "any"),
    "reduce_l1": (_one(te.sum, te.abs), lambda x, a: np.abs(x).sum(a), _NORM(1), "any"),
    "reduce_l2": (_one(te.sum, lambda v: v * v, te.sqrt, "sumsq"),
                  lambda x, a: np.sqrt((x * x).sum(a)), _NORM(2), "any"),
    "reduce_log_sum": (_one(te.sum, lambda v: v, te.log, "sum"), lambda x, a: np.log(x.sum(a)),
                       lambda t, x, d, k: t.log(t.sum(x, d, k)), "positive"),
    "reduce_log_sum_exp": (_log_sum_exp, lambda x, a: _log_sum_exp_np(x, a),
                           lambda t, x, d, k: t.logsumexp(x, d, k), "any"),
}


# the reductions of integers (wrapping as C's) and of bools; the others take float32
_TYPED = {"reduce_sum": (numbers, "int32"), "reduce_sum_square": (numbers, "int64"),
          "reduce_max": (same, "bool"), "reduce_min": (same, "int8")}


def _define_reduction(op: str) -> None:
    lower, np_fn, torch_fn, domain = REDUCTIONS[op]
    rule, example_dtype = _TYPED.get(op, (floats, None))
    typed = [Example(e.inputs, e.attrs, (example_dtype,)) for e in _EXAMPLES[:2]] \
        if example_dtype else []
    define(op, "reduce", _reduce_infer(op),
           lambda args, a, name, out: lower(args[0], a["axes"], a["keepdims"], name),
           lambda args, a, out: np_fn(exact(args[0]), tuple(a["axes"])).reshape(out.shape),
           attrs=dict(axes=REQUIRED, keepdims=True), layout="barrier", torch=_oracle(torch_fn),
           examples=[*_EXAMPLES, *typed], domains={} if domain == "any" else {0: domain},
           dtype=rule)


for _op in REDUCTIONS:
    _define_reduction(_op)


# ---- cumsum ----

def cumsum_np(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """ONNX CumSum (in x's dtype): the running sum along `axis`, from the end with `reverse`,
    each element's own term left out with `exclusive`."""
    x = np.flip(x, axis) if reverse else x
    out = np.cumsum(x, axis=axis, dtype=x.dtype)
    if exclusive:
        out = np.concatenate([np.zeros_like(np.take(out, [0], axis)),
                              np.take(out, range(x.shape[axis] - 1), axis)], axis)
    return np.flip(out, axis) if reverse else out



def _cumsum_infer(inputs, attrs, label):
    x = inputs[0].shape
    attrs["axis"] = axis_of(label, "cumsum", attrs["axis"], len(x))
    return x


def _cumsum_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """out[.., i, ..] = the sum over k of x[.., k, ..] where k <= i (k < i exclusive; k >= i,
    k > i reverse): a reduction over the whole axis with the running bound as a predicate, n^2
    terms a row. Exact on integers (wrapping as C's); on floats each output sums its own terms,
    so no rounding error accumulates along the axis. Meant for the axes exports take it over
    (token positions from an attention mask); a long axis costs quadratically."""
    x, axis = args[0], a["axis"]
    k = te.reduce_axis(x.shape[axis], name="k")
    zero = ir.const(0, x.dtype)

    def body(*idx: ir.Expr) -> ir.Expr:
        i = idx[axis]
        src = tuple(k if d == axis else v for d, v in enumerate(idx))
        if a["reverse"]:
            take = k > i if a["exclusive"] else k >= i
        else:
            take = k < i if a["exclusive"] else k <= i
        return te.sum(te.if_then_else(take, x[src], zero), axis=[k])

    return te.compute(x.shape, body, name=name)


def _cumsum_torch(t, x, *, axis, exclusive, reverse):
    y = x.flip(axis) if reverse else x
    out = y.cumsum(axis, dtype=x.dtype)
    out = out - y if exclusive else out
    return out.flip(axis) if reverse else out


define("cumsum", "reduce", _cumsum_infer, _cumsum_lower,
       lambda args, a, out: cumsum_np(exact(args[0]), a["axis"], a["exclusive"], a["reverse"]),
       attrs=dict(axis=REQUIRED, exclusive=0, reverse=0), layout="barrier", torch=_cumsum_torch,
       dtype=numbers,
       examples=[Example((X3,), dict(axis=1)), Example((X3,), dict(axis=-1, exclusive=1)),
                 Example(((2, 3, 5, 7),), dict(axis=0, reverse=1)),
                 Example(((4, 11),), dict(axis=1, exclusive=1, reverse=1), ("int64",)),
                 Example(((1, 13),), dict(axis=1), ("int32",))])


# ---- softmax, log_softmax ----


def _softmax_infer(op: str):
    def infer(inputs, attrs, label):
        attrs["axis"] = axis_of(label, op, attrs["axis"], len(inputs[0].shape))
        return inputs[0].shape
    return infer


def _row_max(x: te.Tensor, axis: int, name: str) -> te.Tensor:
    return _reduce_stage(x, [axis], False, te.max, lambda v, r: v, f"{name}_maxelem", "k")


def _shifted_exp(v: ir.Expr, top: ir.Expr) -> ir.Expr:
    """exp(v - top) as ops.softmax's (0 below its floor: why in shifted_exp)."""
    return shifted_exp(v - top)


def _softmax_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages as ops.softmax: {name}_maxelem, {name}_exp, {name}_expsum, then name."""
    x, = args
    axis = a["axis"]
    maxelem = _row_max(x, axis, name)
    ex = elementwise(x.shape, lambda i: _shifted_exp(x[i], maxelem[_drop(i, [axis])]),
                     f"{name}_exp")
    expsum = _reduce_stage(ex, [axis], False, te.sum, lambda v, r: v, f"{name}_expsum", "k")
    return elementwise(x.shape, lambda i: ex[i] / expsum[_drop(i, [axis])], name)


def _log_softmax_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """{name}_maxelem, {name}_expsum (of exp(x - max)), then x - max - log(expsum)."""
    x, = args
    axis = a["axis"]
    top = _row_max(x, axis, name)
    expsum = _reduce_stage(x, [axis], False, te.sum, lambda v, r: _shifted_exp(v, top[r]),
                           f"{name}_expsum", "k")
    return elementwise(x.shape, lambda i: x[i] - top[_drop(i, [axis])] - te.log(
        expsum[_drop(i, [axis])]), name)


def _log_softmax_np(x: np.ndarray, axis: int) -> np.ndarray:
    shifted = x - x.max(axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis, keepdims=True))


_SOFTMAX_EXAMPLES = [Example(((7, 13),)), Example((X3,), dict(axis=1)), Example(((11,),))]
define("softmax", "reduce", _softmax_infer("softmax"), _softmax_lower,
       lambda args, a, out: ref.softmax(f64(args[0]), a["axis"]), attrs=dict(axis=-1),
       layout="barrier", torch=lambda t, x, axis: t.softmax(x, axis),
       examples=_SOFTMAX_EXAMPLES)
define("log_softmax", "reduce", _softmax_infer("log_softmax"), _log_softmax_lower,
       lambda args, a, out: _log_softmax_np(f64(args[0]), a["axis"]), attrs=dict(axis=-1),
       layout="barrier", torch=lambda t, x, axis: t.log_softmax(x, axis),
       examples=[*_SOFTMAX_EXAMPLES, Example(((2, 3, 5, 7),), dict(axis=0))])


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
