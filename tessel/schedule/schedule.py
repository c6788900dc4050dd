"""Schedule: a program under transformation, its random variables and its trace.

    sch = tessel.Schedule(func, seed=0)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, factors=[None, 8])
    sch.vectorize(i1)
    print(sch.func.script()); print(sch.trace.script())

Every public primitive and sampling method is an *instruction* (`instruction` in base.py):
a call records one entry in `sch.trace`, and a primitive that fails leaves the schedule as it
was.
"""
from tessel.schedule.base import ScheduleBase
from tessel.schedule.blockize import BlockizePrimitives
from tessel.schedule.cache import CachePrimitives
from tessel.schedule.compute_at import ComputeLocationPrimitives
from tessel.schedule.layout import LayoutPrimitives
from tessel.schedule.loops import LoopPrimitives
from tessel.schedule.reduction import ReductionPrimitives
from tessel.schedule.sampling import SamplingInstructions


class Schedule(LoopPrimitives, ComputeLocationPrimitives, CachePrimitives, ReductionPrimitives,
               LayoutPrimitives, BlockizePrimitives, SamplingInstructions, ScheduleBase):
    """The primitives live in the mixins, one family per module: loops.py (split, fuse,
    reorder, add_unit_loop, parallel, vectorize, unroll, bind, annotate, unannotate),
    compute_at.py (compute_at, reverse_compute_at, compute_inline, reverse_compute_inline,
    sample_compute_location), cache.py (cache_read, cache_write), reduction.py (rfactor,
    decompose_reduction), layout.py (transform_layout), blockize.py (blockize, tensorize),
    sampling.py (sample_perfect_tile, sample_categorical). Queries (get_block, get_loops, ...)
    are in base.py."""
