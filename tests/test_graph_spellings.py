"""Exporters' spellings recognized before fusion (tessel.graph.spellings): GELU's tanh form
written out, and a linear layer flattened to rows around its product (GPT-2's Conv1D)."""
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
