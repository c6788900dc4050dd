"""The arithmetic of resampling (tessel.graph.opdefs.resize): where each output index of a
resized axis reads the input, and with what weights.

Each output index y reads the input at a source coordinate x(y), an affine function of y that
ONNX's coordinate_transformation_mode fixes (half_pixel: (y + 0.5) / scale - 0.5,
align_corners, asymmetric, ...). "nearest" reads x rounded as nearest_mode says; "linear"
weighs the 2 neighbours of x by their distance, "cubic" the 4 around it with Keys' cubic
kernel (antialias widens both by 1 / scale to downsample); neighbours past the border read the
border (ONNX's edge padding).

Shapes are static, so everything is known per output index: the rounded source indices are
decided in float64 as ONNX's reference does (ties included) and written in the te program as
floor((a * y + b) / c), small integers found to give exactly those indices; a neighbour's
weight is computed from the exact rational x(y) when its denominator is small (every resize
to given sizes, scales such as 2 or 0.5), else in float64.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tessel import ir, te
from tessel.graph.ir import check
from tessel.graph.opdefs.base import Attrs

Index = tuple[ir.Expr, ...]
MAX_DENOMINATOR = 1 << 12


# ---- source coordinates ----

def source_line(n: int, out: int, scale: float, s: Fraction, transform: str,
                roi: tuple[float, float]) -> tuple[Fraction, Fraction, np.ndarray]:
    """x(y) = alpha * y + beta along an axis of `n` resized to `out` by `scale` (exactly `s`:
    out / n for given sizes), as exact fractions, and x at each y in float64 computed as
    ONNX's reference computes it."""
    length, y = scale * n, np.arange(out, dtype=np.float64)
    lo, hi = (Fraction(v) for v in roi)
    if transform == "align_corners" or (transform == "tf_crop_and_resize" and length != 1):
        span = (hi - lo) if transform == "tf_crop_and_resize" else Fraction(1)
        alpha = span * (n - 1) / (s * n - 1) if length != 1 else Fraction(0)
        beta = lo * (n - 1) if transform == "tf_crop_and_resize" else Fraction(0)
        floats = y * float(span) * (n - 1) / (length - 1) if length != 1 else 0 * y
        return alpha, beta, floats + float(beta)
    if transform == "tf_crop_and_resize":  # one output: the middle of the roi
        beta = (hi - lo) * (n - 1) / 2 + lo * (n - 1)
        return Fraction(0), beta, np.full(out, (roi[1] - roi[0]) * (n - 1) / 2 + roi[0] * (n - 1))
    if transform == "asymmetric":
        return 1 / s, Fraction(0), y / scale
    if transform == "pytorch_half_pixel" and length == 1:
        return Fraction(0), Fraction(-1, 2), np.full(out, -0.5)
    offset, offset_f = Fraction(0), 0.0
    if transform == "half_pixel_symmetric":
        offset = Fraction(n, 2) * (1 - out / (s * n))
        offset_f = n / 2 * (1 - out / length)
    return 1 / s, offset + 1 / (2 * s) - Fraction(1, 2), offset_f + (y + 0.5) / scale - 0.5


def round_nearest(x: np.ndarray, rounding: str) -> np.ndarray:
    """ONNX's nearest index (before clamping): an integral x is itself; else rounded."""
    low = np.floor(x)
    frac = x - low
    up = {"round_prefer_floor": frac > 0.5, "round_prefer_ceil": frac >= 0.5,
          "floor": np.zeros_like(x, bool), "ceil": frac > 0}[rounding]
    return (low + up).astype(np.int64)


def fit_floor(table: np.ndarray, slope: float) -> tuple[int, int, int] | None:
    """Small integers (a, b, c > 0) with floor((a * y + b) / c) == table[y] for every y, or None:
    `table` is a nondecreasing sequence of floor(slope * y + offset) kind."""
    y = np.arange(len(table), dtype=np.int64)
    for c in range(1, 4 * len(table) + 17):
        for a in range(math.floor(slope * c) - 1, math.ceil(slope * c) + 2):
            lowest = int(np.max(c * table - a * y))
            if lowest <= int(np.min(c * table + c - 1 - a * y)):
                if abs(a) * len(table) + abs(lowest) + c < 1 << 30:
                    return a, lowest, c
    return None


# ---- one axis of a resize ----

@dataclass(frozen=True)
class AxisPlan:
    """How the output indices of one resized axis read the input: the rounded index
    floor((a * y + b) / c) (floor(x), or the nearest index), the exact x = (p * y + q) / r
    when r is small (else alpha, beta in float64), and the outputs that extrapolate."""
    n: int  # the input's and the output's extent
    out: int
    scale: float
    fit: tuple[int, int, int]
    lowest: int  # the fit's least and greatest values over the axis
    highest: int
    exact: tuple[int, int, int] | None
    line: tuple[float, float]
    inside: tuple[int, int] | None  # tf_crop_and_resize: the outputs in the input's span


def plan_axis(n: int, out: int, scale: tuple[float, Fraction], roi: tuple[float, float],
              a: Attrs, label: str) -> AxisPlan:
    """The plan of an axis of `n` resized to `out` by `scale` (as a float, and exactly)."""
    alpha, beta, x = source_line(n, out, *scale, a["coordinate_transformation_mode"], roi)
    base = round_nearest(x, a["nearest_mode"]) if a["mode"] == "nearest" else \
        np.floor(x).astype(np.int64)
    fit = fit_floor(base, float(alpha))
    check(fit is not None, f"node {label} (resize): no integer form of the source indices "
                           f"{base.tolist()} (an axis of {n} to {out})")
    r = math.lcm(alpha.denominator, beta.denominator)
    p, q = int(alpha * r), int(beta * r)
    small = r <= MAX_DENOMINATOR and abs(p) * out + abs(q) + r * n < 1 << 30
    inside = None
    if a["coordinate_transformation_mode"] == "tf_crop_and_resize":
        ok = np.flatnonzero((x >= 0) & (x <= n - 1))
        inside = (int(ok[0]), int(ok[-1])) if len(ok) else (out, -1)
    return AxisPlan(n, out, scale[0], fit, int(base.min()), int(base.max()),
                    (p, q, r) if small else None, (float(alpha), float(beta)), inside)


def _rounded(plan: AxisPlan, y: ir.Expr) -> ir.Expr:
    """floor((a * y + b) / c) with a numerator that is never negative (plain C division)."""
    a, b, c = plan.fit
    shift = -(-max(0, -b) // c)
    return (y * a + (b + shift * c)) // c - shift if a else ir.const(b // c)


def _clamped(index: ir.Expr, lo: int, hi: int, n: int) -> ir.Expr:
    """`index` (ranging over [lo, hi]) clamped into [0, n - 1], as the border reads."""
    if lo < 0:
        index = te.max(index, 0)
    return te.min(index, n - 1) if hi > n - 1 else index


def _fraction(plan: AxisPlan, y: ir.Expr, base: ir.Expr) -> ir.Expr:
    """x(y) - base, in float32."""
    if plan.exact is not None:
        p, q, r = plan.exact
        return te.cast("float32", y * p + q - base * r) * (1.0 / r)
    alpha, beta = plan.line
    x = te.cast("float64", y) * alpha + beta
    return te.cast("float32", x - te.cast("float64", base))


def offsets(a: Attrs, scale: float) -> range:
    """The neighbours of floor(x) that an output reads: 2 (linear) or 4 (cubic), more when
    antialias widens the kernel by 1 / scale to downsample (ONNX's antialias)."""
    if a["mode"] == "nearest":
        return range(1)
    reach = 1 if a["mode"] == "linear" else 2
    start = math.floor(-reach / min(scale, 1.0)) + 1 if a["antialias"] else 1 - reach
    return range(start, 2 - start)


def kernel_weights(t, taps: range, a: Attrs, scale: float, where, maximum) -> list:
    """The weight of each neighbour floor(x) + k of x (t = x - floor(x)): the linear or Keys'
    cubic kernel at its distance (scaled with antialias, when the weights must be normalized:
    `normalized`). Works on te expressions (where, maximum: te.if_then_else, te.max) and numpy
    arrays alike."""
    s = min(scale, 1.0) if a["antialias"] else 1.0
    A = a["cubic_coeff_a"]
    dists = [(k - t) * s if k >= 1 else (t - k) * s for k in taps]  # |distance|, for t in [0, 1)
    if a["mode"] == "linear":
        weights = [1.0 - t, t] if s == 1 else [maximum(1.0 - d, 0.0) for d in dists]
    else:
        def near(d):  # |distance| <= 1
            return ((A + 2) * d - (A + 3)) * d * d + 1

        def far(d):  # 1 < |distance| < 2
            return ((d * A - 5 * A) * d + 8 * A) * d - 4 * A
        weights = [near(d) if k in (0, 1) else far(d) for k, d in zip(taps, dists)] if s == 1 \
            else [where(d <= 1, near(d), where(d < 2, far(d), 0.0)) for d in dists]
    return weights


def normalized(a: Attrs, scale: float) -> bool:
    """Whether kernel_weights' weights are divided by their sum (antialias downsampling)."""
    return a["antialias"] and scale < 1


def nearest_index(plan: AxisPlan, y: ir.Expr) -> ir.Expr:
    return _clamped(_rounded(plan, y), plan.lowest, plan.highest, plan.n)


def axis_taps(plan: AxisPlan, y: ir.Expr, a: Attrs
              ) -> tuple[list[tuple[ir.Expr, ir.Expr]], ir.Expr | None]:
    """(input index, weight) of each neighbour that output index y of a linear or cubic
    resize reads, and what their weighted sum is divided by (None: the weights sum to 1)."""
    base = _rounded(plan, y)
    taps = offsets(a, plan.scale)
    indices = [_clamped(base + k if k else base, plan.lowest + k, plan.highest + k, plan.n)
               for k in taps]
    weights = kernel_weights(_fraction(plan, y, base), taps, a, plan.scale, te.if_then_else,
                             te.max)
    excluded = a["exclude_outside"] and (plan.lowest + taps[0] < 0 or
                                         plan.highest + taps[-1] >= plan.n)
    if excluded:
        weights = [w if plan.lowest + k >= 0 and plan.highest + k <= plan.n - 1 else
                   te.if_then_else(te.all(base + k >= 0, base + k <= plan.n - 1), w, 0.0)
                   for k, w in zip(taps, weights)]
    divisor = sum(weights[1:], weights[0]) if excluded or normalized(a, plan.scale) else None
    return list(zip(indices, weights)), divisor
