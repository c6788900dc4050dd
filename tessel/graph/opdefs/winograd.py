"""Winograd's minimal filtering for 3x3 convolutions, F(m x m, 3 x 3) (Lavin and Gray, 2016):
a stride-1 3x3 convolution as three kernels, each one tessel tunes like any other.

    V = winograd_input(x, tile=m)  # (a*a, P, C): each a x a input tile (a = m + 2), B^T d B
    M = matmul(V, U)               # (a*a, P, K): a*a independent GEMMs, U the transformed weight
    y = winograd_output(M)         # (N, K/b, H, W, b): each tile's m x m outputs A^T M A, blocked

P is the number of m x m output tiles (N * ceil(H/m) * ceil(W/m)). The weight transform
U = G g G^T runs once, at graph time (`winograd_weight`). With m = 4 a tile of 16 outputs takes
36 multiplies per input/output channel pair where the direct convolution takes 144, so the
GEMM does 1/4 of the direct convolution's arithmetic, and tessel's matmul schedules run it
near peak.

The transforms multiply by constant matrices, mostly zeros and +-1 (B^T of F(4, 3) has 22
nonzeros of 36, A^T 18 of 24). Each element of a transformed tile is written as the formula it
is, chosen by its position in the tile (`linear_choice`: an if_then_else over the rows of the
matrix, each row's sum with its nonzero terms only), and the blocks carry UnrollCases'
annotation (tessel.space.rules.cases): the search space unrolls the in-tile positions, every
copy's choice folds to one straight-line formula, and the compiler shares the row sums between
them. Measured on ResNet-18's 56x56 stage (Zen 5, 2026-11-26): the contraction with the
Kronecker matrix as a runtime tensor (1296 multiply-adds a tile and channel, zeros included)
tuned to 120 us; this form, 32 trials, 24 us.

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
from tessel.graph.opdefs.blocked import (torch_block, torch_unblock, block_array,
                                         unblock_array, with_channel_bias)
from tessel.ops.common import named, pad_tensor
from tessel.space.rules.cases import CASES

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


# ---- winograd_input ----

def _input_infer(inputs, attrs, label):
    x, m = inputs[0].shape, attrs["tile"]
    check(len(x) == 5, f"node {label} (winograd_input): data {x} must be (N, C/b, H, W, b)")
    check(m in TILES, f"node {label} (winograd_input): tile {m!r} is not one of {TILES}")
    th, tw = tile_grid(x[2], x[3], m)
    return ((m + 2) ** 2, x[0] * th * tw, x[1] * x[4])


def linear_choice(index: te.Expr, coefficients: np.ndarray, term) -> te.Expr:
    """sum_k coefficients[index, k] * term(k), with the row chosen by `index` (an expression)
    among the rows of a constant matrix: a chain of if_then_else over the rows, each row's sum
    written with its nonzero coefficients only (+-1 as an addition or a subtraction). Once
    `index` is a constant (its loop unrolled) the chain folds to the one sum."""
    def row(r: int) -> te.Expr:
        total = None
        for k, c in enumerate(coefficients[r]):
            if c == 0:
                continue
            value = term(k)
            if abs(c) != 1:
                value = value * te.const(float(abs(c)), "float32")
            total = (value if c > 0 else -value) if total is None else (
                total + value if c > 0 else total - value)
        return total if total is not None else te.const(0.0, "float32")

    chosen = row(len(coefficients) - 1)
    for r in range(len(coefficients) - 2, -1, -1):
        chosen = te.if_then_else(index == r, row(r), chosen)
    return chosen


def _input_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    (x,) = args
    n, cb, h, w, b = x.shape
    m = a["tile"]
    alpha = m + 2
    bt = winograd_matrices(m)[2]
    th, tw = tile_grid(h, w, m)
    padded = pad_tensor(x, (0, 0, 1, 1, 0), (0, 0, th * m + 1 - h, tw * m + 1 - w, 0), 0,
                        ("n", "c", "h", "w", "b"), name=f"{name}_pad")

    def body(t, p, c):
        tile: dict[tuple[int, int], te.Expr] = {}  # one load per input of the tile, shared

        def d(i: int, j: int) -> te.Expr:
            if (i, j) not in tile:
                tile[i, j] = padded[p // (th * tw), c // b, (p // tw) % th * m + i,
                                    p % tw * m + j, c % b]
            return tile[i, j]

        # (B^T d B)[e, f] = sum_i B^T[e, i] sum_j B^T[f, j] d[i, j], t = e * alpha + f
        return linear_choice(t // alpha, bt, lambda i: linear_choice(
            t % alpha, bt, lambda j: d(i, j)))

    return te.compute(out.shape, named(body, ("t", "p", "c")), name=name,
                      attrs={CASES: ((alpha, alpha), (), ())})


def _input_reference(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    x, bb = unblock_array(f64(args[0])), input_coefficients(a["tile"])
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


def _input_torch(t, x, *, tile):
    x = torch_unblock(t, x)
    n, c, h, w = x.shape
    m, alpha = tile, tile + 2
    bb = t.as_tensor(input_coefficients(m), dtype=x.dtype)
    th, tw = tile_grid(h, w, m)
    padded = t.nn.functional.pad(x, (1, tw * m + 1 - w, 1, th * m + 1 - h))
    tiles = padded.unfold(2, alpha, m).unfold(3, alpha, m)  # (n, c, th, tw, a, a)
    tiles = tiles.reshape(n, c, th * tw, alpha * alpha)
    return t.einsum("ts,ncps->tnpc", bb, tiles).reshape(alpha * alpha, n * th * tw, c)


define("winograd_input", "reduce", _input_infer, _input_lower, _input_reference,
       attrs=dict(tile=REQUIRED), inputs=(1, 1), layout="barrier", torch=_input_torch,
       examples=[Example(((1, 2, 9, 7, 4),), dict(tile=4)),  # ragged tiles: 9x7 in 4x4 tiles
                 Example(((2, 3, 4, 5, 2),), dict(tile=2))])


# ---- winograd_output ----

def _output_infer(inputs, attrs, label):
    mm = inputs[0].shape
    shape, block = attrs["shape"], attrs["block"]
    check(isinstance(shape, (tuple, list)) and len(shape) == 3
          and all(isinstance(d, int) and d >= 1 for d in shape),
          f"node {label} (winograd_output): shape must be the output's (N, H, W), got {shape!r}")
    n, h, w = shape
    check(len(mm) == 3, f"node {label} (winograd_output): products {mm} must be (a*a, P, K)")
    alpha = math.isqrt(mm[0])
    check(alpha * alpha == mm[0] and alpha - 2 in TILES,
          f"node {label} (winograd_output): products {mm} are not a Winograd transform's "
          f"(a*a with a - 2 in {TILES})")
    th, tw = tile_grid(h, w, alpha - 2)
    check(mm[1] == n * th * tw, f"node {label} (winograd_output): products {mm} do not make "
                                f"a {n}x{h}x{w} output of {alpha - 2}x{alpha - 2} tiles")
    check(isinstance(block, int) and block >= 1 and mm[2] % block == 0,
          f"node {label} (winograd_output): block {block!r} must divide the {mm[2]} channels")
    if len(inputs) > 1:
        check(inputs[1].shape == (mm[2],), f"node {label} (winograd_output): bias "
                                           f"{inputs[1].shape} must be ({mm[2]},)")
    return (n, mm[2] // block, h, w, block)


def _output_lower(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    mm, *bias = args
    n, kb, h, w, ob = out.shape
    alpha = math.isqrt(mm.shape[0])
    m = alpha - 2
    at = winograd_matrices(m)[0]
    th, tw = tile_grid(h, w, m)

    def body(n_, k, y, x, ki):
        tile = n_ * (th * tw) + y // m * tw + x // m
        products: dict[tuple[int, int], te.Expr] = {}  # one load per product, shared

        def v(i: int, j: int) -> te.Expr:
            if (i, j) not in products:
                products[i, j] = mm[i * alpha + j, tile, k * ob + ki]
            return products[i, j]

        # (A^T M A)[y % m, x % m] = sum_i A^T[y % m, i] sum_j A^T[x % m, j] M[i * alpha + j]
        return linear_choice(y % m, at, lambda i: linear_choice(x % m, at, lambda j: v(i, j)))

    stage = f"{name}_tile" if bias else name
    y = te.compute(out.shape, named(body, ("n", "k", "y", "x", "ki")), name=stage,
                   attrs={CASES: ((), (), (m,), (m,), ())})
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
    mm = f64(args[0])
    m = math.isqrt(mm.shape[0]) - 2
    y = _untile(np.einsum("os,spk->pko", output_coefficients(m), mm), a["shape"], m)
    if len(args) > 1:
        y = y + f64(args[1])[None, :, None, None]
    return block_array(y, a["block"])


def _output_torch(t, mm, bias=None, *, shape, block):
    m = math.isqrt(mm.shape[0]) - 2
    aa = t.as_tensor(output_coefficients(m), dtype=mm.dtype)
    y = _untile(t.einsum("os,spk->pko", aa, mm), shape, m)
    if bias is not None:
        y = y + bias[None, :, None, None]
    return torch_block(t, y, block)


define("winograd_output", "anchor", _output_infer, _output_lower, _output_reference,
       attrs=dict(shape=REQUIRED, block=REQUIRED), inputs=(1, 2), layout="barrier",
       torch=_output_torch, examples=[
           Example(((36, 2 * 3 * 2, 8), (8,)), dict(shape=(2, 9, 7), block=4)),
           Example(((36, 2 * 2 * 2, 8),), dict(shape=(2, 8, 8), block=8)),
           Example(((16, 6, 6),), dict(shape=(1, 4, 5), block=2))])


__all__ = ["winograd_matrices", "winograd_weight", "input_coefficients", "output_coefficients",
           "tile_grid", "TILES"]
