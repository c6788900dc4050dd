"""The torch importer's converters for dense layers, elementwise operators and layout: `ATEN`
maps ATen operator names (`aten.add.Tensor`) to them (see `torch_context`).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessel.graph.frontend.context import Const
from tessel.graph.frontend.einsum import einsum
from tessel.graph.frontend.torch_context import Context, Converter, Missing, each
from tessel.graph.frontend.torch_convert_logic import cast, promote
from tessel.graph.opdefs.shape import slice_range

# ---- dense ----

def _linear(c: Context, a: dict) -> Any:
    bias = [] if a["bias"] is None else [a["bias"]]
    return c.out("dense", [a["input"], a["weight"], *bias])


def _addmm(c: Context, a: dict) -> Any:
    """addmm and baddbmm: beta * self + alpha * (mat1 @ mat2) (batch1 @ batch2: BLOOM's
    ALiBi scores); a constant mat2 and a row bias make a dense; beta 0 ignores self."""
    left, right = a.get("mat1", a.get("batch1")), a.get("mat2", a.get("batch2"))
    w, bias = c.const(right), a["self"]
    if (w is not None and w.ndim == 2 and a["beta"] == 1 and a["alpha"] == 1
            and c.shape(bias) == (w.shape[1],)):
        return c.out("dense", [left, c.transpose(right, (1, 0)), bias])
    product = c.emit("matmul", [left, right])
    if a["alpha"] != 1:
        product = _times(c, product, float(a["alpha"]))
    if a["beta"] == 0:
        return product
    return c.out("add", [bias if a["beta"] == 1 else _times(c, bias, float(a["beta"])), product])


def _matmul(c: Context, a: dict) -> Any:
    """torch.matmul, mm and bmm; 1-d operands become a row (left) or a column (right)."""
    x, y = a["self"], a.get("other", a.get("mat2"))
    vectors = len(c.shape(x)) == 1 or len(c.shape(y)) == 1
    if not vectors:
        return c.out("matmul", [x, y])
    if len(c.shape(x)) == 1:
        x = c.reshape(x, (1, *c.shape(x)))
    if len(c.shape(y)) == 1:
        y = c.reshape(y, (*c.shape(y), 1))
    return c.reshape(c.emit("matmul", [x, y]), c.out_shape(), final=True)


# ---- elementwise ----

def _binary(op: str, reverse: bool = False) -> Converter:
    """add/sub (with alpha on the second operand), mul, div, pow, maximum, minimum; `reverse`
    is rsub: other - alpha * self. Operands of mixed dtypes are promoted as torch does."""
    def convert(c: Context, a: dict) -> Any:
        x, y = a["self"], a.get("other", a.get("exponent"))
        if reverse:
            x, y = y, x
        alpha = a.get("alpha", 1)
        if alpha != 1:
            y = _times(c, y, float(alpha))
        rounding = {None: op, "floor": "floor_div", "trunc": "trunc_div"}
        if a.get("rounding_mode") not in rounding:
            raise c.fail(f"rounding_mode={a['rounding_mode']!r} is not supported")
        return c.out(rounding[a.get("rounding_mode")], promote(c, [x, y]))
    return convert


def _times(c: Context, v: Any, factor: float) -> Any:
    """`v * factor`, computed at import when `v` is a constant."""
    array = c.const(v)
    if array is None:
        return c.emit("mul", [v, factor])
    return float(array * factor) if array.ndim == 0 else c.new_const(array * factor, "scaled")


def _unary(op: str, **attrs: Any) -> Converter:
    return lambda c, a: c.out(op, [a["self"]], **attrs)


def _gelu(c: Context, a: dict) -> Any:
    return c.out("gelu", [a["self"]], approximate=a["approximate"])


def _leaky_relu(c: Context, a: dict) -> Any:
    return c.out("leaky_relu", [a["self"]], alpha=float(a["negative_slope"]))


def _clip(lo_key: str | None, hi_key: str | None, lo: float | None = None,
          hi: float | None = None) -> Converter:
    """clamp/hardtanh/relu6 as clip; the bounds come from arguments or are fixed."""
    def convert(c: Context, a: dict) -> Any:
        low = a.get(lo_key) if lo_key else lo
        high = a.get(hi_key) if hi_key else hi
        for bound in (low, high):
            if bound is not None and not isinstance(bound, (int, float)):
                raise c.fail("tensor bounds are not supported; clamp to Python numbers")
        return c.out("clip", [a["self"]], min=None if low is None else float(low),
                     max=None if high is None else float(high))
    return convert


def _reciprocal(c: Context, a: dict) -> Any:
    return c.out("div", [1.0, a["self"]])


def _rsqrt(c: Context, a: dict) -> Any:
    return c.out("div", [1.0, c.emit("sqrt", [a["self"]])])


def _silu(c: Context, a: dict) -> Any:
    return c.out("silu", [a["self"]])


def _hardsigmoid(c: Context, a: dict) -> Any:
    return c.out("hard_sigmoid", [a["self"]], alpha=1.0 / 6.0, beta=0.5)


def _elu(c: Context, a: dict) -> Any:
    """scale * elu(x, alpha) (selu's form when scale is not 1); input_scale must be 1."""
    if float(a["input_scale"]) != 1.0:
        raise c.fail(f"input_scale={a['input_scale']} is not supported")
    alpha, scale = float(a["alpha"]), float(a["scale"])
    if scale == 1.0:
        return c.out("elu", [a["self"]], alpha=alpha)
    return c.out("selu", [a["self"]], alpha=alpha, gamma=scale)


def _softplus(c: Context, a: dict) -> Any:
    return c.out("softplus", [a["self"]], beta=float(a["beta"]),
                 threshold=float(a["threshold"]))


def _threshold(c: Context, a: dict) -> Any:
    """x where x > threshold, else value: thresholded_relu when the value is 0."""
    if float(a["value"]) != 0.0:
        raise c.fail(f"threshold value={a['value']} is not supported (only 0)")
    return c.out("thresholded_relu", [a["self"]], alpha=float(a["threshold"]))


def _prelu(c: Context, a: dict) -> Any:
    """The weight: one slope per channel (axis 1), or one for all."""
    x, w = a["self"], a["weight"]
    n, rank = math.prod(c.shape(w)), len(c.shape(x))
    return c.out("prelu", [x, c.reshape(w, (n, *(1,) * (rank - 2)) if n > 1 else (1,))])


def _round(c: Context, a: dict) -> Any:
    """round, half to even; with decimals d as torch: round(x * 10**d) / 10**d, or for d < 0
    round(x / 10**-d) * 10**-d."""
    d = int(a.get("decimals", 0))
    if d == 0:
        return c.out("round", [a["self"]])
    scale, (first, last) = float(10 ** abs(d)), ("mul", "div") if d > 0 else ("div", "mul")
    return c.out(last, [c.emit("round", [c.emit(first, [a["self"], scale])]), scale])


# ---- layout ----

def _view(c: Context, a: dict) -> Any:
    """view/reshape/flatten/unflatten/squeeze/unsqueeze: the output shape that torch
    recorded (expand: torch_convert_logic)."""
    x, shape = a["self"], c.out_shape()
    if math.prod(shape) != math.prod(c.shape(x)):
        raise c.fail(f"broadcasting {c.shape(x)} to {shape} is not supported (only "
                     f"expands that add size-1 axes)")
    return c.reshape(x, shape, final=True)


def _identity(c: Context, a: dict) -> Any:
    """clone, contiguous, alias, detach, dropout in eval mode (casts: torch_convert_logic)."""
    x = a.get("self", a.get("input"))
    if a.get("train"):
        raise c.fail("dropout in training mode is not supported; export in eval mode")
    return x


def _native_dropout(c: Context, a: dict) -> Any:
    return (_identity(c, a), Missing("dropout mask output"))


def _permute(c: Context, a: dict) -> Any:
    rank = len(c.shape(a["self"]))
    if "dims" in a:
        perm = [int(d) % rank for d in a["dims"]]
    else:  # transpose.int, swapaxes, swapdims, t: swap two axes
        perm = list(range(rank))
        pair = next(((a[p], a[q]) for p, q in (("dim0", "dim1"), ("axis0", "axis1")) if p in a),
                    (0, rank - 1))
        i, j = int(pair[0]) % rank, int(pair[1]) % rank
        perm[i], perm[j] = perm[j], perm[i]
    return c.transpose(a["self"], perm, final=True)


def _cat(c: Context, a: dict) -> Any:
    tensors = [t for t in a["tensors"] if math.prod(c.shape(t)) > 0]
    if len(tensors) == 1:
        return tensors[0]
    return c.out("concat", tensors, axis=int(a["dim"]))


def _stack(c: Context, a: dict) -> Any:
    rank = len(c.shape(a["tensors"][0])) + 1
    axis = int(a["dim"]) % rank
    parts = [c.reshape(t, (*c.shape(t)[:axis], 1, *c.shape(t)[axis:])) for t in a["tensors"]]
    return c.out("concat", parts, axis=axis) if len(parts) > 1 else parts[0]


def _slice(c: Context, a: dict) -> Any:
    """aten.slice.Tensor and narrow: numpy's x[start:end:step] along one axis."""
    shape = c.shape(a["self"])
    axis = int(a["dim"]) % len(shape)
    start = a.get("start")
    end = a.get("end") if "length" not in a else int(start) + int(a["length"])
    ranges = [range(n) for n in shape]
    ranges[axis] = slice_range(shape[axis], None if start is None else int(start),
                               None if end is None else int(end), int(a.get("step", 1)))
    return c.slice(a["self"], ranges, final=True)


def _split(c: Context, a: dict) -> list[Any]:
    """split.Tensor (parts of split_size, the last smaller), split_with_sizes, and chunk (as
    split, parts of ceil(n / chunks))."""
    shape = c.shape(a["self"])
    axis = int(a.get("dim", 0)) % len(shape)
    if "split_sizes" in a:
        sizes = [int(n) for n in a["split_sizes"]]
    else:
        step = int(a["split_size"]) if "chunks" not in a else -(-shape[axis] // int(a["chunks"]))
        sizes = [min(step, shape[axis] - k) for k in range(0, shape[axis], step)]
    return c.split(a["self"], axis, sizes)


def _unbind(c: Context, a: dict) -> list[Any]:
    """unbind.int: the slices along `dim`, each without that axis (timm's q, k, v)."""
    shape = c.shape(a["self"])
    axis = int(a.get("dim", 0)) % len(shape)
    rest = shape[:axis] + shape[axis + 1:]
    return [c.reshape(p, rest) for p in c.split(a["self"], axis, [1] * shape[axis])]


def _roll(c: Context, a: dict) -> Any:
    """roll: along each of `dims` the last `shift` elements moved to the front (two slices
    joined the other way round; Swin's shifted windows); without dims, of the flattened
    tensor."""
    x, shape = a["self"], c.shape(a["self"])
    shifts, dims = [int(s) for s in a["shifts"]], [int(d) for d in a.get("dims") or ()]
    if not dims:
        c.check(len(shifts) == 1, f"shifts {shifts} without dims: one shift expected")
        flat = _roll(c, {"self": c.reshape(x, (math.prod(shape),)), "shifts": shifts,
                         "dims": [0]})
        return c.reshape(flat, shape)
    c.check(len(shifts) == len(dims), f"shifts {shifts} and dims {dims} differ in length")
    for shift, dim in zip(shifts, dims):
        axis = dim % len(shape)
        n = shape[axis]
        if shift % n:
            head, tail = c.split(x, axis, [n - shift % n, shift % n])
            x = c.emit("concat", [tail, head], axis=axis)
    return x


def _slice_scatter(c: Context, a: dict) -> Any:
    """slice_scatter and select_scatter (a functional program's writes into a slice): `src`
    between the parts of `self` before and after the slice along `dim` (a concat); a slice
    with a step is refused."""
    x, src = a["self"], a["src"]
    shape = c.shape(x)
    axis = int(a.get("dim", 0)) % len(shape)
    if "index" in a:  # select_scatter: one index, src without the axis
        start = int(a["index"]) % shape[axis]
        rng, src = range(start, start + 1), c.reshape(src, (*shape[:axis], 1, *shape[axis + 1:]))
    else:
        start, end = a.get("start"), a.get("end")
        rng = slice_range(shape[axis], None if start is None else int(start),
                          None if end is None else int(end), int(a.get("step", 1)))
    c.check(rng.step == 1, f"a slice with step {rng.step} is not supported here")
    if len(rng) == shape[axis]:
        return src
    ranges = [range(n) for n in shape]
    parts = []
    for lo, hi in ((0, rng.start), (rng.stop, shape[axis])):
        ranges[axis] = range(lo, hi)
        parts.append(c.slice(x, list(ranges)) if hi > lo else None)
    return c.out("concat", [p for p in (parts[0], src, parts[1]) if p is not None], axis=axis)


def _written(key: str) -> Converter:
    """fill.Scalar, fill.Tensor ("value") and copy.default ("src"): a functional program's
    x[...] = v and x.copy_(v), v broadcast to self's shape in self's dtype."""
    def convert(c: Context, a: dict) -> Any:
        shape, v = c.shape(a["self"]), cast(c, a[key], c.dtype(a["self"]))
        if isinstance(v, Const):
            return c.derive(v, np.broadcast_to(v.array, shape), "filled")
        return c.out("expand", [v], shape=shape) if c.shape(v) != shape else v
    return convert


# aten operators (and their in-place forms) that are one canonical unary operator
UNARY = "relu sigmoid tanh erf exp log sqrt neg abs hardswish mish sign floor ceil round".split()
_VIEWS = ("view.default reshape.default _unsafe_view.default flatten.using_ints unflatten.int "
          "reshape_as.default view_as.default "
          "unsqueeze.default unsqueeze_.default squeeze.default squeeze.dim squeeze.dims")
_IDENTITY = ("clone.default contiguous.default alias.default detach.default "
             "lift_fresh_copy.default dropout.default feature_dropout.default "
             "alpha_dropout.default dropout_.default feature_dropout_.default "
             "alpha_dropout_.default")

ATEN: dict[str, Converter] = {
    **each("linear.default", _linear),
    **each("addmm.default baddbmm.default", _addmm),
    **each("mm.default bmm.default matmul.default", _matmul),
    **each("add.Tensor add.Scalar add_.Tensor add_.Scalar", _binary("add")),
    **each("sub.Tensor sub.Scalar sub_.Tensor sub_.Scalar", _binary("sub")),
    **each("rsub.Tensor rsub.Scalar", _binary("sub", reverse=True)),
    **each("mul.Tensor mul.Scalar mul_.Tensor mul_.Scalar", _binary("mul")),
    **each("div.Tensor div.Scalar div.Tensor_mode div_.Tensor div_.Scalar", _binary("div")),
    **each("pow.Tensor_Tensor pow.Tensor_Scalar pow.Scalar", _binary("pow")),
    **each("maximum.default", _binary("maximum")),
    **each("minimum.default", _binary("minimum")),
    **{f"aten.{op}{inplace}.default": _unary(op) for op in UNARY for inplace in ("", "_")},
    **each("gelu.default gelu_.default", _gelu),
    **each("leaky_relu.default leaky_relu_.default", _leaky_relu),
    **each("hardtanh.default hardtanh_.default", _clip("min_val", "max_val")),
    **each("relu6.default relu6_.default", _clip(None, None, 0.0, 6.0)),
    **each("clamp.default clamp_.default", _clip("min", "max")),
    **each("clamp_min.default clamp_min_.default", _clip("min", None)),
    **each("clamp_max.default clamp_max_.default", _clip(None, "max")),
    **each("reciprocal.default", _reciprocal),
    **each("rsqrt.default", _rsqrt),
    **each("silu.default silu_.default", _silu),
    **each("hardsigmoid.default hardsigmoid_.default", _hardsigmoid),
    **each("elu.default elu_.default", _elu),
    **each("selu.default selu_.default", _unary("selu")),
    **each("celu.default celu_.default", lambda c, a: c.out("celu", [a["self"]],
                                                          alpha=float(a["alpha"]))),
    **each("softplus.default", _softplus),
    **each("threshold.default threshold_.default", _threshold),
    **each("prelu.default", _prelu),
    **each("round.decimals round_.decimals", _round),
    **each(_VIEWS, _view),
    **each("permute.default transpose.int t.default swapaxes.default swapdims.default",
           _permute),
    **each(_IDENTITY, _identity),
    **each("native_dropout.default", _native_dropout),
    **each("cat.default", _cat),
    **each("stack.default", _stack),
    **each("slice.Tensor narrow.default", _slice),
    **each("split.Tensor split_with_sizes.default chunk.default", _split),
    **each("unbind.int", _unbind),
    **each("roll.default", _roll),
    **each("einsum.default", lambda c, a: einsum(c, str(a["equation"]), list(a["tensors"]))),
    **each("slice_scatter.default select_scatter.default", _slice_scatter),
    **each("fill.Scalar fill.Tensor", _written("value")),
    **each("copy.default", _written("src")),
}
