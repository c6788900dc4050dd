"""PyTorch modules -> tessel graphs through torch.export: `from_torch(module, example_inputs)`.

    graph = from_torch(model, (torch.randn(1, 3, 224, 224),))

`torch.export.export(module.eval(), example_inputs)` traces the module into an FX graph of ATen
operators with static shapes. User inputs become graph inputs (the example inputs' shapes);
parameters, buffers and tensor constants become float32 constants, added to the graph when a
node first reads them; the user outputs become the graph outputs. Each ATen operator goes
through one converter of `ATEN` into canonical operators of `tessel.graph.ops`, except a node
whose tensor inputs are all constants (a weight transpose, a mask built with torch.ones): torch
runs it at import. Graph values keep the FX node names; the extra values a translation needs
are named after the FX node they lead to.

An ATen operator without a converter raises `UnsupportedOpError` (a `GraphError`) naming it
and its FX node; nothing is dropped silently. Before giving up, the import retries on the
core-ATen decomposition of the program (`run_decompositions()`), which spells composite
operators such as einsum or group-norm-free MLP blocks with mapped ones. The high-level export
IR goes first because it maps one-to-one onto canonical operators (linear -> dense, conv2d ->
conv, layer_norm -> layer_norm): core ATen spells a BERT layer with 55 nodes (addmm, view,
expand, bmm, getitem) against 24, and decomposing costs 0.5-4 s per zoo model.

In-place operators (relu_, add_) rebind the value they mutate, so later readers see the
result; a mutation through a view of another tensor is not followed.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np

from tessel.graph.ir import Graph, GraphError, check


class UnsupportedOpError(GraphError):
    """An ATen operator (or other FX call) that tessel has no translation for."""

    def __init__(self, target: str, node: str, detail: str = "") -> None:
        self.target, self.node = target, node
        super().__init__(f"{target} (FX node {node}) is not supported by tessel's torch "
                         f"importer{detail}")


@dataclass(frozen=True, eq=False)
class Const:
    """A tensor known at import: a parameter, a buffer, or a folded node's result."""
    name: str
    array: np.ndarray


@dataclass(frozen=True)
class Missing:
    """An extra output of an ATen operator that tessel does not compute (pool indices,
    batch-norm statistics); reading it through getitem raises."""
    what: str


Value = Union[str, Const]  # str: a value of the graph being built
Converter = Callable[["Importer", dict], Any]


def from_torch(module: Any, example_inputs: tuple[Any, ...], name: str | None = None) -> Graph:
    """Translate `module` (put in eval mode) traced on `example_inputs` into a tessel `Graph`."""
    import torch
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__
    program = _export(module, tuple(example_inputs))
    try:
        return Importer(program, name).run()
    except UnsupportedOpError as first:
        try:
            return Importer(program.run_decompositions(), name).run()
        except UnsupportedOpError as second:
            same = (second.target, second.node) == (first.target, first.node)
            detail = (" (nor after core-ATen decomposition)" if same else
                      f" (its core-ATen decomposition fails at {second.target}, FX node "
                      f"{second.node})")
            raise UnsupportedOpError(first.target, first.node, detail) from None


def _export(module: Any, example_inputs: tuple[Any, ...]) -> Any:
    import torch
    try:
        return torch.export.export(module.eval(), example_inputs)
    except Exception as e:  # torch raises many types: data-dependent control flow, ...
        raise GraphError(f"torch.export could not trace {type(module).__name__}: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from e


class Importer:
    """The state of one import: the graph so far and what each FX node became."""

    def __init__(self, program: Any, name: str) -> None:
        self.program = program
        self.graph = Graph(name)
        self.env: dict[str, Any] = {}
        self.reserved = {n.name for n in program.graph.nodes}
        self.scalars: dict[float, Const] = {}
        self.node: Any = None
        self.label, self.target = "", ""

    def run(self) -> Graph:
        self.bind_placeholders()
        for node in self.program.graph.nodes:
            self.node, self.label, self.target = node, node.name, _target_name(node.target)
            if node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                self.set_outputs(node)
            elif node.op != "placeholder":
                raise UnsupportedOpError(f"FX {node.op} {self.target}", node.name)
        return self.graph

    # ---- inputs, nodes, outputs ----

    def bind_placeholders(self) -> None:
        placeholders = {n.name: n for n in self.program.graph.nodes if n.op == "placeholder"}
        for spec in self.program.graph_signature.input_specs:
            kind, arg = spec.kind.name, spec.arg
            if kind == "USER_INPUT" and hasattr(arg, "value"):  # specialized to a constant
                self.env[arg.name] = arg.value
            elif kind == "USER_INPUT":
                self.env[arg.name] = self.add_input(placeholders[arg.name])
            elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                tensor = self.program.state_dict.get(spec.target)
                if tensor is None:
                    tensor = self.program.constants[spec.target]
                self.env[arg.name] = Const(self.fresh(spec.target), _to_numpy(tensor))
            else:
                raise UnsupportedOpError(f"{kind.lower()} input {spec.target}", arg.name)

    def add_input(self, node: Any) -> str:
        val = node.meta.get("val")
        check(hasattr(val, "shape"), f"input {node.name}: only tensor inputs are supported, "
                                     f"got {val!r}")
        dtype = str(val.dtype).removeprefix("torch.")
        return self.graph.add_input(node.name, tuple(int(d) for d in val.shape), dtype)

    def call(self, node: Any) -> None:
        args = _map_nodes(node.args, self.env)
        kwargs = _map_nodes(node.kwargs, self.env)
        if node.target is not operator.getitem:
            _refuse_missing(self, (args, kwargs))
        if node.target is operator.getitem:
            result = self.getitem(*args)
        elif self.foldable(node, args, kwargs):
            result = self.fold(node.target(*_to_torch(args), **_to_torch(kwargs)))
        elif self.target in ATEN:
            result = ATEN[self.target](self, _bind(node.target, args, kwargs))
            self.check_shape(result, node.meta.get("val"))
        else:
            raise UnsupportedOpError(self.target, node.name)
        if _mutates_self(node.target) and hasattr(node.args[0], "name"):
            self.env[node.args[0].name] = result
        self.env[node.name] = result

    def getitem(self, source: Any, index: int) -> Any:
        return source[index]  # a Missing output is refused where it is used, not here

    def set_outputs(self, node: Any) -> None:
        values = _map_nodes(list(node.args[0]), self.env)
        specs = self.program.graph_signature.output_specs
        outputs = [v for v, s in zip(values, specs) if s.kind.name == "USER_OUTPUT"]
        _refuse_missing(self, outputs)
        for v in outputs:
            check(isinstance(v, (str, Const)), f"graph {self.graph.name}: output {v!r} is not "
                                               f"a tensor")
        self.graph.set_outputs([self.value(v) for v in outputs])

    # ---- folding and checks ----

    def foldable(self, node: Any, args: Any, kwargs: Any) -> bool:
        import torch
        if not isinstance(node.target, torch._ops.OpOverload):
            return False
        if torch.Tag.nondeterministic_seeded in node.target.tags:
            return False
        return not _any_graph_value((args, kwargs), self.graph.types)

    def fold(self, result: Any) -> Any:
        import torch
        if isinstance(result, torch.Tensor):
            name = self.label if self.label not in self.graph.types else self.fresh(self.label)
            return Const(name, _to_numpy(result))
        if isinstance(result, (tuple, list)):
            return type(result)(self.fold(r) for r in result)
        return result

    def check_shape(self, result: Any, val: Any) -> None:
        if isinstance(result, (tuple, list)) and isinstance(val, (tuple, list)):
            result, val = result[0], val[0]
        if not isinstance(result, (str, Const)) or not hasattr(val, "shape"):
            return
        got, want = self.shape(result), tuple(int(d) for d in val.shape)
        check(got == want or (want == () and got in ((), (1,))),
              f"node {self.label} ({self.target}): tessel's translation has shape {got}, torch "
              f"says {want} (an importer bug)")

    # ---- helpers for converters ----

    def fail(self, msg: str) -> GraphError:
        return GraphError(f"node {self.label} ({self.target}): {msg}")

    def shape(self, v: Any) -> tuple[int, ...]:
        if isinstance(v, Const):
            return tuple(v.array.shape)
        if isinstance(v, str):
            return self.graph.types[v].shape
        return ()  # a Python scalar

    def out_shape(self) -> tuple[int, ...]:
        """The shape torch recorded for the (first) output of the node being translated."""
        val = self.node.meta["val"]
        return tuple(int(d) for d in (val[0] if isinstance(val, (tuple, list)) else val).shape)

    def const(self, v: Any) -> np.ndarray | None:
        if isinstance(v, Const):
            return v.array
        return np.asarray(v, np.float32) if isinstance(v, (int, float)) else None

    def value(self, v: Any) -> str:
        """The graph value of `v`: a graph value as is, a constant or scalar added once."""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = self.scalar(float(v))
        if isinstance(v, str):
            return v
        if not isinstance(v, Const):
            raise self.fail(f"expected a tensor, got {v!r}")
        if v.name not in self.graph.types:
            self.graph.add_constant(v.name, v.array)
        return v.name

    def scalar(self, x: float) -> Const:
        if x not in self.scalars:
            self.scalars[x] = Const(self.fresh(f"{self.label}_scalar"), np.asarray(x, np.float32))
        return self.scalars[x]

    def new_const(self, array: np.ndarray, what: str) -> Const:
        return Const(self.fresh(f"{self.label}_{what}"), np.array(array, order="C"))

    def emit(self, op: str, ins: Sequence[Any], **attrs: Any) -> str:
        """Add an intermediate node of a translation (named after the FX node)."""
        return self.graph.add_node(op, [self.value(v) for v in ins], name=self.label,
                                   output=self.fresh(f"{self.label}_{op}"), **attrs)

    def out(self, op: str, ins: Sequence[Any], **attrs: Any) -> str:
        """Add the node that computes the FX node's (first) output, under its name."""
        return self.graph.add_node(op, [self.value(v) for v in ins], name=self.label,
                                   output=self.label, **attrs)

    def fresh(self, base: str) -> str:
        """A name no FX node and no graph value has (FX names are kept for their nodes)."""
        name, k = base, 0
        while name in self.reserved or name in self.graph.types:
            k += 1
            name = f"{base}_{k}"
        self.reserved.add(name)
        return name

    def reshape(self, v: Any, shape: Sequence[int], final: bool = False) -> Any:
        shape = tuple(int(d) for d in shape)
        if self.shape(v) == shape:
            return v
        if isinstance(v, Const):
            return self.new_const(v.array.reshape(shape), "reshaped")
        return (self.out if final else self.emit)("reshape", [v], shape=shape)

    def transpose(self, v: Any, perm: Sequence[int], final: bool = False) -> Any:
        perm = tuple(p % len(perm) for p in perm)
        if perm == tuple(range(len(perm))):
            return v
        if isinstance(v, Const):
            return self.new_const(np.transpose(v.array, perm), "transposed")
        return (self.out if final else self.emit)("transpose", [v], perm=perm)


# ---- FX plumbing ----

def _target_name(target: Any) -> str:
    """'aten.add.Tensor' for an ATen overload, the function's name for anything else."""
    if hasattr(target, "_schema") or not callable(target):
        return str(target)
    return getattr(target, "__name__", str(target))


def _map_nodes(x: Any, env: dict[str, Any]) -> Any:
    """FX arguments with each node replaced by what it became."""
    if hasattr(x, "op") and hasattr(x, "name") and hasattr(x, "meta"):
        return env[x.name]
    if isinstance(x, (list, tuple)):
        return type(x)(_map_nodes(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _map_nodes(v, env) for k, v in x.items()}
    return x


def _refuse_missing(c: Importer, x: Any) -> None:
    if isinstance(x, Missing):
        raise c.fail(f"reads the {x.what}, which tessel does not compute")
    if isinstance(x, (list, tuple)):
        for v in x:
            _refuse_missing(c, v)
    elif isinstance(x, dict):
        _refuse_missing(c, list(x.values()))


def _any_graph_value(x: Any, values: dict[str, Any]) -> bool:
    """Whether the arguments `x` read a value computed by the graph (not known at import)."""
    if isinstance(x, str):
        return x in values
    if isinstance(x, (list, tuple)):
        return any(_any_graph_value(v, values) for v in x)
    if isinstance(x, dict):
        return any(_any_graph_value(v, values) for v in x.values())
    return False


def _bind(target: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Arguments by schema name, defaults filled in."""
    bound: dict[str, Any] = {}
    for i, arg in enumerate(target._schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            bound[arg.name] = args[i]
        elif arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def _mutates_self(target: Any) -> bool:
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments:
        return False
    alias = schema.arguments[0].alias_info
    return alias is not None and alias.is_write


def _to_numpy(tensor: Any) -> np.ndarray:
    import torch
    t = tensor.detach().cpu()
    if t.is_floating_point():
        t = t.to(torch.float32)
    check(not t.is_complex(), f"complex tensors are not supported (dtype {t.dtype})")
    return t.numpy().copy()


def _to_torch(x: Any) -> Any:
    import torch
    if isinstance(x, Const):
        return torch.tensor(x.array)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_torch(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_torch(v) for k, v in x.items()}
    return x


def _ntuple(v: Any, n: int) -> tuple[int, ...]:
    """An int or a list of ints as n ints (torch repeats a single value)."""
    values = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    return tuple(values * n if len(values) == 1 else values)


# ---- convolutions and dense ----

def _conv(c: Importer, a: dict) -> Any:
    x, w = a["input"], a["weight"]
    nd = len(c.shape(w)) - 2
    transposed = bool(a.get("transposed", "conv_transpose" in c.target))
    pads = _conv_pads(c, a["padding"], c.shape(w)[2:], _ntuple(a["dilation"], nd))
    attrs = dict(strides=_ntuple(a["stride"], nd), pads=pads,
                 dilations=_ntuple(a["dilation"], nd), groups=int(a["groups"]))
    if transposed:
        attrs["output_padding"] = _ntuple(a["output_padding"], nd)
    unbatched = len(c.shape(x)) == nd + 1
    if unbatched:
        x = c.reshape(x, (1, *c.shape(x)))
    bias = [] if a["bias"] is None else [a["bias"]]
    op = "conv_transpose" if transposed else "conv"
    if unbatched:
        return c.reshape(c.emit(op, [x, w, *bias], **attrs), c.out_shape(), final=True)
    return c.out(op, [x, w, *bias], **attrs)


def _conv_pads(c: Importer, padding: Any, kernel: Sequence[int], dil: Sequence[int]
               ) -> tuple[int, ...]:
    if isinstance(padding, str):
        if padding == "valid":
            return (0,) * 2 * len(kernel)
        if padding != "same":
            raise c.fail(f"padding must be 'valid' or 'same', got {padding!r}")
        total = [d * (k - 1) for k, d in zip(kernel, dil)]
        return tuple(t // 2 for t in total) + tuple(t - t // 2 for t in total)
    p = _ntuple(padding, len(kernel))
    return p + p


def _linear(c: Importer, a: dict) -> Any:
    bias = [] if a["bias"] is None else [a["bias"]]
    return c.out("dense", [a["input"], a["weight"], *bias])


def _addmm(c: Importer, a: dict) -> Any:
    """beta * self + alpha * (mat1 @ mat2); a constant mat2 and a row bias make a dense."""
    w, bias = c.const(a["mat2"]), a["self"]
    if (w is not None and w.ndim == 2 and a["beta"] == 1 and a["alpha"] == 1
            and c.shape(bias) == (w.shape[1],)):
        return c.out("dense", [a["mat1"], c.transpose(a["mat2"], (1, 0)), bias])
    product = c.emit("matmul", [a["mat1"], a["mat2"]])
    if a["alpha"] != 1:
        product = _times(c, product, float(a["alpha"]))
    return c.out("add", [bias if a["beta"] == 1 else _times(c, bias, float(a["beta"])), product])


def _matmul(c: Importer, a: dict) -> Any:
    """torch.matmul, mm and bmm; 1-d operands become a row (left) or a column (right)."""
    x, y = a["self"], a.get("other", a.get("mat2"))
    vectors = len(c.shape(x)) == 1 or len(c.shape(y)) == 1
    if not vectors:
        return c.out("matmul", [x, y])
    if len(c.shape(x)) == 1:
        x = c.reshape(x, (1, *c.shape(x)))
    if len(c.shape(y)) == 1:
        y = c.reshape(y, (*c.shape(y), 1))
    return c.reshape(c.emit("matmul", [x, y]), c.out_shape(), final=True)


# ---- elementwise ----

def _binary(op: str, reverse: bool = False) -> Converter:
    """add/sub (with alpha on the second operand), mul, div, pow, maximum, minimum; `reverse`
    is rsub: other - alpha * self."""
    def convert(c: Importer, a: dict) -> Any:
        x, y = a["self"], a.get("other", a.get("exponent"))
        if reverse:
            x, y = y, x
        alpha = a.get("alpha", 1)
        if alpha != 1:
            y = _times(c, y, float(alpha))
        if a.get("rounding_mode") is not None:
            raise c.fail(f"rounding_mode={a['rounding_mode']!r} is not supported")
        return c.out(op, [x, y])
    return convert


def _times(c: Importer, v: Any, factor: float) -> Any:
    """`v * factor`, computed at import when `v` is a constant."""
    array = c.const(v)
    if array is None:
        return c.emit("mul", [v, factor])
    return float(array * factor) if array.ndim == 0 else c.new_const(array * factor, "scaled")


def _unary(op: str, **attrs: Any) -> Converter:
    return lambda c, a: c.out(op, [a["self"]], **attrs)


def _gelu(c: Importer, a: dict) -> Any:
    return c.out("gelu", [a["self"]], approximate=a["approximate"])


def _leaky_relu(c: Importer, a: dict) -> Any:
    return c.out("leaky_relu", [a["self"]], alpha=float(a["negative_slope"]))


def _clip(lo_key: str | None, hi_key: str | None, lo: float | None = None,
          hi: float | None = None) -> Converter:
    """clamp/hardtanh/relu6 as clip; the bounds come from arguments or are fixed."""
    def convert(c: Importer, a: dict) -> Any:
        low = a.get(lo_key) if lo_key else lo
        high = a.get(hi_key) if hi_key else hi
        for bound in (low, high):
            if bound is not None and not isinstance(bound, (int, float)):
                raise c.fail("tensor bounds are not supported; clamp to Python numbers")
        return c.out("clip", [a["self"]], min=None if low is None else float(low),
                     max=None if high is None else float(high))
    return convert


def _reciprocal(c: Importer, a: dict) -> Any:
    return c.out("div", [1.0, a["self"]])


def _rsqrt(c: Importer, a: dict) -> Any:
    return c.out("div", [1.0, c.emit("sqrt", [a["self"]])])


def _silu(c: Importer, a: dict) -> Any:
    return c.out("mul", [a["self"], c.emit("sigmoid", [a["self"]])])


def _hardsigmoid_value(c: Importer, x: Any, final: bool) -> str:
    shifted = c.emit("add", [c.emit("mul", [x, 1.0 / 6.0]), 0.5])
    return (c.out if final else c.emit)("clip", [shifted], min=0.0, max=1.0)


def _hardsigmoid(c: Importer, a: dict) -> Any:
    return _hardsigmoid_value(c, a["self"], final=True)


def _hardswish(c: Importer, a: dict) -> Any:
    return c.out("mul", [a["self"], _hardsigmoid_value(c, a["self"], final=False)])


# ---- normalization, softmax, attention ----

def _batch_norm(c: Importer, a: dict) -> Any:
    """batch_norm, native_batch_norm and _native_batch_norm_legit_no_training (inference)."""
    x = a["input"]
    if a.get("training"):
        raise c.fail("training-mode batch norm (batch statistics) is not supported; export "
                     "the module in eval mode")
    if a["running_mean"] is None or a["running_var"] is None:
        raise c.fail("batch norm without running statistics is not supported")
    channels = c.shape(x)[1]
    scale, bias = a["weight"], a["bias"]
    if scale is None:
        scale = c.new_const(np.ones(channels, np.float32), "scale")
    if bias is None:
        bias = c.new_const(np.zeros(channels, np.float32), "bias")
    out = c.out("batch_norm", [x, scale, bias, a["running_mean"], a["running_var"]],
                epsilon=float(a["eps"]))
    if c.target.startswith("aten.batch_norm"):
        return out
    return (out, Missing("batch-norm mean output"), Missing("batch-norm inverse-std output"))


def _layer_norm(c: Importer, a: dict) -> Any:
    x, normalized = a["input"], tuple(int(d) for d in a["normalized_shape"])
    axis = len(c.shape(x)) - len(normalized)
    scale, bias = a["weight"], a["bias"]
    if scale is None:
        scale = c.new_const(np.ones(normalized, np.float32), "ln_scale")
    out = c.out("layer_norm", [x, scale, *([] if bias is None else [bias])], axis=axis,
                epsilon=float(a["eps"]))
    if c.target.startswith("aten.layer_norm"):
        return out
    return (out, Missing("layer-norm mean output"), Missing("layer-norm inverse-std output"))


def _softmax(log: bool) -> Converter:
    def convert(c: Importer, a: dict) -> Any:
        if not log:
            return c.out("softmax", [a["self"]], axis=int(a["dim"]))
        return c.out("log", [c.emit("softmax", [a["self"]], axis=int(a["dim"]))])
    return convert


def _sdpa(c: Importer, a: dict) -> Any:
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


def _attention_mask(c: Importer, a: dict, queries: int, keys: int) -> Any:
    if a["is_causal"]:
        causal = np.triu(np.full((queries, keys), -np.inf, np.float32), 1)
        return c.new_const(causal, "causal_mask")
    mask = a["attn_mask"]
    if mask is None:
        return None
    array = c.const(mask)
    if array is not None and array.dtype == np.bool_:
        return c.new_const(np.where(array, 0.0, -np.inf).astype(np.float32), "mask")
    if isinstance(mask, str) and c.graph.types[mask].dtype == "bool":
        raise c.fail("a computed boolean attention mask is not supported; pass a float mask")
    return mask


# ---- pooling and reductions ----

def _spatial_dims(target: str) -> int:
    """2 for aten.max_pool2d.default and its kin."""
    return int(re.search(r"(\d)d", target).group(1))


def _max_pool(c: Importer, a: dict) -> Any:
    nd = _spatial_dims(c.target)
    if any(d != 1 for d in _ntuple(a["dilation"], nd)):
        raise c.fail(f"dilated max pooling (dilation={a['dilation']}) is not supported")
    out = _pool(c, "max_pool", a, nd)
    return (out, Missing("pooling indices output")) if "with_indices" in c.target else out


def _avg_pool(c: Importer, a: dict) -> Any:
    if a.get("divisor_override") is not None:
        raise c.fail(f"divisor_override={a['divisor_override']} is not supported")
    include_pad = bool(a["count_include_pad"])
    return _pool(c, "avg_pool", a, _spatial_dims(c.target), count_include_pad=include_pad)


def _pool(c: Importer, op: str, a: dict, nd: int, **extra: Any) -> Any:
    x = a["self"]
    kernel = _ntuple(a["kernel_size"], nd)
    strides = _ntuple(a["stride"], nd) if a["stride"] else kernel
    pads = _ntuple(a["padding"], nd)
    attrs = dict(kernel=kernel, strides=strides, pads=pads + pads,
                 ceil_mode=bool(a["ceil_mode"]), **extra)
    if len(c.shape(x)) == nd + 1:  # unbatched (C, *spatial)
        y = c.emit(op, [c.reshape(x, (1, *c.shape(x)))], **attrs)
        return c.reshape(y, c.out_shape(), final=True)
    return c.out(op, [x], **attrs)


def _adaptive_avg_pool(c: Importer, a: dict) -> Any:
    """Output (1, ..., 1) -> global_avg_pool; sizes dividing the input -> avg_pool."""
    x = a["self"]
    nd = _spatial_dims(c.target)
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


def _mean(c: Importer, a: dict) -> Any:
    """reduce_mean; a mean over all spatial axes that keeps them is global_avg_pool."""
    rank = len(c.shape(a["self"]))
    dims = a.get("dim")
    axes = sorted({int(d) % rank for d in dims} if dims else range(rank))
    if a.get("keepdim") and rank >= 3 and axes == list(range(2, rank)):
        return c.out("global_avg_pool", [a["self"]])
    return c.out("reduce_mean", [a["self"]], axes=tuple(axes), keepdims=bool(a.get("keepdim")))


def _sum(c: Importer, a: dict) -> Any:
    """sum as reduce_mean times the number of summed elements."""
    shape = c.shape(a["self"])
    dims = a.get("dim")
    axes = tuple(range(len(shape))) if not dims else tuple(int(d) for d in dims)
    count = math.prod(shape[d] for d in axes)
    mean = c.emit("reduce_mean", [a["self"]], axes=axes, keepdims=bool(a.get("keepdim")))
    return c.out("mul", [mean, float(count)])


# ---- layout ----

def _view(c: Importer, a: dict) -> Any:
    """view/reshape/flatten/unflatten/squeeze/unsqueeze/expand without broadcasting: the
    output shape that torch recorded."""
    x, shape = a["self"], c.out_shape()
    if math.prod(shape) != math.prod(c.shape(x)):
        raise c.fail(f"broadcasting {c.shape(x)} to {shape} is not supported (only "
                     f"expands that add size-1 axes)")
    return c.reshape(x, shape, final=True)


def _identity(c: Importer, a: dict) -> Any:
    """clone, contiguous, alias, detach, dropout in eval mode, casts to the same dtype."""
    x = a.get("self", a.get("input"))
    if a.get("train"):
        raise c.fail("dropout in training mode is not supported; export in eval mode")
    dtype = a.get("dtype")
    if dtype is not None and str(dtype).removeprefix("torch.") != _dtype(c, x):
        raise c.fail(f"casting {_dtype(c, x)} to {dtype} is not supported")
    return x


def _dtype(c: Importer, v: Any) -> str:
    return str(v.array.dtype) if isinstance(v, Const) else c.graph.types[v].dtype


def _native_dropout(c: Importer, a: dict) -> Any:
    return (_identity(c, a), Missing("dropout mask output"))


def _permute(c: Importer, a: dict) -> Any:
    rank = len(c.shape(a["self"]))
    if "dims" in a:
        perm = [int(d) % rank for d in a["dims"]]
    else:  # transpose.int, t: swap two axes
        perm = list(range(rank))
        i, j = (int(a["dim0"]) % rank, int(a["dim1"]) % rank) if "dim0" in a else (0, rank - 1)
        perm[i], perm[j] = perm[j], perm[i]
    return c.transpose(a["self"], perm, final=True)


def _cat(c: Importer, a: dict) -> Any:
    tensors = [t for t in a["tensors"] if math.prod(c.shape(t)) > 0]
    if len(tensors) == 1:
        return tensors[0]
    return c.out("concat", tensors, axis=int(a["dim"]))


def _stack(c: Importer, a: dict) -> Any:
    rank = len(c.shape(a["tensors"][0])) + 1
    axis = int(a["dim"]) % rank
    parts = [c.reshape(t, (*c.shape(t)[:axis], 1, *c.shape(t)[axis:])) for t in a["tensors"]]
    return c.out("concat", parts, axis=axis) if len(parts) > 1 else parts[0]


def _each(names: str, converter: Converter) -> dict[str, Converter]:
    return {f"aten.{n}": converter for n in names.split()}


_UNARY = "relu sigmoid tanh erf exp log sqrt neg abs".split()
_VIEWS = ("view.default reshape.default _unsafe_view.default flatten.using_ints unflatten.int "
          "unsqueeze.default unsqueeze_.default squeeze.default squeeze.dim squeeze.dims "
          "expand.default")
_IDENTITY = ("clone.default contiguous.default alias.default detach.default "
             "lift_fresh_copy.default dropout.default feature_dropout.default "
             "alpha_dropout.default _to_copy.default to.dtype")

ATEN: dict[str, Converter] = {
    **_each("convolution.default conv1d.default conv2d.default conv3d.default conv1d.padding "
            "conv2d.padding conv3d.padding conv_transpose1d.default conv_transpose2d.input "
            "conv_transpose3d.input", _conv),
    **_each("linear.default", _linear),
    **_each("addmm.default", _addmm),
    **_each("mm.default bmm.default matmul.default", _matmul),
    **_each("add.Tensor add.Scalar add_.Tensor add_.Scalar", _binary("add")),
    **_each("sub.Tensor sub.Scalar sub_.Tensor sub_.Scalar", _binary("sub")),
    **_each("rsub.Tensor rsub.Scalar", _binary("sub", reverse=True)),
    **_each("mul.Tensor mul.Scalar mul_.Tensor mul_.Scalar", _binary("mul")),
    **_each("div.Tensor div.Scalar div.Tensor_mode div_.Tensor div_.Scalar", _binary("div")),
    **_each("pow.Tensor_Tensor pow.Tensor_Scalar pow.Scalar", _binary("pow")),
    **_each("maximum.default", _binary("maximum")),
    **_each("minimum.default", _binary("minimum")),
    **{f"aten.{op}{inplace}.default": _unary(op) for op in _UNARY for inplace in ("", "_")},
    **_each("gelu.default gelu_.default", _gelu),
    **_each("leaky_relu.default leaky_relu_.default", _leaky_relu),
    **_each("hardtanh.default hardtanh_.default", _clip("min_val", "max_val")),
    **_each("relu6.default relu6_.default", _clip(None, None, 0.0, 6.0)),
    **_each("clamp.default clamp_.default", _clip("min", "max")),
    **_each("clamp_min.default clamp_min_.default", _clip("min", None)),
    **_each("clamp_max.default clamp_max_.default", _clip(None, "max")),
    **_each("reciprocal.default", _reciprocal),
    **_each("rsqrt.default", _rsqrt),
    **_each("silu.default silu_.default", _silu),
    **_each("hardsigmoid.default hardsigmoid_.default", _hardsigmoid),
    **_each("hardswish.default hardswish_.default", _hardswish),
    **_each("batch_norm.default native_batch_norm.default "
            "_native_batch_norm_legit_no_training.default", _batch_norm),
    **_each("layer_norm.default native_layer_norm.default", _layer_norm),
    **_each("softmax.int _softmax.default", _softmax(log=False)),
    **_each("log_softmax.int _log_softmax.default", _softmax(log=True)),
    **_each("scaled_dot_product_attention.default", _sdpa),
    **_each("max_pool1d.default max_pool2d.default max_pool3d.default "
            "max_pool2d_with_indices.default max_pool3d_with_indices.default", _max_pool),
    **_each("avg_pool1d.default avg_pool2d.default avg_pool3d.default", _avg_pool),
    **_each("adaptive_avg_pool1d.default adaptive_avg_pool2d.default "
            "_adaptive_avg_pool2d.default adaptive_avg_pool3d.default "
            "_adaptive_avg_pool3d.default", _adaptive_avg_pool),
    **_each("mean.dim mean.default", _mean),
    **_each("sum.dim_IntList sum.default", _sum),
    **_each(_VIEWS, _view),
    **_each("permute.default transpose.int t.default", _permute),
    **_each(_IDENTITY, _identity),
    **_each("native_dropout.default", _native_dropout),
    **_each("cat.default", _cat),
    **_each("stack.default", _stack),
}

__all__ = ["from_torch", "UnsupportedOpError", "ATEN", "Importer", "Const"]
