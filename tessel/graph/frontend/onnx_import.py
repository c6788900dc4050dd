"""ONNX models -> tessel graphs: `from_onnx(model, input_shapes=None, name=None)`.

    graph = from_onnx("resnet.onnx", input_shapes={"input": (1, 3, 224, 224)})

Graph inputs are the ONNX inputs that are not initializers, with the model's static shape
(`input_shapes` fills dynamic dimensions); initializers become constants. Each ONNX node goes
through one converter of `CONVERTERS` into canonical operators of `tessel.graph.ops`, except a
node whose inputs are all constants and whose operator has a numpy implementation in
`tessel.graph.frontend.onnx_fold.FOLD`: that one is evaluated at import, which removes the shape
arithmetic that exporters emit. Anything else raises `GraphError` naming the ONNX operator and
node; nothing is dropped silently. Graph values keep their ONNX names where a node produces
them; the extra values a translation needs are named after the ONNX output they lead to.

This module is the driver (inputs, constant folding, dispatch, outputs); `CONVERTERS` merges
the converter tables of `onnx_convert_nn` (convolutions, Gemm, pooling, normalizations),
`onnx_convert_math` (elementwise, reductions), `onnx_convert_shape` (layout and shapes) and
`onnx_convert_logic` (comparisons, boolean logic, Where, Cast, Gather, Expand). A
converter is `fn(importer, inputs, attrs) -> value`: `inputs` are the node's inputs (a graph
value's name, a `Const` known at import, or None for an absent optional input), `attrs` its
decoded attributes; it adds canonical operators through the `Importer` and returns the value
of the node's first output (a list of them for a node with several outputs).
"""
from __future__ import annotations

import os
from numbers import Integral
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper

from tessel.graph.frontend import onnx_file, onnx_fold
from tessel.graph.frontend.context import Const, GraphBuilder, Value
from tessel.graph.frontend.onnx_convert_logic import LOGIC, dtype_name
from tessel.graph.frontend.onnx_convert_math import MATH
from tessel.graph.frontend.onnx_convert_nn import NN
from tessel.graph.frontend.onnx_convert_quant import QUANT
from tessel.graph.frontend.onnx_convert_rnn import RNN
from tessel.graph.frontend.onnx_convert_shape import SHAPE
from tessel.graph.frontend.onnx_fold import FOLD
from tessel.graph.ir import Graph, GraphError, check
from tessel.graph.opdefs.base import DTYPES

Converter = Callable[["Importer", list, dict], Any]
CONVERTERS: dict[str, Converter] = {**NN, **MATH, **SHAPE, **RNN, **LOGIC, **QUANT}


def from_onnx(model: onnx.ModelProto | str | os.PathLike,
              input_shapes: dict[str, tuple] | None = None, name: str | None = None) -> Graph:
    """Translate an ONNX model (a proto or a file path) into a tessel `Graph`; `input_shapes`
    ({input name: shape}) fixes the sizes of inputs whose dimensions the model leaves open."""
    shapes = check_input_shapes(input_shapes)  # before the file is read
    proto, weights = (model, {}) if isinstance(model, onnx.ModelProto) else load_file(model)
    importer = Importer(proto, name, weights)
    del weights  # the importer holds each weight until the last node reading it is converted
    importer.add_inputs(shapes)
    for node in proto.graph.node:
        importer.convert(node)
    importer.set_outputs()
    return importer.graph


def check_input_shapes(input_shapes: Any) -> dict[str, tuple[int, ...]]:
    """`input_shapes` as {name: tuple of ints}; GraphError unless it maps input names to
    sequences of positive ints (2.5 is no size, and True is no 1)."""
    if input_shapes is None:
        return {}
    check(isinstance(input_shapes, Mapping), f"input_shapes must be a dict {{input name: "
                                             f"shape}}, got {type(input_shapes).__name__}")
    out = {}
    for name, shape in input_shapes.items():
        check(isinstance(name, str), f"input_shapes: an input name must be a str, got {name!r}")
        dims = tuple(shape) if isinstance(shape, (list, tuple)) else None
        check(dims is not None and all(isinstance(d, Integral) and not isinstance(d, bool)
                                       and d >= 1 for d in dims),
              f"input_shapes[{name!r}] must be a tuple of positive ints, got {shape!r}")
        out[name] = tuple(int(d) for d in dims)
    return out


def load_file(path: str | os.PathLike) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The model in an .onnx file and its raw initializers as arrays, each weight in memory
    once (tessel.graph.frontend.onnx_file); GraphError when the file is missing, empty, not ONNX or
    holds no graph."""
    path = Path(path)
    check(path.is_file(), f"no such ONNX file: {path}")
    check(path.stat().st_size > 0, f"{path} is empty: not an ONNX model")
    try:
        proto, weights = onnx_file.load_file(path)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise GraphError(f"{path} is not an ONNX model (it does not parse as one: "
                         f"{str(err).splitlines()[0] if str(err) else type(err).__name__}; "
                         "cut short or another format?)") from None
    check(len(proto.graph.node) > 0 or len(proto.graph.output) > 0,
          f"{path} holds no ONNX graph (no nodes, no outputs): not a model file?")
    return proto, weights


class Importer(GraphBuilder):
    """The state of one import: the graph so far and what each ONNX value name became. A
    constant derived from another is named after it (`W_T`)."""

    def __init__(self, proto: onnx.ModelProto, name: str | None,
                 weights: dict[str, np.ndarray]) -> None:
        g = proto.graph
        self.proto = proto
        self.opset = _opset(proto)
        self.n_outputs = 1  # of the node being converted (Split without sizes splits by it)
        self.outputs: list[str] = []  # the node's output names ("" for an omitted one)
        self.env: dict[str, Value] = {
            t.name: Const(t.name, weights[t.name] if t.name in weights
                          else numpy_helper.to_array(t)) for t in g.initializer}
        self.uses: dict[str, int] = {o.name: 1 for o in g.output}
        for node in g.node:
            for v in node.input:
                self.uses[v] = self.uses.get(v, 0) + 1
        super().__init__(Graph(name or g.name or "model"), {v.name for v in g.input} | set(
            self.env) | set(self.uses) | {out for node in g.node for out in node.output})
        self.transposed: dict[tuple[str, tuple[int, ...]], Const] = {}
        # DequantizeLinear outputs -> (quantized value, scale, zero point or None, axis): a
        # convolution of two of them computes in int8 (onnx_convert_quant.quantized_conv)
        self.dequantized: dict[str, tuple[Value, np.ndarray, np.ndarray | None, int]] = {}

    # ---- inputs, nodes, outputs ----

    def add_inputs(self, input_shapes: dict[str, tuple]) -> None:
        inputs = [v for v in self.proto.graph.input if v.name not in self.env]
        unknown = set(input_shapes) - {v.name for v in inputs}
        check(not unknown, f"input_shapes names {sorted(unknown)}, which are not inputs of "
                           f"the model; its inputs are {[v.name for v in inputs]}")
        for v in inputs:
            dtype = dtype_name(v.type.tensor_type.elem_type)
            check(dtype in DTYPES, f"input {v.name}: dtype {dtype} is not supported; tessel "
                                   f"graphs take {', '.join(DTYPES)}")
            self.env[v.name] = self.graph.add_input(v.name, _input_shape(v, input_shapes),
                                                    dtype)

    def convert(self, node: onnx.NodeProto) -> None:
        self.enter(node.name or node.output[0], node.op_type, node.output[0])
        check(node.domain in ("", "ai.onnx"), f"node {self.label}: operator {node.domain}."
                                              f"{node.op_type} of a custom domain is not supported")
        ins = [self._lookup(v) if v else None for v in node.input]
        self.n_outputs, self.outputs = len(node.output), list(node.output)
        foldable = node.op_type in FOLD and all(v is None or isinstance(v, Const) for v in ins)
        if not foldable and node.op_type not in CONVERTERS:
            raise GraphError(_unsupported(node.op_type, self.label, ins))
        attrs = {a.name: _attribute(a) for a in node.attribute}
        if foldable:
            arrays = [None if v is None else v.array for v in ins]
            if node.op_type == "DequantizeLinear":
                self.dequantized[self.out_name] = (ins[0], arrays[1], arrays[2] if len(
                    arrays) > 2 else None, int(attrs.get("axis", 1)))
            self._bind(node, Const(self.out_name, onnx_fold.fold(
                node.op_type, arrays, attrs, self.label)))
        else:
            self._bind(node, CONVERTERS[node.op_type](self, ins, attrs))
        for v in node.input:  # a weight read for the last time: only what it became stays
            self.uses[v] = self.uses.get(v, 1) - 1
            if v and not self.uses[v] and isinstance(self.env.get(v), Const):
                del self.env[v]

    def set_outputs(self) -> None:
        self.enter("graph outputs", "-")
        outs = [self._lookup(o.name) for o in self.proto.graph.output]
        self.graph.set_outputs([self.value(v, keep_dtype=True) for v in outs])

    def _lookup(self, name: str) -> Value:
        self.check(name in self.env, f"input {name!r} is not produced by an earlier node (is "
                                     f"the model sorted?)")
        return self.env[name]

    def _bind(self, node: onnx.NodeProto, value: Value | list[Value]) -> None:
        """The node's outputs: one value, or a list (Split) of one per output."""
        values = value if isinstance(value, list) else [value]
        for name, v in zip(node.output, values):
            self.env[name] = v
        for i, extra in enumerate(node.output[len(values):], len(values)):
            self.check(not extra or not self.uses.get(extra), f"output {i} ({extra!r}) is used, "
                       f"but tessel translates only the first output of {node.op_type}")

    # ---- helpers for converters ----

    def wants(self, index: int) -> bool:
        """Whether output `index` of the node being converted is read (by a later node or as
        a graph output): a converter computes an optional output only then."""
        name = self.outputs[index] if index < len(self.outputs) else ""
        return bool(name) and self.uses.get(name, 0) > 0

    def const(self, ins: list, index: int, what: str) -> np.ndarray | None:
        """Input `index` as an array (None when absent); it must be known at import."""
        v = ins[index] if index < len(ins) else None
        self.check(v is None or isinstance(v, Const), f"{what} (input {index}) must be a "
                   f"constant known at import, got the computed value {v!r}")
        return None if v is None else v.array

    def derive(self, v: Const, array: np.ndarray, what: str) -> Const:
        return Const(self.fresh(f"{v.name}_{what}"), np.array(array, order="C"))

    def transpose(self, v: Value, perm: Sequence[int], final: bool = False) -> Value:
        """`v` transposed; a constant once per permutation (a weight that several MatMuls
        share stays one constant)."""
        perm = tuple(int(p) for p in perm)
        if not isinstance(v, Const) or perm == tuple(range(len(perm))):
            return super().transpose(v, perm, final)
        if (v.name, perm) not in self.transposed:
            self.transposed[v.name, perm] = self.derive(v, np.transpose(v.array, perm), "T")
        return self.transposed[v.name, perm]


# ---- model-level helpers ----

def _opset(proto: onnx.ModelProto) -> int:
    for op in proto.opset_import:
        if op.domain in ("", "ai.onnx"):
            return int(op.version)
    raise GraphError(f"model {proto.graph.name}: no opset of the default ONNX domain")


def _input_shape(v: onnx.ValueInfoProto, given: dict[str, tuple]) -> tuple[int, ...]:
    dims = v.type.tensor_type.shape.dim if v.type.tensor_type.HasField("shape") else None
    if v.name in given:
        shape = given[v.name]
        check(dims is None or len(dims) == len(shape), f"input {v.name}: input_shapes gives "
              f"{shape}, but the model's input has rank {len(dims or ())}")
        for i, d in enumerate(dims or ()):
            check(d.dim_value <= 0 or d.dim_value == shape[i], f"input {v.name}: input_shapes "
                  f"gives {shape}, but the model fixes dim {i} to {d.dim_value}")
        return shape
    check(dims is not None, f"input {v.name}: the model gives no shape; pass input_shapes")
    for i, d in enumerate(dims):
        check(d.dim_value > 0, f"input {v.name}: dim {i} ({d.dim_param or '?'}) is dynamic; "
                               f"pass input_shapes={{{v.name!r}: (...)}} with a concrete size")
    return tuple(int(d.dim_value) for d in dims)


def _attribute(a: onnx.AttributeProto) -> Any:
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    return list(value) if isinstance(value, (list, tuple)) or hasattr(value, "extend") else value


def _unsupported(op_type: str, label: str, ins: list) -> str:
    if op_type in FOLD:
        computed = [v for v in ins if isinstance(v, str)]
        return (f"node {label}: ONNX operator {op_type!r} is supported only on constant "
                f"inputs (tessel evaluates it at import), but {computed} are computed")
    return (f"node {label}: ONNX operator {op_type!r} is not supported; tessel translates "
            f"{sorted(CONVERTERS)} and evaluates {sorted(set(FOLD) - set(CONVERTERS))} "
            f"on constant inputs")


__all__ = ["from_onnx", "Importer", "Const", "Converter", "CONVERTERS"]
