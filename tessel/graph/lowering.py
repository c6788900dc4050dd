"""Tensor-expression lowering of graph nodes: the stages of one operator on te tensors.

    x = te.placeholder((1, 3, 9, 7), name="x"); w = te.placeholder((5, 3, 3, 3), name="w")
    y = lower(conv_node, [x, w], "conv0")          # stages conv0_pad (if padded), conv0
    z = lower(div_node, [y, 8.0], "div0")           # a float arg is an immediate: y / 8.0
    func = te.create_func([x, w, z])               # one fused PrimFunc

The stages are those of `tessel.ops` (built with its te builders `nn.conv_stages`,
`nn.conv_transpose_stages` and `nn.pool_stages`, the stage structure of `ops.norm`, dense as
`ops.linalg.dense`), so the search space's designs
apply to them and a lone conv node lowers to the very workload of `ops.conv2d`. The op's last
stage is named `name`, earlier ones `{name}_<role>` (`_pad`, `_conv`, `_dense`, `_sum`, ...).
Binary operators broadcast as numpy does; a Python float stands for a tensor of shape ().
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from tessel import ir, te
from tessel.graph.ir import Node, TensorType, check
from tessel.graph.ops import infer
from tessel.ops import nn
from tessel.ops.common import named

Arg = te.Tensor | float
Attrs = dict[str, Any]
Index = tuple[ir.Expr, ...]


# ---- helpers ---------------------------------------------------------------------------------


def _bcast(idx: Index, shape: tuple[int, ...], out: tuple[int, ...]) -> Index:
    """The index into a tensor of `shape` that numpy broadcasting reads at output index idx."""
    lead = len(out) - len(shape)
    return tuple(ir.const(0) if n == 1 and out[lead + d] != 1 else idx[lead + d]
                 for d, n in enumerate(shape))


def _value(arg: Arg, idx: Index, out: tuple[int, ...]) -> ir.Expr:
    if isinstance(arg, te.Tensor):
        return arg[_bcast(idx, arg.shape, out)]
    return ir.const(float(arg), "float32")


def _keep_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A reduction's output shape: (1,) when no axis is kept, so every stage has an axis."""
    return shape or (1,)


def _expand(kept: Index, axes: Sequence[int], reduced: Sequence[ir.Expr], rank: int) -> Index:
    """The full index of a rank-`rank` tensor: `reduced` at `axes`, `kept` elsewhere in order
    (`kept` is the index of a stage built by `_keep_shape`: ignored when no axis is kept)."""
    kept_iter, red_iter = iter(kept), iter(reduced)
    return tuple(next(red_iter) if d in axes else next(kept_iter) for d in range(rank))


def _drop(idx: Index, axes: Sequence[int]) -> Index:
    """The index into a `_keep_shape` stage of `idx` with `axes` removed."""
    kept = tuple(i for d, i in enumerate(idx) if d not in axes)
    return kept or (ir.const(0),)


def _reduce_axes(sizes: Sequence[int], prefix: str) -> list[te.Axis]:
    if len(sizes) == 1:
        return [te.reduce_axis(sizes[0], name=prefix)]
    return [te.reduce_axis(n, name=f"{prefix}{d}") for d, n in enumerate(sizes)]


def _elementwise(shape: tuple[int, ...], fn: Callable[..., ir.Expr], name: str) -> te.Tensor:
    return te.compute(shape, lambda *i: fn(tuple(i)), name=name)


# ---- anchors: convolutions and matrix products -------------------------------------------------


def _bias_add(out: te.Tensor, bias: te.Tensor, axis: int, name: str) -> te.Tensor:
    return _elementwise(out.shape, lambda i: out[i] + bias[i[axis]], name)


def _conv(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    x, w, *bias = args
    nd = x.ndim - 2
    stage = f"{name}_conv" if bias else name
    out = nn.conv_stages("conv", x, w, a["strides"], a["pads"][:nd], a["dilations"],
                         a["groups"], x.dtype, stage, pad_after=a["pads"][nd:],
                         pad_name=f"{name}_pad")
    return _bias_add(out, bias[0], 1, name) if bias else out


def _conv_transpose(args: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, w, *bias = args
    stage = f"{name}_conv" if bias else name
    nd = x.ndim - 2
    y = nn.conv_transpose_stages(x, w, a["strides"], a["pads"][:nd], out.shape[2:],
                                 a["dilations"], a["groups"], stage, pad_name=f"{name}_pad")
    return _bias_add(y, bias[0], 1, name) if bias else y


def _mm_names(rank: int) -> tuple[str, ...]:
    """Axis names of a product's output: b0, b1, ... (batch), then i, j (j alone at rank 1)."""
    return tuple(f"b{d}" for d in range(rank - 2)) + ("i", "j")[-rank:]


def _dense(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    """ops.linalg.dense over every leading axis of x: out[..., j] = sum_k x[..., k] w[j, k]."""
    x, w, *bias = args
    k = te.reduce_axis(x.shape[-1], name="k")
    shape = (*x.shape[:-1], w.shape[0])

    def body(*idx: ir.Expr) -> ir.Expr:
        return te.sum(x[(*idx[:-1], k)] * w[idx[-1], k], axis=k)

    out = te.compute(shape, named(body, _mm_names(len(shape))),
                     name=f"{name}_dense" if bias else name)
    return _bias_add(out, bias[0], len(shape) - 1, name) if bias else out


def _matmul(args: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, y = args
    k = te.reduce_axis(x.shape[-1], name="k")
    batch = out.shape[:-2]

    def body(*idx: ir.Expr) -> ir.Expr:
        b, i, j = idx[:-2], idx[-2], idx[-1]
        xb, yb = _bcast(b, x.shape[:-2], batch), _bcast(b, y.shape[:-2], batch)
        return te.sum(x[(*xb, i, k)] * y[(*yb, k, j)], axis=k)

    return te.compute(out.shape, named(body, _mm_names(len(out.shape))), name=name)


# ---- elementwise -----------------------------------------------------------------------------


def _pow(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """x ** y; float exponents that torch special-cases become products, sqrt or rsqrt."""
    if isinstance(y, ir.FloatImm):
        special = {1.0: lambda: x, 2.0: lambda: x * x, 3.0: lambda: x * x * x,
                   0.5: lambda: te.sqrt(x), -0.5: lambda: te.rsqrt(x),
                   -1.0: lambda: 1.0 / x, -2.0: lambda: 1.0 / (x * x)}
        if y.value in special:
            return special[y.value]()
    return te.pow(x, y)


BINARY_FNS: dict[str, Callable[[ir.Expr, ir.Expr], ir.Expr]] = {
    "add": lambda u, v: u + v, "sub": lambda u, v: u - v, "mul": lambda u, v: u * v,
    "div": lambda u, v: u / v, "pow": _pow,
    "maximum": lambda u, v: te.max(u, v), "minimum": lambda u, v: te.min(u, v),
}


def _gelu(v: ir.Expr, approximate: str) -> ir.Expr:
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (v + 0.044715 * (v * v * v))
        return 0.5 * v * (1.0 + te.tanh(inner))
    check(approximate == "none", f"gelu: approximate must be 'none' or 'tanh', "
                                 f"got {approximate!r}")
    return 0.5 * v * (1.0 + te.erf(v * math.sqrt(0.5)))  # as ops.gelu


def _clip(v: ir.Expr, lo: float | None, hi: float | None) -> ir.Expr:
    if lo is not None:
        v = te.max(v, float(lo))
    return v if hi is None else te.min(v, float(hi))


UNARY_FNS: dict[str, Callable[[ir.Expr, Attrs], ir.Expr]] = {
    "relu": lambda v, a: te.max(v, 0.0), "sigmoid": lambda v, a: te.sigmoid(v),
    "tanh": lambda v, a: te.tanh(v), "erf": lambda v, a: te.erf(v),
    "exp": lambda v, a: te.exp(v), "log": lambda v, a: te.log(v),
    "sqrt": lambda v, a: te.sqrt(v), "neg": lambda v, a: -v, "abs": lambda v, a: te.abs(v),
    "gelu": lambda v, a: _gelu(v, a["approximate"]),
    "clip": lambda v, a: _clip(v, a["min"], a["max"]),
    "leaky_relu": lambda v, a: te.if_then_else(v > 0.0, v, v * float(a["alpha"])),
}


def _binary(op: str) -> Callable[..., te.Tensor]:
    def lower_binary(args: list[Arg], a: Attrs, name: str, out: TensorType) -> te.Tensor:
        check(any(isinstance(v, te.Tensor) for v in args),
              f"lowering {name} ({op}): both inputs are floats; fold the constant instead")
        fn = BINARY_FNS[op]
        return _elementwise(out.shape, lambda i: fn(*(_value(v, i, out.shape) for v in args)),
                            name)
    return lower_binary


def _unary(op: str) -> Callable[..., te.Tensor]:
    def lower_unary(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
        x, = args
        return _elementwise(x.shape, lambda i: UNARY_FNS[op](x[i], a), name)
    return lower_unary


def _batch_norm(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    """One stage, as ops.batch_norm: (x - mean) * (scale * rsqrt(var + eps)) + bias."""
    x, scale, bias, mean, var = args
    eps = float(a["epsilon"])
    return _elementwise(x.shape, lambda i: (x[i] - mean[i[1]]) * (
        scale[i[1]] * te.rsqrt(var[i[1]] + eps)) + bias[i[1]], name)


# ---- pooling and reductions ------------------------------------------------------------------


def _pool_after(x: te.Tensor, a: Attrs, out_sp: Sequence[int]) -> tuple[int, ...]:
    """Padding after each spatial axis, grown so that ceil_mode's last windows fit."""
    nd, sizes = x.ndim - 2, x.shape[2:]
    return tuple(max(e, (o - 1) * s + k - b - n) for n, k, s, b, e, o in zip(
        sizes, a["kernel"], a["strides"], a["pads"][:nd], a["pads"][nd:], out_sp))


def _max_pool(args: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    nd, out_sp = x.ndim - 2, out.shape[2:]
    return nn.pool_stages("max_pool", x, a["kernel"], a["strides"], a["pads"][:nd], out_sp,
                          te.identity_of("max", x.dtype), te.max, name,
                          pad_after=_pool_after(x, a, out_sp), pad_name=f"{name}_pad")


def _window_count(y: ir.Expr, k: int, s: int, b: int, lo: int, hi: int) -> ir.Expr:
    """How many of the k taps of window y (starting at y * s - b) lie in [lo, hi)."""
    start = y * s - b
    return te.min(start + k, hi) - te.max(start, lo)


def _avg_divisor(idx: Index, x: te.Tensor, a: Attrs, out_sp: Sequence[int]) -> ir.Expr | float:
    """The divisor of each window's sum: the taps inside the input, plus the padded ones with
    count_include_pad (only up to the declared padding, as in torch and onnxruntime)."""
    nd = x.ndim - 2
    total: ir.Expr | int = 1
    for d, (n, k, s, b, e, o) in enumerate(zip(x.shape[2:], a["kernel"], a["strides"],
                                               a["pads"][:nd], a["pads"][nd:], out_sp)):
        lo, hi = (-b, n + e) if a["count_include_pad"] else (0, n)
        starts = [y * s - b for y in range(o)]
        if all(st >= lo and st + k <= hi for st in starts):
            total = total * k
        else:
            total = _window_count(idx[2 + d], k, s, b, lo, hi) * total
    return float(total) if isinstance(total, int) else te.cast("float32", total)


def _avg_pool(args: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """Stages as ops.avg_pool2d: [pad,] sum, then the sum over the window count."""
    x, = args
    nd, out_sp = x.ndim - 2, out.shape[2:]
    total = nn.pool_stages("avg_pool", x, a["kernel"], a["strides"], a["pads"][:nd], out_sp,
                           0, te.sum, f"{name}_sum", pad_after=_pool_after(x, a, out_sp),
                           pad_name=f"{name}_pad")
    return _elementwise(total.shape, lambda i: total[i] / _avg_divisor(i, x, a, out_sp), name)


def _mean(x: te.Tensor, axes: Sequence[int], keepdims: bool, name: str) -> te.Tensor:
    """Stages as ops.global_avg_pool2d: `{name}_sum` over `axes`, then `name` = sum / count."""
    kept = tuple(1 if d in axes else n for d, n in enumerate(x.shape)) if keepdims else \
        _keep_shape(tuple(n for d, n in enumerate(x.shape) if d not in axes))
    rk = _reduce_axes([x.shape[d] for d in axes], "r")

    def body(*idx: ir.Expr) -> ir.Expr:
        if keepdims:
            full = tuple(rk[list(axes).index(d)] if d in axes else i for d, i in enumerate(idx))
        else:
            full = _expand(idx, axes, rk, x.ndim)
        return te.sum(x[full], axis=rk)

    total = te.compute(kept, body, name=f"{name}_sum")
    count = float(math.prod(x.shape[d] for d in axes))
    return _elementwise(kept, lambda i: total[i] / count, name)


def _global_avg_pool(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    x, = args
    return _mean(x, range(2, x.ndim), True, name)


def _reduce_mean(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    x, = args
    return _mean(x, a["axes"], a["keepdims"], name)


def _softmax(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    """Stages as ops.softmax: {name}_maxelem, {name}_exp, {name}_expsum, then name."""
    x, = args
    axis, rank = a["axis"], x.ndim
    red = _keep_shape(tuple(n for d, n in enumerate(x.shape) if d != axis))

    def row_reduce(src: te.Tensor, combiner: Callable[..., ir.Expr], stage: str) -> te.Tensor:
        k = te.reduce_axis(x.shape[axis], name="k")
        return te.compute(red, lambda *r: combiner(src[_expand(r, [axis], [k], rank)], axis=k),
                          name=f"{name}_{stage}")

    maxelem = row_reduce(x, te.max, "maxelem")
    ex = _elementwise(x.shape, lambda i: te.exp(x[i] - maxelem[_drop(i, [axis])]), f"{name}_exp")
    expsum = row_reduce(ex, te.sum, "expsum")
    return _elementwise(x.shape, lambda i: ex[i] / expsum[_drop(i, [axis])], name)


def _layer_norm(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    """Stages as ops.layer_norm: {name}_mean, {name}_var (over axes axis..end), then name."""
    x, scale, *bias = args
    axis, rank = a["axis"], x.ndim
    axes, inner = list(range(axis, rank)), x.shape[axis:]
    lead, inv_n, eps = _keep_shape(x.shape[:axis]), 1.0 / math.prod(inner), float(a["epsilon"])

    def row(fn: Callable[[ir.Expr, Index], ir.Expr], stage: str) -> te.Tensor:
        rk = _reduce_axes(inner, "k")
        return te.compute(lead, lambda *r: te.sum(fn(x[_expand(r, axes, rk, rank)], r), axis=rk),
                          name=f"{name}_{stage}")

    mean = row(lambda v, r: v * inv_n, "mean")
    var = row(lambda v, r: (v - mean[r]) * (v - mean[r]) * inv_n, "var")

    def body(i: Index) -> ir.Expr:
        r, j = _drop(i, axes), i[axis:]
        out = (x[i] - mean[r]) * te.rsqrt(var[r] + eps) * scale[j]
        return out + bias[0][j] if bias else out

    return _elementwise(x.shape, body, name)


# ---- layout ----------------------------------------------------------------------------------


def _unravel(flat: ir.Expr, shape: tuple[int, ...]) -> Index:
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    return tuple(flat // st if d == 0 else (flat // st) % n
                 for d, (n, st) in enumerate(zip(shape, strides)))


def _reshape(args: list[te.Tensor], a: Attrs, name: str) -> te.Tensor:
    """out[i] = x at the same row-major position (a copy stage; executors alias reshapes)."""
    x, = args
    shape = a["shape"]
    if shape == x.shape:
        return _elementwise(shape, lambda i: x[i], name)

    def body(i: Index) -> ir.Expr:
        flat: ir.Expr | int = 0
        for v, n in zip(i, shape):
            flat = flat * n + v
        return x[_unravel(ir.convert(flat), x.shape)]

    return _elementwise(shape, body, name)


def _transpose(args: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    x, = args
    perm = a["perm"]
    return _elementwise(out.shape, lambda i: x[tuple(i[perm.index(d)] for d in range(x.ndim))],
                        name)


def _concat(xs: list[te.Tensor], a: Attrs, name: str, out: TensorType) -> te.Tensor:
    """A select chain over the inputs along `axis` (only the chosen input is read)."""
    axis = a["axis"]
    offsets = [sum(t.shape[axis] for t in xs[:m]) for m in range(len(xs))]

    def load(t: te.Tensor, off: int, i: Index) -> ir.Expr:
        return t[tuple(v - off if d == axis else v for d, v in enumerate(i))]

    def body(i: Index) -> ir.Expr:
        value = load(xs[-1], offsets[-1], i)
        for t, off in reversed(list(zip(xs[:-1], offsets[:-1]))):
            value = te.if_then_else(i[axis] < off + t.shape[axis], load(t, off, i), value)
        return value

    return _elementwise(out.shape, body, name)


# op -> fn(args, attrs, name), or fn(args, attrs, name, output type) for ops in _NEEDS_TYPE
LOWERINGS: dict[str, Callable[..., te.Tensor]] = {
    "conv": _conv, "conv_transpose": _conv_transpose, "dense": _dense, "matmul": _matmul,
    **{op: _binary(op) for op in BINARY_FNS}, **{op: _unary(op) for op in UNARY_FNS},
    "batch_norm": _batch_norm, "max_pool": _max_pool, "avg_pool": _avg_pool,
    "global_avg_pool": _global_avg_pool, "reduce_mean": _reduce_mean, "softmax": _softmax,
    "layer_norm": _layer_norm, "reshape": _reshape, "transpose": _transpose, "concat": _concat,
}
_NEEDS_TYPE = {"conv_transpose", "matmul", *BINARY_FNS, "max_pool", "avg_pool", "transpose",
               "concat"}


def _type_of(arg: Any, i: int, node: Node, name: str) -> TensorType:
    """A tensor's type; a float stands for shape () and only binary operators take one."""
    if isinstance(arg, te.Tensor):
        return TensorType(arg.shape, arg.dtype)
    check(isinstance(arg, (int, float)) and not isinstance(arg, bool),
          f"lowering {name} ({node.op}): input {i} must be a te.Tensor or a float, got {arg!r}")
    check(node.op in BINARY_FNS, f"lowering {name} ({node.op}): input {i} must be a tensor, "
                                 f"got {arg!r} (only binary elementwise operators take floats)")
    return TensorType((), "float32")


def lower(node: Node, args: list[Arg], name: str) -> te.Tensor:
    """The stages computing `node` from `args` (te tensors, or floats for scalar constants),
    the last one named `name`. Attributes are checked and defaulted as by `Graph.add_node`."""
    check(node.op in LOWERINGS, f"lowering {name}: unsupported operator {node.op!r}; "
                                f"known: {sorted(LOWERINGS)}")
    attrs = dict(node.attrs)
    types = [_type_of(a, i, node, name) for i, a in enumerate(args)]
    out_type = infer(node.op, types, attrs, node.name or name)
    args = [float(a) if not isinstance(a, te.Tensor) else a for a in args]
    fn = LOWERINGS[node.op]
    out = fn(args, attrs, name, out_type) if node.op in _NEEDS_TYPE else fn(args, attrs, name)
    check(out.shape == out_type.shape, f"lowering {name} ({node.op}): built shape {out.shape}, "
                                       f"shape inference says {out_type.shape}")
    return out


__all__ = ["lower", "LOWERINGS"]
