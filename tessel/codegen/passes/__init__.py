"""Code generation's passes: scheduled PrimFunc in, lowered IR out (see
`tessel.codegen.lowered` for the nodes each pass produces). Each pass is IR -> IR and has
golden tests of its own (tests/test_codegen_passes.py); `lower_kernel` runs them in order.
`compact_buffers` (PrimFunc -> PrimFunc) runs before it in a build (tessel.build, measure)."""
from __future__ import annotations

from tessel.codegen.lowered import LoweredFunc, SourceTooLarge
from tessel.codegen.passes.blocks import lower_blocks
from tessel.codegen.passes.compact import compact_buffers
from tessel.codegen.passes.lanes import fold_lanes
from tessel.codegen.passes.peel import peel_tails
from tessel.codegen.passes.prefetch import prefetch_streams
from tessel.codegen.passes.reductions import vectorize_reductions
from tessel.codegen.passes.registers import promote_registers
from tessel.codegen.passes.unroll import unroll
from tessel.codegen.passes.unswitch import unswitch_guards
from tessel.codegen.passes.vectorize import NotVectorizable, vectorize
from tessel.ir import PrimFunc, walk
from tessel.target import Target


def lower_kernel(func: PrimFunc, target: Target, *,
                 max_unroll_step: int | None = None,
                 max_nodes: int | None = None) -> LoweredFunc:
    """`func` lowered for a CPU target: vector reductions, blocks, unrolling, peeled vector
    tails, partial tiles' guards hoisted, vectorization, register promotion, lanes folded as
    trees, software prefetch.
    `max_unroll_step` caps the auto-unroll annotations (None: none).
    With `max_nodes`, an unrolled body of more IR nodes raises SourceTooLarge before it is
    vectorized (generate_c's budget: vectorizing a body it then refuses took most of a cold
    compile)."""
    unrolled = unswitch_guards(peel_tails(unroll(lower_blocks(vectorize_reductions(
        func, target)), max_unroll_step)))
    if max_nodes is not None:
        _check_nodes(unrolled, max_nodes)
    return prefetch_streams(fold_lanes(promote_registers(vectorize(unrolled, target))))


class _Over(Exception):
    pass


def _check_nodes(func: LoweredFunc, max_nodes: int) -> None:
    count = 0

    def visit(_: object) -> None:
        nonlocal count
        count += 1
        if count > max_nodes:
            raise _Over
    try:
        walk(func.body, visit)
    except _Over:
        raise SourceTooLarge(f"{func.name}: its unrolled body has more than {max_nodes:,} "
                             "nodes") from None


__all__ = ["lower_kernel", "compact_buffers", "lower_blocks", "vectorize_reductions", "unroll",
           "peel_tails", "unswitch_guards", "vectorize", "promote_registers", "fold_lanes",
           "prefetch_streams", "NotVectorizable"]
