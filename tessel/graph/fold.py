"""Graph passes before fusion: constant folding, batch norm into conv weights, dead nodes.

Each pass returns a new Graph and leaves its argument unchanged; value names are kept, so a
value of the input graph that survives has the same name in the result.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from tessel.graph.ir import Graph, Node

# a rewrite gets (new graph, node, its inputs renamed) and returns the node's new output
# value, or None to copy the node unchanged
Rewrite = Callable[[Graph, Node, list[str]], "str | None"]


def rebuild(graph: Graph, rewrite: Rewrite | None = None) -> Graph:
    """A copy of `graph` whose nodes pass through `rewrite` in order, without the nodes and
    constants that no output depends on."""
    new = Graph(graph.name)
    for v in graph.inputs:
        new.add_input(v, graph.types[v].shape, graph.types[v].dtype)
    for name, value in graph.constants.items():
        new.add_constant(name, value)
    renamed: dict[str, str] = {}
    for node in graph.nodes:
        inputs = [renamed.get(v, v) for v in node.inputs]
        out = rewrite(new, node, inputs) if rewrite else None
        if out is None:
            out = new.add_node(node.op, inputs, name=node.name, output=node.output,
                               **dict(node.attrs))
        renamed[node.output] = out
    new.set_outputs([renamed.get(v, v) for v in graph.outputs])
    return prune(new)


def prune(graph: Graph) -> Graph:
    """Drop (in place) the nodes and constants that no output depends on."""
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.output in live:
            live.update(node.inputs)
    dead = [n.output for n in graph.nodes if n.output not in live]
    dead += [c for c in graph.constants if c not in live]
    graph.nodes = [n for n in graph.nodes if n.output in live]
    for v in dead:
        graph.constants.pop(v, None)
        del graph.types[v]
    return graph


def fold_constants(graph: Graph) -> Graph:
    """Evaluate every node whose inputs are all constants (with the numpy reference)."""
    from tessel.graph.reference import evaluate

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        if node.op == "reshape" or not all(v in new.constants for v in inputs):
            return _fold_reshape(new, node, inputs)
        value = evaluate(node, [new.constants[v] for v in inputs])
        return new.add_constant(node.output, value)  # (in its dtype)

    return rebuild(graph, rewrite)


def _fold_reshape(new: Graph, node: Node, inputs: list[str]) -> str | None:
    if node.op == "reshape" and inputs[0] in new.constants:
        value = new.constants[inputs[0]].reshape(node.attrs["shape"])
        return new.add_constant(node.output, value)
    return None


def fold_batch_norm(graph: Graph) -> Graph:
    """conv -> batch_norm with constant weights becomes one conv with scaled weights and a
    bias (inference batch norm is an affine map per output channel)."""
    users = graph.consumers()
    producer = graph.producer()

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        if node.op != "batch_norm":
            return None
        conv = producer.get(node.inputs[0])
        if (conv is None or conv.op != "conv" or len(users[conv.output]) != 1
                or conv.output in graph.outputs
                or not all(v in graph.constants for v in (*conv.inputs[1:], *node.inputs[1:]))):
            return None
        return _folded_conv(new, conv, node)

    return rebuild(graph, rewrite)


def _folded_conv(new: Graph, conv: Node, bn: Node) -> str:
    c = new.constants
    weight = c[conv.inputs[1]]
    bias = c[conv.inputs[2]] if len(conv.inputs) > 2 else np.zeros(weight.shape[0], np.float32)
    scale, shift, mean, var = (c[v].astype(np.float64) for v in bn.inputs[1:])
    factor = scale / np.sqrt(var + bn.attrs["epsilon"])
    w = (weight * factor.reshape(-1, *(1,) * (weight.ndim - 1))).astype(np.float32)
    b = ((bias - mean) * factor + shift).astype(np.float32)
    w_name = new.add_constant(new._fresh(conv.inputs[1] + "_bn"), w)
    b_name = new.add_constant(new._fresh(bn.output + "_bias"), b)
    # the copy of the unfolded conv is left dead (pruned); its input keeps its name
    return new.add_node("conv", [conv.inputs[0], w_name, b_name], name=conv.name,
                        output=bn.output, **dict(conv.attrs))


def recognize_gelu(graph: Graph) -> Graph:
    """x * (1 + erf(x / sqrt(2))) * 0.5, as exporters spell GELU, becomes one gelu node: x has
    two readers in that spelling, which would keep the chain out of its producer's kernel."""
    producer = graph.producer()

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        x = _gelu_input(graph, producer, node)
        return None if x is None else new.add_node("gelu", [x], name=node.name,
                                                   output=node.output)

    return rebuild(graph, rewrite)


def _scalar_operand(graph: Graph, node: Node) -> tuple[float | None, str]:
    """(the value of a one-element constant input, the other input) of a binary node."""
    a, b = node.inputs
    for c, other in ((b, a), (a, b)):
        if c in graph.constants and graph.constants[c].size == 1:
            return float(graph.constants[c].reshape(-1)[0]), other
    return None, a


def _gelu_input(graph: Graph, producer: dict[str, Node], node: Node) -> str | None:
    if node.op != "mul" or _scalar_operand(graph, node)[0] != 0.5:
        return None
    inner = producer.get(_scalar_operand(graph, node)[1])
    if inner is None or inner.op != "mul":
        return None
    for x, a in (inner.inputs, inner.inputs[::-1]):
        plus = producer.get(a)
        if plus is None or plus.op != "add" or _scalar_operand(graph, plus)[0] != 1.0:
            continue
        erf = producer.get(_scalar_operand(graph, plus)[1])
        scaled = producer.get(erf.inputs[0]) if erf is not None and erf.op == "erf" else None
        if scaled is not None and scaled.op in ("div", "mul"):
            c, operand = _scalar_operand(graph, scaled)
            want = math.sqrt(2.0) if scaled.op == "div" else math.sqrt(0.5)
            if operand == x and c is not None and abs(c - want) < 1e-6:
                return x
    return None


def simplify(graph: Graph) -> Graph:
    """The standard pipeline before fusion: fold constants, fold batch norms, fold again,
    recognize exporters' spelled-out GELU."""
    return recognize_gelu(fold_constants(fold_batch_norm(fold_constants(graph))))


__all__ = ["rebuild", "prune", "recognize_gelu", "fold_constants", "fold_batch_norm", "simplify"]
