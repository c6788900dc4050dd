"""Winograd convolutions (tessel.graph.winograd, tessel.graph.opdefs.winograd): the transform
matrices compute a correlation, the rewrite gives the plain graph's outputs at ragged tile
counts and odd channel blocks, only "same" 3x3 convolutions with enough tiles and channels are
rewritten, each weight is stored once (transformed), and compiled models run it correctly."""
import numpy as np
import pytest

import tessel
from tessel.graph import Graph, GraphError
from tessel.graph.compiler import load_model
from tessel.graph.layout import LAYOUTS, block_layouts
from tessel.graph.opdefs.winograd import TILES, winograd_matrices, winograd_weight
from tessel.graph.reference import run_graph
from tessel.graph.winograd import winograd_convs

from isa import ISA_PRESETS, runs_here


def _close(got, want, rtol=1e-4):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("m", TILES)
def test_the_matrices_compute_a_correlation(m):
    """A^T [(G g) * (B^T d)] is the valid correlation of d (m + 2 taps) with g (3 taps)."""
    at, g, bt = winograd_matrices(m)
    rng = np.random.default_rng(m)
    d, w = rng.standard_normal(m + 2), rng.standard_normal(3)
    want = np.correlate(d, w, mode="valid")
    np.testing.assert_allclose(at @ ((g @ w) * (bt @ d)), want, rtol=1e-12, atol=1e-12)


def _cnn(h=15, w=13, c=32, k=40):
    """A 1x1 stem to `c` channels, then 3x3 "same" convs c -> k (bias, ReLU) and k -> k (a
    residual add and ReLU after it: epilogues of the output transform), a stride-2 3x3, a
    3x3 without padding, a 3x3 on 16 channels: the last three stay direct."""
    rng = np.random.default_rng(0)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.2)

    g = Graph("wino")
    x = g.add_input("x", (1, 8, h, w))
    s = g.add_node("relu", [g.add_node("conv", [x, const(g, "w0", c, 8, 1, 1)])])
    a = g.add_node("conv", [s, const(g, "w1", k, c, 3, 3), const(g, "b1", k)], pads=(1, 1, 1, 1))
    a = g.add_node("relu", [a])
    b = g.add_node("conv", [a, const(g, "w2", k, k, 3, 3)], pads=(1, 1, 1, 1))
    b = g.add_node("relu", [g.add_node("add", [b, a])])
    d = g.add_node("conv", [b, const(g, "w3", 48, k, 3, 3)], strides=(2, 2), pads=(1, 1, 1, 1))
    e = g.add_node("conv", [d, const(g, "w4", 16, 48, 3, 3)])  # no padding
    f = g.add_node("conv", [e, const(g, "w5", 16, 16, 3, 3)], pads=(1, 1, 1, 1))  # 16 channels
    g.set_outputs([f, b])
    return g


@pytest.mark.parametrize("lanes, tile", [(16, 4), (8, 4), (16, 2)])
def test_winograd_gives_the_plain_graphs_outputs(lanes, tile):
    """15x13 outputs in 4x4 tiles (ragged on both axes), 40 channels in blocks of 8."""
    g = _cnn()
    wino = winograd_convs(block_layouts(g, lanes), tile=tile)
    ops = wino.op_counts()
    assert ops["winograd_input"] == ops["winograd_output"] == 2 and ops["conv_blocked"] == 4
    assert ops["matmul"] == 2
    feeds = [np.random.default_rng(1).standard_normal((1, 8, 15, 13)).astype("float32")]
    _close(run_graph(wino, feeds), run_graph(g, feeds))
    assert wino.outputs == g.outputs


def test_the_epilogues_and_weights_of_a_rewritten_conv():
    """Bias, residual add and ReLU follow the output transform (they fuse into its kernel);
    the rewritten convs' weights are stored only transformed, (36, C, K)."""
    wino = winograd_convs(block_layouts(_cnn(), 16))
    after = {v: [n.op for n in users] for v, users in wino.consumers().items()}
    outs = [n for n in wino.nodes if n.op == "winograd_output"]
    assert len(outs[0].inputs) == 2  # the products and the bias
    assert after[outs[0].output] == ["relu"] and after[outs[1].output] == ["add"]
    transformed = [wino.constants[n.inputs[1]] for n in wino.nodes if n.op == "matmul"]
    # (k = 40 channels padded to 48, three vectors of 16)
    assert [u.shape for u in transformed] == [(36, 32, 48), (36, 48, 48)]
    stored = {c for c in wino.constants if c.startswith(("w1", "w2"))}
    assert all("winograd" in c for c in stored), stored
    blocked = block_layouts(_cnn(), 16)
    w1 = next(n.inputs[1] for n in blocked.nodes if n.op == "conv_blocked"
              and blocked.types[n.inputs[1]].shape[2:4] == (3, 3))
    assert w1 not in wino.constants


def test_the_weight_transform_matches_the_direct_convolution():
    """U = G g G^T in float64: a 4x4 tile through the matrices equals the 3x3 correlation."""
    rng = np.random.default_rng(5)
    weight = rng.standard_normal((3, 2, 3, 3))
    tile = rng.standard_normal((2, 6, 6))
    at, _, bt = winograd_matrices(4)
    u = winograd_weight(weight, 4).astype(np.float64).reshape(6, 6, 2, 3)
    v = np.einsum("ei,cij,fj->efc", bt, tile, bt)
    y = np.einsum("ie,efk,jf->kij", at, np.einsum("efc,efck->efk", v, u), at)
    want = np.stack([[[np.sum(tile[:, i:i + 3, j:j + 3] * weight[k]) for j in range(4)]
                      for i in range(4)] for k in range(3)])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_few_tiles_stay_direct_and_bad_arguments_are_named():
    small = winograd_convs(block_layouts(_cnn(h=7, w=7), 16))  # 2 x 2 tiles
    assert "winograd_input" not in small.op_counts()
    assert winograd_convs(block_layouts(_cnn(h=7, w=7), 16), min_tiles=4).op_counts()[
        "winograd_output"] == 2
    with pytest.raises(GraphError, match="tile must be one of"):
        winograd_convs(_cnn(), tile=3)
    with pytest.raises(GraphError, match="min_tiles"):
        winograd_convs(_cnn(), min_tiles=0)


def test_a_zoo_resnet_matches_its_plain_graph():
    """ResNet-18 at 64x64: its 16x16 stage (16 tiles) runs as Winograd, the others direct."""
    pytest.importorskip("torch")
    from tessel.graph.frontend import models
    plain = load_model(models.torch_graph("resnet18", image=64))
    wino = winograd_convs(block_layouts(plain, 16))
    assert wino.op_counts()["winograd_output"] == 4
    feeds = [np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype("float32")]
    _close(run_graph(wino, feeds), run_graph(plain, feeds))


@ISA_PRESETS
def test_compiled_winograd_models_compute_the_same(target):
    """Kernels on their expert priors, blocks of 16 (AVX-512) and of 8 (AVX2), built and run."""
    if not runs_here(target):
        pytest.skip(f"{target} code does not run on this host")
    g = _cnn(h=17, w=9)  # 5 x 3 tiles: the rule's minimum lowered to reach them
    feeds = [np.random.default_rng(3).standard_normal((1, 8, 17, 9)).astype("float32")]
    graph = winograd_convs(block_layouts(g, target.vector_lanes("float32")), min_tiles=8)
    model = tessel.compile_model(graph, target, layout="plain")  # (already rewritten)
    assert sum(k.func.name.startswith("winograd_input") for k in model.kernels) == 2
    _close(model(*feeds), run_graph(g, feeds))
    default = tessel.compile_model(_cnn(), target)  # 4 x 4 tiles: the default layout rewrites
    assert default.layout == "winograd" and "winograd" in LAYOUTS
    assert any(k.func.name.startswith("fused_winograd_output") for k in default.kernels)
    feeds = [np.random.default_rng(4).standard_normal((1, 8, 15, 13)).astype("float32")]
    _close(default(*feeds), run_graph(_cnn(), feeds))


@ISA_PRESETS
def test_the_transforms_compile_to_straight_line_formulas(target):
    """At 8x8 (whole 4x4 tiles) the space unrolls both transforms' positions in the tile
    (UnrollCases): their C chooses no formula at run time (no ==: every choice folded), each
    tile's 36 (input) or 16 (output) values are stored by straight-line code, and the model
    still computes the plain graph's outputs."""
    if not runs_here(target):
        pytest.skip(f"{target} code does not run on this host")
    from tessel.codegen import generate_c
    from tessel.graph.fuse import fuse
    from tessel.graph.compiler.tasks import extract_tasks, lower_groups
    from tessel.space import default_postprocs, final_func, make_space

    g = _cnn(h=8, w=8)
    lanes = target.vector_lanes("float32")
    graph = winograd_convs(block_layouts(g, lanes), min_tiles=4)
    feeds = [np.random.default_rng(6).standard_normal((1, 8, 8, 8)).astype("float32")]
    _close(tessel.compile_model(graph, target, layout="plain")(*feeds), run_graph(g, feeds))
    space, posts = make_space("auto", target), default_postprocs(target)
    seen = {}
    for task in extract_tasks(lower_groups(graph, fuse(graph)), target):
        kind = next((k for k in ("winograd_input", "winograd_output") if k in task.name), None)
        if kind is None:
            continue
        source = generate_c(final_func(space.generate(task.workload)[0], posts), target)
        body = source[source.index("static int32_t"):source.index("int32_t tessel_entry")]
        assert " == " not in body, kind
        stores = body.count("_store(&")
        seen[kind] = max(seen.get(kind, 0), stores)
    assert seen["winograd_input"] >= 36 and seen["winograd_output"] >= 16, seen


def test_bad_transform_arguments_are_named():
    g = Graph("bad")
    x = g.add_input("x", (1, 2, 8, 8, 16))
    with pytest.raises(GraphError, match="tile 3 is not one of"):
        g.add_node("winograd_input", [x], tile=3)
    m = g.add_input("m", (30, 4, 16))
    with pytest.raises(GraphError, match="not a Winograd transform's"):
        g.add_node("winograd_output", [m], shape=(1, 8, 8), block=16)
    m = g.add_input("m2", (36, 5, 16))
    with pytest.raises(GraphError, match="do not make a 1x8x8 output"):
        g.add_node("winograd_output", [m], shape=(1, 8, 8), block=16)
