"""How a front end adds nodes and constants to a tessel graph: `Const` and `GraphBuilder`.

A front end walks a foreign model (ONNX nodes, FX nodes) and translates each node into
canonical operators of `tessel.graph.ops` through a `GraphBuilder`: `enter` names the node
being translated, `out` adds the node that computes its (first) output under that output's
name, `emit` an intermediate named after it. A tensor known at import is a `Const`; it stays
one (reshaped, transposed, scaled with numpy) until a node reads it, and `value` adds it to
the graph then, so shape arithmetic and weight layout changes cost nothing at run time.
`tessel.graph.frontend.onnx_import.Importer` and `tessel.graph.frontend.torch_context.Context`
extend it with their naming and dtype rules.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

from tessel.graph.ir import Graph, GraphError, check, unique_name


@dataclass(frozen=True, eq=False)
class Const:
    """A tensor known at import: a weight, a folded node's result, or an array derived from one."""
    name: str
    array: np.ndarray


Value = Union[str, Const]  # str: a value of the graph being built


def triangle_mask(shape: Sequence[int], upper: bool, k: int) -> np.ndarray:
    """The elements ONNX Trilu and torch.triu/tril keep over the last two axes of `shape`:
    column - row >= k (upper) or <= k (lower)."""
    rows, cols = shape[-2:]
    diff = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    return diff >= k if upper else diff <= k


class GraphBuilder:
    """The graph being built and the foreign node being translated: its `label` (the label of
    every node added for it), `op_type` (for messages) and `out_name` (its first output)."""

    const_dtype: str | None = None  # the dtype a constant takes in the graph (None: its own)

    def __init__(self, graph: Graph, reserved: set[str]) -> None:
        self.graph = graph
        self.reserved = reserved  # the foreign model's names, kept for the values they name
        self.label, self.op_type, self.out_name = "", "", ""

    def enter(self, label: str, op_type: str, out_name: str | None = None) -> None:
        """Translate the node `label` next; its first output is `out_name` (default: `label`)."""
        self.label, self.op_type = label, op_type
        self.out_name = label if out_name is None else out_name

    def fail(self, msg: str) -> GraphError:
        return GraphError(f"node {self.label} ({self.op_type}): {msg}")

    def check(self, cond: Any, msg: str) -> None:
        if not cond:
            raise self.fail(msg)

    def fresh(self, base: str) -> str:
        """A name that no value of the foreign model and no graph value has."""
        name = unique_name(base, lambda n: n in self.reserved or n in self.graph.types)
        self.reserved.add(name)
        return name

    def shape(self, v: Any) -> tuple[int, ...]:
        if isinstance(v, Const):
            return tuple(v.array.shape)
        return self.graph.types[v].shape if isinstance(v, str) else ()  # () for a Python number

    def dtype(self, v: Any) -> str:
        """The dtype `v` has (a constant: the one it takes in the graph, float64 as float32)."""
        if isinstance(v, Const):
            kind = v.array.dtype
            return "float32" if kind == "float64" else self.const_dtype or str(kind)
        return self.graph.types[v].dtype if isinstance(v, str) else "float32"

    # ---- nodes ----

    def value(self, v: Any, keep_dtype: bool = False) -> str:
        """The graph value of `v`: a graph value as is; a constant (a Python number is a float32
        scalar) is added, in `const_dtype` unless `keep_dtype`, the first time one is read."""
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = self.scalar(float(v))
        if isinstance(v, str):
            return v
        if not isinstance(v, Const):
            raise self.fail(f"expected a tensor, got {v!r}")
        if v.name not in self.graph.types:
            array, dtype = v.array, None if keep_dtype else self.const_dtype
            check(array.dtype.kind in "biuf", f"constant {v.name}: dtype {array.dtype} has no "
                                              f"tensor equivalent")
            self.graph.add_constant(v.name, array if dtype is None
                                    else array.astype(dtype, copy=False))
        return v.name

    def emit(self, op: str, ins: Sequence[Any], **attrs: Any) -> str:
        """Add an intermediate node of the translation, named after the foreign output."""
        return self.graph.add_node(op, [self.value(v) for v in ins], name=self.label,
                                   output=self.fresh(f"{self.out_name}_{op}"), **attrs)

    def out(self, op: str, ins: Sequence[Any], **attrs: Any) -> str:
        """Add the node that computes the foreign node's (first) output, under its name."""
        return self.graph.add_node(op, [self.value(v) for v in ins], name=self.label,
                                   output=self.out_name, **attrs)

    # ---- constants ----

    def new_const(self, array: np.ndarray, what: str) -> Const:
        """A constant made at import for the node being translated, named after its output."""
        return Const(self.fresh(f"{self.out_name}_{what}"), np.array(array, order="C"))

    def derive(self, v: Const, array: np.ndarray, what: str) -> Const:
        """The constant `array` computed at import from the constant `v` (`what`: how)."""
        return self.new_const(array, what)

    def scalar(self, x: float, dtype: str = "float32") -> Const:
        """A constant of shape () (an immediate where a kernel reads it)."""
        return self.new_const(np.asarray(x, np.bool_ if dtype == "bool" else dtype), "scalar")

    def reshape(self, v: Any, shape: Sequence[int], final: bool = False) -> Any:
        """`v` in `shape` (the node's output when `final`); a constant is reshaped at import."""
        shape = tuple(int(d) for d in shape)
        if self.shape(v) == shape:
            return v
        if isinstance(v, Const):
            return self.derive(v, v.array.reshape(shape), "reshaped")
        return (self.out if final else self.emit)("reshape", [v], shape=shape)

    def transpose(self, v: Any, perm: Sequence[int], final: bool = False) -> Any:
        """`v` with its axes permuted by `perm`; a constant is permuted at import."""
        perm = tuple(int(p) for p in perm)
        if perm == tuple(range(len(perm))):
            return v
        if isinstance(v, Const):
            return self.derive(v, np.transpose(v.array, perm), "transposed")
        return (self.out if final else self.emit)("transpose", [v], perm=perm)

    def slice(self, v: Any, ranges: Sequence[range], final: bool = False) -> Any:
        """The elements of `v` at `ranges`, one per axis (tessel.graph.opdefs.shape
        slice_range); a constant is sliced at import."""
        if all(r == range(n) for r, n in zip(ranges, self.shape(v))):
            return v
        if isinstance(v, Const):
            return self.derive(v, v.array[np.ix_(*ranges)] if ranges else v.array, "sliced")
        return (self.out if final else self.emit)(
            "slice", [v], starts=tuple(r.start for r in ranges),
            ends=tuple(r.stop for r in ranges), steps=tuple(r.step for r in ranges))

    def triangle(self, v: Any, upper: bool, k: int) -> Any:
        """`v` with the elements outside its upper (or lower) triangle over the last two axes,
        k diagonals off the main one, set to 0: a where over a mask made at import."""
        shape = self.shape(v)
        self.check(len(shape) >= 2, f"input of rank {len(shape)}: a triangle needs 2 axes")
        mask = triangle_mask(shape, upper, k)
        if mask.all():
            return v
        zero = self.new_const(np.zeros((), self.dtype(v)), "zero")
        return self.out("where", [self.new_const(mask, "mask"), v, zero])

    def split(self, v: Any, axis: int, sizes: Sequence[int]) -> list[Any]:
        """`v` cut along `axis` into consecutive parts of `sizes` (they must add up)."""
        shape = self.shape(v)
        self.check(sum(sizes) == shape[axis] and all(int(n) >= 1 for n in sizes),
                   f"split sizes {list(sizes)} do not cut axis {axis} of {shape} into "
                   f"non-empty parts")
        ranges, start, parts = [range(n) for n in shape], 0, []
        for n in sizes:
            ranges[axis] = range(start, start + int(n))
            parts.append(self.slice(v, list(ranges)))
            start += int(n)
        return parts


__all__ = ["Const", "Value", "GraphBuilder", "triangle_mask"]
