"""UnrollCases: a block whose value is one of a few formulas, chosen by the value of some of its
axes, gets those axes unrolled just outside its vector loop, so that in every unrolled copy
the choice is a constant and code generation folds it away.

Winograd's transforms are the case in point (tessel.graph.opdefs.winograd): element t of a
transformed tile is a fixed linear combination of the tile's inputs, a different one for each
t, with coefficients known when the kernel is written (mostly 0 and +-1). Written as a
contraction with the coefficient matrix as a tensor, the kernel multiplies every zero (1296
multiply-adds a tile and channel where 484 are nonzero) and loads each coefficient at run
time; written as a choice among formulas (`if_then_else` on t), it does only the nonzero ones
once t is a constant: with t's loops unrolled, each copy is straight-line code that the C
compiler reduces further (the formulas share their inner sums). The rule does what TVM's
hand-written schedules for its Winograd data-pack blocks do, on any block that asks.

A block asks with the annotation CASES = a tuple of one entry per spatial axis, each a tuple
of the factors of the axis's unrolled part (innermost last): () for an axis that is not
chosen on, (6, 6) for a 36-long axis unrolled whole as 6 x 6 (a tile's two coordinates),
(4,) for an axis whose position within a 4-wide tile is what is chosen on (the loop over
tiles stays a loop). The rule splits those axes, splits the last axis into whole vectors
when it divides into them, and orders the loops: the remaining ones in their order, the
unrolled parts, the last axis (or its vector part: 8 channels of an AVX-512 target stay one
half-vector loop). ParallelizeVectorizeUnroll's postprocessor then
parallelizes the outer loops and vectorizes the innermost. A block whose loops were already
transformed, or whose annotation does not fit its axes, is left as it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tessel.schedule import BlockRV, LoopRV, Schedule
from tessel.space.rules.base import is_reduction, simple_loops
from tessel.target import Target

CASES = "tessel.unroll_cases"


@dataclass(frozen=True)
class UnrollCases:
    vector_lanes: int | None = None  # float32 lanes of the target (AVX2 8, AVX-512 16)

    def for_target(self, target: Target) -> "UnrollCases":
        return replace(self, vector_lanes=self.vector_lanes or target.vector_lanes("float32"))

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        spec = node.annotations.get(CASES)
        if spec is None or is_reduction(node):
            return [sch]
        infos = simple_loops(sch, block)
        if infos is None or not _fits(spec, [i.extent for i in infos]) or \
                [i.var for i in infos] != [iv.var for iv in node.iter_vars]:
            return [sch]  # transformed before, or an annotation not of this block's axes
        kept: list[LoopRV] = []
        unrolled: list[LoopRV] = []
        for info, factors in zip(infos, spec):
            if not factors:
                kept.append(info.loop)
                continue
            inner = math.prod(factors)
            outer = [info.extent // inner] if info.extent > inner else []
            parts = (sch.split(info.loop, [*outer, *factors]) if len(outer) + len(factors) > 1
                     else [info.loop])
            kept.extend(parts[:len(outer)])
            unrolled.extend(parts[len(outer):])
        lanes = self.vector_lanes or Target("host").vector_lanes("float32")
        vector: list[LoopRV] = []
        last = infos[-1]
        if not spec[-1]:  # the last axis, not chosen on, stays innermost: whole vectors of it
            kept.pop()
            if last.extent > lanes and last.extent % lanes == 0:
                outer, inner_loop = sch.split(last.loop, [None, lanes])
                kept.append(outer)
                vector = [inner_loop]
            else:
                vector = [last.loop]
        sch.reorder(*kept, *unrolled, *vector)
        for loop in unrolled:
            sch.unroll(loop)
        return [sch]


def _fits(spec: object, extents: list[int]) -> bool:
    """One entry per axis, each a tuple of positive ints whose product divides the axis."""
    if not isinstance(spec, tuple) or len(spec) != len(extents):
        return False
    for factors, extent in zip(spec, extents):
        if not isinstance(factors, tuple) or not all(
                isinstance(f, int) and not isinstance(f, bool) and f >= 1 for f in factors):
            return False
        if factors and extent % math.prod(factors):
            return False
    return True


__all__ = ["UnrollCases", "CASES"]
