"""Winograd's minimal filtering for 3x3 convolutions, F(m x m, 3 x 3) (Lavin and Gray, 2016):
a stride-1 3x3 convolution as three kernels, each one tessel tunes like any other.

    V = winograd_input(x, BB)     # (a*a, P, C): each a x a input tile (a = m + 2), transformed
    M = matmul(V, U)              # (a*a, P, K): a*a independent GEMMs, U the transformed weight
    y = winograd_output(M, AA)    # (N, K/b, H, W, b): each tile's m x m outputs, blocked

P is the number of m x m output tiles (N * ceil(H/m) * ceil(W/m)). The weight transform
U = G g G^T runs once, at graph time (`winograd_weight`). With m = 4 a tile of 16 outputs takes
36 multiplies per input/output channel pair where the direct convolution takes 144, so the
GEMM does 1/4 of the direct convolution's arithmetic; the transforms are contractions with
constant matrices (BB = B^T (x) B^T, AA = A^T (x) A^T, given as constants so the kernels stay
plain tensor programs), linear in the channels. The GEMMs are where the time goes when the
channels are many, and tessel's matmul schedules run near peak.

One contraction with the Kronecker product costs a^4 multiply-adds per tile and channel where
rows-then-columns (two stages) costs 2 a^3, 3x fewer. Measured on ResNet-18's 56x56 stage
(Zen 4): two stages made the input transform's expert prior faster (0.33 -> 0.22 ms) and the
output transform's slower (0.15 -> 0.20 ms), and the tuned single contraction runs at 0.19 ms
(167 GFLOP/s, the zeros of BB multiplied as any other number): one stage each, as here.

The data is the blocked layout of tessel.graph.opdefs.blocked (N, C/ib, H, W, ib) and the
output is blocked (N, K/ob, H, W, ob), so epilogues (bias, residual add, ReLU) fuse into the
output transform as they fuse into a convolution. Only "same" 3x3 convolutions (stride 1,
dilation 1, padding 1) have this form; tessel.graph.winograd decides which convolutions of a
graph take it.
"""
from __future__ import annotations

import math

import numpy as np

from tessel import te
from tessel.graph.ir import TensorType, check
from tessel.graph.opdefs.base import REQUIRED, Arg, Attrs, Example, define, f64
from tessel.graph.opdefs.blocked import (_torch_block, _torch_unblock, block_array,
                                         unblock_array, with_channel_bias)
from tessel.ops.common import named, pad_tensor

# (A^T, G, B^T) of F(m, 3) with the interpolation points 0, 1, -1 (m = 2) and 0, +-1, +-2 (m = 4)
_MATRICES = {
    2: ([[1, 1, 1, 0], [0, 1, -1, -1]],
        [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
        [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
    4: ([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
         [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
}
TILES = tuple(_MATRICES)


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A^T (m, a), G (a, 3), B^T (a, a)) of F(m x m, 3 x 3), float64."""
    check(m in _MATRICES, f"winograd: output tile {m!r} is not one of {TILES}")
    return tuple(np.array(t, dtype=np.float64) for t in _MATRICES[m])  # type: ignore


def input_coefficients(m: int) -> np.ndarray:
    """BB (a*a, a*a): V[e*a + f] = sum_{i, j} BB[e*a + f, i*a + j] d[i, j] = (B^T d B)[e, f]."""
    bt = winograd_matrices(m)[2]
    return np.kron(bt, bt)


def output_coefficients(m: int) -> np.ndarray:
    """AA (m*m, a*a): Y[i*m + j] = sum_s AA[i*m + j, s] M[s] = (A^T M A)[i, j]."""
    at = winograd_matrices(m)[0]
    return np.kron(at, at)


def winograd_weight(weight: np.ndarray, m: int) -> np.ndarray:
    """A 3x3 OIHW weight (K, C, 3, 3) as the GEMMs read it: U (a*a, C, K), U[e*a + f, c, k] =
    (G g[k, c] G^T)[e, f], computed in float64."""
    k, c, kh, kw = weight.shape
    check((kh, kw) == (3, 3), f"winograd_weight: a 3x3 weight is needed, got {weight.shape}")
    g = winograd_matrices(m)[1]
    u = np.einsum("ei,kcij,fj->efck", g, f64(weight), g)
    return np.ascontiguousarray(u.reshape(-1, c, k).astype(np.float32))


def tile_grid(h: int, w: int, m: int) -> tuple[int, int]:
    """How many m x m output tiles cover an h x w output: (rows, columns)."""
    return math.ceil(h / m), math.ceil(w / m)


def _alpha(coefficients: tuple[int, ...], label: str, op: str, rows: int | None = None) -> int:
    a = math.isqrt(coefficients[-1])
    check(len(coefficients) == 2 and a * a == coefficients[-1] and a - 2 in TILES
          and (rows is None or coefficients[0] == rows),
          f"node {label} ({op}): coefficients {coefficients} are not a Winograd transform's")
    return a


# ---- winograd_input ----

def _input_infer(inputs, attrs, label):
    x, bb = inputs[0].shape, inputs[1].shape
    check(len(x) == 5, f"node {label} (winograd_input): data {x} must be (N, C/b, H, W, b)")
    a = _alpha(bb, label, "winograd_input", bb[-1] if len(bb) == 2 else None)
    th, tw = tile_grid(x[2], x[3], a - 2)
    return (a * a, x[0] * th * tw, x[1] * x[4])


def _input_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, bb = args
    n, cb, h, w, b = x.shape
    alpha = math.isqrt(bb.shape[0])
    m = alpha - 2
    th, tw = tile_grid(h, w, m)
    padded = pad_tensor(x, (0, 0, 1, 1, 0), (0, 0, th * m + 1 - h, tw * m + 1 - w, 0), 0,
                        ("n", "c", "h", "w", "b"), name=f"{name}_pad")
    ri, rj = te.reduce_axis(alpha, name="ri"), te.reduce_axis(alpha, name="rj")

    def body(t, p, c):
        tile = padded[p // (th * tw), c // b, (p // tw) % th * m + ri, p % tw * m + rj, c % b]
        return te.sum(bb[t, ri * alpha + rj] * tile, axis=[ri, rj])

    return te.compute(out.shape, named(body, ("t", "p", "c")), name=name)


def _input_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, bb = unblock_array(f64(args[0])), f64(args[1])
    n, c, h, w = x.shape
    alpha = math.isqrt(bb.shape[0])
    m = alpha - 2
    th, tw = tile_grid(h, w, m)
    padded = np.zeros((n, c, th * m + 2, tw * m + 2))
    padded[:, :, 1:h + 1, 1:w + 1] = x
    tiles = np.stack([padded[:, :, i * m:i * m + alpha, j * m:j * m + alpha]
                      for i in range(th) for j in range(tw)], axis=1)  # (n, th*tw, c, a, a)
    v = np.einsum("ts,npcs->tnpc", bb, tiles.reshape(n, th * tw, c, alpha * alpha))
    return v.reshape(alpha * alpha, n * th * tw, c)


def _input_torch(t, x, bb):
    x = _torch_unblock(t, x)
    n, c, h, w = x.shape
    alpha = math.isqrt(bb.shape[0])
    m = alpha - 2
    th, tw = tile_grid(h, w, m)
    padded = t.nn.functional.pad(x, (1, tw * m + 1 - w, 1, th * m + 1 - h))
    tiles = padded.unfold(2, alpha, m).unfold(3, alpha, m)  # (n, c, th, tw, a, a)
    tiles = tiles.reshape(n, c, th * tw, alpha * alpha)
    return t.einsum("ts,ncps->tnpc", bb, tiles).reshape(alpha * alpha, n * th * tw, c)


define("winograd_input", "reduce", _input_infer, _input_lower, _input_reference,
       inputs=(2, 2), layout="barrier", torch=_input_torch, examples=[
           Example(((1, 2, 9, 7, 4), (36, 36))),  # ragged tiles: 9x7 in 4x4 tiles
           Example(((2, 3, 4, 5, 2), (16, 16)))])


# ---- winograd_output ----

def _output_infer(inputs, attrs, label):
    mm, aa = inputs[0].shape, inputs[1].shape
    shape, block = attrs["shape"], attrs["block"]
    check(isinstance(shape, (tuple, list)) and len(shape) == 3
          and all(isinstance(d, int) and d >= 1 for d in shape),
          f"node {label} (winograd_output): shape must be the output's (N, H, W), got {shape!r}")
    n, h, w = shape
    check(len(mm) == 3, f"node {label} (winograd_output): products {mm} must be (a*a, P, K)")
    alpha = _alpha(aa, label, "winograd_output")
    m = alpha - 2
    th, tw = tile_grid(h, w, m)
    check(aa[0] == m * m and mm[0] == alpha * alpha and mm[1] == n * th * tw,
          f"node {label} (winograd_output): products {mm} and coefficients {aa} do not make "
          f"a {n}x{h}x{w} output of {m}x{m} tiles")
    check(isinstance(block, int) and block >= 1 and mm[2] % block == 0,
          f"node {label} (winograd_output): block {block!r} must divide the {mm[2]} channels")
    if len(inputs) > 2:
        check(inputs[2].shape == (mm[2],), f"node {label} (winograd_output): bias "
                                           f"{inputs[2].shape} must be ({mm[2]},)")
    return (n, mm[2] // block, h, w, block)


def _output_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    mm, aa, *bias = args
    n, kb, h, w, ob = out.shape
    alpha = math.isqrt(aa.shape[1])
    m = alpha - 2
    th, tw = tile_grid(h, w, m)
    s = te.reduce_axis(alpha * alpha, name="s")

    def body(n_, k, y, x, ki):
        tile = n_ * (th * tw) + y // m * tw + x // m
        return te.sum(aa[y % m * m + x % m, s] * mm[s, tile, k * ob + ki], axis=[s])

    stage = f"{name}_tile" if bias else name
    y = te.compute(out.shape, named(body, ("n", "k", "y", "x", "ki")), name=stage)
    return with_channel_bias(y, bias, name)


def _untile(y, shape: tuple[int, int, int], m: int):
    """Per-tile outputs (P, K, m*m) (numpy or torch) as the image (N, K, H, W) they tile, the
    ragged last tiles cropped."""
    n, h, w = shape
    th, tw = tile_grid(h, w, m)
    k = y.shape[1]
    y = y.reshape(n, th, tw, k, m, m)
    y = y.permute(0, 3, 1, 4, 2, 5) if hasattr(y, "permute") else y.transpose(0, 3, 1, 4, 2, 5)
    return y.reshape(n, k, th * m, tw * m)[:, :, :h, :w]


def _output_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    mm, aa = f64(args[0]), f64(args[1])
    y = _untile(np.einsum("os,spk->pko", aa, mm), a["shape"], math.isqrt(aa.shape[0]))
    if len(args) > 2:
        y = y + f64(args[2])[None, :, None, None]
    return block_array(y, a["block"])


def _output_torch(t, mm, aa, bias=None, *, shape, block):
    y = _untile(t.einsum("os,spk->pko", aa, mm), shape, math.isqrt(aa.shape[0]))
    if bias is not None:
        y = y + bias[None, :, None, None]
    return _torch_block(t, y, block)


define("winograd_output", "anchor", _output_infer, _output_lower, _output_reference,
       attrs=dict(shape=REQUIRED, block=REQUIRED), inputs=(2, 3), layout="barrier",
       torch=_output_torch, examples=[
           Example(((36, 2 * 3 * 2, 8), (16, 36), (8,)), dict(shape=(2, 9, 7), block=4)),
           Example(((16, 6, 6), (4, 16)), dict(shape=(1, 4, 5), block=2))])


__all__ = ["winograd_matrices", "winograd_weight", "input_coefficients", "output_coefficients",
           "tile_grid", "TILES"]
