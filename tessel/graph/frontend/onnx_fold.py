"""Numpy implementations of ONNX operators, for the ONNX importer's constant folding.

Exporters compute shapes in the graph (`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`);
with static shapes every such chain has constant inputs, so `tessel.graph.frontend.onnx_import`
evaluates it here and the canonical graph sees only its result. `FOLD` maps an ONNX op type
to `fn(inputs, attrs) -> array` (inputs are numpy arrays, None for an absent optional input;
attrs are decoded attribute values). The shape helpers (reshape targets, squeeze axes) are
shared with the importer's translations of the same operators.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
from onnx import helper, numpy_helper

from tessel.graph.frontend.context import triangle_mask
from tessel.graph.ir import GraphError, check
from tessel.graph.opdefs.logic import mod_np
from tessel.graph.opdefs.reduce import cumsum_np

Array = np.ndarray
FoldFn = Callable[[list[Any], dict[str, Any]], Array]


# ---- shape helpers shared with the importer ----

def axes_of(attrs: dict[str, Any], inputs: Sequence[Any], index: int) -> list[int] | None:
    """The `axes` of an operator that took them as an attribute before opset 13 (or 18) and
    as its input `index` since: the attribute, else the constant input, else None."""
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    if len(inputs) > index and inputs[index] is not None:
        return [int(a) for a in np.asarray(inputs[index]).reshape(-1)]
    return None


def reshape_target(shape: Sequence[int], spec: Sequence[int], allowzero: int,
                   label: str) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input dimension (unless allowzero), one -1
    takes the remaining elements."""
    dims = [int(d) for d in spec]
    check(dims.count(-1) <= 1, f"node {label} (Reshape): more than one -1 in shape {dims}")
    if not allowzero:
        for i, d in enumerate(dims):
            if d == 0:
                check(i < len(shape), f"node {label} (Reshape): 0 at axis {i} of {dims} has "
                                      f"no input dimension to copy from {tuple(shape)}")
                dims[i] = int(shape[i])
    size, known = math.prod(shape), math.prod(d for d in dims if d != -1)
    if -1 in dims:
        check(known > 0 and size % known == 0,
              f"node {label} (Reshape): cannot infer -1 in {dims} for input {tuple(shape)}")
        dims[dims.index(-1)] = size // known
    check(math.prod(dims) == size, f"node {label} (Reshape): {tuple(shape)} cannot be "
                                   f"reshaped to {dims}")
    return tuple(dims)


def squeeze_shape(shape: Sequence[int], axes: list[int] | None, label: str) -> tuple[int, ...]:
    rank = len(shape)
    if axes is None:
        return tuple(d for d in shape if d != 1)
    axes = [a % rank for a in axes]
    for a in axes:
        check(shape[a] == 1, f"node {label} (Squeeze): axis {a} of {tuple(shape)} is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def unsqueeze_shape(shape: Sequence[int], axes: list[int] | None, label: str) -> tuple[int, ...]:
    check(axes is not None, f"node {label} (Unsqueeze): needs axes")
    rank = len(shape) + len(axes)
    positions = sorted(a % rank for a in axes)
    check(len(set(positions)) == len(positions), f"node {label} (Unsqueeze): repeated axes {axes}")
    dims = list(shape)
    for a in positions:
        dims.insert(a, 1)
    return tuple(dims)


# ---- numpy implementations ----

def _constant(ins: list[Any], attrs: dict[str, Any]) -> Array:
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise GraphError(f"Constant: only tensor, float(s) and int(s) values are supported, got "
                     f"attributes {sorted(attrs)}")


def _shape(ins: list[Any], attrs: dict[str, Any]) -> Array:
    shape = np.asarray(ins[0]).shape
    return np.asarray(shape[attrs.get("start", 0):attrs.get("end", len(shape))], np.int64)


def _int_div(a: Array, b: Array) -> Array:
    a, b = np.asarray(a), np.asarray(b)
    if np.issubdtype(a.dtype, np.integer) and np.issubdtype(b.dtype, np.integer):
        q = np.abs(a) // np.abs(b)  # ONNX (C) integer division truncates towards zero
        return np.where((a < 0) != (b < 0), -q, q).astype(np.result_type(a, b))
    return a / b


def _slice(ins: list[Any], attrs: dict[str, Any]) -> Array:
    data = ins[0]
    starts = attrs.get("starts", ins[1] if len(ins) > 1 else None)
    ends = attrs.get("ends", ins[2] if len(ins) > 2 else None)
    axes = axes_of(attrs, ins, 3)
    axes = list(range(len(starts))) if axes is None else axes
    steps = ins[4] if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        index[int(a) % data.ndim] = slice(int(s), int(e), int(st))
    return data[tuple(index)]


def _gather(ins: list[Any], attrs: dict[str, Any]) -> Array:
    data, axis = ins[0], attrs.get("axis", 0)
    indices = np.where(ins[1] < 0, ins[1] + data.shape[axis], ins[1])
    return np.take(data, indices, axis=axis)


def _reshape(ins: list[Any], attrs: dict[str, Any]) -> Array:
    shape = reshape_target(ins[0].shape, ins[1], attrs.get("allowzero", 0), "Reshape")
    return ins[0].reshape(shape)


def _constant_of_shape(ins: list[Any], attrs: dict[str, Any]) -> Array:
    value = numpy_helper.to_array(attrs["value"]) if "value" in attrs else np.zeros(1, np.float32)
    return np.full([int(d) for d in ins[0]], value.reshape(-1)[0], dtype=value.dtype)


def _cast(ins: list[Any], attrs: dict[str, Any]) -> Array:
    return ins[0].astype(helper.tensor_dtype_to_np_dtype(attrs["to"]))


def _range(ins: list[Any], attrs: dict[str, Any]) -> Array:
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins)
    return np.arange(start, limit, delta).astype(np.result_type(start, limit, delta))


def _expand(ins: list[Any], attrs: dict[str, Any]) -> Array:
    shape = np.broadcast_shapes(ins[0].shape, tuple(int(d) for d in ins[1]))
    return np.broadcast_to(ins[0], shape).copy()


def _clip(ins: list[Any], attrs: dict[str, Any]) -> Array:
    """Clip's bounds as attributes (before opset 11) or optional inputs; absent: unbounded."""
    lo = attrs.get("min", ins[1] if len(ins) > 1 else None)
    hi = attrs.get("max", ins[2] if len(ins) > 2 else None)
    x = np.asarray(ins[0])
    if lo is not None:
        x = np.maximum(x, np.asarray(lo, x.dtype))
    return x if hi is None else np.minimum(x, np.asarray(hi, x.dtype))


def _trilu(ins: list[Any], attrs: dict[str, Any]) -> Array:
    k = int(np.asarray(ins[1]).reshape(())) if len(ins) > 1 and ins[1] is not None else 0
    x = np.asarray(ins[0])
    return np.where(triangle_mask(x.shape, bool(attrs.get("upper", 1)), k), x, np.zeros_like(x))


def _arg(fn: Callable[..., Array]) -> FoldFn:
    """ArgMax, ArgMin (int64): the first extreme, or the last with select_last_index."""
    def fold(ins: list[Any], attrs: dict[str, Any]) -> Array:
        x, axis = np.asarray(ins[0]), int(attrs.get("axis", 0))
        if attrs.get("select_last_index", 0):
            n = x.shape[axis]
            out = n - 1 - fn(np.flip(x, axis), axis=axis)
        else:
            out = fn(x, axis=axis)
        out = np.asarray(out, np.int64)
        return np.expand_dims(out, axis) if attrs.get("keepdims", 1) else out
    return fold


_SCATTER = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum,
            "min": np.minimum}


def _scatter_nd(ins: list[Any], attrs: dict[str, Any]) -> Array:
    """ScatterND: data with the slices `indices` name replaced by (or, with a reduction,
    combined with) `updates`, in order (a mask built by slice assignment in an export)."""
    data, indices, updates = (np.asarray(v) for v in ins)
    combine = _SCATTER[attrs.get("reduction", "none")]
    out, depth = data.copy(), indices.shape[-1]
    rows = indices.reshape(-1, depth)
    for where, value in zip(rows, updates.reshape(len(rows), *data.shape[depth:])):
        at = tuple(int(i) for i in where)
        out[at] = value if combine is None else combine(out[at], value)
    return out


def _scatter_elements(ins: list[Any], attrs: dict[str, Any]) -> Array:
    """ScatterElements: out[.., indices[i], ..] = updates[i] along `axis` (or combined)."""
    data, indices, updates = (np.asarray(v) for v in ins)
    axis = int(attrs.get("axis", 0)) % data.ndim
    indices = np.where(indices < 0, indices + data.shape[axis], indices)
    combine = _SCATTER[attrs.get("reduction", "none")]
    out = data.copy()
    if combine is None:
        np.put_along_axis(out, indices, updates, axis)
        return out
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = indices
    combine.at(out, tuple(grid), updates)
    return out


def _reduce(fn: Callable[..., Array]) -> FoldFn:
    def fold(ins: list[Any], attrs: dict[str, Any]) -> Array:
        axes = axes_of(attrs, ins, 1)
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return np.asarray(ins[0])
        keep = bool(attrs.get("keepdims", 1))
        return np.asarray(fn(ins[0], axis=None if not axes else tuple(axes), keepdims=keep))
    return fold


def _variadic(fn: Callable[[Array, Array], Array]) -> FoldFn:
    def fold(ins: list[Any], attrs: dict[str, Any]) -> Array:
        out = ins[0]
        for x in ins[1:]:
            out = fn(out, x)
        return np.asarray(out)
    return fold


def _elementwise(fn: Callable[..., Array]) -> FoldFn:
    return lambda ins, attrs: np.asarray(fn(*ins)).astype(np.result_type(*ins))


def _along(v: Any, axis: int, rank: int) -> Array:
    """A quantization scale or zero point, shaped to broadcast along `axis` when 1-D."""
    v = np.asarray(v)
    if v.ndim == 1 and v.size > 1:
        shape = [1] * rank
        shape[axis % rank] = v.size
        return v.reshape(shape)
    return v.reshape(())


def _dequantize(ins: list[Any], attrs: dict[str, Any]) -> Array:
    """DequantizeLinear of a constant (a weight): (x - zero_point) * scale in float32."""
    x, scale = np.asarray(ins[0]), ins[1]
    zp = ins[2] if len(ins) > 2 and ins[2] is not None else 0
    axis = int(attrs.get("axis", 1))
    centered = (x.astype(np.int32) - _along(zp, axis, x.ndim).astype(np.int32)).astype(np.float32)
    return centered * _along(scale, axis, x.ndim).astype(np.float32)


FOLD: dict[str, FoldFn] = {
    "Constant": _constant,
    "Shape": _shape,
    "Size": lambda ins, attrs: np.asarray(np.asarray(ins[0]).size, np.int64),
    "Identity": lambda ins, attrs: ins[0],
    "Cast": _cast,
    "DequantizeLinear": _dequantize,
    "Gather": _gather,
    "Slice": _slice,
    "Concat": lambda ins, attrs: np.concatenate(ins, axis=attrs["axis"]),
    "Reshape": _reshape,
    "Flatten": lambda ins, attrs: ins[0].reshape(
        math.prod(ins[0].shape[:attrs.get("axis", 1)]), -1),
    "Squeeze": lambda ins, attrs: ins[0].reshape(
        squeeze_shape(ins[0].shape, axes_of(attrs, ins, 1), "Squeeze")),
    "Unsqueeze": lambda ins, attrs: ins[0].reshape(
        unsqueeze_shape(ins[0].shape, axes_of(attrs, ins, 1), "Unsqueeze")),
    "Transpose": lambda ins, attrs: np.transpose(ins[0], attrs.get("perm")),
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Expand": _expand,
    "Tile": lambda ins, attrs: np.tile(ins[0], [int(r) for r in ins[1]]),
    "Where": lambda ins, attrs: np.where(*ins),
    "Add": _elementwise(np.add),
    "Sub": _elementwise(np.subtract),
    "Mul": _elementwise(np.multiply),
    "Div": _elementwise(_int_div),
    "Pow": lambda ins, attrs: np.power(ins[0], ins[1]).astype(ins[0].dtype),
    "Neg": _elementwise(np.negative),
    "Relu": _elementwise(lambda x: np.maximum(x, 0)),
    "Reciprocal": _elementwise(np.reciprocal),
    "Log": _elementwise(np.log),
    "Tanh": _elementwise(np.tanh),
    "Abs": _elementwise(np.abs),
    "Sqrt": _elementwise(np.sqrt),
    "Exp": _elementwise(np.exp),
    "Floor": _elementwise(np.floor),
    "Ceil": _elementwise(np.ceil),
    "Max": _variadic(np.maximum),
    "Min": _variadic(np.minimum),
    "Sum": _variadic(np.add),
    "Equal": lambda ins, attrs: np.equal(*ins),
    "Less": lambda ins, attrs: np.less(*ins),
    "Greater": lambda ins, attrs: np.greater(*ins),
    "Not": lambda ins, attrs: np.logical_not(ins[0]),
    "And": lambda ins, attrs: np.logical_and(*ins),
    "Or": lambda ins, attrs: np.logical_or(*ins),
    "ReduceProd": _reduce(np.prod),
    "ReduceSum": _reduce(np.sum),
    "MatMul": lambda ins, attrs: np.matmul(*ins),
    "Mod": lambda ins, attrs: mod_np(np.asarray(ins[0]), np.asarray(ins[1]),
                                     int(attrs.get("fmod", 0))),
    "Clip": _clip,
    "Sign": _elementwise(np.sign),
    "Round": _elementwise(np.round),  # (half to even, as ONNX's)
    "Sigmoid": _elementwise(lambda x: 1.0 / (1.0 + np.exp(-x))),
    "Sin": _elementwise(np.sin),
    "Cos": _elementwise(np.cos),
    "LessOrEqual": lambda ins, attrs: np.less_equal(*ins),
    "GreaterOrEqual": lambda ins, attrs: np.greater_equal(*ins),
    "Xor": lambda ins, attrs: np.logical_xor(*ins),
    "IsNaN": lambda ins, attrs: np.isnan(ins[0]),
    "ReduceMax": _reduce(np.max),
    "ReduceMin": _reduce(np.min),
    "ReduceMean": _reduce(np.mean),
    "ArgMax": _arg(np.argmax),
    "ArgMin": _arg(np.argmin),
    "CumSum": lambda ins, attrs: cumsum_np(np.asarray(ins[0]), int(np.asarray(ins[1])),
                                           bool(attrs.get("exclusive", 0)),
                                           bool(attrs.get("reverse", 0))),
    "Trilu": _trilu,
    "ScatterND": _scatter_nd,
    "ScatterElements": _scatter_elements,
    "Einsum": lambda ins, attrs: np.einsum(attrs["equation"], *ins),
}


def fold(op_type: str, inputs: list[Any], attrs: dict[str, Any], label: str) -> Array:
    """The value of an ONNX node whose inputs are all constants (`op_type` in FOLD)."""
    try:
        return np.asarray(FOLD[op_type](inputs, attrs))
    except GraphError:
        raise
    except (ValueError, IndexError, TypeError, KeyError) as e:
        raise GraphError(f"node {label} ({op_type}): evaluating it on its constant inputs "
                         f"failed: {e}") from None


__all__ = ["FOLD", "fold", "axes_of", "reshape_target", "squeeze_shape", "unsqueeze_shape"]
