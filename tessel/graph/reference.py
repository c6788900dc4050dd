"""A numpy interpreter of the graph IR: the constant folder's evaluator and the test oracle.

    out = evaluate(node, [x, w])            # one operator on numpy arrays
    y, = run_graph(graph, {"x": x})         # a whole model (feeds by name, or a list in order)

Each operator's `reference` (in `tessel.graph.opdefs`) follows PyTorch / ONNX exactly:
convolutions with groups, dilation and asymmetric pads over 1-3 spatial axes, transposed
convolutions with
output_padding, pools with ceil_mode and count_include_pad, exact and tanh GELU. Float
arithmetic runs in float64 (convolutions as im2col GEMMs), integer arithmetic in its own dtype;
results are given the output's dtype (float32 rounded). Bad inputs raise `GraphError` naming
the node or the feed.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tessel.graph.ir import Graph, Node, TensorType, check
from tessel.graph.opdefs import OPS, infer_type


def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The output of `node` on numpy `args` (its inputs in order), a new array of the node's
    output dtype. Shapes and attributes are checked as when
    the node was added to a graph; defaulted attributes may be left out of `node.attrs`."""
    label = node.name or node.op
    arrays = [np.asarray(x) for x in args]
    attrs = dict(node.attrs)
    out_type = infer_type(node.op, [TensorType(x.shape, str(x.dtype)) for x in arrays], attrs,
                          label)
    op = OPS[node.op]
    with np.errstate(all="ignore"):  # log(0) = -inf and sqrt(-1) = nan, as in torch
        out = op.reference(arrays, attrs, out_type)
    check(out.shape == out_type.shape, f"node {label} ({node.op}): the reference computed "
                                       f"shape {out.shape}, shape inference says {out_type.shape}")
    # a copy (never a view of an input), 0-d kept
    return np.array(out, dtype=out_type.dtype, order="C")


def _feed_list(graph: Graph, feeds: dict[str, np.ndarray] | Sequence[np.ndarray]
               ) -> list[np.ndarray]:
    if isinstance(feeds, dict):
        missing = [v for v in graph.inputs if v not in feeds]
        unknown = sorted(set(feeds) - set(graph.inputs))
        check(not missing, f"graph {graph.name}: no feed for input(s) {missing}")
        check(not unknown, f"graph {graph.name}: feeds {unknown} are not inputs of the graph; "
                           f"its inputs are {graph.inputs}")
        return [feeds[v] for v in graph.inputs]
    feeds = list(feeds)
    check(len(feeds) == len(graph.inputs), f"graph {graph.name}: {len(feeds)} feeds given for "
                                           f"{len(graph.inputs)} inputs {graph.inputs}")
    return feeds


def _check_feed(graph: Graph, name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    want = graph.types[name]
    check(array.shape == want.shape, f"graph {graph.name}: feed {name!r} has shape "
                                     f"{array.shape}, the input is {want.shape}")
    check(str(array.dtype) == want.dtype, f"graph {graph.name}: feed {name!r} has dtype "
                                          f"{array.dtype}, the input is {want.dtype}")
    return array


def _last_uses(graph: Graph) -> dict[str, int]:
    """value -> index of the last node reading it (values never read again can be freed)."""
    last: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
    return last


def run_graph(graph: Graph, feeds: dict[str, np.ndarray] | Sequence[np.ndarray]
              ) -> list[np.ndarray]:
    """Run `graph` on `feeds` (by input name, or a list in `graph.inputs` order): its outputs
    in order. Each feed must have its input's exact shape and dtype."""
    check(graph.outputs, f"graph {graph.name}: has no outputs; call set_outputs first")
    env: dict[str, np.ndarray] = dict(graph.constants)
    for name, value in zip(graph.inputs, _feed_list(graph, feeds)):
        env[name] = _check_feed(graph, name, value)
    keep, last = set(graph.outputs), _last_uses(graph)
    for i, node in enumerate(graph.nodes):
        env[node.output] = evaluate(node, [env[v] for v in node.inputs])
        for v in set(node.inputs):
            if last[v] == i and v not in keep and v not in graph.constants:
                del env[v]
    return [env[v] for v in graph.outputs]


__all__ = ["evaluate", "run_graph"]
