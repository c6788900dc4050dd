"""Fused groups -> PrimFuncs -> tuning tasks, one per distinct kernel.

    graph = simplify(from_onnx("resnet18.onnx"))
    kernels = lower_groups(graph, fuse(graph))      # one GroupKernel per non-view group
    tasks = extract_tasks(kernels, Target("host"))  # one Task per structural hash, weighted

A group's PrimFunc takes its external inputs (activations and weight tensors) in order of
first use, then its output. Scalar constants are folded into the expressions as immediates
of their dtype.
Groups that compute the same thing on the same shapes (ResNet's repeated blocks) share one
structural hash, so they become one task whose weight is their count.
"""
from __future__ import annotations

import math

import numpy as np

from tessel import ir, te
from tessel.graph.fuse import FusedGroup, fuse
from tessel.graph.ir import Graph, Node
from tessel.graph.layout import DEFAULT_LAYOUT, apply_layout
from tessel.graph.lowering import lower
from tessel.graph.ops import OPS, broadcast_shape
from tessel.graph.runtime import GroupKernel
from tessel.ir import CONSTANT_PARAMS, MEASURE, PARTITION, PrimFunc
from tessel.target import Target
from tessel.tuning.task import Task


def lower_group(graph: Graph, group: FusedGroup, cores: int = 1) -> GroupKernel:
    env: dict[str, te.Tensor] = {}
    placeholders: list[te.Tensor] = []
    params: list[str] = []
    for node in group.nodes:
        args: list[te.Tensor | ir.Expr] = []
        for k, v in enumerate(node.inputs):
            if v in env:
                args.append(env[v])
            elif _embeddable(graph, node, v):
                value = graph.constants[v].reshape(-1)[0]
                args.append(ir.const(value.item(), graph.types[v].dtype))
            else:
                env[v] = te.placeholder(graph.types[v].shape, graph.types[v].dtype,
                                        name=_param_name(node, k, len(params)))
                placeholders.append(env[v])
                params.append(v)
                args.append(env[v])
        env[node.output] = lower(node, args, name=node.op)
    func = te.create_func([*placeholders, env[group.output]], name=group.name)
    # measured as the runtime runs it: its weights packed once (prepacked), and each call
    # from the caches the model's other kernels leave (MEASURE)
    attrs = {**func.attrs, MEASURE: "in_model"}
    constant = tuple(k for k, v in enumerate(params) if v in graph.constants)
    if constant:
        attrs[CONSTANT_PARAMS] = constant
    if rows_partition(func, constant, cores):
        attrs[PARTITION] = "rows"
    func = PrimFunc(func.name, func.params, func.body, attrs)
    return GroupKernel(group, func, (*params, group.output))


def rows_partition(func: PrimFunc, constant: tuple[int, ...], cores: int) -> bool:
    """Whether the threads split the kernel's output by rows (axis 2 of a blocked NCHW[x]c
    tensor, in `cores` equal shares) instead of by the outer loops fused as its schedule has
    them, which for a blocked conv means by channel blocks: when its output is at least as
    large as its weights. A 1x1 conv split by channels reads every input row, half of them
    written by the other core; split by rows, each core reads the rows it wrote (and all the
    weights), and so does the next kernel. Where the weights are the larger (MobileNet-v2's
    and ResNet-18's last layers), each core reading half of them is the better trade.
    MobileNet-v2's records tuned before the split, in one process (2026-11-26, 2-core Zen 5):
    2.054 ms with these kernels split by rows against 2.198 ms by channels (onnxruntime
    2.086 ms); a prototype splitting every kernel by rows, 2.247 against 2.216 ms."""
    out = func.params[-1]
    if cores < 2 or len(out.shape) != 5 or out.shape[2] % cores:
        return False
    weights = sum(math.prod(func.params[k].shape) for k in constant)
    return math.prod(out.shape) >= weights


def _embeddable(graph: Graph, node: Node, value: str) -> bool:
    """A one-element constant of a node that takes scalars (elementwise) whose output
    shape the other inputs already give: it becomes an immediate of the expression."""
    if value not in graph.constants or graph.constants[value].size != 1:
        return False
    if not OPS[node.op].scalars:
        return False
    others = [graph.types[v].shape for v in node.inputs if v != value]
    out = graph.types[node.output].shape
    return bool(others) and broadcast_shape(others, node.name) == out


def _param_name(node: Node, index: int, count: int) -> str:
    """Parameter names help readers and the measurement's random inputs (a batch norm's
    variance must be positive: OpDef.param_names); structural hashing ignores them."""
    if index < len(OPS[node.op].param_names):
        return OPS[node.op].param_names[index]
    if OPS[node.op].kind == "anchor" and index > 0:
        return ("weight", "bias")[index - 1]
    return f"p{count}"


def lower_groups(graph: Graph, groups: list[FusedGroup], cores: int = 1) -> list[GroupKernel]:
    """The kernels of the groups that run (not views, not concats done in place); `cores`:
    the threads that will run them (rows_partition)."""
    return [lower_group(graph, g, cores) for g in groups if not (g.is_view or g.in_place)]


def extract_tasks(kernels: list[GroupKernel], target: Target) -> list[Task]:
    """One task per distinct kernel (structural hash), weighted by how often the model runs
    it, in order of first appearance."""
    first: dict[str, GroupKernel] = {}
    count: dict[str, int] = {}
    for k in kernels:
        first.setdefault(k.key, k)
        count[k.key] = count.get(k.key, 0) + 1
    return [Task(k.func, target, name=_task_name(k, i), weight=float(count[key]))
            for i, (key, k) in enumerate(first.items())]


def _task_name(kernel: GroupKernel, index: int) -> str:
    shape = "x".join(str(n) for n in kernel.func.outputs[0].shape)
    return f"{index:02d}-{kernel.func.name}-{shape}"


def model_tasks(graph: Graph, target: Target, layout: str = DEFAULT_LAYOUT
                ) -> tuple[list[GroupKernel], list[Task]]:
    """The kernels of a simplified graph in `layout` (tessel.graph.layout) and its tuning
    tasks (one per distinct kernel)."""
    graph = apply_layout(graph, layout, target)
    return graph_tasks(graph, target)


def graph_tasks(graph: Graph, target: Target) -> tuple[list[GroupKernel], list[Task]]:
    """The kernels of a graph already in its layout, and its tuning tasks."""
    kernels = lower_groups(graph, fuse(graph), target.cores)
    return kernels, extract_tasks(kernels, target)


def param_arrays(graph: Graph, kernel: GroupKernel) -> list[np.ndarray | None]:
    """The constant arrays bound to the kernel's parameters (None for activations)."""
    return [graph.constants.get(v) for v in kernel.params]


__all__ = ["GroupKernel", "extract_tasks", "graph_tasks", "lower_group", "lower_groups",
           "model_tasks", "param_arrays", "rows_partition"]
