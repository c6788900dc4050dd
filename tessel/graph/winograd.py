"""Winograd convolutions as a graph rewrite: which 3x3 convolutions of a blocked graph run as
F(m x m, 3 x 3) (tessel.graph.opdefs.winograd), and their weights transformed once, here.

    graph = winograd_convs(block_layouts(simplify(g), lanes=16))

A blocked convolution (`conv_blocked`) is rewritten when it is a "same" 3x3 convolution (stride
1, dilation 1, padding 1, groups 1) over at least `min_tiles` output tiles: input transform,
a batched GEMM against the transformed weight, output transform (bias and the convolution's
epilogues fuse into it). The original weight is dropped; the graph stores U (a*a, C, K) only.

Why a tile count and not every 3x3 convolution: U holds (m+2)^2 / 9 times the weight's floats
(4x for m = 4), and with few tiles each GEMM is a few rows against its whole slice of U. On
ResNet-18 (Zen 4, expert priors, in sequence) Winograd at 56x56, 28x28 and 14x14 (196, 49, 16
tiles of 4x4) took the call from 17.6 to 14.5 ms; adding the 7x7 stage (4 tiles) measured no
faster in sequence (its kernels are faster repeated, but its 3 x 38 MB of U come from memory
on every call) and would hold 113 MB of weights where the direct convolutions hold 28.
"""
from __future__ import annotations

from tessel.graph.fold import rebuild
from tessel.graph.ir import Graph, Node, check, unique_name
from tessel.graph.opdefs.blocked import unblock_weight
from tessel.graph.opdefs.winograd import TILES, tile_grid, winograd_weight

MIN_TILES = 16
# per output pixel the transforms cost about 81 C + 36 K multiply-adds (dense contractions
# with the 6x6 constant matrices), the GEMMs 2.25 C K, the direct convolution 9 C K: below
# some 20 channels the transforms eat the saving (a 3-channel stem: 2979 against 1728)
MIN_CHANNELS = 32


def winograd_convs(graph: Graph, tile: int = 4, min_tiles: int = MIN_TILES) -> Graph:
    """`graph` with its eligible blocked 3x3 convolutions as Winograd F(tile, 3) (see the
    module); a new Graph, inputs and outputs unchanged."""
    check(tile in TILES, f"winograd_convs: tile must be one of {TILES}, got {tile!r}")
    check(isinstance(min_tiles, int) and min_tiles >= 1,
          f"winograd_convs: min_tiles must be a positive int, got {min_tiles!r}")

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        if not eligible(new, node, inputs, tile, min_tiles):
            return None
        x, w, *bias = inputs
        n, _, h, wd, _ = new.types[x].shape
        ob = new.types[w].shape[5]
        u = new.add_constant(_fresh(new, f"{w}_winograd{tile}"),
                             winograd_weight(unblock_weight(new.constants[w]), tile))
        v = new.add_node("winograd_input", [x], name=node.name, tile=tile,
                         output=_fresh(new, f"{node.output}_wino_in"))
        mm = new.add_node("matmul", [v, u], name=node.name,
                          output=_fresh(new, f"{node.output}_wino_gemm"))
        return new.add_node("winograd_output", [mm, *bias],
                            name=node.name, output=node.output, shape=(n, h, wd), block=ob)

    return rebuild(graph, rewrite)


def eligible(graph: Graph, node: Node, inputs: list[str], tile: int, min_tiles: int) -> bool:
    """Whether `node` is a blocked "same" 3x3 convolution over at least `min_tiles` tiles
    of tile x tile outputs and MIN_CHANNELS input and output channels, with a constant
    weight."""
    if node.op != "conv_blocked" or inputs[1] not in graph.constants:
        return False
    a = node.attrs
    w = graph.types[inputs[1]].shape
    if (a["groups"] != 1 or tuple(w[2:4]) != (3, 3) or tuple(a["strides"]) != (1, 1)
            or tuple(a["dilations"]) != (1, 1) or tuple(a["pads"]) != (1, 1, 1, 1)):
        return False
    n, cb, h, wd, ib = graph.types[inputs[0]].shape
    if min(cb * ib, w[0] * w[5]) < MIN_CHANNELS:
        return False
    rows, cols = tile_grid(h, wd, tile)
    return n * rows * cols >= min_tiles


def _fresh(graph: Graph, base: str) -> str:
    return unique_name(base, graph.types.__contains__)


__all__ = ["winograd_convs", "eligible", "MIN_TILES", "MIN_CHANNELS"]
