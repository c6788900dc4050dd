"""Tensor expressions (expr.py) and their lowering to the naive loop nest (lower.py).

    A = te.placeholder((M, K), name="A")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    func = te.create_func([A, B, C], name="matmul")
"""
from tessel.te.expr import (Axis, ComputeOp, IRError, Reduce, Tensor, TEError, abs, all, any,
                            cast, ceil, compute, const, erf, exp, floor, identity_of,
                            if_then_else, log, max, min, placeholder, pow, reduce_axis, round,
                            rsqrt, sigmoid, sqrt, sum, tanh)
from tessel.te.lower import create_func, lower

__all__ = ["Axis", "Reduce", "Tensor", "ComputeOp", "TEError", "placeholder", "compute",
           "reduce_axis", "sum", "max", "min", "if_then_else", "all", "any", "cast", "const",
           "exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid", "pow", "abs", "floor", "ceil",
           "round", "identity_of", "create_func", "lower", "IRError"]
