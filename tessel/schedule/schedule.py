"""Schedule: a program under transformation, its random variables and its trace.

    sch = tessel.Schedule(func, seed=0)
    block = sch.get_block("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, factors=[None, 8])
    sch.vectorize(i1)
    print(sch.func.script()); print(sch.trace.script())

Every public primitive and sampling method is an *instruction*: calling it records one entry
in `sch.trace` (calls that primitives make to each other are not recorded). A primitive
either succeeds or raises ScheduleError and leaves the schedule as it was.
"""
from tessel.schedule.base import ScheduleBase
from tessel.schedule.loops import LoopPrimitives
from tessel.schedule.sampling import SamplingInstructions


class Schedule(LoopPrimitives, SamplingInstructions, ScheduleBase):
    """Primitives: see LoopPrimitives (split, fuse, reorder, add_unit_loop, parallel,
    vectorize, unroll, bind, annotate, unannotate) and SamplingInstructions
    (sample_perfect_tile, sample_categorical); queries are in ScheduleBase."""
