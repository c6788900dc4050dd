"""A model as the compiler takes it: a tessel Graph, an ONNX model (proto or path) or a torch
module, imported by its front end (tessel.graph.frontend) and simplified."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tessel.extras import require
from tessel.graph.passes import simplify
from tessel.graph.ir import Graph, GraphError, check


def load_model(model: Any, input_shapes: dict[str, Sequence[int]] | None = None,
               example_inputs: tuple | None = None) -> Graph:
    """A Graph from a Graph, an ONNX model (proto or path), or a torch.nn.Module (with
    `example_inputs`); then simplified (constants and batch norms folded). `input_shapes`
    fills an ONNX model's dynamic dimensions (tessel.graph.frontend.onnx_import)."""
    if isinstance(model, Graph):
        check(not input_shapes, "input_shapes is for ONNX models; a tessel Graph has its shapes")
        graph = model
    elif is_torch_module(model):
        check(example_inputs is not None, "a torch module needs example_inputs (a tuple of "
                                          "tensors of the shapes to compile for)")
        check(not input_shapes, "input_shapes is for ONNX models; a torch module is compiled "
                                "for the shapes of its example_inputs")
        from tessel.graph.frontend.torch_import import from_torch  # (imports torch)
        graph = from_torch(model, tuple(example_inputs))
    elif isinstance(model, (str, Path)) or type(model).__name__ == "ModelProto":
        check(example_inputs is None, "example_inputs is for torch modules; give an ONNX "
                                      "model's shapes with input_shapes")
        require("onnx", "importing an ONNX model")
        from tessel.graph.frontend.onnx_import import from_onnx  # (imports onnx)
        graph = from_onnx(model, input_shapes=input_shapes)
    else:
        raise GraphError(f"cannot compile a {type(model).__name__}: pass a tessel Graph, an "
                         f"ONNX model (ModelProto or path) or a torch.nn.Module")
    return simplify(graph)


def is_torch_module(model: Any) -> bool:
    """Whether `model` is a torch.nn.Module, told without importing torch."""
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module"
               for c in type(model).__mro__)


__all__ = ["is_torch_module", "load_model"]
