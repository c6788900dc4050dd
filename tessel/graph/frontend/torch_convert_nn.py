"""The torch importer's converters for convolutions, norms, attention, pooling and reductions:
`ATEN` maps ATen operator names (`aten.conv2d.default`) to them (see `torch_context`).
"""
from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from tessel.graph.frontend.torch_context import Context, Converter, Missing, each, ntuple

# ---- convolution ----

def _conv(c: Context, a: dict) -> Any:
    x, w = a["input"], a["weight"]
    nd = len(c.shape(w)) - 2
    transposed = bool(a.get("transposed", "conv_transpose" in c.op_type))
    pads = _conv_pads(c, a["padding"], c.shape(w)[2:], ntuple(a["dilation"], nd))
    attrs = dict(strides=ntuple(a["stride"], nd), pads=pads,
                 dilations=ntuple(a["dilation"], nd), groups=int(a["groups"]))
    if transposed:
        attrs["output_padding"] = ntuple(a["output_padding"], nd)
    unbatched = len(c.shape(x)) == nd + 1
    if unbatched:
        x = c.reshape(x, (1, *c.shape(x)))
    bias = [] if a["bias"] is None else [a["bias"]]
    op = "conv_transpose" if transposed else "conv"
    if unbatched:
        return c.reshape(c.emit(op, [x, w, *bias], **attrs), c.out_shape(), final=True)
    return c.out(op, [x, w, *bias], **attrs)


def _conv_pads(c: Context, padding: Any, kernel: Sequence[int], dil: Sequence[int]
               ) -> tuple[int, ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * 2 * len(kernel)
        if padding != "same":
            raise c.fail(f"padding must be 'valid' or 'same', got {padding!r}")
        total = [d * (k - 1) for k, d in zip(kernel, dil)]
        return tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    p = ntuple(padding, len(kernel))
    return p + p



# ---- normalization, softmax, attention ----

def _batch_norm(c: Context, a: dict) -> Any:
    """batch_norm, native_batch_norm and _native_batch_norm_legit_no_training (inference)."""
    x = a["input"]
    if a.get("training"):
        raise c.fail("training-mode batch norm (batch statistics) is not supported; export "
                     "the module in eval mode")
    if a["running_mean"] is None or a["running_var"] is None:
        raise c.fail("batch norm without running statistics is not supported")
    scale, bias = _affine(c, a, c.shape(x)[1])
    out = c.out("batch_norm", [x, scale, bias, a["running_mean"], a["running_var"]],
                epsilon=float(a["eps"]))
    return _with_statistics(c, out, "batch")


def _layer_norm(c: Context, a: dict) -> Any:
    x, normalized = a["input"], tuple(int(d) for d in a["normalized_shape"])
    axis = len(c.shape(x)) - len(normalized)
    scale, bias = a["weight"], a["bias"]
    if scale is None:
        scale = c.new_const(np.ones(normalized, np.float32), "ln_scale")
    out = c.out("layer_norm", [x, scale, *([] if bias is None else [bias])], axis=axis,
                epsilon=float(a["eps"]))
    return _with_statistics(c, out, "layer")


def _with_statistics(c: Context, out: str, norm: str) -> Any:
    """`out`; for the native_* forms also their mean and inverse-std outputs, not computed."""
    if c.op_type.startswith(f"aten.{norm}_norm"):
        return out
    return (out, Missing(f"{norm}-norm mean output"), Missing(f"{norm}-norm inverse-std output"))


def _affine(c: Context, a: dict, channels: int) -> tuple[Any, Any]:
    """A norm's per-channel weight and bias; ones and zeros where the module has none."""
    scale, bias = a["weight"], a["bias"]
    if scale is None:
        scale = c.new_const(np.ones(channels, np.float32), "scale")
    if bias is None:
        bias = c.new_const(np.zeros(channels, np.float32), "bias")
    return scale, bias


def _instance_norm(c: Context, a: dict) -> Any:
    """instance_norm: the statistics of each sample's channel, or the running ones when the
    module tracks them (use_input_stats=False in eval mode: a batch norm)."""
    x = a["input"]
    scale, bias = _affine(c, a, c.shape(x)[1])
    if not a["use_input_stats"]:
        return c.out("batch_norm", [x, scale, bias, a["running_mean"], a["running_var"]],
                     epsilon=float(a["eps"]))
    return c.out("instance_norm", [x, scale, bias], epsilon=float(a["eps"]))


def _batch_statistics(c: Context, a: dict) -> Any:
    """_native_batch_norm_legit with training=True (instance_norm's decomposition): the batch's
    statistics, which for a batch of 1 are the instance norm's."""
    if not a["training"]:
        return _batch_norm(c, {"running_mean": None, "running_var": None, **a})
    x = a["input"]
    if c.shape(x)[0] != 1:
        raise c.fail(f"batch norm with batch statistics over a batch of {c.shape(x)[0]} is not "
                     f"supported; export the module in eval mode")
    out = c.out("instance_norm", [x, *_affine(c, a, c.shape(x)[1])], epsilon=float(a["eps"]))
    return (out, Missing("batch-norm mean output"), Missing("batch-norm inverse-std output"))


def _group_norm(c: Context, a: dict) -> Any:
    """group_norm and native_group_norm (whose mean and inverse-std outputs are not computed)."""
    x = a["input"]
    groups = int(a["num_groups"] if "num_groups" in a else a["group"])
    out = c.out("group_norm", [x, *_affine(c, a, c.shape(x)[1])], groups=groups,
                epsilon=float(a["eps"]))
    return _with_statistics(c, out, "group")


def _softmax(log: bool) -> Converter:
    op = "log_softmax" if log else "softmax"
    return lambda c, a: c.out(op, [a["self"]], axis=int(a["dim"]))


def _sdpa(c: Context, a: dict) -> Any:
    """softmax(q @ k^T * scale + mask) @ v, the math of scaled_dot_product_attention."""
    if a["dropout_p"]:
        raise c.fail(f"attention dropout_p={a['dropout_p']} is not supported (eval mode: 0)")
    q, k, v = a["query"], a["key"], a["value"]
    if a.get("enable_gqa") and c.shape(q)[-3] != c.shape(k)[-3]:
        raise c.fail("grouped-query attention (enable_gqa) is not supported")
    rank = len(c.shape(k))
    keys = c.transpose(k, (*range(rank - 2), rank - 1, rank - 2))
    scale = a["scale"] if a["scale"] is not None else 1.0 / math.sqrt(c.shape(q)[-1])
    scores = c.emit("mul", [c.emit("matmul", [q, keys]), float(scale)])
    mask = _attention_mask(c, a, c.shape(q)[-2], c.shape(k)[-2])
    if mask is not None:
        scores = c.emit("add", [scores, mask])
    return c.out("matmul", [c.emit("softmax", [scores], axis=-1), v])


def _attention_mask(c: Context, a: dict, queries: int, keys: int) -> Any:
    if a["is_causal"]:
        causal = np.triu(np.full((queries, keys), -np.inf, np.float32), 1)
        return c.new_const(causal, "causal_mask")
    mask = a["attn_mask"]
    if mask is None:
        return None
    array = c.const(mask)
    if array is not None and array.dtype == np.bool_:
        return c.new_const(np.where(array, 0.0, -np.inf).astype(np.float32), "mask")
    if isinstance(mask, str) and c.graph.types[mask].dtype == "bool":  # True: attend
        return c.emit("where", [mask, c.scalar(0.0), c.scalar(-np.inf)])
    return mask


# ---- pooling and reductions ----

def _spatial_dims(target: str) -> int:
    """2 for aten.max_pool2d.default and its kin."""
    return int(re.search(r"(\d)d", target).group(1))


def _max_pool(c: Context, a: dict) -> Any:
    nd = _spatial_dims(c.op_type)
    out = _pool(c, "max_pool", a, nd, dilations=ntuple(a["dilation"], nd))
    return (out, Missing("pooling indices output")) if "with_indices" in c.op_type else out


def _avg_pool(c: Context, a: dict) -> Any:
    if a.get("divisor_override") is not None:
        raise c.fail(f"divisor_override={a['divisor_override']} is not supported")
    include_pad = bool(a["count_include_pad"])
    return _pool(c, "avg_pool", a, _spatial_dims(c.op_type), count_include_pad=include_pad)


def _pool(c: Context, op: str, a: dict, nd: int, **extra: Any) -> Any:
    x = a["self"]
    kernel = ntuple(a["kernel_size"], nd)
    strides = ntuple(a["stride"], nd) if a["stride"] else kernel
    pads = ntuple(a["padding"], nd)
    attrs = dict(kernel=kernel, strides=strides, pads=pads + pads,
                 ceil_mode=bool(a["ceil_mode"]), **extra)
    if len(c.shape(x)) == nd + 1:  # unbatched (C, *spatial)
        y = c.emit(op, [c.reshape(x, (1, *c.shape(x)))], **attrs)
        return c.reshape(y, c.out_shape(), final=True)
    return c.out(op, [x], **attrs)


def _adaptive_avg_pool(c: Context, a: dict) -> Any:
    """Output (1, ..., 1) -> global_avg_pool; sizes dividing the input -> avg_pool."""
    x = a["self"]
    nd = _spatial_dims(c.op_type)
    if len(c.shape(x)) == nd + 1:
        raise c.fail("unbatched adaptive pooling is not supported; add a batch axis")
    spatial = c.shape(x)[2:]
    wanted = a["output_size"]
    wanted = [wanted] * nd if isinstance(wanted, int) else list(wanted) * (nd // len(wanted))
    sizes = [n if s is None else int(s) for n, s in zip(spatial, wanted)]
    if all(s == 1 for s in sizes):
        return c.out("global_avg_pool", [x])
    if any(n % s for n, s in zip(spatial, sizes)):
        raise c.fail(f"adaptive pooling of {spatial} to {tuple(sizes)} (windows of unequal "
                     f"size) is not supported; only output sizes that divide the input")
    kernel = tuple(n // s for n, s in zip(spatial, sizes))
    if all(k == 1 for k in kernel):
        return x
    return c.out("avg_pool", [x], kernel=kernel, strides=kernel)


def _mean(c: Context, a: dict) -> Any:
    """reduce_mean; a mean over all spatial axes that keeps them is global_avg_pool."""
    rank = len(c.shape(a["self"]))
    dims = a.get("dim")
    axes = sorted({int(d) % rank for d in dims} if dims else range(rank))
    if a.get("keepdim") and rank >= 3 and axes == list(range(2, rank)):
        return c.out("global_avg_pool", [a["self"]])
    return c.out("reduce_mean", [a["self"]], axes=tuple(axes), keepdims=bool(a.get("keepdim")))


def _sum(c: Context, a: dict) -> Any:
    """sum as reduce_mean times the number of summed elements."""
    shape = c.shape(a["self"])
    dims = a.get("dim")
    axes = tuple(range(len(shape))) if not dims else tuple(int(d) for d in dims)
    count = math.prod(shape[d] for d in axes)
    mean = c.emit("reduce_mean", [a["self"]], axes=axes, keepdims=bool(a.get("keepdim")))
    return c.out("mul", [mean, float(count)])


ATEN: dict[str, Converter] = {
    **each("convolution.default conv1d.default conv2d.default conv3d.default conv1d.padding "
           "conv2d.padding conv3d.padding conv_transpose1d.default conv_transpose2d.input "
           "conv_transpose3d.input", _conv),
    **each("batch_norm.default native_batch_norm.default "
           "_native_batch_norm_legit_no_training.default", _batch_norm),
    **each("layer_norm.default native_layer_norm.default", _layer_norm),
    **each("instance_norm.default", _instance_norm),
    **each("_native_batch_norm_legit.no_stats _native_batch_norm_legit.default",
           _batch_statistics),
    **each("group_norm.default native_group_norm.default", _group_norm),
    **each("softmax.int _softmax.default", _softmax(log=False)),
    **each("log_softmax.int _log_softmax.default", _softmax(log=True)),
    **each("scaled_dot_product_attention.default", _sdpa),
    **each("max_pool1d.default max_pool2d.default max_pool3d.default "
           "max_pool2d_with_indices.default max_pool3d_with_indices.default", _max_pool),
    **each("avg_pool1d.default avg_pool2d.default avg_pool3d.default", _avg_pool),
    **each("adaptive_avg_pool1d.default adaptive_avg_pool2d.default "
           "_adaptive_avg_pool2d.default adaptive_avg_pool3d.default "
           "_adaptive_avg_pool3d.default", _adaptive_avg_pool),
    **each("mean.dim mean.default", _mean),
    **each("sum.dim_IntList sum.default", _sum),
}
