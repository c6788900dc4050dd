"""Pure-numpy reference implementations of tessel's operator library.

Generated kernels are checked against these functions, so they follow torch.nn.functional
semantics exactly without needing torch. Layouts: NCL/NCHW/NCDHW data, OI[D]HW convolution
weights and IOHW (in, out/groups, kh, kw) transposed-convolution weights. Reductions accumulate in
float64; every function returns a new array of the inputs' floating dtype (float32 in, float32
out). Bad arguments raise ValueError with a message naming the wrong argument.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

IntOrTuple = int | Sequence[int]

_CHUNK_BYTES = 64 * 2**20  # upper bound (roughly) on one im2col buffer
erf_f64 = np.frompyfunc(math.erf, 1, 1)  # numpy has no erf; math.erf is exact to double precision


# ---- argument checks -----------------------------------------------------------------------


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _ints(value, n: int, name: str, minimum: int) -> tuple[int, ...]:
    """`value` (an int or a sequence of n ints) as an n-tuple of ints, each >= `minimum`."""
    values = (value,) * n if _is_int(value) else value
    ok = isinstance(values, (list, tuple)) and len(values) == n and all(map(_is_int, values))
    _check(ok, f"{name} must be an int or a sequence of {n} ints, got {value!r}")
    _check(all(v >= minimum for v in values), f"{name} must be >= {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def _array(x, name: str = "x", ndim: int | None = None) -> np.ndarray:
    x = np.asarray(x)
    _check(ndim is None or x.ndim == ndim, f"{name} must be {ndim}-D, got shape {x.shape}")
    return x


def _vector(v, name: str, length: int) -> np.ndarray:
    v = _array(v, name, 1)
    _check(v.shape[0] == length, f"{name} must have shape ({length},), got {v.shape}")
    return v


def _axis(axis, ndim: int, name: str = "axis") -> int:
    _check(_is_int(axis) and -ndim <= axis < ndim, f"{name}={axis!r} out of range for {ndim}-D x")
    return int(axis) % ndim


def _dtype(*arrays: np.ndarray) -> np.dtype:
    """The result dtype: the inputs' promoted dtype, or float64 if that is not floating."""
    dtype = np.result_type(*arrays)
    return dtype if np.issubdtype(dtype, np.inexact) else np.dtype(np.float64)


def _check_out(out: tuple[int, ...], what: str) -> None:
    _check(all(size > 0 for size in out), f"output size {out} <= 0: {what}")


# ---- linear algebra ------------------------------------------------------------------------


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(M, K) x (K, N) -> (M, N)."""
    a, b = _array(a, "a", 2), _array(b, "b", 2)
    _check(a.shape[1] == b.shape[0], f"reduction mismatch: a is {a.shape}, b is {b.shape}")
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(_dtype(a, b))


def batch_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(B, M, K) x (B, K, N) -> (B, M, N), like torch.bmm."""
    a, b = _array(a, "a", 3), _array(b, "b", 3)
    _check(a.shape[0] == b.shape[0], f"batch mismatch: a is {a.shape}, b is {b.shape}")
    _check(a.shape[2] == b.shape[1], f"reduction mismatch: a is {a.shape}, b is {b.shape}")
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(_dtype(a, b))


def dense(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """x (..., K) times w (N, K) transposed, plus bias (N,): torch.nn.functional.linear."""
    x, w = _array(x, "x"), _array(w, "w", 2)
    _check(x.ndim >= 1 and x.shape[-1] == w.shape[1],
           f"reduction mismatch: x is {x.shape}, w is {w.shape} (w must be (N, K))")
    out = x.astype(np.float64) @ w.astype(np.float64).T
    if bias is None:
        return out.astype(_dtype(x, w))
    bias = _vector(bias, "bias", w.shape[0])
    return (out + bias).astype(_dtype(x, w, bias))


def transpose_batch_matmul(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """q, k (batch, seq, heads, dim) -> (batch, heads, seq_q, seq_k): q[b,i,h,:] . k[b,j,h,:]."""
    q, k = _array(q, "q", 4), _array(k, "k", 4)
    _check(q.shape[0] == k.shape[0] and q.shape[2:] == k.shape[2:],
           f"q {q.shape} and k {k.shape} must agree in batch, heads and dim")
    q64 = q.astype(np.float64).transpose(0, 2, 1, 3)
    k64 = k.astype(np.float64).transpose(0, 2, 3, 1)
    return np.matmul(q64, k64).astype(_dtype(q, k))


# ---- convolutions --------------------------------------------------------------------------


def _pad_spatial(x: np.ndarray, padding: tuple[int, ...], value: float) -> np.ndarray:
    return np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in padding], constant_values=value)


def sliding_windows(x: np.ndarray, kernel, stride, dilation) -> np.ndarray:
    """View of x's sliding windows, (N, C, *out, *kernel): taps `dilation` apart, windows `stride`
    apart. x must already be padded."""
    nd = len(kernel)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    view = sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    steps = [slice(None, None, s) for s in stride] + [slice(None, None, d) for d in dilation]
    return view[(slice(None), slice(None), *steps)]


def _conv_args(x, w, stride, padding, dilation, groups, nd: int):
    """Validated (x, w, stride, padding, dilation) for an nd-d convolution."""
    x, w = _array(x, "x", nd + 2), _array(w, "w", nd + 2)
    stride = _ints(stride, nd, "stride", 1)
    padding = _ints(padding, nd, "padding", 0)
    dilation = _ints(dilation, nd, "dilation", 1)
    _check(_is_int(groups) and groups >= 1, f"groups must be a positive int, got {groups!r}")
    c, o, kernel = x.shape[1], w.shape[0], w.shape[2:]
    _check(c % groups == 0, f"groups={groups} does not divide the {c} input channels of x")
    _check(o % groups == 0, f"groups={groups} does not divide the {o} output channels of w")
    _check(w.shape[1] * groups == c, f"channel mismatch: x has {c} channels but w {w.shape} "
           f"expects {w.shape[1]} per group x groups={groups}")
    _check(min(kernel) >= 1, f"w has an empty kernel: {w.shape}")
    out = tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                for size, k, s, p, d in zip(x.shape[2:], kernel, stride, padding, dilation))
    _check_out(out, f"input {x.shape[2:]} too small for kernel {kernel} with padding {padding}, "
               f"dilation {dilation}")
    return x, w, stride, padding, dilation


def conv_nd(x, w, stride, padding, dilation, groups: int) -> np.ndarray:
    """Grouped nd convolution (cross-correlation) of validated args by chunked im2col, float64."""
    nd, g, (n, c), o = x.ndim - 2, groups, x.shape[:2], w.shape[0]
    windows = sliding_windows(_pad_spatial(x.astype(np.float64), padding, 0.0), w.shape[2:],
                              stride, dilation)
    out_sp = windows.shape[2:2 + nd]
    # 1. (N, C, *out, *kernel) -> (G, C/G, *kernel, N, *out), still a view
    windows = windows.reshape(n, g, c // g, *windows.shape[2:])
    windows = windows.transpose(1, 2, *range(3 + nd, 3 + 2 * nd), 0, *range(3, 3 + nd))
    # 2. per chunk of the first output axis: gather the columns and multiply per group
    wmat = w.astype(np.float64).reshape(g, o // g, -1)
    out = np.empty((g, o // g, n, *out_sp))
    row_bytes = 8 * g * wmat.shape[2] * n * math.prod(out_sp[1:])
    step = max(1, _CHUNK_BYTES // row_bytes)
    for start in range(0, out_sp[0], step):
        rows = slice(start, min(start + step, out_sp[0]))
        cols = windows[(slice(None),) * (3 + nd) + (rows,)].reshape(g, wmat.shape[2], -1)
        chunk = np.matmul(wmat, cols)
        out[:, :, :, rows] = chunk.reshape(g, o // g, n, rows.stop - start, *out_sp[1:])
    return out.reshape(o, n, *out_sp).swapaxes(0, 1)


def conv1d(x, w, stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> np.ndarray:
    """x (N, C, L), w (O, C/groups, K) -> (N, O, L_out)."""
    args = _conv_args(x, w, stride, padding, dilation, groups, nd=1)
    return conv_nd(*args, groups).astype(_dtype(args[0], args[1]), order="C")


def conv2d(x, w, stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> np.ndarray:
    """x (N, C, H, W), w (O, C/groups, KH, KW) -> (N, O, H_out, W_out)."""
    args = _conv_args(x, w, stride, padding, dilation, groups, nd=2)
    return conv_nd(*args, groups).astype(_dtype(args[0], args[1]), order="C")


def conv3d(x, w, stride: IntOrTuple = 1, padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
           groups: int = 1) -> np.ndarray:
    """x (N, C, D, H, W), w (O, C/groups, KD, KH, KW) -> (N, O, D_out, H_out, W_out)."""
    args = _conv_args(x, w, stride, padding, dilation, groups, nd=3)
    return conv_nd(*args, groups).astype(_dtype(args[0], args[1]), order="C")


def depthwise_conv2d(x, w, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     dilation: IntOrTuple = 1) -> np.ndarray:
    """x (N, C, H, W), w (C, 1, KH, KW) -> (N, C, H_out, W_out): conv2d with groups=C."""
    x, w = _array(x, "x", 4), _array(w, "w", 4)
    _check(w.shape[:2] == (x.shape[1], 1),
           f"depthwise w must be ({x.shape[1]}, 1, kh, kw) for x {x.shape}, got {w.shape}")
    return conv2d(x, w, stride, padding, dilation, groups=x.shape[1])


def conv2d_transpose(x, w, stride: IntOrTuple = 1, padding: IntOrTuple = 0,
                     output_padding: IntOrTuple = 0, dilation: IntOrTuple = 1,
                     groups: int = 1) -> np.ndarray:
    """x (N, C, H, W), w (C, O/groups, KH, KW) -> (N, O, H_out, W_out): torch conv_transpose2d,
    H_out = (H - 1) * stride - 2 * padding + dilation * (KH - 1) + output_padding + 1."""
    x, w = _array(x, "x", 4), _array(w, "w", 4)
    stride, padding = _ints(stride, 2, "stride", 1), _ints(padding, 2, "padding", 0)
    dilation = _ints(dilation, 2, "dilation", 1)
    output_padding = _ints(output_padding, 2, "output_padding", 0)
    _check(all(op < max(s, d) for op, s, d in zip(output_padding, stride, dilation)),
           f"output_padding {output_padding} must be smaller than stride {stride} or dilation "
           f"{dilation}")
    _check(_is_int(groups) and groups >= 1, f"groups must be a positive int, got {groups!r}")
    c = x.shape[1]
    _check(w.shape[0] == c, f"channel mismatch: x has {c} channels but w {w.shape} (IOHW) "
           f"has {w.shape[0]} input channels")
    _check(c % groups == 0, f"groups={groups} does not divide the {c} input channels of x")
    _check(min(w.shape[2:]) >= 1, f"w has an empty kernel: {w.shape}")
    out = tuple((i - 1) * s - 2 * p + d * (k - 1) + op + 1 for i, k, s, p, d, op
                in zip(x.shape[2:], w.shape[2:], stride, padding, dilation, output_padding))
    _check_out(out, f"padding {padding} too large for input {x.shape[2:]} and kernel "
               f"{w.shape[2:]}")
    full = scatter_taps(x, w, stride, dilation, groups, output_padding)
    crop = tuple(slice(p, p + size) for p, size in zip(padding, out))
    return full[(slice(None), slice(None)) + crop].swapaxes(0, 1).astype(_dtype(x, w), order="C")


def scatter_taps(x, w, stride, dilation, groups: int, output_padding) -> np.ndarray:
    """Uncropped transposed convolution, (O, N, *full) float64: one GEMM gives every kernel tap's
    contribution, then each tap is added into the output at its dilated offset, stride apart."""
    g, (n, c), og, kernel, in_sp = groups, x.shape[:2], w.shape[1], w.shape[2:], x.shape[2:]
    # 1. cols[g, og, *kernel, n, *in] = sum over cg of w[g, cg, og, *kernel] * x[n, g, cg, *in]
    wg = w.astype(np.float64).reshape(g, c // g, -1).transpose(0, 2, 1)
    xg = x.astype(np.float64).reshape(n, g, c // g, -1).transpose(1, 2, 0, 3).reshape(g, c // g, -1)
    cols = np.matmul(wg, xg).reshape(g * og, *kernel, n, *in_sp)
    # 2. scatter-add the taps
    full_sp = [(i - 1) * s + d * (k - 1) + 1 + op
               for i, k, s, d, op in zip(in_sp, kernel, stride, dilation, output_padding)]
    full = np.zeros((g * og, n, *full_sp))
    for tap in np.ndindex(*kernel):
        dst = tuple(slice(t * d, t * d + (i - 1) * s + 1, s)
                    for t, i, s, d in zip(tap, in_sp, stride, dilation))
        full[(slice(None), slice(None)) + dst] += cols[(slice(None),) + tap]
    return full


def conv2d_bn_relu(x, w, gamma, beta, mean, var, stride: IntOrTuple = 1,
                   padding: IntOrTuple = 0, eps: float = 1e-5) -> np.ndarray:
    """relu(batch_norm(conv2d(x, w, stride, padding))) with inference batch norm over (O,)."""
    args = _conv_args(x, w, stride, padding, 1, 1, nd=2)
    params = [_vector(v, name, args[1].shape[0]) for v, name
              in zip((gamma, beta, mean, var), ("gamma", "beta", "mean", "var"))]
    out = np.maximum(batch_norm_f64(conv_nd(*args, 1), *params, eps), 0.0)
    return out.astype(_dtype(args[0], args[1], *params), order="C")


# ---- normalization and softmax -------------------------------------------------------------


def batch_norm_f64(x64: np.ndarray, gamma, beta, mean, var, eps: float) -> np.ndarray:
    """Inference batch norm over axis 1, float64."""
    shape = (-1,) + (1,) * (x64.ndim - 2)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    shift = beta.astype(np.float64) - mean.astype(np.float64) * scale
    return x64 * scale.reshape(shape) + shift.reshape(shape)


def batch_norm(x, gamma, beta, mean, var, eps: float = 1e-5) -> np.ndarray:
    """Inference batch norm: (x - mean) / sqrt(var + eps) * gamma + beta per channel (axis 1)."""
    x = _array(x)
    _check(x.ndim >= 2, f"x must be at least 2-D (N, C, ...), got shape {x.shape}")
    params = [_vector(v, name, x.shape[1]) for v, name
              in zip((gamma, beta, mean, var), ("gamma", "beta", "mean", "var"))]
    return batch_norm_f64(x.astype(np.float64), *params, eps).astype(_dtype(x, *params))


def layer_norm(x, gamma=None, beta=None, eps: float = 1e-5) -> np.ndarray:
    """Normalize over the last axis (biased variance), then scale by gamma and shift by beta."""
    x = _array(x)
    _check(x.ndim >= 1 and x.shape[-1] > 0, f"x must have a non-empty last axis, got {x.shape}")
    x64 = x.astype(np.float64)
    centered = x64 - x64.mean(axis=-1, keepdims=True)
    out = centered / np.sqrt((centered * centered).mean(axis=-1, keepdims=True) + eps)
    arrays = [x]
    if gamma is not None:
        arrays.append(_vector(gamma, "gamma", x.shape[-1]))
        out = out * arrays[-1]
    if beta is not None:
        arrays.append(_vector(beta, "beta", x.shape[-1]))
        out = out + arrays[-1]
    return out.astype(_dtype(*arrays))


def softmax(x, axis: int = -1) -> np.ndarray:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the maximum for stability."""
    x = _array(x)
    axis = _axis(axis, x.ndim)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(_dtype(x))


# ---- pooling -------------------------------------------------------------------------------


def _pool_args(x, kernel, stride, padding):
    """Validated (x, kernel, stride, padding) for a 2-d pooling (torch's rules, ceil_mode=False)."""
    x = _array(x, "x", 4)
    kernel = _ints(kernel, 2, "kernel", 1)
    stride = kernel if stride is None else _ints(stride, 2, "stride", 1)
    padding = _ints(padding, 2, "padding", 0)
    _check(all(2 * p <= k for p, k in zip(padding, kernel)),
           f"padding {padding} must be at most half of kernel {kernel}")
    out = tuple((size + 2 * p - k) // s + 1
                for size, k, s, p in zip(x.shape[2:], kernel, stride, padding))
    _check_out(out, f"input {x.shape[2:]} too small for kernel {kernel} with padding {padding}")
    return x, kernel, stride, padding


def max_pool2d(x, kernel: IntOrTuple, stride: IntOrTuple | None = None,
               padding: IntOrTuple = 0) -> np.ndarray:
    """Window maximum; padding counts as -inf, so it never wins."""
    x, kernel, stride, padding = _pool_args(x, kernel, stride, padding)
    low = -np.inf if np.issubdtype(x.dtype, np.inexact) else np.iinfo(x.dtype).min
    windows = sliding_windows(_pad_spatial(x, padding, low), kernel, stride, (1, 1))
    return windows.max(axis=(-2, -1))


def avg_pool2d(x, kernel: IntOrTuple, stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
               count_include_pad: bool = True) -> np.ndarray:
    """Window mean; with count_include_pad=False padded positions are left out of the divisor."""
    x, kernel, stride, padding = _pool_args(x, kernel, stride, padding)
    sums = sliding_windows(_pad_spatial(x.astype(np.float64), padding, 0.0), kernel, stride,
                           (1, 1))
    sums = sums.sum(axis=(-2, -1))
    if count_include_pad:
        return (sums / (kernel[0] * kernel[1])).astype(_dtype(x))
    ones = _pad_spatial(np.ones((1, 1) + x.shape[2:]), padding, 0.0)
    counts = sliding_windows(ones, kernel, stride, (1, 1)).sum(axis=(-2, -1))
    return (sums / counts).astype(_dtype(x))


def global_avg_pool2d(x) -> np.ndarray:
    """Mean over H and W, keeping them: (N, C, H, W) -> (N, C, 1, 1)."""
    x = _array(x, "x", 4)
    _check(x.shape[2] * x.shape[3] > 0, f"x has an empty spatial extent: {x.shape}")
    return x.mean(axis=(2, 3), keepdims=True, dtype=np.float64).astype(_dtype(x))


# ---- elementwise ---------------------------------------------------------------------------


def relu(x) -> np.ndarray:
    x = _array(x)
    return np.maximum(x, np.zeros((), x.dtype))


def sigmoid(x) -> np.ndarray:
    """1 / (1 + exp(-x)), written so that no exp overflows."""
    x = _array(x)
    e = np.exp(-np.abs(x.astype(np.float64)))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(_dtype(x))


def tanh(x) -> np.ndarray:
    x = _array(x)
    return np.tanh(x.astype(np.float64)).astype(_dtype(x))


def gelu(x) -> np.ndarray:
    """x * Phi(x) in the exact erf form: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    x = _array(x)
    x64 = x.astype(np.float64)
    erf = erf_f64(x64 / math.sqrt(2.0)).astype(np.float64)
    return (0.5 * x64 * (1.0 + erf)).astype(_dtype(x))


def add(a, b) -> np.ndarray:
    """a + b with numpy (= torch) broadcasting."""
    return np.add(_array(a), _array(b))


def multiply(a, b) -> np.ndarray:
    """a * b with numpy (= torch) broadcasting."""
    return np.multiply(_array(a), _array(b))


def bias_add(x, b, axis: int = 1) -> np.ndarray:
    """x plus the vector b broadcast along `axis`."""
    x = _array(x)
    axis = _axis(axis, x.ndim)
    b = _vector(b, "b", x.shape[axis])
    return x + b.reshape((-1,) + (1,) * (x.ndim - 1 - axis))


def pad(x, pad_before: IntOrTuple, pad_after: IntOrTuple | None = None,
        value: float = 0.0) -> np.ndarray:
    """Constant padding: pad_before[i] / pad_after[i] elements before / after axis i (an int pads
    every axis; pad_after defaults to pad_before)."""
    x = _array(x)
    before = _ints(pad_before, x.ndim, "pad_before", 0)
    after = before if pad_after is None else _ints(pad_after, x.ndim, "pad_after", 0)
    return np.pad(x, list(zip(before, after)), constant_values=value)
