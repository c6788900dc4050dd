"""A numpy interpreter of the graph IR: the constant folder's evaluator and the test oracle.

    out = evaluate(node, [x, w])            # one operator on numpy arrays
    y, = run_graph(graph, {"x": x})         # a whole model (feeds by name, or a list in order)

Every operator of `tessel.graph.ops.OPS` follows PyTorch / ONNX exactly: convolutions with
groups, dilation and asymmetric pads over 1-3 spatial axes, transposed convolutions with
output_padding, pools with ceil_mode and count_include_pad, exact and tanh GELU. Arithmetic
runs in float64 (convolutions as im2col GEMMs) and results are rounded to float32; reshape and
concat keep their input dtype. Bad inputs raise `GraphError` naming the node or the feed.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np

from tessel.graph.ir import Graph, Node, TensorType, check
from tessel.graph.ops import infer
from tessel.ops import reference as ref

Attrs = dict[str, Any]
F64 = np.float64


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=F64)


def _erf(x: np.ndarray) -> np.ndarray:
    try:
        from scipy.special import erf
    except ImportError:  # scipy is optional: math.erf is exact but slower
        return ref.erf_f64(x).astype(F64)
    return erf(x)


# ---- convolutions ----------------------------------------------------------------------------


def _split_pads(pads: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    nd = len(pads) // 2
    return tuple(pads[:nd]), tuple(pads[nd:])


def _channel_bias(out: np.ndarray, args: list[np.ndarray]) -> np.ndarray:
    if len(args) < 3:
        return out
    return out + _f64(args[2]).reshape((-1,) + (1,) * (out.ndim - 2))


def _conv(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    x, w = _f64(args[0]), args[1]
    before, after = _split_pads(a["pads"])
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(before, after)))
    nd = x.ndim - 2
    out = ref.conv_nd(x, w, a["strides"], (0,) * nd, a["dilations"], a["groups"])
    return _channel_bias(out, args)


def _conv_transpose(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    x, w = args[0], args[1]
    full = ref.scatter_taps(x, w, a["strides"], a["dilations"], a["groups"],
                             a["output_padding"])  # (O, N, *uncropped)
    before, after = _split_pads(a["pads"])
    crop = tuple(slice(b, n - e) for b, e, n in zip(before, after, full.shape[2:]))
    return _channel_bias(full[(slice(None), slice(None)) + crop].swapaxes(0, 1), args)


def _dense(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    out = _f64(args[0]) @ _f64(args[1]).T
    return out + _f64(args[2]) if len(args) > 2 else out


def _matmul(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    return np.matmul(_f64(args[0]), _f64(args[1]))


# ---- pooling ---------------------------------------------------------------------------------


def _pool_padding(x: np.ndarray, a: Attrs, out_sp: Sequence[int]) -> list[tuple[int, int]]:
    """(before, after) per spatial axis; after grows so that ceil_mode's last windows fit."""
    before, after = _split_pads(a["pads"])
    pads = []
    for n, k, s, b, e, o in zip(x.shape[2:], a["kernel"], a["strides"], before, after, out_sp):
        pads.append((b, max(e, (o - 1) * s + k - b - n)))
    return pads


def _window_counts(a: Attrs, sizes: Sequence[int], out_sp: Sequence[int]) -> np.ndarray:
    """How many elements avg_pool divides each window's sum by, as an (*out_sp) array."""
    before, after = _split_pads(a["pads"])
    counts = np.ones((), F64)
    for n, k, s, b, e, o in zip(sizes, a["kernel"], a["strides"], before, after, out_sp):
        lo, hi = (-b, n + e) if a["count_include_pad"] else (0, n)
        start = np.arange(o) * s - b
        axis = np.minimum(start + k, hi) - np.maximum(start, lo)
        counts = np.multiply.outer(counts, axis.astype(F64))
    return counts


def _pool(args: list[np.ndarray], a: Attrs, out_sp: Sequence[int], is_max: bool) -> np.ndarray:
    x = args[0] if is_max else _f64(args[0])
    fill = -np.inf if is_max else 0.0
    padded = np.pad(x, [(0, 0), (0, 0)] + _pool_padding(x, a, out_sp), constant_values=fill)
    nd = x.ndim - 2
    windows = ref.sliding_windows(padded, a["kernel"], a["strides"], (1,) * nd)
    windows = windows[(slice(None), slice(None)) + tuple(slice(o) for o in out_sp)]
    axes = tuple(range(-nd, 0))
    if is_max:
        return windows.max(axis=axes)
    return windows.sum(axis=axes) / _window_counts(a, x.shape[2:], out_sp)


def _max_pool(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    return _pool(args, a, out.shape[2:], is_max=True)


def _avg_pool(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    return _pool(args, a, out.shape[2:], is_max=False)


def _reduce_mean(args: list[np.ndarray], a: Attrs, out: TensorType) -> np.ndarray:
    return _f64(args[0]).mean(axis=tuple(a["axes"])).reshape(out.shape)


def _global_avg_pool(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    x = _f64(args[0])
    return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


# ---- normalization ---------------------------------------------------------------------------


def _batch_norm(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    x, scale, bias, mean, var = args
    return ref.batch_norm_f64(_f64(x), scale, bias, mean, var, a["epsilon"])


def _layer_norm(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    x, axis = args[0], a["axis"]
    rows = x.reshape(math.prod(x.shape[:axis]), -1)
    params = [p.reshape(-1) for p in args[1:]]
    return ref.layer_norm(_f64(rows), *params, eps=a["epsilon"]).reshape(x.shape)


def _softmax(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    return ref.softmax(_f64(args[0]), a["axis"])


# ---- elementwise -----------------------------------------------------------------------------


def _gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    check(approximate == "none", f"gelu: approximate must be 'none' or 'tanh', "
                                 f"got {approximate!r}")
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _clip(x: np.ndarray, lo: float | None, hi: float | None) -> np.ndarray:
    if lo is not None:
        x = np.maximum(x, lo)
    return x if hi is None else np.minimum(x, hi)


UNARY_FNS: dict[str, Callable[[np.ndarray, Attrs], np.ndarray]] = {
    "relu": lambda x, a: np.maximum(x, 0.0),
    "sigmoid": lambda x, a: ref.sigmoid(x),
    "tanh": lambda x, a: np.tanh(x),
    "erf": lambda x, a: _erf(x),
    "exp": lambda x, a: np.exp(x),
    "log": lambda x, a: np.log(x),
    "sqrt": lambda x, a: np.sqrt(x),
    "neg": lambda x, a: -x,
    "abs": lambda x, a: np.abs(x),
    "gelu": lambda x, a: _gelu(x, a["approximate"]),
    "clip": lambda x, a: _clip(x, a["min"], a["max"]),
    "leaky_relu": lambda x, a: np.where(x > 0, x, x * a["alpha"]),
}
BINARY_FNS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
}


def _unary(op: str) -> Callable[[list[np.ndarray], Attrs], np.ndarray]:
    return lambda args, a: UNARY_FNS[op](_f64(args[0]), a)


def _binary(op: str) -> Callable[[list[np.ndarray], Attrs], np.ndarray]:
    return lambda args, a: BINARY_FNS[op](_f64(args[0]), _f64(args[1]))


# ---- layout ----------------------------------------------------------------------------------


def _reshape(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    return np.reshape(args[0], a["shape"])


def _transpose(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    return np.transpose(args[0], a["perm"])


def _concat(args: list[np.ndarray], a: Attrs) -> np.ndarray:
    return np.concatenate(args, axis=a["axis"])


# op -> fn(args, attrs) or, for the ops marked in _NEEDS_TYPE, fn(args, attrs, output type)
EVALUATORS: dict[str, Callable[..., np.ndarray]] = {
    "conv": _conv, "conv_transpose": _conv_transpose, "dense": _dense, "matmul": _matmul,
    **{op: _binary(op) for op in BINARY_FNS}, **{op: _unary(op) for op in UNARY_FNS},
    "batch_norm": _batch_norm, "max_pool": _max_pool, "avg_pool": _avg_pool,
    "global_avg_pool": _global_avg_pool, "reduce_mean": _reduce_mean, "softmax": _softmax,
    "layer_norm": _layer_norm, "reshape": _reshape, "transpose": _transpose, "concat": _concat,
}
_NEEDS_TYPE = {"max_pool", "avg_pool", "reduce_mean"}
_KEEPS_DTYPE = {"reshape", "transpose", "concat"}


def evaluate(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """The output of `node` on numpy `args` (its inputs in order), a new float32 array (reshape,
    transpose and concat keep their input dtype). Shapes and attributes are checked as when
    the node was added to a graph; defaulted attributes may be left out of `node.attrs`."""
    label = node.name or node.op
    arrays = [np.asarray(x) for x in args]
    attrs = dict(node.attrs)
    out_type = infer(node.op, [TensorType(x.shape, str(x.dtype)) for x in arrays], attrs, label)
    fn = EVALUATORS[node.op]
    with np.errstate(all="ignore"):  # log(0) = -inf and sqrt(-1) = nan, as in torch
        out = fn(arrays, attrs, out_type) if node.op in _NEEDS_TYPE else fn(arrays, attrs)
    check(out.shape == out_type.shape, f"node {label} ({node.op}): the reference computed "
                                       f"shape {out.shape}, shape inference says {out_type.shape}")
    dtype = out_type.dtype if node.op in _KEEPS_DTYPE else "float32"
    return np.array(out, dtype=dtype, order="C")  # a copy (never a view of an input), 0-d kept


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


__all__ = ["evaluate", "run_graph", "EVALUATORS"]
