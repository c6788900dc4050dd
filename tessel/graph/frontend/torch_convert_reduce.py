"""The torch importer's converters for reductions beyond mean and sum (those two are in
`torch_convert_nn`): amax, amin, max and min (of every element, or along a dim: the values;
the indices output is not computed), prod, linalg_vector_norm, logsumexp. `ATEN` is merged
into `torch_import.ATEN`."""
from __future__ import annotations

import math
from typing import Any

from tessel.graph.frontend.torch_context import Context, Converter, Missing, each


def _axes(c: Context, x: Any, dims: Any) -> tuple[int, ...]:
    """The reduced axes: `dims` (an int or a list, negative from the end); none: every axis."""
    rank = len(c.shape(x))
    if dims is None or (not isinstance(dims, int) and len(dims) == 0):
        return tuple(range(rank))
    return tuple(sorted({int(d) % rank for d in ([dims] if isinstance(dims, int) else dims)}))


def _check_dtype(c: Context, a: dict) -> None:
    dtype = a.get("dtype")
    if dtype is not None and str(dtype) != "torch.float32":
        raise c.fail(f"dtype={dtype} is not supported here (float32 only)")


def _reduce(op: str) -> Converter:
    """`op` over the argument `dim` (none or empty: every axis), keeping them with keepdim."""
    def convert(c: Context, a: dict) -> Any:
        _check_dtype(c, a)
        x = a["self"]
        return c.out(op, [x], axes=_axes(c, x, a.get("dim")), keepdims=bool(a.get("keepdim")))
    return convert


def _with_indices(op: str) -> Converter:
    """max.dim and min.dim: their values, and their indices as `Missing`."""
    values = _reduce(op)
    return lambda c, a: (values(c, a), Missing(f"{c.op_type} indices output"))


def _vector_norm(c: Context, a: dict) -> Any:
    """ord 1 and 2 (reduce_l1, reduce_l2), +-inf (the largest or smallest |x|), another p as
    (sum |x| ** p) ** (1 / p)."""
    _check_dtype(c, a)
    x, p = a["self"], float(a["ord"])
    attrs = dict(axes=_axes(c, x, a["dim"]), keepdims=bool(a["keepdim"]))
    if p in (1.0, 2.0):
        return c.out("reduce_l1" if p == 1.0 else "reduce_l2", [x], **attrs)
    if p == 0.0:
        raise c.fail("ord=0 (the count of nonzero elements) is not supported")
    magnitude = c.emit("abs", [x])
    if math.isinf(p):
        return c.out("reduce_max" if p > 0 else "reduce_min", [magnitude], **attrs)
    total = c.emit("reduce_sum", [c.emit("pow", [magnitude, p])], **attrs)
    return c.out("pow", [total, 1.0 / p])


ATEN: dict[str, Converter] = {
    **each("amax.default max.default", _reduce("reduce_max")),
    **each("amin.default min.default", _reduce("reduce_min")),
    **each("max.dim", _with_indices("reduce_max")),
    **each("min.dim", _with_indices("reduce_min")),
    **each("prod.default prod.dim_int", _reduce("reduce_prod")),
    **each("logsumexp.default", _reduce("reduce_log_sum_exp")),
    **each("linalg_vector_norm.default", _vector_norm),
}
