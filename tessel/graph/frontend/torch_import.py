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
result; a program with a write through a view (x[1:3] = 2) whose storage is read again
afterwards is imported in its functional form (`functional`), which spells the write as a
slice_scatter; the importer refuses such a write (UnsupportedOpError) rather than lose it.

This module is the driver (the walk over the exported program, constant folding, shape checks);
`ATEN` merges the converter tables of `tessel.graph.frontend.torch_convert_nn` (convolutions, norms,
attention, pooling, reductions) and `tessel.graph.frontend.torch_convert_math` (dense, elementwise,
layout), which build the graph through `tessel.graph.frontend.torch_context.Context`.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

from tessel.graph.frontend import torch_convert_logic, torch_convert_math, torch_convert_nn
from tessel.graph.frontend import torch_convert_reduce, torch_convert_rnn, torch_convert_spatial
from tessel.graph.frontend.context import Const
from tessel.graph.frontend.torch_context import Context, Converter, Missing
from tessel.graph.ir import Graph, GraphError, check


class UnsupportedOpError(GraphError):
    """An ATen operator (or other FX call) that tessel has no translation for."""

    def __init__(self, target: str, node: str, detail: str = "") -> None:
        self.target, self.node, self.detail = target, node, detail
        super().__init__(f"{target} (FX node {node}) is not supported by tessel's torch "
                         f"importer{detail}")


ATEN: dict[str, Converter] = {**torch_convert_nn.ATEN, **torch_convert_math.ATEN,
                              **torch_convert_logic.ATEN, **torch_convert_rnn.ATEN,
                              **torch_convert_reduce.ATEN, **torch_convert_spatial.ATEN}
INPUT = object()  # an Importer binding: the placeholder is a graph input


def from_torch(module: Any, example_inputs: tuple[Any, ...], name: str | None = None) -> Graph:
    """Translate `module` (put in eval mode) traced on `example_inputs` into a tessel `Graph`."""
    import torch
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__
    program = functional(_export(module, tuple(example_inputs)))
    try:
        return Importer.of_program(program, name).run()
    except UnsupportedOpError as first:
        try:
            return Importer.of_program(program.run_decompositions(), name).run()
        except UnsupportedOpError as second:
            same = (second.target, second.node) == (first.target, first.node)
            detail = first.detail + (" (nor after core-ATen decomposition)" if same else
                                     f" (its core-ATen decomposition fails at "
                                     f"{second.target}, FX node {second.node})")
            raise UnsupportedOpError(first.target, first.node, detail) from None


def functional(program: Any) -> Any:
    """The program, or where it writes through a view whose storage is read afterwards
    (`lost_write`) the program with its in-place operators made functional (a write into a
    slice becomes slice_scatter) and nothing else decomposed."""
    if lost_write(program.graph) is None:
        return program
    try:
        return program.run_decompositions({})
    except Exception as e:  # noqa: BLE001  torch raises many types
        raise GraphError(f"torch could not make the program functional ({type(e).__name__}: "
                         f"{(str(e).strip().splitlines() or [''])[0]}); it writes through a "
                         f"view whose storage is read afterwards") from e


def _export(module: Any, example_inputs: tuple[Any, ...]) -> Any:
    import torch
    try:
        return torch.export.export(module.eval(), example_inputs)
    except Exception as e:  # torch raises many types: data-dependent control flow, ...
        raise GraphError(f"torch.export could not trace {type(module).__name__}: "
                         f"{type(e).__name__}: {str(e).strip().splitlines()[0]}") from e


class Importer(Context):
    """The state of one import: the graph so far and what each FX node became.

    `graph` is an FX graph of ATen operators whose nodes carry torch's `meta["val"]`;
    `bindings` says what each placeholder is, by name: `INPUT` (a graph input of the recorded
    shape and dtype), a tensor (a constant) or a Python value (specialized at export);
    `user_outputs` picks the outputs that become the graph's (default: all of them);
    `names` names constants (default: their placeholder's name)."""

    def __init__(self, graph: Any, name: str, bindings: dict[str, Any],
                 user_outputs: Sequence[bool] | None = None,
                 names: dict[str, str] | None = None) -> None:
        super().__init__(Graph(name), {n.name for n in graph.nodes})
        self.fx_graph, self.bindings, self.user_outputs = graph, bindings, user_outputs
        self.names = names or {}
        self.env: dict[str, Any] = {}

    @classmethod
    def of_program(cls, program: Any, name: str) -> "Importer":
        """The importer of a `torch.export` program: user inputs are graph inputs (or their
        specialized values), parameters, buffers and tensor constants are constants."""
        bindings: dict[str, Any] = {}
        names: dict[str, str] = {}
        for spec in program.graph_signature.input_specs:
            kind, arg = spec.kind.name, spec.arg
            if kind == "USER_INPUT":
                bindings[arg.name] = arg.value if hasattr(arg, "value") else INPUT
            elif kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
                tensor = program.state_dict.get(spec.target)
                bindings[arg.name] = (tensor if tensor is not None
                                      else program.constants[spec.target])
                names[arg.name] = spec.target
            else:
                raise UnsupportedOpError(f"{kind.lower()} input {spec.target}", arg.name)
        outputs = [s.kind.name == "USER_OUTPUT" for s in program.graph_signature.output_specs]
        return cls(program.graph, name, bindings, outputs, names)

    def run(self) -> Graph:
        lost = lost_write(self.fx_graph)
        if lost is not None:
            node, view, base, reader = lost
            raise UnsupportedOpError(target_name(node.target), node.name, f": it writes "
                                     f"through {view.name}, a view of {base.name}, which "
                                     f"{reader.name} reads after it")
        for node in self.fx_graph.nodes:
            self.node = node
            self.enter(node.name, target_name(node.target))
            if node.op == "placeholder":
                self.bind(node)
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                self.set_outputs(node)
            else:
                raise UnsupportedOpError(f"FX {node.op} {self.op_type}", node.name)
        return self.graph

    # ---- inputs, nodes, outputs ----

    def bind(self, node: Any) -> None:
        check(node.name in self.bindings, f"placeholder {node.name} has no binding (an "
                                          f"importer bug)")
        bound = self.bindings[node.name]
        if bound is INPUT:
            self.env[node.name] = self.add_input(node)
        elif _is_tensor(bound):
            self.env[node.name] = Const(self.fresh(self.names.get(node.name, node.name)),
                                        _to_numpy(bound))
        else:
            self.env[node.name] = bound

    def add_input(self, node: Any) -> str:
        val = node.meta.get("val")
        check(hasattr(val, "shape"), f"input {node.name}: only tensor inputs are supported, "
                                     f"got {val!r}")
        dtype = str(val.dtype).removeprefix("torch.")
        return self.graph.add_input(node.name, tuple(int(d) for d in val.shape), dtype)

    def call(self, node: Any) -> None:
        args, kwargs = _map_nodes((node.args, node.kwargs), self.env)
        if node.target is not operator.getitem:
            _refuse_missing(self, (args, kwargs))
        if node.target is operator.getitem:
            result = self.getitem(*args)
        elif self.foldable(node, args, kwargs):
            torch_args, torch_kwargs = _map_leaves((args, kwargs), _to_torch)
            result = self.fold(node.target(*torch_args, **torch_kwargs))
        elif self.op_type in ATEN:
            result = ATEN[self.op_type](self, _bind(node.target, args, kwargs))
            self.check_shape(result, node.meta.get("val"))
        else:
            raise UnsupportedOpError(self.op_type, node.name)
        if _mutates_self(node.target) and hasattr(node.args[0], "name"):
            self.env[node.args[0].name] = result
        self.env[node.name] = result

    def getitem(self, source: Any, index: int) -> Any:
        return source[index]  # a Missing output is refused where it is used, not here

    def set_outputs(self, node: Any) -> None:
        result = node.args[0]
        values = _map_nodes(list(result) if isinstance(result, (list, tuple)) else [result],
                            self.env)
        keep = self.user_outputs if self.user_outputs is not None else [True] * len(values)
        outputs = [v for v, k in zip(values, keep) if k]
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
        computed = self.graph.types  # a str argument names a value the graph computes
        return not any(isinstance(v, str) and v in computed for v in _leaves((args, kwargs)))

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
        self.check(got == want or (want == () and got in ((), (1,))), f"tessel's translation "
                   f"has shape {got}, torch says {want} (an importer bug)")


# ---- FX plumbing ----

def target_name(target: Any) -> str:
    """'aten.add.Tensor' for an ATen overload, the function's name for anything else."""
    if hasattr(target, "_schema") or not callable(target):
        return str(target)
    return getattr(target, "__name__", str(target))


def _map_leaves(x: Any, fn: Callable[[Any], Any]) -> Any:
    """`x` with `fn` applied to each leaf of its nested lists, tuples and dicts."""
    if isinstance(x, (list, tuple)):
        return type(x)(_map_leaves(v, fn) for v in x)
    if isinstance(x, dict):
        return {k: _map_leaves(v, fn) for k, v in x.items()}
    return fn(x)


def _leaves(x: Any) -> list[Any]:
    """The leaves of nested lists, tuples and dicts, in order."""
    if isinstance(x, dict):
        x = list(x.values())
    return [leaf for v in x for leaf in _leaves(v)] if isinstance(x, (list, tuple)) else [x]


def _map_nodes(x: Any, env: dict[str, Any]) -> Any:
    """FX arguments with each node replaced by what it became."""
    def lookup(v: Any) -> Any:
        is_node = hasattr(v, "op") and hasattr(v, "name") and hasattr(v, "meta")
        return env[v.name] if is_node else v
    return _map_leaves(x, lookup)


def _refuse_missing(c: Importer, x: Any) -> None:
    for v in _leaves(x):
        if isinstance(v, Missing):
            raise c.fail(f"reads the {v.what}, which tessel does not compute")


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


def lost_write(graph: Any) -> tuple[Any, Any, Any, Any] | None:
    """The first in-place write through a view (x[1:3] = 2: fill_ of a slice) whose storage
    another node reads after it, as (write, view, base, reader); None if there is none. The
    importer rebinds only the value a write goes through, so such a graph is imported from its
    functional form (`functional`), where the write is a slice_scatter."""
    order = {node: k for k, node in enumerate(graph.nodes)}
    root: dict[Any, Any] = {}  # a view's node -> the node whose storage it shares
    for node in graph.nodes:
        source = node.args[0] if node.op == "call_function" and node.args else None
        if not isinstance(getattr(source, "name", None), str):
            continue
        if _returns_view(node.target) or (node.target is operator.getitem and source in root):
            root[node] = root.get(source, source)
        elif _mutates_self(node.target) and source in root:
            base = root[source]
            aliases = [base, *(v for v, r in root.items() if r is base and v is not source)]
            later = [u for a in aliases for u in a.users if order[u] > order[node]]
            if later:
                return node, source, base, later[0]
    return None


def _returns_view(target: Any) -> bool:
    """Whether the operator's result shares its first argument's storage without writing it
    (slice, view, transpose, split)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "detach")


def _to_numpy(tensor: Any) -> np.ndarray:
    import torch
    t = tensor.detach().cpu()
    if t.is_floating_point():
        t = t.to(torch.float32)
    check(not t.is_complex(), f"complex tensors are not supported (dtype {t.dtype})")
    return t.numpy().copy()


def _to_torch(x: Any) -> Any:
    import torch
    return torch.tensor(x.array) if isinstance(x, Const) else x


__all__ = ["from_torch", "functional", "lost_write", "UnsupportedOpError", "ATEN", "INPUT",
           "Importer", "Const"]
