"""ONNX converters of integer and boolean data: comparisons, boolean logic, Where, Cast and
CastLike, Gather, GatherElements, Expand, Mod, IsNaN, IsInf, Trilu (`LOGIC`, merged into
`onnx_import.CONVERTERS`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import onnx
from onnx import helper

from tessel.graph.frontend.context import Value
from tessel.graph.opdefs.base import DTYPES
from tessel.graph.ops import broadcast_shape

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer


def dtype_name(elem_type: int) -> str:
    """The numpy name of an ONNX element type ("int64"), or its ONNX name when tessel has no
    such dtype (FLOAT16), for the message that refuses it."""
    try:
        name = helper.tensor_dtype_to_np_dtype(elem_type).name
    except (KeyError, TypeError, ValueError):
        name = ""
    return name if name in DTYPES else onnx.TensorProto.DataType.Name(elem_type)


def _to(ctx: Importer, name: str) -> str:
    ctx.check(name in DTYPES, f"casting to {name} is not supported; tessel's dtypes are "
                              f"{', '.join(DTYPES)}")
    return name


def _cast(ctx: Importer, ins: list, attrs: dict) -> Value:
    to = _to(ctx, dtype_name(int(attrs["to"])))
    return ins[0] if ctx.dtype(ins[0]) == to else ctx.out("cast", ins[:1], to=to)


def _cast_like(ctx: Importer, ins: list, attrs: dict) -> Value:
    to = _to(ctx, ctx.dtype(ins[1]))
    return ins[0] if ctx.dtype(ins[0]) == to else ctx.out("cast", ins[:1], to=to)


def _expand(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Expand: numpy broadcasting of the input and the shape (either may have the 1s)."""
    shape = ctx.shape(ins[0])
    target = broadcast_shape([shape, tuple(int(d) for d in ctx.const(ins, 1, "shape"))],
                             ctx.label)
    return ins[0] if target == shape else ctx.out("expand", ins[:1], shape=target)


def _trilu(ctx: Importer, ins: list, attrs: dict) -> Value:
    k = ctx.const(ins, 1, "k")
    return ctx.triangle(ins[0], bool(attrs.get("upper", 1)), 0 if k is None else int(k))


def _node(op: str) -> Converter:
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        return ctx.out(op, ins)
    return convert


LOGIC: dict[str, Converter] = {
    **{k: _node(op) for k, op in (
        ("Equal", "equal"), ("Less", "less"), ("LessOrEqual", "less_equal"),
        ("Greater", "greater"), ("GreaterOrEqual", "greater_equal"), ("And", "logical_and"),
        ("Or", "logical_or"), ("Xor", "logical_xor"), ("Not", "logical_not"),
        ("Where", "where"), ("IsNaN", "isnan"))},
    "IsInf": lambda ctx, ins, attrs: ctx.out("isinf", ins, **{
        k: int(attrs.get(k, 1)) for k in ("detect_positive", "detect_negative")}),
    "Cast": _cast, "CastLike": _cast_like, "Expand": _expand, "Trilu": _trilu,
    "Mod": lambda ctx, ins, attrs: ctx.out("mod", ins, fmod=int(attrs.get("fmod", 0))),
    "Gather": lambda ctx, ins, attrs: ctx.out("gather", ins, axis=int(attrs.get("axis", 0))),
    "GatherElements": lambda ctx, ins, attrs: ctx.out("gather_elements", ins,
                                                      axis=int(attrs.get("axis", 0))),
}
