"""Matrix products: matmul, batch_matmul, dense (torch linear), transpose_batch_matmul.

Integer inputs may accumulate in a wider type: `matmul(..., dtype="int8", out_dtype="int32")`
casts each operand to out_dtype before multiplying. The second operand may have its own dtype
(`b_dtype`, by default `dtype`): quantized models multiply uint8 activations by int8 weights,
`matmul(..., dtype="uint8", b_dtype="int8", out_dtype="int32")`.
"""
from __future__ import annotations

from tessel import ir, te
from tessel.ops import reference as ref
from tessel.ops.common import check, dtype_arg, make_func, out_dtype_arg, positive
from tessel.ops.registry import define


def _mul(a: ir.Expr, b: ir.Expr, out_dtype: str) -> ir.Expr:
    return te.cast(out_dtype, a) * te.cast(out_dtype, b)


def _dtypes(op: str, dtype: str, b_dtype: str | None, out_dtype: str | None
            ) -> tuple[str, str, str, dict]:
    """(dtype, b_dtype, out_dtype, the args to record): b_dtype is recorded only when it
    differs from dtype, so the workloads of one dtype keep their arguments."""
    dtype = dtype_arg(op, dtype)
    b = dtype if b_dtype is None else dtype_arg(op, b_dtype, "b_dtype")
    check(ir.is_float(b) == ir.is_float(dtype),
          f"{op}: b_dtype {b!r} and dtype {dtype!r} must both be float or both int")
    out = out_dtype_arg(op, dtype, out_dtype)
    out_dtype_arg(op, b, out)
    return dtype, b, out, ({} if b == dtype else {"b_dtype": b})


@define(ref.matmul)
def matmul(M: int, N: int, K: int, dtype: str = "float32",
           out_dtype: str | None = None, b_dtype: str | None = None) -> ir.PrimFunc:
    """C[i, j] = sum_k A[i, k] * B[k, j]; params (A (M, K), B (K, N), C (M, N))."""
    positive("matmul", M=M, N=N, K=K)
    dtype, b_dtype, out_dtype, extra = _dtypes("matmul", dtype, b_dtype, out_dtype)
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), b_dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((M, N), lambda i, j: te.sum(_mul(A[i, k], B[k, j], out_dtype), axis=k),
                   name="C")
    return make_func("matmul", [A, B, C],
                     dict(M=M, N=N, K=K, dtype=dtype, out_dtype=out_dtype, **extra))


@define(ref.batch_matmul)
def batch_matmul(B: int, M: int, N: int, K: int, dtype: str = "float32",
                 out_dtype: str | None = None, b_dtype: str | None = None) -> ir.PrimFunc:
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j] (torch.bmm); params (A, B, C)."""
    positive("batch_matmul", B=B, M=M, N=N, K=K)
    dtype, b_dtype, out_dtype, extra = _dtypes("batch_matmul", dtype, b_dtype, out_dtype)
    X = te.placeholder((B, M, K), dtype, name="A")
    Y = te.placeholder((B, K, N), b_dtype, name="B")
    k = te.reduce_axis(K, name="k")
    C = te.compute((B, M, N),
                   lambda b, i, j: te.sum(_mul(X[b, i, k], Y[b, k, j], out_dtype), axis=k),
                   name="C")
    return make_func("batch_matmul", [X, Y, C],
                     dict(B=B, M=M, N=N, K=K, dtype=dtype, out_dtype=out_dtype, **extra))


@define(ref.dense)
def dense(M: int, N: int, K: int, bias: bool = True, dtype: str = "float32",
          out_dtype: str | None = None, b_dtype: str | None = None) -> ir.PrimFunc:
    """torch.nn.functional.linear: out[i, j] = sum_k data[i, k] * weight[j, k] (+ bias[j]).

    Params (data (M, K), weight (N, K)[, bias (N,)], out (M, N)); with a bias the product is
    its own stage "dense" and the output is the stage "bias_add".
    """
    positive("dense", M=M, N=N, K=K)
    check(isinstance(bias, bool), f"dense: bias must be True or False, got {bias!r}")
    dtype, b_dtype, out_dtype, extra = _dtypes("dense", dtype, b_dtype, out_dtype)
    data = te.placeholder((M, K), dtype, name="data")
    weight = te.placeholder((N, K), b_dtype, name="weight")
    k = te.reduce_axis(K, name="k")
    out = te.compute((M, N), lambda i, j: te.sum(_mul(data[i, k], weight[j, k], out_dtype),
                                                 axis=k), name="dense")
    params = [data, weight]
    if bias:
        b = te.placeholder((N,), out_dtype, name="bias")
        prod = out
        out = te.compute((M, N), lambda i, j: prod[i, j] + b[j], name="bias_add")
        params.append(b)
    return make_func("dense", params + [out],
                     dict(M=M, N=N, K=K, bias=bias, dtype=dtype, out_dtype=out_dtype, **extra))


@define(ref.transpose_batch_matmul)
def transpose_batch_matmul(batch: int, seq: int, heads: int, dim: int,
                           dtype: str = "float32") -> ir.PrimFunc:
    """Attention scores: C[b, h, i, j] = sum_d q[b, i, h, d] * k[b, j, h, d].

    Params (q, k of shape (batch, seq, heads, dim), C (batch, heads, seq, seq)). As in
    MetaSchedule's TBG workload, the two transposes are stages of their own ("q_T", "k_T").
    """
    positive("transpose_batch_matmul", batch=batch, seq=seq, heads=heads, dim=dim)
    dtype = dtype_arg("transpose_batch_matmul", dtype)
    q = te.placeholder((batch, seq, heads, dim), dtype, name="q")
    k = te.placeholder((batch, seq, heads, dim), dtype, name="k")
    q_t = te.compute((batch, heads, seq, dim), lambda b, h, i, d: q[b, i, h, d], name="q_T")
    k_t = te.compute((batch, heads, dim, seq), lambda b, h, d, j: k[b, j, h, d], name="k_T")
    r = te.reduce_axis(dim, name="d")
    C = te.compute((batch, heads, seq, seq),
                   lambda b, h, i, j: te.sum(q_t[b, h, i, r] * k_t[b, h, r, j], axis=r), name="C")
    return make_func("transpose_batch_matmul", [q, k, C],
                     dict(batch=batch, seq=seq, heads=heads, dim=dim, dtype=dtype))


__all__ = ["matmul", "batch_matmul", "dense", "transpose_batch_matmul"]
