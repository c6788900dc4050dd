"""`KernelOp`: everything tessel knows about one kernel-level operator, and the registry `OPS`.

An operator is defined once, in the file of its family (linalg.py, nn.py, elementwise.py,
norm.py): its factory, decorated with `@define(numpy, *numpy_args)`. The factory builds the
naive PrimFunc (attrs {"op": name, "args": {...}} rebuild it); `numpy`, from tessel.ops.reference,
computes the same from the input arrays and the factory arguments named in `numpy_args`.
Derived for every operator alike: `flops(func)`, counted on the lowering as the graph's
`OpDef.flops` is (tests/test_suite.py holds the closed formulas it equals), and the reference
check's `reference_inputs`, `empty_outputs`, `run_reference`.

The graph's operators (tessel.graph.opdefs) are a registry of their own, a layer up. Templates
(tessel.space.templates) are keyed by operator name in the layer above; one template serves
several operators (conv2d's also conv2d_transpose and conv2d_bn_relu).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from tessel import ir
from tessel.ops.common import check

Factory = Callable[..., ir.PrimFunc]


@dataclass(frozen=True)
class KernelOp:
    name: str
    factory: Factory  # the naive PrimFunc; its attrs name the op and the arguments
    numpy: Callable[..., np.ndarray]  # tessel.ops.reference: (*inputs, *numpy_args' values)
    numpy_args: tuple[str, ...]  # the factory arguments numpy takes after the inputs

    def reference(self, inputs: Sequence[np.ndarray], args: dict[str, Any]) -> np.ndarray:
        """The output for `inputs` of the program the factory builds from `args`."""
        return self.numpy(*inputs, *(args[k] for k in self.numpy_args))


OPS: dict[str, KernelOp] = {}


def define(numpy: Callable[..., np.ndarray], *numpy_args: str) -> Callable[[Factory], Factory]:
    """Register the decorated factory as operator `factory.__name__` (see KernelOp)."""
    def register(factory: Factory) -> Factory:
        check(factory.__name__ not in OPS, f"operator {factory.__name__} is defined twice")
        OPS[factory.__name__] = KernelOp(factory.__name__, factory, numpy, numpy_args)
        return factory
    return register


# ---- flops ---------------------------------------------------------------------------------

def _expr_ops(e: ir.Expr) -> int:
    """Arithmetic operations in a stored value: index math and select conditions excluded;
    an if_then_else counts its costlier side (one side runs: Winograd's transforms choose one
    formula of six per element)."""
    if isinstance(e, ir.BufferLoad):
        return 0
    if isinstance(e, ir.Select):
        return max(_expr_ops(e.true_value), _expr_ops(e.false_value))
    if isinstance(e, ir.BinOp):
        own = 1 if e.op in ("+", "-", "*", "/", "//", "%", "min", "max") else 0
        return own + _expr_ops(e.a) + _expr_ops(e.b)
    if isinstance(e, ir.Call) and e.name == "if_then_else":
        return max(_expr_ops(x) for x in e.args[1:])
    if isinstance(e, ir.Call):
        return 1 + sum(_expr_ops(x) for x in e.args)
    if isinstance(e, ir.Cast):
        return _expr_ops(e.value)
    return 0


def flops(func: ir.PrimFunc) -> int:
    """Operations of one run, a multiply-add counting 2: for each block, the product of its
    iteration extents times the arithmetic operations in what it stores (the reduction update
    included, the init excluded). Exact for the naive program of a factory or a graph
    lowering; the one count behind GFLOP/s and the task scheduler."""
    total = 0
    for block in ir.blocks(func.body):
        if block is func.root:
            continue
        iters = math.prod(iv.extent for iv in block.iter_vars)
        total += iters * sum(_expr_ops(s.value) for s in ir.collect(block.body, ir.BufferStore))
    return total


# ---- numpy references ----------------------------------------------------------------------

def _registered(func: ir.PrimFunc) -> tuple[KernelOp, dict[str, Any]]:
    op = func.attrs.get("op")
    if op not in OPS:
        raise ValueError(f"function {func.name!r} has attrs op={op!r}, which has no numpy "
                         f"reference; known: {sorted(OPS)}")
    return OPS[op], func.attrs["args"]


def _random(rng: np.random.Generator, buf: ir.Buffer) -> np.ndarray:
    if ir.is_int(buf.dtype):
        return rng.integers(-8, 9, size=buf.shape).astype(buf.dtype)
    if buf.name == "var":  # variances must be positive
        return rng.uniform(0.5, 1.5, size=buf.shape).astype(buf.dtype)
    return rng.uniform(-1.0, 1.0, size=buf.shape).astype(buf.dtype)


def reference_inputs(func: ir.PrimFunc, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Seeded random arrays for the input params, in order, of the right shape and dtype."""
    _registered(func)
    rng = np.random.default_rng(seed)
    return tuple(_random(rng, buf) for buf in func.inputs)


def empty_outputs(func: ir.PrimFunc) -> tuple[np.ndarray, ...]:
    """Zeroed arrays for the output params, in order."""
    return tuple(np.zeros(buf.shape, buf.dtype) for buf in func.outputs)


def run_reference(func: ir.PrimFunc, *inputs: np.ndarray) -> np.ndarray:
    """The expected output of `func` on `inputs`, from its operator's numpy reference, in the
    output param's dtype."""
    op, args = _registered(func)
    expected = len(func.inputs)
    if len(inputs) != expected:
        raise ValueError(f"{func.name}: expected {expected} input arrays "
                         f"({', '.join(b.name for b in func.inputs)}), got {len(inputs)}")
    out = np.asarray(op.reference(inputs, args))
    dtype = func.outputs[0].dtype
    if ir.is_int(dtype) and not np.issubdtype(out.dtype, np.integer):
        out = np.rint(out)
    return out.astype(dtype)
