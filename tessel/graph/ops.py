"""The canonical operators of the graph IR: inputs, attributes, fusion kind, shape inference.

Layouts are PyTorch's (NC[D]HW data, OI[D]HW conv weights); float32 unless said. `pads` list
the padding before each spatial axis, then after each (ONNX order). Binary elementwise
operators broadcast as numpy does.

| op | inputs | attributes |
|---|---|---|
| conv | x, w (O, C/groups, *k)[, b (O,)] | strides, pads, dilations, groups |
| conv_transpose | x, w (C, O/groups, *k)[, b] | strides, pads, output_padding, dilations, groups |
| dense | x (..., K), w (N, K)[, b (N,)] | (torch linear) |
| matmul | a (..., M, K), b (..., K, N) | (numpy matmul, batch dims broadcast; ranks >= 2) |
| add sub mul div pow maximum minimum | a, b | |
| relu sigmoid tanh erf exp log sqrt neg abs | x | |
| gelu | x | approximate: "none" or "tanh" |
| clip | x | min, max (None: unbounded) |
| leaky_relu | x | alpha |
| batch_norm | x, scale, bias, mean, var (each (C,)) | epsilon (channels on axis 1) |
| max_pool, avg_pool | x | kernel, strides, pads, ceil_mode (avg: count_include_pad) |
| global_avg_pool | x | (keeps the spatial axes as 1) |
| reduce_mean | x | axes, keepdims |
| softmax | x | axis |
| layer_norm | x, scale[, bias] | axis (normalizes axes axis..end), epsilon |
| reshape | x | shape (static, no -1 or 0) |
| transpose | x | perm |
| concat | x0, x1, ... | axis |

Kinds drive fusion (as TVM's operator patterns): "anchor" (complex, fusable with elementwise
consumers), "reduce", "elemwise", "injective" (index remapping), "view" (a reshape: the
executor aliases the buffer, no kernel).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tessel.graph.ir import GraphError, TensorType, check

REQUIRED = object()

UNARY = ("relu", "sigmoid", "tanh", "erf", "exp", "log", "sqrt", "neg", "abs", "gelu", "clip",
         "leaky_relu")
BINARY = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")


@dataclass(frozen=True)
class OpDef:
    kind: str
    infer: Callable[[list[TensorType], dict[str, Any], str], tuple[int, ...]]
    attrs: dict[str, Any]
    n_inputs: tuple[int, int]  # (min, max); max -1 = any


def infer(op: str, inputs: list[TensorType], attrs: dict[str, Any], label: str) -> TensorType:
    """The output type of `op` on `inputs`; fills defaulted attributes into `attrs`."""
    check(op in OPS, f"node {label}: unsupported operator {op!r}; tessel's graph IR has "
                     f"{sorted(OPS)}")
    d = OPS[op]
    lo, hi = d.n_inputs
    check(len(inputs) >= lo and (hi < 0 or len(inputs) <= hi),
          f"node {label} ({op}): takes {lo}{'' if hi == lo else '+' if hi < 0 else f'-{hi}'} "
          f"inputs, got {len(inputs)}")
    for key in attrs:
        check(key in d.attrs, f"node {label} ({op}): unknown attribute {key!r}; "
                              f"expected {sorted(d.attrs)}")
    for key, default in d.attrs.items():
        if key not in attrs:
            check(default is not REQUIRED, f"node {label} ({op}): missing attribute {key!r}")
            attrs[key] = default
    for t in inputs:
        check(t.dtype == "float32" or op in ("reshape", "concat"),
              f"node {label} ({op}): only float32 tensors are supported, got {t.dtype}")
    shape = d.infer(inputs, attrs, label)
    check(all(n >= 1 for n in shape), f"node {label} ({op}): empty output shape {shape}")
    return TensorType(tuple(int(n) for n in shape), inputs[0].dtype)


# ---- shape functions ----

def _ints(label: str, op: str, name: str, value: Any, n: int) -> tuple[int, ...]:
    values = tuple(int(v) for v in value)
    check(len(values) == n, f"node {label} ({op}): {name} needs {n} values, got {list(value)}")
    return values


def _conv(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    nd = len(x) - 2
    check(1 <= nd <= 3 and len(w) == len(x),
          f"node {label} (conv): data {x} and weight {w} must both be 3-d, 4-d or 5-d")
    strides = _ints(label, "conv", "strides", attrs["strides"] or (1,) * nd, nd)
    dil = _ints(label, "conv", "dilations", attrs["dilations"] or (1,) * nd, nd)
    pads = _ints(label, "conv", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    attrs.update(strides=strides, dilations=dil, pads=pads)
    g = attrs["groups"]
    check(x[1] == w[1] * g and w[0] % g == 0,
          f"node {label} (conv): {x[1]} input channels do not fit weight {w} with groups={g}")
    if len(inputs) > 2:
        check(inputs[2].shape == (w[0],), f"node {label} (conv): bias {inputs[2].shape} "
                                          f"must be ({w[0]},)")
    out = [(n + pads[i] + pads[i + nd] - dil[i] * (k - 1) - 1) // strides[i] + 1
           for i, (n, k) in enumerate(zip(x[2:], w[2:]))]
    check(all(o >= 1 for o in out), f"node {label} (conv): kernel {w[2:]} larger than the "
                                     f"padded input {x[2:]}")
    return (x[0], w[0], *out)


def _conv_transpose(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    nd = len(x) - 2
    check(1 <= nd <= 3 and len(w) == len(x), f"node {label} (conv_transpose): data {x} and "
                                             f"weight {w} ranks do not match")
    g = attrs["groups"]
    check(x[1] == w[0] and x[1] % g == 0, f"node {label} (conv_transpose): {x[1]} input "
                                          f"channels do not fit weight {w} (groups={g})")
    strides = _ints(label, "conv_transpose", "strides", attrs["strides"] or (1,) * nd, nd)
    dil = _ints(label, "conv_transpose", "dilations", attrs["dilations"] or (1,) * nd, nd)
    pads = _ints(label, "conv_transpose", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    opad = _ints(label, "conv_transpose", "output_padding",
                 attrs["output_padding"] or (0,) * nd, nd)
    attrs.update(strides=strides, dilations=dil, pads=pads, output_padding=opad)
    out = [(n - 1) * s - pads[i] - pads[i + nd] + d * (k - 1) + op + 1
           for i, (n, k, s, d, op) in enumerate(zip(x[2:], w[2:], strides, dil, opad))]
    return (x[0], w[1] * g, *out)


def _dense(inputs, attrs, label):
    x, w = inputs[0].shape, inputs[1].shape
    check(len(w) == 2 and x[-1] == w[1], f"node {label} (dense): data {x} and weight {w} "
                                         f"(N, K) disagree on K")
    if len(inputs) > 2:
        check(inputs[2].shape == (w[0],), f"node {label} (dense): bias must be ({w[0]},)")
    return (*x[:-1], w[0])


def _matmul(inputs, attrs, label):
    a, b = inputs[0].shape, inputs[1].shape
    check(len(a) >= 2 and len(b) >= 2 and a[-1] == b[-2],
          f"node {label} (matmul): shapes {a} and {b} do not multiply")
    return (*broadcast_shape([a[:-2], b[:-2]], label), a[-2], b[-1])


def broadcast_shape(shapes: Sequence[tuple[int, ...]], label: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"node {label}: shapes {list(shapes)} do not broadcast") from None


def _binary(inputs, attrs, label):
    return broadcast_shape([t.shape for t in inputs], label)


def _same(inputs, attrs, label):
    return inputs[0].shape


def _batch_norm(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) >= 2, f"node {label} (batch_norm): data must have a channel axis, got {x}")
    for t in inputs[1:]:
        check(t.shape == (x[1],), f"node {label} (batch_norm): parameters must be ({x[1]},), "
                                  f"got {t.shape}")
    return x


def _pool(inputs, attrs, label):
    x = inputs[0].shape
    nd = len(x) - 2
    check(1 <= nd <= 3, f"node {label} (pool): data must be 3-d to 5-d, got {x}")
    kernel = _ints(label, "pool", "kernel", attrs["kernel"], nd)
    strides = _ints(label, "pool", "strides", attrs["strides"] or kernel, nd)
    pads = _ints(label, "pool", "pads", attrs["pads"] or (0,) * 2 * nd, 2 * nd)
    attrs.update(kernel=kernel, strides=strides, pads=pads)
    rnd = math.ceil if attrs["ceil_mode"] else math.floor
    out = []
    for i, n in enumerate(x[2:]):
        size = rnd((n + pads[i] + pads[i + nd] - kernel[i]) / strides[i]) + 1
        if attrs["ceil_mode"] and (size - 1) * strides[i] >= n + pads[i]:
            size -= 1  # the last window must start inside the input or its left padding
        out.append(size)
    return (*x[:2], *out)


def _global_pool(inputs, attrs, label):
    x = inputs[0].shape
    check(len(x) >= 3, f"node {label} (global_avg_pool): data must be 3-d or more, got {x}")
    return (*x[:2], *(1,) * (len(x) - 2))


def _axis(label: str, op: str, axis: int, rank: int) -> int:
    check(-rank <= axis < rank, f"node {label} ({op}): axis {axis} out of range for rank {rank}")
    return axis % rank


def _reduce_mean(inputs, attrs, label):
    x = inputs[0].shape
    axes = sorted({_axis(label, "reduce_mean", a, len(x)) for a in attrs["axes"]})
    attrs["axes"] = tuple(axes)
    if attrs["keepdims"]:
        return tuple(1 if i in axes else n for i, n in enumerate(x))
    return tuple(n for i, n in enumerate(x) if i not in axes) or (1,)


def _softmax(inputs, attrs, label):
    attrs["axis"] = _axis(label, "softmax", attrs["axis"], len(inputs[0].shape))
    return inputs[0].shape


def _layer_norm(inputs, attrs, label):
    x = inputs[0].shape
    axis = attrs["axis"] = _axis(label, "layer_norm", attrs["axis"], len(x))
    for t in inputs[1:]:
        check(t.shape == x[axis:], f"node {label} (layer_norm): scale/bias must be "
                                   f"{x[axis:]}, got {t.shape}")
    return x


def _reshape(inputs, attrs, label):
    shape = tuple(int(n) for n in attrs["shape"])
    check(all(n >= 1 for n in shape), f"node {label} (reshape): shape {shape} must be "
                                       f"resolved to positive sizes by the importer")
    check(math.prod(shape) == inputs[0].size, f"node {label} (reshape): {inputs[0].shape} "
                                              f"has {inputs[0].size} elements, not {shape}")
    attrs["shape"] = shape
    return shape


def _transpose(inputs, attrs, label):
    x = inputs[0].shape
    perm = tuple(int(p) for p in attrs["perm"])
    check(sorted(perm) == list(range(len(x))),
          f"node {label} (transpose): perm {perm} is not a permutation of {len(x)} axes")
    attrs["perm"] = perm
    return tuple(x[p] for p in perm)


def _concat(inputs, attrs, label):
    first = inputs[0].shape
    axis = attrs["axis"] = _axis(label, "concat", attrs["axis"], len(first))
    for t in inputs[1:]:
        ok = len(t.shape) == len(first) and all(
            a == b for i, (a, b) in enumerate(zip(t.shape, first)) if i != axis)
        check(ok, f"node {label} (concat): shapes {first} and {t.shape} differ off axis {axis}")
    return (*first[:axis], sum(t.shape[axis] for t in inputs), *first[axis + 1:])


_CONV_ATTRS = dict(strides=None, pads=None, dilations=None, groups=1)
_POOL_ATTRS = dict(kernel=REQUIRED, strides=None, pads=None, ceil_mode=False)

OPS: dict[str, OpDef] = {
    "conv": OpDef("anchor", _conv, _CONV_ATTRS, (2, 3)),
    "conv_transpose": OpDef("anchor", _conv_transpose, {**_CONV_ATTRS, "output_padding": None},
                            (2, 3)),
    "dense": OpDef("anchor", _dense, {}, (2, 3)),
    "matmul": OpDef("anchor", _matmul, {}, (2, 2)),
    **{op: OpDef("elemwise", _binary, {}, (2, 2)) for op in BINARY},
    **{op: OpDef("elemwise", _same, {}, (1, 1)) for op in UNARY},
    "batch_norm": OpDef("elemwise", _batch_norm, dict(epsilon=1e-5), (5, 5)),
    "max_pool": OpDef("reduce", _pool, _POOL_ATTRS, (1, 1)),
    "avg_pool": OpDef("reduce", _pool, {**_POOL_ATTRS, "count_include_pad": False}, (1, 1)),
    "global_avg_pool": OpDef("reduce", _global_pool, {}, (1, 1)),
    "reduce_mean": OpDef("reduce", _reduce_mean, dict(axes=REQUIRED, keepdims=True), (1, 1)),
    "softmax": OpDef("reduce", _softmax, dict(axis=-1), (1, 1)),
    "layer_norm": OpDef("reduce", _layer_norm, dict(axis=-1, epsilon=1e-5), (2, 3)),
    "reshape": OpDef("view", _reshape, dict(shape=REQUIRED), (1, 1)),
    "transpose": OpDef("injective", _transpose, dict(perm=REQUIRED), (1, 1)),
    "concat": OpDef("injective", _concat, dict(axis=REQUIRED), (1, -1)),
}
OPS["gelu"] = OpDef("elemwise", _same, dict(approximate="none"), (1, 1))
OPS["clip"] = OpDef("elemwise", _same, dict(min=None, max=None), (1, 1))
OPS["leaky_relu"] = OpDef("elemwise", _same, dict(alpha=0.01), (1, 1))

__all__ = ["OPS", "OpDef", "UNARY", "BINARY", "REQUIRED", "infer", "broadcast_shape"]
