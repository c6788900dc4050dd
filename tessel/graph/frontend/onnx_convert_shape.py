"""ONNX converters of layout and shapes: reshapes, transposes, slices, splits, joins, and
the operators that vanish on a static-shape graph (`SHAPE`, merged into
`onnx_import.CONVERTERS`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np
import onnx

from tessel.graph.frontend import onnx_fold
from tessel.graph.frontend.context import Const, Value
from tessel.graph.frontend.onnx_fold import axes_of, reshape_target
from tessel.graph.opdefs.shape import slice_range
from tessel.graph.ops import broadcast_shape

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer


def _flatten(ctx: Importer, ins: list, attrs: dict) -> Value:
    shape = ctx.shape(ins[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    return ctx.reshape(ins[0], (math.prod(shape[:axis]), math.prod(shape[axis:])), final=True)


def _reshape(ctx: Importer, ins: list, attrs: dict) -> Value:
    spec = attrs["shape"] if "shape" in attrs else ctx.const(ins, 1, "shape")
    target = reshape_target(ctx.shape(ins[0]), spec, attrs.get("allowzero", 0), ctx.label)
    return ctx.reshape(ins[0], target, final=True)


def _reshape_axes(shape_of: Callable[..., tuple[int, ...]]) -> Converter:
    """Squeeze and Unsqueeze: a reshape to `shape_of(shape, axes, label)`."""
    def convert(ctx: Importer, ins: list, attrs: dict) -> Value:
        axes = axes_of(attrs, [None, ctx.const(ins, 1, "axes")], 1)
        return ctx.reshape(ins[0], shape_of(ctx.shape(ins[0]), axes, ctx.label), final=True)
    return convert


def _transpose(ctx: Importer, ins: list, attrs: dict) -> Value:
    perm = attrs.get("perm", list(range(len(ctx.shape(ins[0]))))[::-1])
    return ctx.transpose(ins[0], perm, final=True)


def _dropout(ctx: Importer, ins: list, attrs: dict) -> Value:
    training = ctx.const(ins, 2, "training_mode")
    ctx.check(training is None or not training.any(), "training mode is not supported")
    return ins[0]


def _cast(ctx: Importer, ins: list, attrs: dict) -> Value:
    ctx.check(attrs["to"] == onnx.TensorProto.FLOAT, f"casting a computed tensor to "
              f"{onnx.TensorProto.DataType.Name(attrs['to'])} is not supported (tessel "
              f"computes in float32)")
    return ins[0]


def _shape_of(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Shape and Size of a computed tensor are known at import: shapes are static."""
    stand_in = np.broadcast_to(np.float32(0), ctx.shape(ins[0]))  # no memory
    return Const(ctx.out_name, onnx_fold.fold(ctx.op_type, [stand_in], attrs, ctx.label))


def _expand(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Expand of a computed tensor: add zeros of the broadcast axes' shape."""
    shape = ctx.shape(ins[0])
    target = broadcast_shape([shape, tuple(int(d) for d in ctx.const(ins, 1, "shape"))],
                             ctx.label)
    if target == shape:
        return ins[0]
    padded = (1,) * (len(target) - len(shape)) + shape
    zeros = np.zeros([t if n == 1 else 1 for t, n in zip(target, padded)], np.float32)
    return ctx.out("add", [ins[0], ctx.new_const(zeros, "zeros")])


def _slice(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Slice: starts, ends, axes and steps are attributes before opset 10, constant inputs
    since; numpy's clamping of out-of-range bounds (ONNX's too), negative steps included."""
    shape = ctx.shape(ins[0])
    given = [None, *(ctx.const(ins, k, what) for k, what in
                     ((1, "starts"), (2, "ends"), (3, "axes"), (4, "steps")))]
    starts, ends = attrs.get("starts", given[1]), attrs.get("ends", given[2])
    ctx.check(starts is not None and ends is not None, "needs starts and ends")
    axes = onnx_fold.axes_of(attrs, given, 3) or list(range(len(starts)))
    steps = [1] * len(starts) if given[4] is None else given[4]
    ranges = [range(n) for n in shape]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        ctx.check(-len(shape) <= int(axis) < len(shape) and int(step) != 0,
                  f"axis {int(axis)} or step {int(step)} does not fit shape {shape}")
        n = shape[int(axis)]
        ranges[int(axis)] = slice_range(n, int(start), int(end), int(step))
    return ctx.slice(ins[0], ranges, final=True)


def _split(ctx: Importer, ins: list, attrs: dict) -> list[Value]:
    """Split into the sizes `split` gives (an attribute before opset 13, an input since), else
    into the node's outputs (`num_outputs` since opset 18): equal parts, the last smaller."""
    shape = ctx.shape(ins[0])
    axis = int(attrs.get("axis", 0))
    ctx.check(-len(shape) <= axis < len(shape), f"axis {axis} out of range for {shape}")
    axis %= len(shape)
    sizes = attrs.get("split", ctx.const(ins, 1, "split"))
    if sizes is None:
        parts = int(attrs.get("num_outputs", ctx.n_outputs))
        chunk = -(-shape[axis] // parts)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(parts)]
    return ctx.split(ins[0], axis, [int(n) for n in sizes])


SHAPE: dict[str, Converter] = {
    "Flatten": _flatten, "Reshape": _reshape,
    "Squeeze": _reshape_axes(onnx_fold.squeeze_shape),
    "Unsqueeze": _reshape_axes(onnx_fold.unsqueeze_shape), "Transpose": _transpose,
    "Concat": lambda ctx, ins, attrs: ctx.out("concat", ins, axis=int(attrs["axis"])),
    "Identity": lambda ctx, ins, attrs: ins[0], "Dropout": _dropout, "Cast": _cast,
    "Shape": _shape_of, "Size": _shape_of, "Expand": _expand, "Slice": _slice, "Split": _split,
}
