"""The graph IR of a whole model: values with static shapes, nodes of canonical operators.

    g = Graph("tiny")
    x = g.add_input("x", (1, 3, 32, 32))
    w = g.add_constant("w", np.random.rand(8, 3, 3, 3).astype("float32"))
    y = g.add_node("conv", [x, w], strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1),
                   groups=1)
    g.set_outputs([g.add_node("relu", [y])])

Importers (ONNX, torch.export) translate their operators into the canonical set of
`tessel.graph.ops.OPS` (which documents each operator's inputs and attributes), so the
passes, the task extraction and the runtime see one vocabulary. Every value has a static
shape and a dtype, inferred when its node is added; a node whose inputs do not fit its
operator raises `GraphError` naming the node.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from tessel.errors import TesselError


class GraphError(TesselError, ValueError):
    """A model that tessel cannot represent: an unsupported operator, a shape that does not
    fit, a dynamic dimension, a dangling value."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise GraphError(msg)


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: str = "float32"

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Node:
    """One operator application: `outputs[0] = op(*inputs; **attrs)` (one output each)."""
    op: str
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any] = field(default_factory=dict, hash=False)
    name: str = ""

    def __str__(self) -> str:
        attrs = ", ".join(f"{k}={v}" for k, v in self.attrs.items())
        sep = ", " if attrs else ""
        return f"{self.output} = {self.op}({', '.join(self.inputs)}{sep}{attrs})"


class Graph:
    """A model: user inputs, constants (weights), nodes in topological order, outputs."""

    def __init__(self, name: str = "model") -> None:
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}

    # ---- building ----

    def add_input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> str:
        self._new_value(name, _static_shape(name, shape), dtype)
        self.inputs.append(name)
        return name

    def add_constant(self, name: str, value: Any, dtype: str | None = None) -> str:
        array = np.asarray(value, dtype=dtype, order="C")  # (ascontiguousarray makes 0-d 1-d)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        self._new_value(name, tuple(int(d) for d in array.shape), str(array.dtype))
        self.constants[name] = array
        return name

    def add_node(self, op: str, inputs: Sequence[str], name: str = "",
                 output: str | None = None, **attrs: Any) -> str:
        """Append `op(*inputs)`; returns the name of its output value (`output`, else a fresh
        name derived from `name` or `op`)."""
        from tessel.graph.ops import infer
        label = name or op
        for v in inputs:
            check(v in self.types, f"node {label} ({op}): input {v!r} is not defined before it")
        out = output or self._fresh(name or op)
        out_type = infer(op, [self.types[v] for v in inputs], attrs, label)
        self._new_value(out, out_type.shape, out_type.dtype)
        self.nodes.append(Node(op, tuple(inputs), out, dict(attrs), label))
        return out

    def set_outputs(self, outputs: Iterable[str]) -> None:
        outputs = list(outputs)
        check(outputs, f"graph {self.name}: a model needs at least one output")
        for v in outputs:
            check(v in self.types, f"graph {self.name}: output {v!r} is not a value of the graph")
        self.outputs = outputs

    # ---- queries ----

    def type_of(self, value: str) -> TensorType:
        return self.types[value]

    def producer(self) -> dict[str, Node]:
        return {n.output: n for n in self.nodes}

    def consumers(self) -> dict[str, list[Node]]:
        users: dict[str, list[Node]] = {v: [] for v in self.types}
        for n in self.nodes:
            for v in n.inputs:
                users[v].append(n)
        return users

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def __str__(self) -> str:
        head = ", ".join(f"{v}: {self.types[v].shape}" for v in self.inputs)
        body = "\n".join(f"  {n}" for n in self.nodes)
        return f"graph {self.name}({head}) -> {', '.join(self.outputs)}\n{body}"

    # ---- internals ----

    def _new_value(self, name: str, shape: tuple[int, ...], dtype: str) -> None:
        check(isinstance(name, str) and name, f"graph {self.name}: value names must be "
                                              f"non-empty strings, got {name!r}")
        check(name not in self.types, f"graph {self.name}: value {name!r} is defined twice")
        self.types[name] = TensorType(shape, dtype)

    def _fresh(self, base: str) -> str:
        return unique_name(base, self.types.__contains__)


def unique_name(base: str, taken: Callable[[str], bool]) -> str:
    """`base`, or `base_1`, `base_2`, ... : the first name `taken` rejects not."""
    name, k = base, 0
    while taken(name):
        k += 1
        name = f"{base}_{k}"
    return name


def _static_shape(name: str, shape: Sequence[Any]) -> tuple[int, ...]:
    dims = tuple(shape)
    for d in dims:
        check(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 1,
              f"input {name}: shape {dims} must be static positive ints (tessel compiles for "
              f"one shape; give the model concrete input sizes)")
    return tuple(int(d) for d in dims)


__all__ = ["Graph", "GraphError", "Node", "TensorType", "check", "unique_name"]
