"""Resampling: `resize` (ONNX Resize and Upsample, torch's interpolate and upsample_*) of
any axes, by "nearest", "linear" or "cubic" interpolation with ONNX's coordinate rules and
options (tessel.graph.opdefs.resample: the arithmetic). nearest is one stage of reads; linear
and cubic, being separable, one stage per resized axis."""
from __future__ import annotations

from fractions import Fraction
from typing import Sequence

import numpy as np

from tessel import ir, te
from tessel.graph.ir import GraphError, TensorType, check
from tessel.graph.opdefs.base import REQUIRED, Arg, Attrs, Example, define, elementwise, f64
from tessel.graph.opdefs.resample import (AxisPlan, axis_taps, kernel_weights, nearest_index,
                                          normalized, offsets, plan_axis, round_nearest,
                                          source_line)

Index = tuple[ir.Expr, ...]
MODES = ("nearest", "linear", "cubic")
TRANSFORMS = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
              "asymmetric", "tf_crop_and_resize")
ROUNDINGS = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


# ---- resize ----

def _resize_infer(inputs, attrs, label):
    x = inputs[0].shape
    sizes = tuple(int(n) for n in attrs["sizes"])
    check(len(sizes) == len(x) and min(sizes) >= 1,
          f"node {label} (resize): sizes {sizes} needs one size >= 1 per axis of {x}")
    for key, n in (("scales", len(x)), ("roi", 2 * len(x))):
        if attrs[key] is not None:
            attrs[key] = tuple(float(v) for v in attrs[key])
            check(len(attrs[key]) == n, f"node {label} (resize): {key} needs {n} values, "
                                        f"got {attrs[key]}")
    for key, allowed in (("mode", MODES), ("coordinate_transformation_mode", TRANSFORMS),
                         ("nearest_mode", ROUNDINGS)):
        check(attrs[key] in allowed, f"node {label} (resize): {key} {attrs[key]!r} is not one "
                                     f"of {allowed}")
    check(attrs["scales"] is None or min(attrs["scales"]) > 0,
          f"node {label} (resize): scales {attrs['scales']} must be positive")
    attrs.update(sizes=sizes, cubic_coeff_a=float(attrs["cubic_coeff_a"]),
                 extrapolation_value=float(attrs["extrapolation_value"]))
    return sizes


def _axis_args(a: Attrs, shape: Sequence[int], d: int
               ) -> tuple[tuple[float, Fraction], tuple[float, float]]:
    """The scale of axis d (as a float, and exactly: out / n for given sizes) and its roi
    (start, end)."""
    if a["scales"] is not None:
        scale = (a["scales"][d], Fraction(a["scales"][d]))
    else:
        scale = (a["sizes"][d] / shape[d], Fraction(a["sizes"][d], shape[d]))
    roi = (0.0, 1.0) if a["roi"] is None else (a["roi"][d], a["roi"][d + len(shape)])
    return scale, roi


def _plans(shape: Sequence[int], a: Attrs, label: str) -> dict[int, AxisPlan]:
    """The plan of each axis that is resized (an axis whose x(y) is y reads as it is)."""
    plans = {}
    for d, (n, out) in enumerate(zip(shape, a["sizes"])):
        scale, roi = _axis_args(a, shape, d)
        x = source_line(n, out, *scale, a["coordinate_transformation_mode"], roi)[2]
        if out != n or not np.array_equal(x, np.arange(n)):
            plans[d] = plan_axis(n, out, scale, roi, a, label)
    return plans


def _extrapolated(plans: dict[int, AxisPlan], i: Index, value: ir.Expr, a: Attrs) -> ir.Expr:
    """`value`, or extrapolation_value where an output's source falls outside the roi of
    tf_crop_and_resize along one of the axes `plans` resize."""
    conds = [c for d, p in plans.items() if p.inside is not None
             for c in (i[d] >= p.inside[0], i[d] <= p.inside[1])]
    return te.if_then_else(te.all(*conds), value, a["extrapolation_value"]) if conds else value


def _nearest_stage(x: te.Tensor, plans: dict[int, AxisPlan], a: Attrs, name: str,
                   shape: tuple[int, ...]) -> te.Tensor:
    """nearest: one read per output, every resized axis's index remapped."""
    def body(i: Index) -> ir.Expr:
        src = tuple(nearest_index(plans[d], v) if d in plans else v for d, v in enumerate(i))
        return _extrapolated(plans, i, x[src], a)
    return elementwise(shape, body, name)


def _axis_stage(x: te.Tensor, d: int, plan: AxisPlan, a: Attrs, name: str) -> te.Tensor:
    """linear and cubic along axis d alone: the weighted sum of its 2 or 4 neighbours (more
    with antialias)."""
    shape = (*x.shape[:d], plan.out, *x.shape[d + 1:])

    def body(i: Index) -> ir.Expr:
        taps, divisor = axis_taps(plan, i[d], a)
        total = None
        for index, weight in taps:
            term = x[(*i[:d], index, *i[d + 1:])] * weight
            total = term if total is None else total + term
        return _extrapolated({d: plan}, i, total if divisor is None else total / divisor, a)
    return elementwise(shape, body, name)


def _resize_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """nearest: one stage of reads. linear and cubic: one stage per resized axis, in order
    ({name}_<axis>, the last one name), as the interpolation is separable; outputs whose
    source falls outside a tf_crop_and_resize roi are extrapolation_value."""
    x, = args
    plans = _plans(x.shape, a, name)
    if a["mode"] == "nearest" or not plans:
        return _nearest_stage(x, plans, a, name, out.shape)
    last = max(plans)
    for d, plan in plans.items():
        x = _axis_stage(x, d, plan, a, name if d == last else f"{name}_{d}")
    return x


def _resize_axis(x: np.ndarray, d: int, n: int, out: int, scale: tuple[float, Fraction],
                 roi: tuple[float, float], a: Attrs) -> np.ndarray:
    """numpy: `x` resized along axis d, from the float64 source coordinates."""
    xs = source_line(n, out, *scale, a["coordinate_transformation_mode"], roi)[2]
    base = round_nearest(xs, a["nearest_mode"]) if a["mode"] == "nearest" else np.floor(xs)
    neighbours = offsets(a, scale[0])
    weights = [np.ones(out)] if a["mode"] == "nearest" else \
        kernel_weights(xs - base, neighbours, a, scale[0], np.where, np.maximum)
    taps = [base.astype(np.int64) + k for k in neighbours]
    if a["exclude_outside"] and a["mode"] != "nearest":
        weights = [np.where((k >= 0) & (k < n), w, 0.0) for k, w in zip(taps, weights)]
    if (a["exclude_outside"] and a["mode"] != "nearest") or normalized(a, scale[0]):
        weights = [w / sum(weights) for w in weights]
    shape = [1] * x.ndim
    shape[d] = out
    y = sum(np.take(x, np.clip(k, 0, n - 1), axis=d) * w.reshape(shape)
            for k, w in zip(taps, weights))
    if a["coordinate_transformation_mode"] == "tf_crop_and_resize":
        inside = ((xs >= 0) & (xs <= n - 1)).reshape(shape)
        y = np.where(inside, y, a["extrapolation_value"])
    return y


def _resize_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x = f64(args[0])
    shape = x.shape
    for d in _plans(shape, a, "resize"):
        x = _resize_axis(x, d, shape[d], a["sizes"][d], *_axis_args(a, shape, d), a)
    return x


def _resize_torch(t, x, *, sizes, scales, mode, coordinate_transformation_mode, nearest_mode,
                  cubic_coeff_a, exclude_outside, roi, extrapolation_value, antialias):
    """The oracle: torch's interpolate, for the attributes it has an equal of (the others are
    checked against ONNX's reference in tests/test_graph_spatial.py)."""
    rule = (mode, coordinate_transformation_mode,
            nearest_mode if mode == "nearest" else cubic_coeff_a if mode == "cubic" else None)
    modes = {("nearest", "asymmetric", "floor"): "nearest",
             ("nearest", "half_pixel", "round_prefer_ceil"): "nearest-exact",
             ("linear", "half_pixel", None): "linear",
             ("linear", "align_corners", None): "linear",
             ("cubic", "half_pixel", -0.75): "bicubic",
             ("cubic", "align_corners", -0.75): "bicubic"}
    if rule not in modes or exclude_outside or antialias or sizes[:2] != tuple(x.shape[:2]):
        raise GraphError(f"resize: torch has no interpolate equal to {rule}")
    torch_mode = modes[rule]
    if torch_mode == "linear":
        torch_mode = ("linear", "bilinear", "trilinear")[x.dim() - 3]
    corners = coordinate_transformation_mode == "align_corners" if mode != "nearest" else None
    size = dict(size=tuple(sizes[2:])) if scales is None else \
        dict(scale_factor=tuple(scales[2:]))
    return t.nn.functional.interpolate(x, mode=torch_mode, align_corners=corners, **size)


define("resize", "injective", _resize_infer, _resize_lower, _resize_reference,
       attrs=dict(sizes=REQUIRED, scales=None, mode="nearest",
                  coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor",
                  cubic_coeff_a=-0.75, exclude_outside=False, roi=None, extrapolation_value=0.0,
                  antialias=False),
       layout="barrier", torch=_resize_torch, examples=[
           Example(((1, 2, 3, 4),), dict(sizes=(1, 2, 6, 8), scales=(1.0, 1.0, 2.0, 2.0),
                                         coordinate_transformation_mode="asymmetric",
                                         nearest_mode="floor")),
           Example(((2, 3, 5, 7),), dict(sizes=(2, 3, 7, 4), coordinate_transformation_mode=
                                         "asymmetric", nearest_mode="floor")),
           Example(((1, 2, 7, 5),), dict(sizes=(1, 2, 4, 9), nearest_mode="round_prefer_ceil")),
           Example(((1, 2, 5, 4),), dict(sizes=(1, 2, 7, 8), mode="linear")),
           Example(((1, 3, 11),), dict(sizes=(1, 3, 5), mode="linear")),
           Example(((1, 2, 4, 5),), dict(sizes=(1, 2, 6, 7), scales=(1.0, 1.0, 1.5, 1.5),
                                         mode="linear")),
           Example(((1, 1, 3, 4, 5),), dict(sizes=(1, 1, 5, 4, 9), mode="linear",
                                            coordinate_transformation_mode="align_corners")),
           Example(((1, 2, 5, 6),), dict(sizes=(1, 2, 9, 4), mode="cubic")),
           Example(((1, 1, 4, 5),), dict(sizes=(1, 1, 7, 11), mode="cubic",
                                         coordinate_transformation_mode="align_corners"))])
