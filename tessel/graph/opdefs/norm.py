"""Normalizations over a channel axis: group norm and instance norm (statistics of each sample's
channel groups over the spatial axes, the stage structure of `ops.layer_norm`), and local
response norm (each value over the squares of its neighbouring channels: Inception-v1's and
AlexNet's LRN). Channels are axis 1 (N, C, *spatial); scale and bias are per channel."""
from __future__ import annotations

import math

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import REQUIRED, Arg, Attrs, Example, define, elementwise, f64
from tessel.ops.common import named, pad_tensor

Index = tuple[ir.Expr, ...]


# ---- group_norm, instance_norm ----

def _norm_infer(op: str):
    def infer(inputs, attrs, label):
        x = inputs[0].shape
        check(len(x) >= 3 or (len(x) == 2 and op == "group_norm"),
              f"node {label} ({op}): data must be (N, C, *spatial), got {x}")
        groups = attrs["groups"] if op == "group_norm" else x[1]
        check(groups >= 1 and x[1] % groups == 0,
              f"node {label} ({op}): {x[1]} channels do not split into {groups} groups")
        for t in inputs[1:]:
            check(t.shape == (x[1],), f"node {label} ({op}): scale and bias must be "
                                      f"({x[1]},), got {t.shape}")
        return x
    return infer


def _channel_sums(x: te.Tensor, groups: int, fn, name: str) -> te.Tensor:
    """fn(x[n, c, ...], index) summed over the spatial axes of each channel c (none: the value),
    as (N, C) for one channel to a group, else as (N, groups, channels per group); `index` is
    the stage's: (n, c) or (n, g, j) for channel c = g * cg + j."""
    cg = x.shape[1] // groups
    rk = [te.reduce_axis(n, name=f"k{d}") for d, n in enumerate(x.shape[2:])]

    def total(c: ir.Expr, index: Index) -> ir.Expr:
        value = fn(x[(index[0], c, *rk)], index)
        return te.sum(value, axis=rk) if rk else value
    if cg == 1:
        return te.compute(x.shape[:2], named(lambda n, c: total(c, (n, c)), ("n", "c")),
                          name=name)
    return te.compute((x.shape[0], groups, cg), named(
        lambda n, g, j: total(g * cg + j, (n, g, j)), ("n", "g", "j")), name=name)


def _group_sums(t: te.Tensor, name: str) -> te.Tensor:
    """(N, groups): the sums of t (N, groups, channels per group) over each group."""
    j = te.reduce_axis(t.shape[2], name="j")
    return te.compute(t.shape[:2], named(lambda n, g: te.sum(t[n, g, j], axis=j), ("n", "g")),
                      name=name)


def group_norm_stages(x: te.Tensor, scale: te.Tensor, bias: te.Tensor, groups: int,
                      eps: float, name: str) -> te.Tensor:
    """Stages as ops.layer_norm: {name}_mean, {name}_var (N, groups) over each group's
    channels and spatial axes, then name = (x - mean) * rsqrt(var + eps) * scale + bias. With
    several channels to a group, each statistic sums each channel's spatial axes first
    ({name}_mean_c, {name}_var_c), then the group's channels. The variance reads the group's
    mean spread over its channels ({name}_mean_b, inlined): a reduction that reads a value
    shared along one of its spatial axes is a reuse the auto space tiles like a matmul, which
    made a 32-group norm of 64 x 56 x 56 20 times slower untuned than instance norm's form."""
    cg = x.shape[1] // groups
    inv_n = 1.0 / (cg * math.prod(x.shape[2:]))
    if cg == 1:
        mean = _channel_sums(x, groups, lambda v, i: v * inv_n, f"{name}_mean")
        var = _channel_sums(x, groups, lambda v, i: (v - mean[i]) * (v - mean[i]) * inv_n,
                            f"{name}_var")
    else:
        mean = _group_sums(_channel_sums(x, groups, lambda v, i: v * inv_n, f"{name}_mean_c"),
                           f"{name}_mean")
        spread = te.compute((x.shape[0], groups, cg), named(
            lambda n, g, j: mean[n, g], ("n", "g", "j")), name=f"{name}_mean_b")
        var = _group_sums(_channel_sums(
            x, groups, lambda v, i: (v - spread[i]) * (v - spread[i]) * inv_n,
            f"{name}_var_c"), f"{name}_var")

    def body(i: Index) -> ir.Expr:
        n, g = i[0], i[1] if cg == 1 else i[1] // cg
        return (x[i] - mean[n, g]) * te.rsqrt(var[n, g] + eps) * scale[i[1]] + bias[i[1]]

    return elementwise(x.shape, body, name)


def _group_norm_reference(args: list[np.ndarray], groups: int, eps: float) -> np.ndarray:
    x, scale, bias = (f64(a) for a in args)
    rows = x.reshape(x.shape[0], groups, -1)
    mean = rows.mean(axis=2, keepdims=True)
    var = ((rows - mean) ** 2).mean(axis=2, keepdims=True)
    y = ((rows - mean) / np.sqrt(var + eps)).reshape(x.shape)
    per_channel = (1, -1) + (1,) * (x.ndim - 2)
    return y * scale.reshape(per_channel) + bias.reshape(per_channel)


define("group_norm", "reduce", _norm_infer("group_norm"),
       lambda args, a, name, out: group_norm_stages(*args, a["groups"], a["epsilon"], name),
       lambda args, a, out: _group_norm_reference(args, a["groups"], a["epsilon"]),
       attrs=dict(groups=REQUIRED, epsilon=1e-5), inputs=(3, 3), layout="barrier",
       torch=lambda t, x, s, b, *, groups, epsilon: t.nn.functional.group_norm(
           x, groups, s, b, epsilon),
       examples=[Example(((2, 6, 5, 7), (6,), (6,)), dict(groups=3)),
                 Example(((1, 6, 9), (6,), (6,)), dict(groups=6, epsilon=1e-3)),
                 Example(((3, 4), (4,), (4,)), dict(groups=2)),
                 Example(((1, 4, 3, 2, 5), (4,), (4,)), dict(groups=1))])
define("instance_norm", "reduce", _norm_infer("instance_norm"),
       lambda args, a, name, out: group_norm_stages(*args, args[0].shape[1], a["epsilon"],
                                                    name),
       lambda args, a, out: _group_norm_reference(args, args[0].shape[1], a["epsilon"]),
       attrs=dict(epsilon=1e-5), inputs=(3, 3), layout="barrier",
       torch=lambda t, x, s, b, *, epsilon: t.nn.functional.instance_norm(
           x, weight=s, bias=b, eps=epsilon),
       examples=[Example(((2, 3, 5, 7), (3,), (3,))),
                 Example(((1, 5, 11), (5,), (5,)), dict(epsilon=1e-3)),
                 Example(((2, 2, 3, 4, 5), (2,), (2,)))])


# ---- lrn ----

def _lrn_infer(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) >= 3, f"node {label} (lrn): data must be (N, C, *spatial), got {x}")
    check(int(attrs["size"]) >= 1, f"node {label} (lrn): size must be >= 1, got {attrs['size']}")
    attrs["size"] = int(attrs["size"])
    return x


def _lrn_window(size: int) -> tuple[int, int]:
    """The channels before and after each one that its sum of squares takes (ONNX's LRN)."""
    return (size - 1) // 2, size // 2


def _lrn_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages: [{name}_pad (zero channels around),] {name}_sqsum (the window's sum of squares),
    then name = x / (bias + alpha / size * sqsum) ** beta."""
    x, = args
    size, rest = a["size"], x.ndim - 2
    before, after = _lrn_window(size)
    padded = pad_tensor(x, (0, before) + (0,) * rest, (0, after) + (0,) * rest,
                        name=f"{name}_pad")
    r = te.reduce_axis(size, name="r")

    def square_sum(n, c, *sp):
        v = padded[(n, c + r, *sp)]
        return te.sum(v * v, axis=r)

    sqsum = te.compute(x.shape, square_sum, name=f"{name}_sqsum")
    scale, bias, beta = a["alpha"] / size, float(a["bias"]), float(a["beta"])
    return elementwise(x.shape, lambda i: x[i] / te.pow(sqsum[i] * scale + bias, beta), name)


def _lrn_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x = f64(args[0])
    before, after = _lrn_window(a["size"])
    squares = np.pad(x * x, [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2))
    window = sum(squares[:, k:k + x.shape[1]] for k in range(a["size"]))
    return x / (a["bias"] + a["alpha"] / a["size"] * window) ** a["beta"]


def _lrn_torch(t, x, *, size, alpha, beta, bias):
    before, after = _lrn_window(size)
    squares = t.nn.functional.pad(x * x, [0, 0] * (x.dim() - 2) + [before, after])
    window = squares.unfold(1, size, 1).sum(-1)
    return x / (bias + alpha / size * window) ** beta


define("lrn", "reduce", _lrn_infer, _lrn_lower, _lrn_reference,
       attrs=dict(size=REQUIRED, alpha=1e-4, beta=0.75, bias=1.0), layout="barrier",
       torch=_lrn_torch,
       examples=[Example(((2, 7, 5, 3),), dict(size=5, alpha=0.1, beta=0.75, bias=2.0)),
                 Example(((1, 6, 9),), dict(size=4, alpha=0.5, beta=0.5)),
                 Example(((1, 3, 4, 2, 3),), dict(size=9, alpha=1.0, bias=1.5))])
