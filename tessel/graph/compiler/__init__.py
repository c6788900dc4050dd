"""The model compiler: a model loaded and simplified (load), its fused groups lowered to
kernels and tuning tasks (tasks), tuned through tessel.tuning (tune), each task's program
chosen in the model's sequence (select), and built into a runtime model (compile)."""
from tessel.graph.compiler.compile import compile_graph, compile_model
from tessel.graph.compiler.load import load_model
from tessel.graph.compiler.select import Selection, select_graph, select_in_sequence
from tessel.graph.compiler.tasks import graph_tasks, model_tasks
from tessel.graph.compiler.tune import tune_model

__all__ = ["Selection", "compile_graph", "compile_model", "graph_tasks", "load_model",
           "model_tasks", "select_graph", "select_in_sequence", "tune_model"]
