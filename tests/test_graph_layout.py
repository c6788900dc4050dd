"""Blocked channel layouts (tessel.graph.layout): the pass gives the plain graph's outputs on
every zoo model and on odd channel counts (blocks of 16 and of 8, channels that divide into
neither), converts only at the network's boundaries, and keeps each weight only in the
layout its kernel reads; compiled models in both layouts compute the same."""
import re

import numpy as np
import pytest

import tessel
from tessel.graph import Graph, GraphError
from tessel.graph.compiler import load_model
from tessel.graph.layout import LAYOUTS, block_layouts
from tessel.graph.opdefs.blocked import block_array, block_weight, unblock_array, unblock_weight
from tessel.graph.reference import run_graph

from isa import ISA_PRESETS, runs_here

RTOL, ATOL = 1e-4, 1e-4


def _close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL * scale)


def _odd_cnn(c_in=5, h=13, w=11):
    """Channels 5 (no block), 24 (blocks of 8 only), 20 (none), 32 (16): a stem, a depthwise
    stride-2 conv, a plain conv between blocked ones, a residual add, max pooling, a
    squeeze-and-excitation gate (N, C, 1, 1), a constant per-channel scale, the global pool,
    a dense head."""
    rng = np.random.default_rng(0)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.3)

    g = Graph("odd")
    x = g.add_input("x", (1, c_in, h, w))
    a = g.add_node("conv", [x, const(g, "w0", 24, c_in, 3, 3), const(g, "b0", 24)],
                   pads=(1, 1, 1, 1))
    a = g.add_node("relu", [a])
    d = g.add_node("conv", [a, const(g, "w1", 24, 1, 3, 3)], strides=(2, 2), pads=(1, 1, 1, 1),
                   groups=24)
    d = g.add_node("clip", [d], min=0.0, max=6.0)
    p = g.add_node("conv", [d, const(g, "w2", 20, 24, 1, 1)])  # 20: stays plain
    q = g.add_node("conv", [p, const(g, "w3", 32, 20, 3, 3)], pads=(1, 1, 1, 1))
    r = g.add_node("conv", [d, const(g, "w4", 32, 24, 1, 1), const(g, "b4", 32)])
    s = g.add_node("relu", [g.add_node("add", [q, r])])
    s = g.add_node("max_pool", [s], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                   ceil_mode=True)
    s = g.add_node("mul", [s, g.add_node("sigmoid", [g.add_node("global_avg_pool", [s])])])
    s = g.add_node("mul", [s, const(g, "scale", 1, 32, 1, 1)])
    s = g.add_node("add", [s, g.add_constant("half", np.float32(0.5))])
    side = g.add_node("sigmoid", [s])  # a second model output, blocked inside
    pooled = g.add_node("global_avg_pool", [s])
    flat = g.add_node("reshape", [pooled], shape=(1, 32))
    g.set_outputs([g.add_node("dense", [flat, const(g, "wd", 7, 32), const(g, "bd", 7)]), side])
    return g


def test_numpy_block_helpers_invert_each_other():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 24, 3, 5))
    assert block_array(x, 8).shape == (2, 3, 3, 5, 8)
    np.testing.assert_array_equal(block_array(x, 8)[1, 2, 0, 4, 3], x[1, 19, 0, 4])
    np.testing.assert_array_equal(unblock_array(block_array(x, 8)), x)
    w = rng.standard_normal((32, 24, 3, 3))
    assert block_weight(w, 8, 16).shape == (2, 3, 3, 3, 8, 16)
    np.testing.assert_array_equal(unblock_weight(block_weight(w, 8, 16)), w)


@pytest.mark.parametrize("lanes", [16, 8])
def test_odd_channels_give_the_plain_graphs_outputs(lanes):
    g = _odd_cnn()
    blocked = block_layouts(g, lanes)
    ops = blocked.op_counts()
    if lanes == 16:  # blocks of 16 or 8: the 20-channel conv stays plain
        assert ops["conv_blocked"] == 4 and ops["conv"] == 1
    else:  # blocks of 8 or 4: 20 channels are 5 blocks of 4
        assert ops["conv_blocked"] == 5 and "conv" not in ops
    assert ops["max_pool_blocked"] == 1 and "global_avg_pool" not in ops
    feeds = [np.random.default_rng(2).standard_normal((1, 5, 13, 11)).astype("float32")]
    _close(run_graph(blocked, feeds), run_graph(g, feeds))
    assert blocked.outputs == g.outputs
    assert [blocked.types[v].shape for v in blocked.outputs] == [(1, 7), (1, 32, 4, 4)]


def test_conversions_only_where_a_plain_reader_needs_them():
    g = _odd_cnn()
    blocked = block_layouts(g, 16)
    ops = blocked.op_counts()
    # out of blocks: into the 20-channel conv, the sigmoid output; the pooled (1x1) value is
    # a reshape; into blocks: nothing (the 20-channel conv's output is read as NCHW[1]c)
    assert ops["from_blocked"] == 2 and "to_blocked" not in ops
    # the stem reads the NCHW input as it lies (NCHW[1]c), a view
    stem = next(n for n in blocked.nodes if n.op == "conv_blocked")
    assert blocked.types[stem.inputs[0]].shape == (1, 5, 13, 11, 1)
    # every weight is stored once, in the layout its kernel reads
    assert not {"w0", "w1", "w3", "w4", "scale"} & set(blocked.constants)
    assert blocked.constants["w2"].shape == (20, 24, 1, 1)  # the plain conv's own


CNNS = {"resnet18": dict(image=40), "mobilenet_v2": dict(image=36),
        "squeezenet": dict(image=39), "dqn": dict(image=52)}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_zoo_cnns_convert_only_at_their_boundaries(name):
    """Every convolution blocked; no conversion into blocks; out of them only before DQN's
    flatten (its last conv's output is 5x5, not 1x1) and after SqueezeNet's pool (its 1000
    classes padded to 1008 channels: the pool's 1x1 output is cropped, not reshaped)."""
    pytest.importorskip("torch")
    from tessel.graph.frontend import models
    plain = load_model(models.torch_graph(name, **CNNS[name]))
    blocked = block_layouts(plain, 16)
    ops = blocked.op_counts()
    assert "conv" not in ops and ops["conv_blocked"] == plain.op_counts()["conv"]
    assert "to_blocked" not in ops and ops.get("from_blocked", 0) == (name in ("dqn",
                                                                              "squeezenet"))
    if name == "squeezenet":  # the fire modules join whole blocks
        assert ops["concat"] == 8 and ops["max_pool_blocked"] == 3
        crop, = (n for n in blocked.nodes if n.op == "from_blocked")
        assert crop.attrs["channels"] == 1000 and blocked.types[crop.inputs[0]].shape[1] == 63


def test_a_graph_without_convolutions_is_unchanged():
    g = Graph("mlp")
    x = g.add_input("x", (3, 8))
    g.set_outputs([g.add_node("relu", [g.add_node("dense", [x, g.add_constant(
        "w", np.ones((4, 8), "float32"))])])])
    assert str(block_layouts(g, 16)) == str(g)


def test_bad_lanes_and_layouts_are_named():
    with pytest.raises(GraphError, match="lanes"):
        block_layouts(_odd_cnn(), 0)
    with pytest.raises(GraphError, match="layout must be one of"):
        tessel.compile_model(_odd_cnn(), layout="nhwc")


@ISA_PRESETS
def test_compiled_models_in_both_layouts_compute_the_same(target):
    """Kernels on their expert priors, in blocks of 16 (AVX-512) and of 8 (AVX2)."""
    if not runs_here(target):
        pytest.skip(f"{target} code does not run on this host")
    g = _odd_cnn(c_in=3, h=17, w=9)
    feeds = [np.random.default_rng(3).standard_normal((1, 3, 17, 9)).astype("float32")]
    want = run_graph(g, feeds)
    plain = tessel.compile_model(g, target, layout="plain")
    blocked = tessel.compile_model(g, target, layout="blocked")
    assert any(k.func.name.startswith("fused_conv_blocked") for k in blocked.kernels)
    _close(plain(*feeds), want)
    _close(blocked(*feeds), want)


def test_auto_layout_times_each_and_keeps_the_fastest():
    g = _odd_cnn(c_in=3, h=9, w=9)
    feeds = [np.random.default_rng(4).standard_normal((1, 3, 9, 9)).astype("float32")]
    model = tessel.compile_model(g, layout="auto", fallback="unscheduled")
    assert sorted(model.layout_times) == sorted(LAYOUTS)
    assert model.layout == min(model.layout_times, key=model.layout_times.get)
    assert f"{model.layout} layout (measured: blocked" in model.report()
    _close(model(*feeds), run_graph(g, feeds))


def _padded_cnn(c=24, h=9, w=7):
    """24 channels (padded to 32 with 16 lanes) through a depthwise conv, a residual add, a
    per-channel divisor, an exp (it may not see the padding), a join and the global pool."""
    rng = np.random.default_rng(3)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.3)

    g = Graph("padded")
    x = g.add_input("x", (1, 8, h, w))
    a = g.add_node("conv", [x, const(g, "w0", c, 8, 1, 1), const(g, "b0", c)])
    d = g.add_node("conv", [a, const(g, "w1", c, 1, 3, 3), const(g, "b1", c)],
                   pads=(1, 1, 1, 1), groups=c)
    s = g.add_node("add", [g.add_node("clip", [d], min=0.0, max=6.0), a])
    s = g.add_node("div", [s, g.add_constant("scale", rng.uniform(1, 2, (1, c, 1, 1))
                                             .astype("float32"))])
    e = g.add_node("exp", [s])  # not finite-preserving: it reads the 24 channels only
    # a computed divisor (plain: 0 in channels a padding would add): divided plain, so the
    # conv after it reads no 0/0 in padded channels
    r = g.add_node("conv", [g.add_node("div", [s, e]), const(g, "w3", 16, c, 1, 1)])
    j = g.add_node("concat", [s, a], axis=1)  # 24 + 24: not whole blocks of 16
    q = g.add_node("conv", [j, const(g, "w2", 40, 2 * c, 1, 1), const(g, "b2", 40)])
    g.set_outputs([e, g.add_node("global_avg_pool", [q]), s, r])
    return g


def test_channels_padded_to_whole_vectors_give_the_plain_outputs():
    g = _padded_cnn()
    blocked = block_layouts(g, 16)
    convs = [n for n in blocked.nodes if n.op == "conv_blocked"]
    # 24 -> 32 (two vectors), 40 -> 48: the weights and biases carry zero rows
    assert [blocked.types[n.output].shape[1:] for n in convs] == [
        (2, 9, 7, 16), (2, 9, 7, 16), (1, 9, 7, 16), (3, 9, 7, 16)]
    assert convs[1].attrs["groups"] == 32 and blocked.constants[convs[0].inputs[2]].shape == (32,)
    crops = [n for n in blocked.nodes if n.op == "from_blocked"]
    assert {n.attrs["channels"] for n in crops} == {24, 40, None}  # None: 16 whole channels
    assert "exp" in {n.op for n in blocked.nodes if n.inputs[0] in {c.output for c in crops}}
    div = next(n for n in blocked.nodes if n.op == "div" and len(blocked.types[n.inputs[1]]
                                                                .shape) == 4)
    assert all(len(blocked.types[v].shape) == 4 for v in div.inputs)
    feeds = [np.random.default_rng(4).standard_normal((1, 8, 9, 7)).astype("float32")]
    _close(run_graph(blocked, feeds), run_graph(g, feeds))
    unpadded = block_layouts(g, 16, pad=False)  # blocks of 8 for 24 and 40 channels
    assert [unpadded.types[n.output].shape[-1] for n in unpadded.nodes
            if n.op == "conv_blocked"] == [8, 8, 16, 8]
    _close(run_graph(unpadded, feeds), run_graph(g, feeds))


def test_a_padded_model_compiles_and_matches():
    g = _padded_cnn(h=6, w=5)
    feeds = [np.random.default_rng(5).standard_normal((1, 8, 6, 5)).astype("float32")]
    model = tessel.compile_model(g, layout="blocked")
    _close(model(*feeds), run_graph(g, feeds))


def _grouped_cnn(h=9, w=7):
    """Grouped 3x3 convolutions: 2 groups of 32 channels (whole blocks of 16 or 8), 16 groups
    of 4 (ResNeXt's: merged into blocks, 4 or 2 at a time), 8 groups of 8 in and 4 out (plain
    with 16 lanes, blocks of 4 with 8), 3 groups of 8 reading channels padded to whole vectors
    (RegNet's), with a bias and a stride, between 1x1 convolutions."""
    rng = np.random.default_rng(9)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.3)

    g = Graph("grouped")
    x = g.add_input("x", (1, 8, h, w))
    a = g.add_node("relu", [g.add_node("conv", [x, const(g, "w0", 64, 8, 1, 1)])])
    b = g.add_node("conv", [a, const(g, "w1", 64, 32, 3, 3), const(g, "b1", 64)],
                   pads=(1, 1, 1, 1), groups=2)
    c = g.add_node("conv", [g.add_node("relu", [b]), const(g, "w2", 64, 4, 3, 3)],
                   strides=(2, 2), pads=(1, 1, 1, 1), groups=16)
    d = g.add_node("conv", [c, const(g, "w3", 32, 8, 3, 3)], pads=(1, 1, 1, 1), groups=8)
    e = g.add_node("relu", [g.add_node("conv", [x, const(g, "w5", 24, 8, 1, 1)])])
    f = g.add_node("conv", [e, const(g, "w6", 24, 8, 3, 3), const(g, "b6", 24)],
                   pads=(1, 1, 1, 1), groups=3)  # 24 channels padded to 32 with 16 lanes
    g.set_outputs([g.add_node("conv", [d, const(g, "w4", 16, 32, 1, 1)]), c, f])
    return g


@pytest.mark.parametrize("lanes", [16, 8])
def test_grouped_convolutions_run_blocked(lanes):
    g = _grouped_cnn()
    blocked = block_layouts(g, lanes)
    convs = [n for n in blocked.nodes if n.op == "conv_blocked"]
    if lanes == 16:  # the padded input's 3 groups of 8 and 1 of padding as 2 of 16
        assert [n.attrs["groups"] for n in convs] == [1, 2, 4, 1, 2, 1]
        assert blocked.op_counts()["conv"] == 1  # 8 in, 4 out a group: no block holds both
    else:
        assert [n.attrs["groups"] for n in convs] == [1, 2, 8, 8, 1, 3, 1]
    feeds = [np.random.default_rng(2).standard_normal((1, 8, 9, 7)).astype("float32")]
    _close(run_graph(blocked, feeds), run_graph(g, feeds))


@ISA_PRESETS
def test_grouped_convolutions_compile_and_match(target):
    if not runs_here(target):
        pytest.skip(f"{target} code does not run on this host")
    g = _grouped_cnn(h=10, w=7)
    feeds = [np.random.default_rng(3).standard_normal((1, 8, 10, 7)).astype("float32")]
    model = tessel.compile_model(g, target, layout="blocked")
    assert sum(k.func.name.startswith("fused_conv_blocked") or k.func.name == "conv_blocked"
               for k in model.kernels) >= 3
    _close(model(*feeds), run_graph(g, feeds))


def test_1d_convolutions_run_blocked_as_2d_ones():
    """wav2vec 2.0's feature encoder (stride, GELU between) and positional convolution (16
    groups, padded, dilated here), Whisper's stem: blocked as 2-d ones of height 1; the GELU
    between them runs on the blocked value (it had the first one's output converted back)."""
    rng = np.random.default_rng(10)
    g = Graph("audio")
    x = g.add_input("x", (1, 3, 41))
    a = g.add_node("conv", [x, g.add_constant("w0", rng.standard_normal((32, 3, 5))
                                              .astype("float32") * 0.3)], strides=(2,))
    a = g.add_node("gelu", [a])
    b = g.add_node("conv", [a, g.add_constant("w1", rng.standard_normal((32, 2, 4))
                                              .astype("float32") * 0.3),
                            g.add_constant("b1", np.ones(32, "float32"))],
                   pads=(2, 1), dilations=(2,), groups=16)
    g.set_outputs([a, b])
    blocked = block_layouts(g, 16)
    assert blocked.op_counts()["conv_blocked"] == 2 and "conv" not in blocked.op_counts()
    gelu = next(n for n in blocked.nodes if n.op == "gelu")
    assert len(blocked.types[gelu.output].shape) == 5
    feeds = [rng.standard_normal((1, 3, 41)).astype("float32")]
    _close(run_graph(blocked, feeds), run_graph(g, feeds))
    _close(tessel.compile_model(g, layout="blocked")(*feeds), run_graph(g, feeds))


def _gated_cnn(c=24, h=9, w=7):
    """Squeeze-and-excitation gates (x * sigmoid(conv(mean x))) feeding a 1x1 projection
    (its weight 16 x 24 smaller than the 32-channel padded activation), a 3x3 conv (its
    weight the larger) and, read twice, a 1x1 conv and the model's output."""
    rng = np.random.default_rng(8)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.3)

    def gate(g, x, tag):
        s = g.add_node("conv", [g.add_node("global_avg_pool", [x]), const(g, f"ws{tag}", c, c,
                                                                        1, 1)])
        return g.add_node("mul", [x, g.add_node("sigmoid", [s])])

    g = Graph("gated")
    x = g.add_input("x", (1, 8, h, w))
    a = g.add_node("relu", [g.add_node("conv", [x, const(g, "w0", c, 8, 1, 1)])])
    p = g.add_node("conv", [gate(g, a, 1), const(g, "w1", 16, c, 1, 1), const(g, "b1", 16)])
    q = g.add_node("conv", [gate(g, a, 2), const(g, "w2", 16, c, 3, 3)], pads=(1, 1, 1, 1))
    twice = gate(g, a, 3)
    r = g.add_node("conv", [twice, const(g, "w3", 16, c, 1, 1)])
    g.set_outputs([p, q, r, twice])
    return g


def test_a_gate_on_input_channels_scales_the_smaller_weight():
    """conv(x * g, w) = conv(x, w * g): the 1x1 projection reads the activation itself and a
    weight scaled by the gate (a small kernel, the gate reshaped to the weight's input
    channels); the 3x3 conv (its weight larger than the activation) and the conv whose gated
    input is also a model output read the product as before. Outputs as the plain graph's,
    through the reference and compiled."""
    g = _gated_cnn()
    blocked = block_layouts(g, 16)
    producer = blocked.producer()
    convs = [n for n in blocked.nodes if n.op == "conv_blocked"
             and blocked.types[n.output].shape == (1, 1, 9, 7, 16)]
    assert [producer[n.inputs[1]].op if n.inputs[1] in producer else "constant"
            for n in convs] == ["mul", "constant", "constant"]
    assert [producer[n.inputs[0]].op for n in convs] == ["relu", "mul", "mul"]
    scaled = producer[convs[0].inputs[1]]
    assert blocked.types[scaled.output].shape == (1, 2, 1, 1, 16, 16)
    assert blocked.types[scaled.inputs[1]].shape == (1, 2, 1, 1, 16, 1)
    feeds = [np.random.default_rng(9).standard_normal((1, 8, 9, 7)).astype("float32")]
    want = run_graph(g, feeds)
    _close(run_graph(blocked, feeds), want)
    _close(tessel.compile_model(g, layout="blocked")(*feeds), want)


# ---- threads split a blocked kernel's rows (PrimFunc.partition) ----------------------------
def _rows_cnn():
    """A 1x1 expansion at 10x6 (output 16x larger than its weight), a 3x3 conv whose weight
    outweighs its 4x4 output, a stride-2 depthwise conv to 5 rows (odd: no even split)."""
    rng = np.random.default_rng(6)

    def const(g, name, *shape):
        return g.add_constant(name, rng.standard_normal(shape).astype("float32") * 0.2)

    g = Graph("rows")
    x = g.add_input("x", (1, 16, 10, 6))
    a = g.add_node("relu", [g.add_node("conv", [x, const(g, "w0", 32, 16, 1, 1),
                                               const(g, "b0", 32)])])
    d = g.add_node("conv", [a, const(g, "w1", 32, 1, 3, 3)], strides=(2, 2), pads=(1, 1, 1, 1),
                   groups=32)
    b = g.add_node("conv", [a, const(g, "w2", 64, 32, 3, 3)], strides=(3, 2), pads=(1, 1, 1, 1))
    g.set_outputs([d, b])
    return g


def _parallel_loops(func):
    from tessel.ir import For, collect
    return [f for f in collect(func.body, For) if f.kind == "parallel"]


def _outermost_loop(func):
    from tessel.ir import For, collect
    return next(iter(collect(func.body, For)))


def test_kernels_whose_output_outweighs_their_weights_split_it_by_rows():
    """On 2 cores the expansion's threads each compute a contiguous band of its 10 rows (one
    parallel loop of 2 iterations, outermost, feeding the row index) and its in-model timing
    has each thread produce its band of every channel block of the input; the conv whose
    weight is the larger, the depthwise conv with 5 rows and every kernel on 1 core keep the
    schedule's fused outer loops. The outputs are the plain graph's either way."""
    from tessel.graph.compiler import model_tasks
    from tessel.ir import PARTITION, structural_hash
    g = _rows_cnn()
    two, one = tessel.Target("host", cores=2), tessel.Target("host", cores=1)
    kernels = {k.func.outputs[0].shape: k.func for k in model_tasks(load_model(g), two)[0]}
    lanes = two.vector_lanes("float32")
    expand = kernels[(1, 32 // lanes, 10, 6, lanes)]
    assert [s for s, f in kernels.items() if f.partition == "rows"] == [expand.outputs[0].shape]
    assert not any(k.func.partition for k in model_tasks(load_model(g), one)[0])
    unsplit = tessel.ir.PrimFunc(expand.name, expand.params, expand.body,
                                 {k: v for k, v in expand.attrs.items() if k != PARTITION})
    assert structural_hash(unsplit) != structural_hash(expand)

    feeds = [np.random.default_rng(7).standard_normal((1, 16, 10, 6)).astype("float32")]
    want = run_graph(g, feeds)
    for target in (two, one):
        model = tessel.compile_model(g, target, layout="blocked")
        _close(model(*feeds), want)
        for call in model.calls:
            func, source = call.module.func, call.module.source
            loops = _parallel_loops(func)
            rows = func.partition == "rows"
            assert rows == (target is two and func.outputs[0].shape[2:4] == (10, 6))
            if rows:  # the outermost loop, 2 shares of the rows
                (par,) = loops
                assert par.extent == 2 and _outermost_loop(func) is par
                n, blocks = func.params[0].shape[:2]  # the input: 16 blocks of 1 channel
                assert (n, blocks, len(func.params[0].shape)) == (1, 16, 5)
                assert f"tessel_produce(args[0], {16 * 10 * 6 * 4}, 16)" in source
            else:
                assert re.search(r"tessel_produce\(args\[0\], \d+, 1\)", source)


def test_records_tuned_before_the_rows_split_run_split_by_rows(tmp_path):
    """A database tuned when the expansion's workload had no partition (its older key): the
    executor replays its record on the partitioned workload, so the tuned program runs with
    its rows split between the threads."""
    from tessel.database import TuningRecord
    from tessel.database.record import target_key
    from tessel.graph.compiler import model_tasks
    from tessel.graph.compiler.compile import protocols
    from tessel.space.priors import ranked_priors
    g = _rows_cnn()
    two = tessel.Target("host", cores=2)
    expand = next(k.func for k in model_tasks(load_model(g), two)[0] if k.func.partition)
    older = list(protocols(expand))[1]
    assert older.partition == "" and older.measure == "in_model"
    db = tessel.Database(tmp_path / "older.db")
    design, decisions = ranked_priors(tessel.space.make_space("auto", two), older)[0]
    trace = design.apply(tessel.Schedule(older), decisions).trace
    db.commit([TuningRecord(db.commit_workload(older), target_key(two), trace.to_json(), None,
                            (1e-4,))])
    model = tessel.compile_model(g, two, database=db, layout="blocked")
    status = next(s for s in model.statuses if s.task.workload.partition)
    assert status.tuned
    call = next(c for c in model.calls if c.module.func.partition)
    (par,) = _parallel_loops(call.module.func)
    assert par.extent == 2 and _outermost_loop(call.module.func) is par
    feeds = [np.random.default_rng(8).standard_normal((1, 16, 10, 6)).astype("float32")]
    _close(model(*feeds), run_graph(g, feeds))
    db.close()
