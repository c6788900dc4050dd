"""Graph passes before fusion: constant folding, batch norm into conv weights, dead nodes.

Each pass returns a new Graph and leaves its argument unchanged; value names are kept, so a
value of the input graph that survives has the same name in the result.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from tessel.graph.ir import Graph, Node, unique_name

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


def fresh_name(old: Graph, new: Graph, base: str) -> str:
    """A value name that neither the graph being rebuilt nor its rebuild has (`base`, else
    with a number): for the values a rewrite adds."""
    return unique_name(base, lambda v: v in old.types or v in new.types)


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


__all__ = ["rebuild", "fresh_name", "prune", "fold_constants", "fold_batch_norm"]
