"""Whole models, in parts that each import only the ones listed before them:

- the graph IR and its operators: ir, ops (opdefs/: one `define` per operator), reference
  (numpy), lowering (to te);
- rewrites of a graph: fold (constants, batch norms), fuse (groups that run as one kernel),
  layout (blocked channels), winograd;
- frontend/: graphs from ONNX models, torch modules (torch.export) and the built-in zoo;
- runtime: a compiled model, its kernels bound to memory planned once;
- compiler/: load a model, its tasks, tune them, choose in the model's sequence, compile;
- torch_backend/: `torch.compile(backend="tessel")`.
"""
from tessel.graph.ir import Graph, GraphError, Node, TensorType
from tessel.graph.ops import OPS

__all__ = ["Graph", "GraphError", "Node", "TensorType", "OPS"]
