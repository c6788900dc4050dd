"""The context that `tessel.graph.frontend.torch_import`'s converters build the graph through.

A converter of `torch_import.ATEN` is `fn(context, args) -> result`: `args` are the ATen
operator's arguments by schema name (defaults filled in), where a tensor is a graph value (its
name, a `str`) or a `Const` known at import; the result is a value, or a tuple of them for an
operator with several outputs (a `Missing` for those tessel does not compute). `Context` is the
`GraphBuilder` of an FX node: nodes and constants it adds are named after the node; the driver,
`torch_import.Importer`, extends it with the walk over the exported program. The converters
live in `torch_convert_nn` (convolutions, norms, attention, pooling, reductions) and
`torch_convert_math` (dense, elementwise, layout).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tessel.graph.frontend.context import Const, GraphBuilder
from tessel.graph.ir import Graph


@dataclass(frozen=True)
class Missing:
    """An extra output of an ATen operator that tessel does not compute (pool indices,
    batch-norm statistics); reading it through getitem raises."""
    what: str


Converter = Callable[["Context", dict], Any]


class Context(GraphBuilder):
    """The graph being built and the FX node being translated (`node`, its name the `label`
    and the output name); constants keep their dtype, and each Python number read becomes one
    shared scalar constant."""

    def __init__(self, graph: Graph, reserved: set[str]) -> None:
        super().__init__(graph, reserved)
        self.scalars: dict[tuple[float, str], Const] = {}
        self.node: Any = None

    def _out_val(self) -> Any:
        val = self.node.meta["val"]
        return val[0] if isinstance(val, (tuple, list)) else val

    def out_shape(self) -> tuple[int, ...]:
        """The shape torch recorded for the (first) output of the node being translated."""
        return tuple(int(d) for d in self._out_val().shape)

    def out_dtype(self) -> Any:
        """The torch dtype torch recorded for the (first) output of the node being translated."""
        return self._out_val().dtype

    def const(self, v: Any) -> np.ndarray | None:
        if isinstance(v, Const):
            return v.array
        return np.asarray(v, np.float32) if isinstance(v, (int, float)) else None

    def scalar(self, x: float, dtype: str = "float32") -> Const:
        if (x, dtype) not in self.scalars:
            self.scalars[x, dtype] = super().scalar(x, dtype)
        return self.scalars[x, dtype]


def ntuple(v: Any, n: int) -> tuple[int, ...]:
    """An int or a list of ints as n ints (torch repeats a single value)."""
    values = [int(v)] if isinstance(v, int) else [int(x) for x in v]
    return tuple(values * n if len(values) == 1 else values)


def each(names: str, converter: Converter) -> dict[str, Converter]:
    """Table entries mapping each of the space-separated ATen `names` to `converter`."""
    return {f"aten.{n}": converter for n in names.split()}
