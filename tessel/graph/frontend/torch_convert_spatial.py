"""The torch importer's converters for spatial layout: padding, repeats, pixel shuffles and
upsampling: `ATEN` maps ATen operator names (`aten.constant_pad_nd.default`) to them (see
`torch_context`). Pads become the graph operator pad (one that only crops, a slice),
repeats tile, upsampling resize with the coordinate rule of each torch mode; pixel_shuffle
and pixel_unshuffle are a reshape, a transpose and a reshape."""
from __future__ import annotations

import math
from typing import Any, Sequence

from tessel.graph.frontend.torch_context import Context, Converter, each

# ---- pads ----

def onnx_pads(torch_pads: Sequence[int], rank: int) -> tuple[int, ...]:
    """torch's pad list (last axis first, (before, after) each) as ONNX pads (the begins of
    every axis, then the ends)."""
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(torch_pads) // 2):
        begins[rank - 1 - i], ends[rank - 1 - i] = (int(p) for p in torch_pads[2 * i:2 * i + 2])
    return (*begins, *ends)


def _pad(mode: str | None) -> Converter:
    """constant_pad_nd, pad (its mode an argument) and the reflection_/replication_pad forms;
    negative pads crop."""
    def convert(c: Context, a: dict) -> Any:
        x = a["self"]
        shape = c.shape(x)
        pads = onnx_pads(a["pad"] if "pad" in a else a["padding"], len(shape))
        chosen = mode or a.get("mode", "constant")
        tessel_mode = {"replicate": "edge", "circular": "wrap"}.get(chosen, chosen)
        if all(p <= 0 for p in pads):
            rank = len(shape)
            return c.slice(x, [range(-b, n + e) for n, b, e in zip(shape, pads, pads[rank:])],
                           final=True)
        value = a.get("value")
        return c.out("pad", [x], pads=pads, mode=tessel_mode,
                     value=0.0 if value is None else float(value))
    return convert


# ---- repeats and shuffles ----

def _repeat(c: Context, a: dict) -> Any:
    """repeat and tile: leading repeats beyond the input's rank add axes (tile's fewer
    repeats than axes repeat the trailing ones)."""
    x = a["self"]
    shape = c.shape(x)
    repeats = [int(r) for r in a.get("repeats", a.get("dims"))]
    repeats = [1] * (len(shape) - len(repeats)) + repeats
    x = c.reshape(x, (1,) * (len(repeats) - len(shape)) + shape)
    if all(r == 1 for r in repeats):
        return c.reshape(x, c.out_shape(), final=True)
    return c.out("tile", [x], repeats=tuple(repeats))


def _pixel_shuffle(c: Context, a: dict) -> Any:
    """(*, C r^2, H, W) -> (*, C, H r, W r): channel c * r^2 + i * r + j to pixel
    (h r + i, w r + j)."""
    x, r = a["self"], int(a["upscale_factor"])
    *lead, ch, h, w = c.shape(x)
    split = c.reshape(x, (math.prod(lead), ch // (r * r), r, r, h, w))
    moved = c.transpose(split, (0, 1, 4, 2, 5, 3))
    return c.reshape(moved, c.out_shape(), final=True)


def _pixel_unshuffle(c: Context, a: dict) -> Any:
    """pixel_shuffle's inverse: (*, C, H r, W r) -> (*, C r^2, H, W)."""
    x, r = a["self"], int(a["downscale_factor"])
    *lead, ch, h, w = c.shape(x)
    split = c.reshape(x, (math.prod(lead), ch, h // r, r, w // r, r))
    moved = c.transpose(split, (0, 1, 3, 5, 2, 4))
    return c.reshape(moved, c.out_shape(), final=True)


# ---- upsampling ----

_RULES = {  # torch mode -> resize attributes (align_corners chooses the linear ones' rule)
    "nearest": dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                    nearest_mode="floor"),
    "_nearest_exact": dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                           nearest_mode="round_prefer_ceil"),
    "linear": dict(mode="linear"), "bilinear": dict(mode="linear"),
    "trilinear": dict(mode="linear"), "bicubic": dict(mode="cubic", cubic_coeff_a=-0.75),
}


def _upsample_scales(a: dict, nd: int) -> list[float] | None:
    """The scale factors torch's coordinates use: the .vec forms' scale_factors, the
    .default forms' scales_d/h/w; None when only the size is given."""
    if a.get("scale_factors"):
        return [float(s) for s in a["scale_factors"]]
    given = [a.get(f"scales_{axis}") for axis in "dhw"[3 - nd:]] if nd > 1 else \
        [a.get("scales")]
    return None if any(s is None for s in given) else [float(s) for s in given]


def _upsample(kind: str) -> Converter:
    """upsample_nearest*, _upsample_nearest_exact*, upsample_linear1d, bilinear2d,
    trilinear3d, bicubic2d (.vec and .default) as resize to the size torch recorded."""
    def convert(c: Context, a: dict) -> Any:
        x = a.get("input", a.get("self"))
        out, rank = c.out_shape(), len(c.shape(x))
        rule = dict(_RULES[kind])
        corners = bool(a.get("align_corners"))
        if rule["mode"] != "nearest":
            rule["coordinate_transformation_mode"] = "align_corners" if corners else "half_pixel"
        scales = None if corners else _upsample_scales(a, rank - 2)
        return c.out("resize", [x], sizes=out, scales=None if scales is None else
                     (1.0, 1.0, *scales), **rule)
    return convert


def _upsample_table() -> dict[str, Converter]:
    table: dict[str, Converter] = {}
    for kind, dims in (("nearest", "123"), ("_nearest_exact", "123"), ("linear", "1"),
                       ("bilinear", "2"), ("trilinear", "3"), ("bicubic", "2")):
        for d in dims:
            name = f"_upsample{kind}{d}d" if kind.startswith("_") else f"upsample_{kind}{d}d"
            table.update(each(f"{name}.vec {name}.default", _upsample(kind)))
    return table


ATEN: dict[str, Converter] = {
    **each("constant_pad_nd.default pad.default", _pad(None)),
    **each("reflection_pad1d.default reflection_pad2d.default reflection_pad3d.default",
           _pad("reflect")),
    **each("replication_pad1d.default replication_pad2d.default replication_pad3d.default",
           _pad("edge")),
    **each("repeat.default tile.default", _repeat),
    **each("pixel_shuffle.default", _pixel_shuffle),
    **each("pixel_unshuffle.default", _pixel_unshuffle),
    **_upsample_table(),
}
