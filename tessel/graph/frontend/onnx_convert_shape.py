"""ONNX converters of layout and shapes: reshapes, transposes, slices, splits, joins, and
the operators that vanish on a static-shape graph (`SHAPE`, merged into
`onnx_import.CONVERTERS`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from tessel.graph.frontend import onnx_fold
from tessel.graph.frontend.context import Const, Value
from tessel.graph.frontend.onnx_fold import axes_of, reshape_target
from tessel.graph.opdefs.shape import slice_range

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


def _dropout(ctx: Importer, ins: list, attrs: dict) -> Value | list[Value]:
    """Dropout at inference (or in training mode with a ratio of 0): the identity, and its
    optional mask output, where read, all true."""
    training, ratio = ctx.const(ins, 2, "training_mode"), ctx.const(ins, 1, "ratio")
    ctx.check(training is None or not training.any() or (ratio is not None and not ratio.any()),
              "training mode with a ratio above 0 (random) is not supported")
    if not ctx.wants(1):
        return ins[0]
    return [ins[0], Const(ctx.outputs[1], np.ones(ctx.shape(ins[0]), np.bool_))]


def _shape_of(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Shape and Size of a computed tensor are known at import: shapes are static."""
    stand_in = np.broadcast_to(np.float32(0), ctx.shape(ins[0]))  # no memory
    return Const(ctx.out_name, onnx_fold.fold(ctx.op_type, [stand_in], attrs, ctx.label))


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


def _pad(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Pad: pads and value are attributes before opset 11, inputs since (axes since 18);
    negative pads crop (a pad that only crops is a slice)."""
    shape = ctx.shape(ins[0])
    rank = len(shape)
    raw, axes = attrs.get("pads", attrs.get("paddings")), None
    value: Value | float | None = attrs.get("value", 0.0)
    if raw is None:
        raw, value = ctx.const(ins, 1, "pads"), ins[2] if len(ins) > 2 else None
        axes = ctx.const(ins, 3, "axes")
    axes = [int(d) % rank for d in (range(rank) if axes is None else axes.reshape(-1))]
    ctx.check(len(raw) == 2 * len(axes), f"pads {list(raw)} need 2 values per axis {axes}")
    pads = [0] * 2 * rank
    for i, d in enumerate(axes):
        pads[d], pads[rank + d] = int(raw[i]), int(raw[len(axes) + i])
    if all(p <= 0 for p in pads):
        ranges = [range(-b, n + e) for n, b, e in zip(shape, pads, pads[rank:])]
        return ctx.slice(ins[0], ranges, final=True)
    if isinstance(value, Const):
        value = float(value.array.reshape(-1)[0]) if value.array.size else 0.0
    extra = [value] if isinstance(value, str) else []
    return ctx.out("pad", [ins[0], *extra], pads=tuple(pads), mode=attrs.get("mode", "constant"),
                   value=0.0 if value is None or extra else value)


def _tile(ctx: Importer, ins: list, attrs: dict) -> Value:
    repeats = [int(r) for r in ctx.const(ins, 1, "repeats")]
    if all(r == 1 for r in repeats):
        return ins[0]
    return ctx.out("tile", ins[:1], repeats=tuple(repeats))


def _depth_to_space(ctx: Importer, ins: list, attrs: dict) -> Value:
    """(N, C, H, W) -> (N, C / b^2, H b, W b): channels d * b^2 + i * b + j (DCR) or
    c * b^2 + i * b + j (CRD) move to the pixel (h b + i, w b + j), as a reshape, a transpose
    and a reshape."""
    (n, c, h, w), b = ctx.shape(ins[0]), int(attrs["blocksize"])
    ctx.check(c % (b * b) == 0, f"{c} channels do not split into blocks of {b}x{b}")
    if attrs.get("mode", "DCR") == "DCR":
        split, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
    moved = ctx.transpose(ctx.reshape(ins[0], split), perm)
    return ctx.reshape(moved, (n, c // (b * b), h * b, w * b), final=True)


def _space_to_depth(ctx: Importer, ins: list, attrs: dict) -> Value:
    """DepthToSpace's inverse: each b x b block of pixels becomes b^2 channels."""
    (n, c, h, w), b = ctx.shape(ins[0]), int(attrs["blocksize"])
    ctx.check(h % b == 0 and w % b == 0, f"spatial size {(h, w)} does not split into {b}x{b}")
    perm = (0, 3, 5, 1, 2, 4) if attrs.get("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    moved = ctx.transpose(ctx.reshape(ins[0], (n, c, h // b, b, w // b, b)), perm)
    return ctx.reshape(moved, (n, c * b * b, h // b, w // b), final=True)


def _given(ctx: Importer, ins: list, index: int, what: str) -> np.ndarray | None:
    """An optional constant input as a flat array; None when absent or empty."""
    array = ctx.const(ins, index, what)
    return None if array is None or array.size == 0 else array.reshape(-1)


def _resize_sizes(shape: tuple[int, ...], axes: list[int], sizes: np.ndarray,
                  policy: str) -> tuple[list[int], tuple[float, ...] | None]:
    """Resize to `sizes`: the output shape, and the scales when keep_aspect_ratio_policy makes
    one scale of all axes (None: each axis scales by its output over its input)."""
    out = list(shape)
    if policy == "stretch":
        for d, n in zip(axes, sizes):
            out[d] = int(n)
        return out, None
    ratios = [int(n) / shape[d] for d, n in zip(axes, sizes)]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    for d in axes:
        out[d] = int(scale * shape[d] + 0.5)
    return out, tuple(scale if d in axes else 1.0 for d in range(len(shape)))


def _resize(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Resize: roi, scales or sizes as constant inputs (axes and keep_aspect_ratio_policy since
    opset 18); Resize-10 is an Upsample."""
    if ctx.opset < 11:
        return _upsample(ctx, ins, attrs)
    shape = ctx.shape(ins[0])
    rank = len(shape)
    roi, scales, sizes = (_given(ctx, ins, k, what) for k, what in
                          ((1, "roi"), (2, "scales"), (3, "sizes")))
    ctx.check((scales is None) != (sizes is None), "needs one of scales and sizes")
    axes = [int(d) % rank for d in attrs.get("axes", range(rank))]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    ctx.check(policy in ("stretch", "not_larger", "not_smaller"),
              f"unknown keep_aspect_ratio_policy {policy!r}")
    if sizes is not None:
        out, full = _resize_sizes(shape, axes, sizes, policy)
    else:
        full = [1.0] * rank
        for d, s in zip(axes, scales):
            full[d] = float(s)
        out, full = [int(s * n) for s, n in zip(full, shape)], tuple(full)
    mode = attrs.get("mode", "nearest")
    transform = attrs.get("coordinate_transformation_mode", "half_pixel")
    if roi is not None and transform == "tf_crop_and_resize":
        full_roi = [0.0] * rank + [1.0] * rank
        for i, d in enumerate(axes):
            full_roi[d], full_roi[rank + d] = float(roi[i]), float(roi[len(axes) + i])
        roi = tuple(full_roi)
    return ctx.out("resize", ins[:1], sizes=tuple(out), scales=full, mode=mode,
                   coordinate_transformation_mode=transform,
                   nearest_mode=attrs.get("nearest_mode", "round_prefer_floor"),
                   cubic_coeff_a=float(attrs.get("cubic_coeff_a", -0.75)),
                   exclude_outside=bool(attrs.get("exclude_outside", 0)),
                   roi=roi if transform == "tf_crop_and_resize" else None,
                   extrapolation_value=float(attrs.get("extrapolation_value", 0.0)),
                   antialias=bool(attrs.get("antialias", 0)) and mode != "nearest")


def _upsample(ctx: Importer, ins: list, attrs: dict) -> Value:
    """Upsample (and Resize-10): scales (an attribute before opset 9), asymmetric source
    coordinates; nearest rounds down when upsampling, up when downsampling (onnxruntime)."""
    shape = ctx.shape(ins[0])
    scales = attrs.get("scales")
    scales = [float(s) for s in (scales if scales is not None else
                                 ctx.const(ins, 1, "scales").reshape(-1))]
    mode = {"bilinear": "linear"}.get(attrs.get("mode", "nearest"), attrs.get("mode", "nearest"))
    ctx.check(mode in ("nearest", "linear"), f"unknown mode {mode!r}")
    ctx.check(min(scales) >= 1 or max(scales) <= 1, f"scales {scales} both up- and downsample")
    return ctx.out("resize", ins[:1], sizes=tuple(int(s * n) for s, n in zip(scales, shape)),
                   scales=tuple(scales), mode=mode, coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor" if min(scales) >= 1 else "ceil")


SHAPE: dict[str, Converter] = {
    "Flatten": _flatten, "Reshape": _reshape,
    "Squeeze": _reshape_axes(onnx_fold.squeeze_shape),
    "Unsqueeze": _reshape_axes(onnx_fold.unsqueeze_shape), "Transpose": _transpose,
    "Concat": lambda ctx, ins, attrs: ctx.out("concat", ins, axis=int(attrs["axis"])),
    "Identity": lambda ctx, ins, attrs: ins[0], "Dropout": _dropout,
    "Shape": _shape_of, "Size": _shape_of, "Slice": _slice, "Split": _split,
    "Pad": _pad, "Tile": _tile, "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth, "Resize": _resize, "Upsample": _upsample,
}
