"""Code generation's passes: scheduled PrimFunc in, lowered IR out (see
`tessel.codegen.lowered` for the nodes each pass produces). Each pass is IR -> IR and has
golden tests of its own (tests/test_codegen_passes.py); `lower_kernel` runs them in order.
`compact_buffers` (PrimFunc -> PrimFunc) runs before it in a build (tessel.build, measure)."""
from __future__ import annotations

from tessel.codegen.lowered import LoweredFunc
from tessel.codegen.passes.blocks import lower_blocks
from tessel.codegen.passes.compact import compact_buffers
from tessel.codegen.passes.reductions import vectorize_reductions
from tessel.codegen.passes.registers import promote_registers
from tessel.codegen.passes.unroll import unroll
from tessel.codegen.passes.vectorize import NotVectorizable, vectorize
from tessel.ir import PrimFunc
from tessel.target import Target


def lower_kernel(func: PrimFunc, target: Target, *,
                 max_unroll_step: int | None = None) -> LoweredFunc:
    """`func` lowered for a CPU target: vector reductions, blocks, unrolling, vectorization,
    register promotion. `max_unroll_step` caps the auto-unroll annotations (None: none)."""
    lowered = lower_blocks(vectorize_reductions(func, target))
    return promote_registers(vectorize(unroll(lowered, max_unroll_step), target))


__all__ = ["lower_kernel", "compact_buffers", "lower_blocks", "vectorize_reductions", "unroll",
           "vectorize", "promote_registers", "NotVectorizable"]
