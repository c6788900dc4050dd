"""Normalizations and softmax, built from reduction stages followed by a normalize stage."""
from __future__ import annotations

from tessel import ir, te
from tessel.ops import reference as ref
from tessel.ops.common import check, dtype_arg, make_func, positive
from tessel.ops.registry import define

# a softmax's shifted exponent below EXP_FLOOR gives exactly 0 (shifted_exp)
EXP_FLOOR = -70.0


def shifted_exp(d: ir.Expr) -> ir.Expr:
    """exp(d) of a softmax's shifted score d = x - max <= 0, and exactly 0 below EXP_FLOOR.
    The C library's vector exp takes a slow path, lane by lane, where its result underflows
    (a causal mask's -3.4e38 sent half of GPT-2's attention scores there: 0.2 -> 0.9 ms a
    call), so it never sees a d below the floor; and what it would give there, divided by
    the row's sum, is a subnormal probability, which an Intel core multiplies by microcode
    assist: GPT-2's probabilities times values took 7.5 ms a layer on a Xeon (0.3 ms in
    normal numbers) when masked scores gave exp(-87) / sum. exp(-70) = 4e-31 over a sum of
    up to 3e7 terms stays normal; the error of the zero is below 4e-31 next to the row
    maximum's 1 (a float32 sum of 1 does not see terms below 6e-8)."""
    return te.if_then_else(d < EXP_FLOOR, 0.0, te.exp(te.max(d, EXP_FLOOR)))


def _eps(op: str, eps: float) -> float:
    check(isinstance(eps, (int, float)) and not isinstance(eps, bool) and eps >= 0,
          f"{op}: eps must be a number >= 0, got {eps!r}")
    return float(eps)


@define(ref.batch_norm, "eps")
def batch_norm(N: int, C: int, H: int, W: int, eps: float = 1e-5,
               dtype: str = "float32") -> ir.PrimFunc:
    """Inference batch norm over channels: params (data (N, C, H, W), gamma, beta, mean, var
    (each (C,)), out); out = (data - mean) * gamma * rsqrt(var + eps) + beta."""
    op = "batch_norm"
    positive(op, N=N, C=C, H=H, W=W)
    eps, dtype = _eps(op, eps), dtype_arg(op, dtype, floating=True)
    data = te.placeholder((N, C, H, W), dtype, name="data")
    gamma, beta, mean, var = (te.placeholder((C,), dtype, name=n)
                              for n in ("gamma", "beta", "mean", "var"))
    out = te.compute((N, C, H, W), lambda n, c, h, w: (data[n, c, h, w] - mean[c]) * (
        gamma[c] * te.rsqrt(var[c] + eps)) + beta[c], name=op)
    return make_func(op, [data, gamma, beta, mean, var, out],
                     dict(N=N, C=C, H=H, W=W, eps=eps, dtype=dtype))


@define(ref.layer_norm, "eps")
def layer_norm(M: int, N: int, eps: float = 1e-5, dtype: str = "float32") -> ir.PrimFunc:
    """Normalize each row of x (M, N) over its N elements (biased variance), then scale and
    shift: params (x, gamma (N,), beta (N,), out). Stages: mean, var (reductions), layer_norm."""
    op = "layer_norm"
    positive(op, M=M, N=N)
    eps, dtype = _eps(op, eps), dtype_arg(op, dtype, floating=True)
    x = te.placeholder((M, N), dtype, name="x")
    gamma = te.placeholder((N,), dtype, name="gamma")
    beta = te.placeholder((N,), dtype, name="beta")
    inv_n = 1.0 / N
    k = te.reduce_axis(N, name="k")
    mean = te.compute((M,), lambda i: te.sum(x[i, k] * inv_n, axis=k), name="mean")
    k2 = te.reduce_axis(N, name="k")

    def centered_square(i):
        d = x[i, k2] - mean[i]
        return te.sum(d * d * inv_n, axis=k2)

    var = te.compute((M,), centered_square, name="var")
    out = te.compute((M, N), lambda i, j: (x[i, j] - mean[i]) * te.rsqrt(var[i] + eps)
                     * gamma[j] + beta[j], name=op)
    return make_func(op, [x, gamma, beta, out], dict(M=M, N=N, eps=eps, dtype=dtype))


@define(ref.softmax)
def softmax(M: int, N: int, dtype: str = "float32") -> ir.PrimFunc:
    """Softmax of each row of x (M, N), shifted by the row maximum for stability: params
    (x, out). Stages: maxelem, exp, expsum, softmax; the exponent is shifted_exp's (0 below
    EXP_FLOOR: why there)."""
    op = "softmax"
    positive(op, M=M, N=N)
    dtype = dtype_arg(op, dtype, floating=True)
    x = te.placeholder((M, N), dtype, name="x")
    k = te.reduce_axis(N, name="k")
    maxelem = te.compute((M,), lambda i: te.max(x[i, k], axis=k), name="maxelem")
    ex = te.compute((M, N), lambda i, j: shifted_exp(x[i, j] - maxelem[i]),
                    name="exp")
    k2 = te.reduce_axis(N, name="k")
    expsum = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="expsum")
    out = te.compute((M, N), lambda i, j: ex[i, j] / expsum[i], name=op)
    return make_func(op, [x, out], dict(M=M, N=N, dtype=dtype))


__all__ = ["batch_norm", "layer_norm", "softmax", "shifted_exp", "EXP_FLOOR"]
