"""Activations beyond relu and gelu, and rounding: the exponential-linear family (elu, selu,
celu), softplus and mish, softsign, thresholded_relu, hard_sigmoid, sign, floor, ceil, round
(half to even), and prelu (a slope tensor broadcast onto x). Each follows ONNX's definition,
which torch's agrees with; float32."""
from __future__ import annotations

import numpy as np

from tessel import ir, te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import (Arg, Attrs, Example, bcast, broadcast_shape, define,
                                      elementwise, f64)
from tessel.graph.opdefs.elementwise import unary

X3 = (3, 5, 7)
SELU_ALPHA, SELU_GAMMA = 1.6732632423543772, 1.0507009873554805  # as float32: ONNX's defaults


# ---- exponential linear units ----

def _expm1(v: ir.Expr) -> ir.Expr:
    """exp(v) - 1, accurate near 0 (Kahan's): (u - 1) * v / log(u) with u = exp(v); v where u
    rounds to 1, -1 where u - 1 does."""
    u = te.exp(v)
    return te.if_then_else(u == 1.0, v, te.if_then_else(
        u - 1.0 == -1.0, -1.0, (u - 1.0) * v / te.log(u)))


def _elu_te(v: ir.Expr, alpha: float, scale: float = 1.0) -> ir.Expr:
    """v > 0: v; else alpha * (exp(v / scale) - 1) (celu is elu with scale = alpha)."""
    x = v if scale == 1.0 else v * (1.0 / float(scale))
    return te.if_then_else(v > 0.0, v, _expm1(x) * float(alpha))


def _elu_np(x: np.ndarray, alpha: float, scale: float = 1.0) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0) / scale) * alpha)


unary("elu", lambda v, a: _elu_te(v, a["alpha"]), lambda x, a: _elu_np(x, a["alpha"]),
      lambda t, x, alpha: t.nn.functional.elu(x, alpha),
      Example((X3,)), Example((X3,), dict(alpha=0.3)), attrs=dict(alpha=1.0))
unary("selu", lambda v, a: _elu_te(v, a["alpha"]) * float(a["gamma"]),
      lambda x, a: _elu_np(x, a["alpha"]) * a["gamma"],
      lambda t, x, alpha, gamma: t.nn.functional.elu(x, alpha) * gamma,
      Example((X3,)), Example((X3,), dict(alpha=2.0, gamma=3.0)),
      attrs=dict(alpha=SELU_ALPHA, gamma=SELU_GAMMA))
unary("celu", lambda v, a: _elu_te(v, a["alpha"], a["alpha"]),
      lambda x, a: _elu_np(x, a["alpha"], a["alpha"]),
      lambda t, x, alpha: t.nn.functional.celu(x, alpha),
      Example((X3,)), Example((X3,), dict(alpha=0.6)), attrs=dict(alpha=1.0))


# ---- softplus, mish, softsign ----

def _log1p_small(u: ir.Expr) -> ir.Expr:
    """log(1 + u) for u in [0, 1], accurate for small u: log(w) * u / (w - 1) with w = 1 + u
    corrects w's rounding (Goldberg's, from Kahan); u itself where w rounds to 1."""
    w = 1.0 + u
    return te.if_then_else(w == 1.0, u, te.log(w) * (u / (w - 1.0)))


def softplus_te(v: ir.Expr, beta: float = 1.0, threshold: float | None = None) -> ir.Expr:
    """log(1 + exp(beta * v)) / beta as max(y, 0) + log1p(exp(-|y|)), y = beta * v: no overflow
    for large y, no cancellation for very negative y; v itself where y > threshold (torch)."""
    y = v * float(beta)
    out = (te.max(y, 0.0) + _log1p_small(te.exp(-te.abs(y)))) * (1.0 / float(beta))
    return out if threshold is None else te.if_then_else(y > float(threshold), v, out)


def _softplus_np(x: np.ndarray, beta: float, threshold: float | None) -> np.ndarray:
    out = np.logaddexp(0.0, beta * x) / beta
    return out if threshold is None else np.where(beta * x > threshold, x, out)


def _softplus_torch(t, x, beta, threshold):
    return t.nn.functional.softplus(x, beta, np.inf if threshold is None else threshold)


unary("softplus", lambda v, a: softplus_te(v, a["beta"], a["threshold"]),
      lambda x, a: _softplus_np(x, a["beta"], a["threshold"]), _softplus_torch,
      Example((X3,)), Example(((2, 3, 5, 7),), dict(beta=2.0, threshold=1.5)),
      attrs=dict(beta=1.0, threshold=None))
unary("mish", lambda v, a: v * te.tanh(softplus_te(v)),
      lambda x, a: x * np.tanh(np.logaddexp(0.0, x)), lambda t, x: t.nn.functional.mish(x))
unary("softsign", lambda v, a: v / (1.0 + te.abs(v)), lambda x, a: x / (1.0 + np.abs(x)),
      lambda t, x: t.nn.functional.softsign(x))


# ---- thresholds ----

def _hard_sigmoid_torch(t, x, alpha, beta):
    return t.clamp(x * alpha + beta, 0.0, 1.0)


unary("thresholded_relu", lambda v, a: te.if_then_else(v > float(a["alpha"]), v, 0.0),
      lambda x, a: np.where(x > a["alpha"], x, 0.0),
      lambda t, x, alpha: t.nn.functional.threshold(x, alpha, 0.0),
      Example((X3,)), Example((X3,), dict(alpha=-0.2)), attrs=dict(alpha=1.0))
unary("hard_sigmoid",
      lambda v, a: te.min(te.max(v * float(a["alpha"]) + float(a["beta"]), 0.0), 1.0),
      lambda x, a: np.clip(x * a["alpha"] + a["beta"], 0.0, 1.0), _hard_sigmoid_torch,
      Example((X3,)), Example(((2, 3, 9, 7),), dict(alpha=1.0 / 6.0, beta=0.5)),
      attrs=dict(alpha=0.2, beta=0.5))


# ---- sign and rounding ----

def round_te(v: ir.Expr) -> ir.Expr:
    """v rounded to the nearest integer, ties to even (ONNX, torch, numpy): the intrinsic
    `round`, one instruction of the ISA in a vector (roundps / vrndnq) and nearbyint in C.
    (An earlier form built it of floor and comparisons, v appearing eight times: a conv whose
    epilogue requantizes twice, a residual block of a QDQ ResNet, inlined 64 copies of its
    accumulator's scaling and ran 10x slower than the conv without it.)"""
    return te.round(v)


# sign: NaN stays NaN (numpy, ONNX Runtime; torch.sign gives 0)
unary("sign", lambda v, a: te.if_then_else(v > 0.0, 1.0, te.if_then_else(v < 0.0, -1.0, v)),
      lambda x, a: np.sign(x), lambda t, x: t.sign(x))
unary("floor", lambda v, a: te.floor(v), lambda x, a: np.floor(x), lambda t, x: t.floor(x))
unary("ceil", lambda v, a: te.ceil(v), lambda x, a: np.ceil(x), lambda t, x: t.ceil(x))
unary("round", lambda v, a: round_te(v), lambda x, a: np.round(x),
      lambda t, x: t.round(x), Example(((4, 33),)))


# ---- prelu ----

def _prelu_infer(inputs: list[TensorType], attrs: Attrs, label: str) -> tuple[int, ...]:
    x, slope = inputs[0].shape, inputs[1].shape
    check(broadcast_shape([x, slope], label) == x,
          f"node {label} (prelu): slope {slope} does not broadcast onto x {x}")
    return x


def _prelu_lower(args: list[Arg], a: Attrs, stage: str, out: TensorType) -> te.Tensor:
    """max(x, 0) + slope * min(x, 0): no select, so no load of the slope under a condition
    (GCC 12's -O3 vectorizer miscompiles `c ? x1[i] : x0[i]` in nested constant loops)."""
    x, slope = args
    check(isinstance(x, te.Tensor), f"lowering {stage} (prelu): x must be a tensor")

    def body(i: tuple[ir.Expr, ...]) -> ir.Expr:
        if isinstance(slope, te.Tensor):
            s = slope[bcast(i, slope.shape, x.shape)]
        else:  # a scalar constant: a float or a literal
            s = slope if isinstance(slope, ir.Expr) else ir.const(float(slope), "float32")
        return te.max(x[i], 0.0) + s * te.min(x[i], 0.0)

    return elementwise(x.shape, body, stage)


define("prelu", "elemwise", _prelu_infer, _prelu_lower,
       lambda args, a, out: np.where(args[0] < 0, f64(args[0]) * f64(args[1]), args[0]),
       layout="broadcast", inputs=(2, 2), scalars=True, finite=True,
       torch=lambda t, x, slope: t.where(x < 0, x * slope, x),
       examples=[Example(((2, 3, 5, 7), (3, 1, 1))), Example((X3, (7,))),
                 Example((X3, X3)), Example((X3, 0.25))])
