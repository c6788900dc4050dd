"""Whole models: a graph IR, importers (ONNX, torch.export), fusion, task extraction and an
executor that runs each fused group with the best kernel the database knows."""
from tessel.graph.ir import Graph, GraphError, Node, TensorType
from tessel.graph.ops import OPS

__all__ = ["Graph", "GraphError", "Node", "TensorType", "OPS"]
