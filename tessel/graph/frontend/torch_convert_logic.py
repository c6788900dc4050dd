"""ATen converters of integer and boolean data (`ATEN`, merged into `torch_import.ATEN`):
comparisons, boolean logic, where and masked_fill, casts, expand, embedding, index_select,
indexing by one integer tensor and gather, cumsum, tril and triu, the tensors filled
alike whatever the input holds (zeros_like, new_full, ...),
and torch's type promotion for the arithmetic of `torch_convert_math` (`promote`).

torch promotes mixed operands (an int64 tensor times a float, a bool mask plus an int): the
dtype torch recorded for the node's output (or, for a comparison, the operands' common dtype)
is the one the operands are cast to; a Python number becomes a scalar of that dtype.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tessel.graph.frontend.context import Const
from tessel.graph.frontend.torch_context import Context, Converter, each
from tessel.graph.opdefs.base import DTYPES, INTS
from tessel.graph.ops import broadcast_shape


def torch_dtype(c: Context, dtype: Any) -> str:
    """tessel's name of a torch dtype; one clear line for those tessel lacks."""
    name = str(dtype).removeprefix("torch.")
    if name in ("float64", "float16", "bfloat16"):
        return "float32"  # tessel computes floats in float32 (constants are converted too)
    if name not in DTYPES:
        raise c.fail(f"{name} tensors are not supported; tessel's dtypes are {', '.join(DTYPES)}")
    return name


def cast(c: Context, v: Any, dtype: str) -> Any:
    """`v` as `dtype`: a Python number becomes a scalar constant, a constant is converted at
    import, a graph value of another dtype gets a cast node."""
    if isinstance(v, (bool, int, float)):
        return c.scalar(v, dtype)
    if isinstance(v, Const):
        if c.dtype(v) == dtype:
            return v
        array = np.trunc(v.array) if v.array.dtype.kind == "f" and dtype in INTS else v.array
        return c.derive(v, array.astype(dtype if dtype != "bool" else np.bool_), dtype)
    return v if c.dtype(v) == dtype else c.emit("cast", [v], to=dtype)


def common_dtype(c: Context, operands: Sequence[Any]) -> str:
    """torch's result type of `operands` (tensors win over Python numbers of their kind)."""
    tensors = [c.dtype(v) for v in operands if not isinstance(v, (bool, int, float))]
    numbers = [v for v in operands if isinstance(v, (bool, int, float))]
    if "float32" in tensors:
        return "float32"
    if any(isinstance(x, float) for x in numbers):
        return "float32"
    ints = [t for t in tensors if t != "bool"]
    if ints:
        return max(ints, key=lambda t: np.dtype(t).itemsize)
    if any(not isinstance(x, bool) for x in numbers):
        return "int64"
    return "bool"


def promote(c: Context, operands: Sequence[Any], dtype: str | None = None) -> list[Any]:
    """The operands cast to `dtype` (default: the node's recorded output dtype)."""
    dtype = dtype or torch_dtype(c, c.out_dtype())
    return [cast(c, v, dtype) for v in operands]


# ---- comparisons, logic, where ----

def _compare(op: str) -> Converter:
    def convert(c: Context, a: dict) -> Any:
        x, y = a["self"], a["other"]
        return c.out(op, promote(c, [x, y], common_dtype(c, [x, y])))
    return convert


def _not_equal(c: Context, a: dict) -> Any:
    x, y = a["self"], a["other"]
    return c.out("logical_not", [c.emit("equal", promote(c, [x, y], common_dtype(c, [x, y])))])


def _logical(op: str, bitwise: bool = False) -> Converter:
    """logical_* on any dtype (nonzero is true), and bitwise_* on bools (the same there)."""
    def convert(c: Context, a: dict) -> Any:
        operands = [a["self"], *([a["other"]] if "other" in a else [])]
        if bitwise and torch_dtype(c, c.out_dtype()) != "bool":
            raise c.fail(f"bitwise operators on {torch_dtype(c, c.out_dtype())} tensors are "
                         f"not supported")
        return c.out(op, promote(c, operands, "bool"))
    return convert


def _pair(op: str, **attrs: Any) -> Converter:
    """floor_divide, remainder, fmod: the operands promoted as torch does."""
    def convert(c: Context, a: dict) -> Any:
        return c.out(op, promote(c, [a["self"], a["other"]]), **attrs)
    return convert


def _where(c: Context, a: dict) -> Any:
    x, y = a["self"], a["other"]
    return c.out("where", [cast(c, a["condition"], "bool"), *promote(c, [x, y])])


def _masked_fill(c: Context, a: dict) -> Any:
    """x.masked_fill(mask, value): where(mask, value, x)."""
    x, value = a["self"], a["value"]
    return c.out("where", [cast(c, a["mask"], "bool"), *promote(c, [value, x])])


def _to(c: Context, a: dict) -> Any:
    """_to_copy, to.dtype, type_as: a cast to the dtype torch recorded (a no-op when the same;
    dropout in eval mode and clones have the identity converter of torch_convert_math)."""
    x = a.get("self", a.get("input"))
    return cast(c, x, torch_dtype(c, c.out_dtype())) if x is not None else x


def _filled(value: float | None) -> Converter:
    """zeros_like, ones_like, full_like, new_zeros, new_ones, new_full, new_empty: a tensor
    whose values do not depend on the input's, a constant (the shape and dtype torch
    recorded; `value` None: the fill_value argument)."""
    def convert(c: Context, a: dict) -> Any:
        fill = a["fill_value"] if value is None else value
        dtype = torch_dtype(c, c.out_dtype())
        return c.new_const(np.full(c.out_shape(), fill, np.bool_ if dtype == "bool" else dtype),
                           "filled")
    return convert


# ---- expand, gather ----

def _expand(c: Context, a: dict) -> Any:
    """expand (and expand_as, broadcast_to): numpy broadcasting to the recorded shape."""
    x, shape = a["self"], c.out_shape()
    if c.shape(x) == shape:
        return x
    if broadcast_shape([c.shape(x), shape], c.label) != shape:
        raise c.fail(f"{c.shape(x)} does not broadcast to {shape}")
    return c.out("expand", [x], shape=shape)


def _embedding(c: Context, a: dict) -> Any:
    """embedding(weight, indices): the rows of the weight (padding_idx only matters in
    training)."""
    return c.out("gather", [a["weight"], cast(c, a["indices"], "int64")], axis=0)


def _index_select(c: Context, a: dict) -> Any:
    x = a["self"]
    return c.out("gather", [x, a["index"]], axis=int(a["dim"]) % len(c.shape(x)))


def _index(c: Context, a: dict) -> Any:
    """x[i, :, j] (aten.index.Tensor), numpy's advanced indexing by integer tensors: the
    indexed axes (moved to the front unless they are adjacent) flattened into one, read by a
    gather at the flat index of the broadcast indices (each wrapped and clamped to its axis)."""
    x, indices = a["self"], list(a["indices"])
    shape = c.shape(x)
    given = [k for k, v in enumerate(indices) if v is not None]
    if any(c.dtype(indices[k]) == "bool" for k in given):
        raise c.fail("indexing with a boolean mask (an output shape that depends on the data) "
                     "is not supported")
    if len(given) == 1:
        return c.out("gather", [x, indices[given[0]]], axis=given[0])
    first = given[0] if given == list(range(given[0], given[-1] + 1)) else 0
    rest = [k for k in range(len(shape)) if k not in given]
    order = [*rest[:first], *given, *rest[first:]]
    x = c.transpose(x, order)
    n = math.prod(shape[k] for k in given)
    x = c.reshape(x, (*c.shape(x)[:first], n, *c.shape(x)[first + len(given):]))
    flat: Any = None
    for k in given:
        idx = _clamped(c, cast(c, indices[k], "int64"), shape[k])
        stride = math.prod(shape[j] for j in given[given.index(k) + 1:])
        term = c.emit("mul", [idx, c.scalar(stride, "int64")]) if stride != 1 else idx
        flat = term if flat is None else c.emit("add", [flat, term])
    return c.out("gather", [x, flat], axis=first)


def _clamped(c: Context, idx: Any, n: int) -> Any:
    """An index into an axis of `n`: negative counts from the end, the rest clamped."""
    wrapped = c.emit("where", [c.emit("less", [idx, c.scalar(0, "int64")]),
                               c.emit("add", [idx, c.scalar(n, "int64")]), idx])
    return c.emit("minimum", [c.emit("maximum", [wrapped, c.scalar(0, "int64")]),
                              c.scalar(n - 1, "int64")])


def _select(c: Context, a: dict) -> Any:
    """x.select(dim, k), x[:, k]: the slice k:k+1 without its axis."""
    x = a["self"]
    shape = c.shape(x)
    axis = int(a["dim"]) % len(shape)
    k = int(a["index"]) % shape[axis]
    ranges = [range(n) for n in shape]
    ranges[axis] = range(k, k + 1)
    return c.reshape(c.slice(x, ranges), c.out_shape(), final=True)


def _any(negate: bool) -> Converter:
    """any (and all, as not any of not) over axes: the mean of the truth values as floats is
    above 0 where any is true."""
    def convert(c: Context, a: dict) -> Any:
        x = cast(c, a["self"], "bool")
        if negate:
            x = c.emit("logical_not", [x])
        rank = len(c.shape(x))
        dims = a.get("dim")
        axes = tuple(range(rank)) if dims is None else tuple(
            int(d) % rank for d in ([dims] if isinstance(dims, int) else dims))
        mean = c.emit("reduce_mean", [c.emit("cast", [x], to="float32")], axes=axes,
                      keepdims=bool(a.get("keepdim", False)))
        mean = c.reshape(mean, c.out_shape())
        if negate:
            return c.out("logical_not", [c.emit("greater", [mean, c.scalar(0.0)])])
        return c.out("greater", [mean, c.scalar(0.0)])
    return convert


def _cumsum(c: Context, a: dict) -> Any:
    """torch.cumsum: in `dtype` if given, else integers and bools summed as int64 (torch's
    promotion), floats as they are."""
    x = a["self"]
    dtype = torch_dtype(c, a["dtype"]) if a.get("dtype") is not None else (
        "int64" if c.dtype(x) in (*INTS, "bool") else c.dtype(x))
    return c.out("cumsum", [cast(c, x, dtype)], axis=int(a["dim"]))


def _triangle(upper: bool) -> Converter:
    return lambda c, a: c.triangle(a["self"], upper, int(a.get("diagonal", 0)))


def _gather_elements(c: Context, a: dict) -> Any:
    x = a["self"]
    return c.out("gather_elements", [x, a["index"]], axis=int(a["dim"]) % len(c.shape(x)))


ATEN: dict[str, Converter] = {
    **each("eq.Tensor eq.Scalar", _compare("equal")),
    **each("ne.Tensor ne.Scalar", _not_equal),
    **each("lt.Tensor lt.Scalar", _compare("less")),
    **each("le.Tensor le.Scalar", _compare("less_equal")),
    **each("gt.Tensor gt.Scalar", _compare("greater")),
    **each("ge.Tensor ge.Scalar", _compare("greater_equal")),
    **{f"aten.logical_{op}.default": _logical(f"logical_{op}") for op in ("and", "or", "xor",
                                                                          "not")},
    **{f"aten.{prefix}{op}{suffix}": _logical(f"logical_{op}", bitwise=True)
       for op in ("and", "or", "xor") for prefix, suffix in (("bitwise_", ".Tensor"),
                                                              ("__", "__.Tensor"))},
    **each("bitwise_not.default", _logical("logical_not", bitwise=True)),
    **each("floor_divide.default floor_divide.Scalar", _pair("floor_div")),
    **each("remainder.Tensor remainder.Scalar", _pair("mod")),
    **each("fmod.Tensor fmod.Scalar", _pair("mod", fmod=1)),
    **each("where.self where.ScalarOther where.ScalarSelf where.Scalar", _where),
    **each("masked_fill.Scalar masked_fill.Tensor masked_fill_.Scalar masked_fill_.Tensor",
           _masked_fill),
    **each("_to_copy.default to.dtype to.dtype_layout to.device type_as.default", _to),
    **each("_assert_tensor_metadata.default", lambda c, a: None),  # a check torch made
    **each("expand.default expand_as.default broadcast_to.default", _expand),
    **each("embedding.default", _embedding),
    **each("index_select.default", _index_select),
    **each("index.Tensor", _index),
    **each("isnan.default", lambda c, a: c.out("isnan", [a["self"]])),
    **each("isinf.default", lambda c, a: c.out("isinf", [a["self"]])),
    **each("gather.default", _gather_elements),
    **each("cumsum.default", _cumsum),
    **each("zeros_like.default new_zeros.default new_empty.default empty_like.default",
           _filled(0.0)),
    **each("ones_like.default new_ones.default", _filled(1.0)),
    **each("full_like.default new_full.default", _filled(None)),
    **each("tril.default", _triangle(False)),
    **each("triu.default", _triangle(True)),
    **each("select.int", _select),
    **each("any.dim any.dims any.default", _any(False)),
    **each("all.dim all.dims all.default", _any(True)),
}
