"""Operators of integer and boolean data: comparisons and boolean logic (bool out), where,
cast, expand (numpy's broadcast_to), gather (ONNX Gather, torch's embedding and index_select:
rows chosen by integer indices computed at run time) and gather_elements (ONNX GatherElements,
torch.gather: one index per output element), and the divisions that round (floor_div,
trunc_div) and remainders (mod: Python's, or C's with fmod), also on floats.

A gather never reads outside its data: an index i in [-n, 0) counts from the end (i + n), as
ONNX and numpy have it, and one outside [-n, n) (ONNX leaves it undefined, torch raises) reads
the nearest row. An integer division or remainder by 0 gives 0 (the hardware would trap). A
cast from float to integer truncates toward zero (C's and numpy's; NaN and values outside the
target's range give what the hardware gives), to bool tests `!= 0`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.ir.expr import INDEX_DTYPE
from tessel.graph.opdefs.base import (DTYPES, INTS, REQUIRED, Arg, Attrs, Example, axis_of,
                                      bcast, broadcast_shape, compare, define, elementwise,
                                      exact, logical, numbers, same, same_shape)
from tessel.graph.opdefs.elementwise import divide, divide_np

X3 = (3, 5, 7)
Index = tuple[ir.Expr, ...]


def _operand(arg: Arg, idx: Index, out: tuple[int, ...]) -> ir.Expr:
    if isinstance(arg, te.Tensor):
        return arg[bcast(idx, arg.shape, out)]
    return arg if isinstance(arg, ir.Expr) else ir.const(float(arg), "float32")


def _broadcast(inputs: list[TensorType], attrs: Attrs, label: str) -> tuple[int, ...]:
    return broadcast_shape([t.shape for t in inputs], label)


def _pointwise(name: str, te_fn: Callable[..., ir.Expr]):
    """The te lowering of an elementwise operator of `te_fn` over broadcast operands."""
    def lower(args: list[Arg], attrs: Attrs, stage: str, out: TensorType) -> te.Tensor:
        check(any(isinstance(v, te.Tensor) for v in args),
              f"lowering {stage} ({name}): every input is a scalar; fold the constant instead")
        return elementwise(out.shape, lambda i: te_fn(*(_operand(v, i, out.shape)
                                                        for v in args)), stage)
    return lower


# ---- comparisons and boolean logic ----

def comparison(name: str, te_fn: Callable[[ir.Expr, ir.Expr], ir.Expr],
               np_fn: Callable[[np.ndarray, np.ndarray], np.ndarray], torch_name: str) -> None:
    define(name, "elemwise", _broadcast, _pointwise(name, te_fn),
           lambda args, attrs, out: np_fn(exact(args[0]), exact(args[1])),
           layout="broadcast", inputs=(2, 2), scalars=True, dtype=compare,
           torch=lambda t, a, b: getattr(t, torch_name)(a, b),
           examples=[Example((X3, (5, 1)), dtypes=("float32", "float32")),
                     Example((X3, X3), dtypes=("int64", "int64")),
                     Example(((7,), X3), dtypes=("int32", "int32"))])


comparison("equal", lambda a, b: a == b, np.equal, "eq")
comparison("less", lambda a, b: a < b, np.less, "lt")
comparison("less_equal", lambda a, b: a <= b, np.less_equal, "le")
comparison("greater", lambda a, b: a > b, np.greater, "gt")
comparison("greater_equal", lambda a, b: a >= b, np.greater_equal, "ge")

_BOOLS = ("bool", "bool")
for _name, _te, _np in (("logical_and", lambda a, b: a & b, np.logical_and),
                        ("logical_or", lambda a, b: a | b, np.logical_or),
                        ("logical_xor", lambda a, b: a != b, np.logical_xor)):
    define(_name, "elemwise", _broadcast, _pointwise(_name, _te),
           lambda args, attrs, out, np_fn=_np: np_fn(args[0], args[1]),
           layout="broadcast", inputs=(2, 2), scalars=True, dtype=logical,
           torch=lambda t, a, b, np_fn=_np: getattr(t, np_fn.__name__)(a, b),
           examples=[Example((X3, (5, 1)), dtypes=_BOOLS), Example((X3, X3), dtypes=_BOOLS)])

define("logical_not", "elemwise", same_shape, _pointwise("logical_not", lambda a: ~a),
       lambda args, attrs, out: np.logical_not(args[0]), layout="channelwise", dtype=logical,
       torch=lambda t, a: t.logical_not(a), examples=[Example((X3,), dtypes=("bool",))])


# ---- where ----

def _where_dtype(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    check(inputs[0].dtype == "bool", f"node {label}: the condition must be bool, got "
                                     f"{inputs[0].dtype}")
    return same(inputs[1:], attrs, label)


define("where", "elemwise", _broadcast,
       _pointwise("where", lambda c, a, b: te.if_then_else(c, a, b)),
       lambda args, attrs, out: np.where(args[0], exact(args[1]), exact(args[2])),
       layout="broadcast", inputs=(3, 3), scalars=True, dtype=_where_dtype,
       torch=lambda t, c, a, b: t.where(c, a, b),
       examples=[Example(((5, 1), X3, (7,)), dtypes=("bool", "float32", "float32")),
                 Example((X3, X3, X3), dtypes=("bool", "int64", "int64"))])


# ---- cast ----

def _cast_dtype(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    same(inputs, attrs, label)
    check(attrs["to"] in DTYPES, f"node {label}: cannot cast to {attrs['to']!r}; tessel's "
                                 f"dtypes are {', '.join(DTYPES)}")
    return attrs["to"]


def _cast_te(x: ir.Expr, to: str) -> ir.Expr:
    if to == "bool":
        return x != ir.const(0, x.dtype) if x.dtype != "bool" else x
    return ir.cast(to, x)


def _cast_np(x: np.ndarray, to: str) -> np.ndarray:
    if x.dtype.kind == "f" and to in INTS:
        x = np.trunc(x)
    with np.errstate(invalid="ignore"):
        return x.astype(to)


define("cast", "elemwise", same_shape,
       lambda args, a, stage, out: elementwise(out.shape,
                                               lambda i: _cast_te(args[0][i], a["to"]), stage),
       lambda args, a, out: _cast_np(args[0], a["to"]), attrs=dict(to=REQUIRED),
       layout="channelwise", dtype=_cast_dtype,
       torch=lambda t, x, to: x.to(getattr(t, to)),
       examples=[Example((X3,), dict(to="int64"), dtypes=("float32",)),
                 Example((X3,), dict(to="bool"), dtypes=("float32",)),
                 Example((X3,), dict(to="float32"), dtypes=("int64",)),
                 Example((X3,), dict(to="int8"), dtypes=("int64",)),
                 Example((X3,), dict(to="float32"), dtypes=("bool",))])


# ---- expand ----

def _expand_infer(inputs: list[TensorType], attrs: Attrs, label: str) -> tuple[int, ...]:
    shape = tuple(int(n) for n in attrs["shape"])
    attrs["shape"] = shape
    out = broadcast_shape([inputs[0].shape, shape], label)
    check(out == shape, f"node {label} (expand): {inputs[0].shape} does not broadcast to "
                        f"{shape}")
    return shape


define("expand", "injective", _expand_infer,
       lambda args, a, stage, out: elementwise(
           out.shape, lambda i: args[0][bcast(i, args[0].shape, out.shape)], stage),
       lambda args, a, out: np.broadcast_to(args[0], a["shape"]),
       attrs=dict(shape=REQUIRED), layout="barrier", dtype=same,
       torch=lambda t, x, shape: x.expand(shape),
       examples=[Example(((5, 1),), dict(shape=(3, 5, 7))),
                 Example(((7,),), dict(shape=(2, 7)), dtypes=("int64",))])


# ---- gather ----

def _gather_dtype(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    check(inputs[1].dtype in ("int32", "int64"), f"node {label}: indices must be int32 or "
                                                 f"int64, got {inputs[1].dtype}")
    return inputs[0].dtype


def _gather_infer(inputs: list[TensorType], attrs: Attrs, label: str) -> tuple[int, ...]:
    data, indices = inputs[0].shape, inputs[1].shape
    check(len(data) >= 1, f"node {label} (gather): data must have an axis, got a scalar")
    axis = attrs["axis"] = axis_of(label, "gather", attrs["axis"], len(data))
    return (*data[:axis], *indices, *data[axis + 1:])


def row_index(v: ir.Expr, n: int) -> ir.Expr:
    """The row an index `v` reads in an axis of `n`: negative counts from the end, and an
    index outside [-n, n) is clamped (no read ever leaves the data)."""
    zero, size = ir.const(0, v.dtype), ir.const(n, v.dtype)
    wrapped = te.if_then_else(v < zero, v + size, v)
    return ir.cast(INDEX_DTYPE, te.min(te.max(wrapped, zero), ir.const(n - 1, v.dtype)))


def _gather_lower(args: list[Arg], a: Attrs, stage: str, out: TensorType) -> te.Tensor:
    data, indices = args
    axis, k = a["axis"], indices.ndim

    def read(i: Index) -> ir.Expr:
        row = row_index(indices[i[axis:axis + k]], data.shape[axis])
        return data[(*i[:axis], row, *i[axis + k:])]
    return elementwise(out.shape, read, stage)


def rows_np(indices: np.ndarray, n: int) -> np.ndarray:
    """`row_index` in numpy."""
    return np.clip(np.where(indices < 0, indices + n, indices), 0, n - 1)


def _gather_np(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    data, indices = args
    return np.take(data, rows_np(indices, data.shape[a["axis"]]), axis=a["axis"])


def _gather_torch(t, data, indices, axis):
    rows = t.clamp(t.where(indices < 0, indices + data.shape[axis], indices), 0,
                   data.shape[axis] - 1)
    return t.index_select(data, axis, rows.reshape(-1)).reshape(
        *data.shape[:axis], *indices.shape, *data.shape[axis + 1:])


define("gather", "injective", _gather_infer, _gather_lower, _gather_np,
       attrs=dict(axis=0), inputs=(2, 2), layout="barrier", dtype=_gather_dtype,
       torch=_gather_torch, param_names=("data", "indices"),
       examples=[Example(((11, 6), (3, 4)), dtypes=("float32", "int64")),
                 Example((X3, (2,)), dict(axis=1), dtypes=("float32", "int32")),
                 Example((X3, ()), dict(axis=-1), dtypes=("int64", "int64"))])


# ---- integer division and remainder ----

def _guarded(u: ir.Expr, v: ir.Expr, fn: Callable[[ir.Expr, ir.Expr], ir.Expr]) -> ir.Expr:
    """fn(u, v) on integers, 0 where v is 0 (the hardware would trap); fn on floats."""
    if ir.is_float(u.dtype):
        return fn(u, v)
    zero = ir.const(0, u.dtype)
    safe = te.if_then_else(v == zero, ir.const(1, u.dtype), v)
    return te.if_then_else(v == zero, zero, fn(u, safe))


def _trunc(q: ir.Expr) -> ir.Expr:
    return te.if_then_else(q < 0.0, te.ceil(q), te.floor(q))


def _floor_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        return np.floor(a / b)
    return np.where(b == 0, 0, np.floor_divide(a, np.where(b == 0, 1, b)))


def _trunc_np(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.trunc(a / b) if a.dtype.kind == "f" else divide_np(a, b)


def _mod_te(u: ir.Expr, v: ir.Expr, fmod: int) -> ir.Expr:
    """Python's remainder (the divisor's sign) or, with fmod, C's (the dividend's)."""
    if fmod:
        return _guarded(u, v, lambda a, b: _by_infinity(a, b, a, a - b * (
            _trunc(a / b) if ir.is_float(a.dtype) else divide(a, b))))
    return _guarded(u, v, lambda a, b: _by_infinity(
        a, b, te.if_then_else(((a < 0.0) == (b < 0.0)) | (a == 0.0), a, b),
        a - b * te.floor(a / b)) if ir.is_float(a.dtype) else a % b)


def _by_infinity(a: ir.Expr, b: ir.Expr, then: ir.Expr, otherwise: ir.Expr) -> ir.Expr:
    """`then` where a float a is finite and b infinite (a / b is 0: the formula's b * 0 is NaN),
    else `otherwise`."""
    if not ir.is_float(a.dtype):
        return otherwise
    inf = float("inf")
    return te.if_then_else((te.abs(b) == inf) & (te.abs(a) < inf), then, otherwise)


def mod_np(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    if fmod:
        return np.fmod(a, b) if a.dtype.kind == "f" else np.where(
            b == 0, 0, np.fmod(a, np.where(b == 0, 1, b)))
    return np.mod(a, b) if a.dtype.kind == "f" else np.where(
        b == 0, 0, np.mod(a, np.where(b == 0, 1, b)))


def _integer_pair(name: str, attrs: Attrs | None = None):
    def lower(args: list[Arg], a: Attrs, stage: str, out: TensorType) -> te.Tensor:
        fn = {"floor_div": lambda u, v: _guarded(u, v, lambda x, y: te.floor(x / y)
                                                 if ir.is_float(x.dtype) else x // y),
              "trunc_div": lambda u, v: _trunc(u / v) if ir.is_float(u.dtype)
              else divide(u, v),
              "mod": lambda u, v: _mod_te(u, v, a["fmod"])}[name]
        return _pointwise(name, fn)(args, a, stage, out)
    return lower


_INT_PAIRS = [Example((X3, X3), dtypes=("int64", "int64")),
              Example((X3, (5, 1)), dtypes=("int32", "int32")),
              Example((X3, X3), dtypes=("float32", "float32"))]
define("floor_div", "elemwise", _broadcast, _integer_pair("floor_div"),
       lambda args, a, out: _floor_np(exact(args[0]), exact(args[1])), layout="broadcast",
       inputs=(2, 2), scalars=True, dtype=numbers, examples=_INT_PAIRS, domains={1: "nonzero"},
       torch=lambda t, a, b: t.div(a, b, rounding_mode="floor"))
define("trunc_div", "elemwise", _broadcast, _integer_pair("trunc_div"),
       lambda args, a, out: _trunc_np(exact(args[0]), exact(args[1])), layout="broadcast",
       inputs=(2, 2), scalars=True, dtype=numbers, examples=_INT_PAIRS, domains={1: "nonzero"},
       torch=lambda t, a, b: t.div(a, b, rounding_mode="trunc"))
define("mod", "elemwise", _broadcast, _integer_pair("mod"),
       lambda args, a, out: mod_np(exact(args[0]), exact(args[1]), a["fmod"]),
       attrs=dict(fmod=0), layout="broadcast", inputs=(2, 2), scalars=True, dtype=numbers,
       examples=[*_INT_PAIRS, Example((X3, X3), dict(fmod=1), dtypes=("int64", "int64")),
                 Example((X3, X3), dict(fmod=1), dtypes=("float32", "float32"))],
       domains={1: "nonzero"},
       torch=lambda t, a, b, fmod: t.fmod(a, b) if fmod else t.remainder(a, b))


# ---- gather_elements ----

def _gather_elements_infer(inputs: list[TensorType], attrs: Attrs, label: str
                           ) -> tuple[int, ...]:
    data, indices = inputs[0].shape, inputs[1].shape
    check(len(data) == len(indices) >= 1, f"node {label} (gather_elements): data {data} and "
                                          f"indices {indices} must have the same rank")
    axis = attrs["axis"] = axis_of(label, "gather_elements", attrs["axis"], len(data))
    check(all(i <= d for k, (i, d) in enumerate(zip(indices, data)) if k != axis),
          f"node {label} (gather_elements): indices {indices} larger than data {data} off "
          f"axis {axis}")
    return indices


def _gather_elements_lower(args: list[Arg], a: Attrs, stage: str, out: TensorType
                           ) -> te.Tensor:
    data, indices = args
    axis = a["axis"]
    return elementwise(out.shape, lambda i: data[(*i[:axis], row_index(
        indices[i], data.shape[axis]), *i[axis + 1:])], stage)


def _gather_elements_np(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    data, indices = args
    return _take_along(data, rows_np(indices, data.shape[a["axis"]]), a["axis"])


def _take_along(data: np.ndarray, rows: np.ndarray, axis: int) -> np.ndarray:
    """numpy's take_along_axis where the indices may be smaller than the data off `axis`."""
    grid = list(np.indices(rows.shape, sparse=True))
    grid[axis] = rows
    return data[tuple(grid)]


define("gather_elements", "injective", _gather_elements_infer, _gather_elements_lower,
       _gather_elements_np, attrs=dict(axis=0), inputs=(2, 2), layout="barrier",
       dtype=_gather_dtype, param_names=("data", "indices"),
       torch=lambda t, data, indices, axis: t.gather(data, axis, t.clamp(t.where(
           indices < 0, indices + data.shape[axis], indices), 0, data.shape[axis] - 1)),
       examples=[Example(((5, 6), (4, 6)), dtypes=("float32", "int64")),
                 Example((X3, (3, 2, 7)), dict(axis=1), dtypes=("int64", "int32"))])


# ---- isnan, isinf ----

def _float_in(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    check(inputs[0].dtype == "float32", f"node {label}: takes float32, got {inputs[0].dtype}")
    return "bool"


def _isinf_te(v: ir.Expr, a: Attrs) -> ir.Expr:
    pos, neg = v == float("inf"), v == float("-inf")
    if a["detect_positive"] and a["detect_negative"]:
        return pos | neg
    return pos if a["detect_positive"] else neg if a["detect_negative"] else ir.const(False)


define("isnan", "elemwise", same_shape,
       lambda args, a, stage, out: elementwise(out.shape, lambda i: args[0][i] != args[0][i],
                                               stage),
       lambda args, a, out: np.isnan(args[0]), layout="channelwise", dtype=_float_in,
       torch=lambda t, x: t.isnan(x), examples=[Example((X3,), dtypes=("float32",))])
define("isinf", "elemwise", same_shape,
       lambda args, a, stage, out: elementwise(out.shape, lambda i: _isinf_te(args[0][i], a),
                                               stage),
       lambda args, a, out: (np.isposinf(args[0]) & bool(a["detect_positive"]))
       | (np.isneginf(args[0]) & bool(a["detect_negative"])),
       attrs=dict(detect_positive=1, detect_negative=1), layout="channelwise", dtype=_float_in,
       torch=lambda t, x, detect_positive, detect_negative:
       (t.isposinf(x) & bool(detect_positive)) | (t.isneginf(x) & bool(detect_negative)),
       examples=[Example((X3,), dtypes=("float32",)),
                 Example((X3,), dict(detect_negative=0), dtypes=("float32",))])
