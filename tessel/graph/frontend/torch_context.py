"""The context that `tessel.graph.frontend.torch_import`'s converters build the graph through.

A converter of `torch_import.ATEN` is `fn(context, args) -> result`: `args` are the ATen
operator's arguments by schema name (defaults filled in), where a tensor is a graph value (its
name, a `str`) or a `Const` known at import; the result is a value, or a tuple of them for an
operator with several outputs (a `Missing` for those tessel does not compute). `Context` holds
the graph being built and the FX node being translated, and adds nodes and constants under
names derived from it; the driver, `torch_import.Importer`, extends it with the walk over the
exported program. The converters live in `torch_convert_nn` (convolutions, norms, attention,
pooling, reductions) and `torch_convert_math` (dense, elementwise, layout).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tessel.graph.ir import Graph, GraphError, unique_name


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


Converter = Callable[["Context", dict], Any]


class Context:
    """The graph being built and the FX node being translated, with the helpers converters use."""

    def __init__(self, graph: Graph, reserved: set[str]) -> None:
        self.graph = graph
        self.reserved = reserved
        self.scalars: dict[float, Const] = {}
        self.node: Any = None
        self.label, self.target = "", ""

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
        name = unique_name(base, lambda n: n in self.reserved or n in self.graph.types)
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


def ntuple(v: Any, n: int) -> tuple[int, ...]:
    """An int or a list of ints as n ints (torch repeats a single value)."""
    values = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    return tuple(values * n if len(values) == 1 else values)


def each(names: str, converter: Converter) -> dict[str, Converter]:
    """Table entries mapping each of the space-separated ATen `names` to `converter`."""
    return {f"aten.{n}": converter for n in names.split()}
