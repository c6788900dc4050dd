"""Exporters' spellings recognized before fusion (tessel.graph.spellings): GELU's tanh form
written out, a linear layer flattened to rows around its product (GPT-2's Conv1D) or over
sequence-first rows (nn.MultiheadAttention's), and attention's scale split over q and k^T
(torch's ONNX export of scaled_dot_product_attention)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tessel.graph import Graph
from tessel.graph.compiler import compile_model
from tessel.graph.fuse import fuse
from tessel.graph.passes import simplify
from tessel.graph.reference import run_graph

RNG = np.random.default_rng(7)


def _const(g: Graph, name: str, *shape: int) -> str:
    return g.add_constant(name, RNG.uniform(-0.5, 0.5, shape).astype(np.float32))


def _scalar(g: Graph, name: str, value: float) -> str:
    return g.add_constant(name, np.float32(value))


def _cube(g: Graph, x: str, spelling: str) -> str:
    if spelling == "pow":
        return g.add_node("pow", [x, _scalar(g, "three", 3.0)])
    return g.add_node("mul", [g.add_node("mul", [x, x]), x])


def _tanh_gelu(g: Graph, x: str, spelling: str, half_first: bool) -> str:
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) as exporters write it."""
    cubed = g.add_node("mul", [_cube(g, x, spelling), _scalar(g, "c", 0.044715)])
    inner = g.add_node("mul", [g.add_node("add", [x, cubed]),
                               _scalar(g, "s", math.sqrt(2.0 / math.pi))])
    plus = g.add_node("add", [g.add_node("tanh", [inner]), _scalar(g, "one", 1.0)])
    if half_first:  # GPT-2's NewGELUActivation: (0.5 * x) * (1 + tanh(...))
        return g.add_node("mul", [g.add_node("mul", [x, _scalar(g, "half", 0.5)]), plus])
    return g.add_node("mul", [_scalar(g, "half", 0.5), g.add_node("mul", [x, plus])])


@pytest.mark.parametrize("spelling, half_first",
                         [("pow", True), ("pow", False), ("muls", True)])
def test_spelled_out_tanh_gelu_becomes_one_node_and_fuses_into_its_dense(spelling, half_first):
    g = Graph("ffn")
    x = g.add_input("x", (3, 5))
    h = g.add_node("dense", [x, _const(g, "w", 7, 5), _const(g, "b", 7)])
    g.set_outputs([_tanh_gelu(g, h, spelling, half_first)])
    simple = simplify(g)
    assert simple.op_counts() == {"dense": 1, "gelu": 1}
    assert [n.attrs["approximate"] for n in simple.nodes if n.op == "gelu"] == ["tanh"]
    assert [grp.name for grp in fuse(simple)] == ["fused_dense_gelu"]
    feeds = [RNG.standard_normal((3, 5)).astype(np.float32) * 3]
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def test_a_tanh_gelu_with_another_constant_is_left_as_written():
    g = Graph("almost")
    x = g.add_input("x", (4, 6))
    y = _tanh_gelu(g, x, "pow", True)
    g.constants["c"] = np.float32(0.05)  # not GELU's 0.044715
    g.set_outputs([y])
    assert "gelu" not in simplify(g).op_counts()


def _flattened_linear(x_shape: tuple[int, ...], n: int, back: tuple[int, ...]) -> Graph:
    """reshape(dense(reshape(x, (rows, k))), back) + residual, then relu: GPT-2's Conv1D (k
    is x's last axis, or with `heads` its last two)."""
    g = Graph("conv1d")
    x = g.add_input("x", x_shape)
    r = g.add_input("r", back)
    k = math.prod(x_shape[len(back) - 1:])
    flat = g.add_node("reshape", [x], shape=(math.prod(x_shape) // k, k))
    y = g.add_node("dense", [flat, _const(g, "w", n, k), _const(g, "b", n)])
    out = g.add_node("relu", [g.add_node("add", [g.add_node("reshape", [y], shape=back), r])])
    g.set_outputs([out])
    return g


@pytest.mark.parametrize("x_shape, views", [((1, 9, 5), 0), ((1, 9, 2, 3), 1)],
                         ids=["rows", "heads"])
def test_a_linear_layer_flattened_to_rows_is_one_kernel_with_its_residual_and_activation(
        x_shape, views):
    """GPT-2's MLP (x is (1, 9, K)) and its attention's output projection (x holds the heads,
    (1, 9, heads, K / heads): seen as (1, 9, K), a view)."""
    g = _flattened_linear(x_shape, 7, (1, 9, 7))
    simple = simplify(g)
    assert simple.op_counts() == {"dense": 1, "add": 1, "relu": 1, **({"reshape": 1} if views
                                                                      else {})}
    assert [grp.name for grp in fuse(simple) if not grp.is_view] == ["fused_dense_add_relu"]
    feeds = [RNG.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs]
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def test_a_reshape_that_does_not_keep_the_columns_last_stays():
    g = Graph("folded")
    x = g.add_input("x", (2, 3, 5))
    flat = g.add_node("reshape", [x], shape=(6, 5))
    y = g.add_node("dense", [flat, _const(g, "w", 7, 5)])
    g.set_outputs([g.add_node("relu", [g.add_node("reshape", [y], shape=(3, 14))])])
    assert simplify(g).op_counts() == {"reshape": 2, "dense": 1, "relu": 1}


def test_a_linear_layer_over_sequence_first_rows_computes_them_as_rows():
    """nn.MultiheadAttention's projections read (L, 1, E): the product's rows are L, not 1."""
    g = Graph("seq_first")
    x = g.add_input("x", (11, 1, 5))
    y = g.add_node("dense", [x, _const(g, "w", 7, 5), _const(g, "b", 7)])
    g.set_outputs([g.add_node("relu", [y])])
    simple = simplify(g)
    dense = next(n for n in simple.nodes if n.op == "dense")
    assert simple.types[dense.inputs[0]].shape == (11, 5)
    assert simple.types[simple.outputs[0]].shape == (11, 1, 7)
    feeds = [RNG.standard_normal((11, 1, 5)).astype(np.float32)]
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)
    one = Graph("one_row")  # (1, 1, K): one row either way, left as it is
    x = one.add_input("x", (1, 1, 5))
    one.set_outputs([one.add_node("dense", [x, _const(one, "w", 7, 5)])])
    assert simplify(one).op_counts() == {"dense": 1}


def test_zero_padding_before_a_convolution_becomes_its_own():
    """TensorFlow's "same" padding as a Pad node (timm's tf_efficientnet): the convolution
    pads inside its loops; a pad of the channels, or with another value, stays."""
    g = Graph("same")
    x = g.add_input("x", (1, 3, 9, 8))
    p = g.add_node("pad", [x], pads=(0, 0, 1, 0, 0, 0, 2, 1))
    y = g.add_node("conv", [p, _const(g, "w", 4, 3, 3, 3)], strides=(2, 2), pads=(1, 1, 0, 0))
    q = g.add_node("pad", [x], pads=(0, 1, 0, 0, 0, 0, 0, 0))  # a channel: stays
    z = g.add_node("conv", [q, _const(g, "v", 2, 4, 1, 1)])
    r = g.add_node("pad", [x], pads=(0, 0, 1, 1, 0, 0, 1, 1), value=1.0)  # not zeros: stays
    u = g.add_node("conv", [r, _const(g, "u", 2, 3, 1, 1)])
    g.set_outputs([y, z, u])
    simple = simplify(g)
    assert simple.op_counts() == {"conv": 3, "pad": 2}
    first = next(n for n in simple.nodes if n.op == "conv")
    assert first.inputs[0] == x and first.attrs["pads"] == (2, 1, 2, 1)
    feeds = [RNG.standard_normal((1, 3, 9, 8)).astype(np.float32)]
    for got, want in zip(run_graph(simple, feeds), run_graph(g, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(compile_model(g)(*feeds), run_graph(g, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_silu_written_as_x_times_its_sigmoid_fuses_and_a_gate_on_another_value_stays():
    """EfficientNet's SiLU (x * sigmoid(x)) becomes one node in its dense's kernel; its
    squeeze-excite gate, x * sigmoid(s) of another value s, stays a mul of two values."""
    g = Graph("swish")
    x = g.add_input("x", (3, 5))
    s = g.add_input("s", (3, 7))
    h = g.add_node("dense", [x, _const(g, "w", 7, 5), _const(g, "b", 7)])
    y = g.add_node("mul", [g.add_node("sigmoid", [h]), h])
    g.set_outputs([g.add_node("mul", [y, g.add_node("sigmoid", [s])])])
    simple = simplify(g)
    assert simple.op_counts() == {"dense": 1, "silu": 1, "sigmoid": 1, "mul": 1}
    # (the gate's sigmoid, of the product's shape, joins the dense's kernel as a prologue)
    assert [grp.name for grp in fuse(simple)] == ["fused_sigmoid_dense_silu_mul"]
    feeds = [RNG.standard_normal(g.types[v].shape).astype(np.float32) * 4 for v in g.inputs]
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def _attention_scores(scale_q: bool, scale_k: bool, seq: int = 13, op: str = "mul") -> Graph:
    """softmax(q' k'^T) over 3 heads of 8, where q' = q * sqrt(s) and k'^T = k^T * sqrt(s) as
    torch exports scaled_dot_product_attention (each scaling optional; with op "div", q' =
    q / (1 / sqrt(s)))."""
    g = Graph("scores")
    q = g.add_node("transpose", [g.add_input("q", (1, seq, 3, 8))], perm=(0, 2, 1, 3))
    kt = g.add_node("transpose", [g.add_input("k", (1, seq, 3, 8))], perm=(0, 2, 3, 1))
    root = math.sqrt(1 / math.sqrt(8))
    if scale_q:
        q = g.add_node(op, [q, _scalar(g, "sq", root if op == "mul" else 1 / root)])
    kt = g.add_node("mul", [kt, _scalar(g, "sk", root)]) if scale_k else kt
    g.set_outputs([g.add_node("softmax", [g.add_node("matmul", [q, kt])], axis=-1)])
    return g


@pytest.mark.parametrize("scale_q, scale_k, op", [(True, True, "mul"), (True, False, "mul"),
                                                  (False, True, "mul"), (True, True, "div")])
def test_attention_scale_split_over_q_and_k_is_applied_once_to_the_scores(scale_q, scale_k, op):
    g = _attention_scores(scale_q, scale_k, op=op)
    simple = simplify(g)
    assert simple.op_counts() == {"transpose": 2, "matmul": 1, "mul": 1, "softmax": 1}
    product = next(n for n in simple.nodes if n.op == "matmul")
    assert all(simple.producer()[v].op == "transpose" for v in product.inputs)
    scale = next(n for n in simple.nodes if n.op == "mul")
    assert scale.inputs[0] == product.output
    want = (1 / math.sqrt(8)) ** ((scale_q + scale_k) / 2)
    assert float(simple.constants[scale.inputs[1]]) == pytest.approx(want, rel=1e-6)
    # the scaling is the product's epilogue: no kernel multiplies q or k^T any more
    assert any(grp.name.endswith("matmul_mul") for grp in fuse(simple))
    feeds = [RNG.standard_normal(g.types[v].shape).astype(np.float32) * 3 for v in g.inputs]
    np.testing.assert_allclose(compile_model(g)(*feeds)[0], run_graph(g, feeds)[0],
                               rtol=1e-5, atol=1e-6)


def test_a_scaled_operand_read_elsewhere_or_scaled_per_element_keeps_its_multiply():
    g = _attention_scores(True, False)
    scaled = next(n.output for n in g.nodes if n.op == "mul")
    g.set_outputs([*g.outputs, scaled])  # q' is an output too: its multiply stays
    assert simplify(g).op_counts()["mul"] == 1
    assert next(n for n in simplify(g).nodes if n.op == "matmul").inputs[0] == scaled
    h = Graph("per_element")
    x = h.add_input("x", (4, 5))
    w = h.add_node("mul", [h.add_input("y", (5, 6)), _const(h, "c", 5, 1)])
    h.set_outputs([h.add_node("matmul", [x, w])])
    assert simplify(h).op_counts() == {"mul": 1, "matmul": 1}
    assert simplify(h).nodes[-1].op == "matmul"
    d = Graph("reciprocal")  # 2 / x is no scaling of x
    x = d.add_input("x", (4, 5))
    d.set_outputs([d.add_node("matmul", [d.add_node("div", [_scalar(d, "two", 2.0), x]),
                                         _const(d, "w", 5, 6)])])
    assert simplify(d).nodes[-1].op == "matmul"
