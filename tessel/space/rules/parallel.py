"""ParallelizeVectorizeUnroll: decide, once per program, how parallel, vector and unrolled
its loops may be. As in MetaSchedule the rule only annotates the root block; the
RewriteParallelVectorizeUnroll postprocessor turns the annotations into loop kinds on the
final loop structure (so they fit whatever the other rules and the decisions made):

    meta_schedule.parallel = max_jobs_per_core * cores     fuse outer spatial loops, parallel
    meta_schedule.vectorize = max_vectorize_extent         vectorize the innermost spatial loop
    meta_schedule.unroll_explicit = v ~ Categorical(0, 16, 64, 512)
                                   -> pragma_auto_unroll_max_step = v on each outer loop
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel.schedule import BlockRV, Schedule

PARALLEL = "meta_schedule.parallel"
VECTORIZE = "meta_schedule.vectorize"
UNROLL = "meta_schedule.unroll_explicit"


@dataclass(frozen=True)
class ParallelizeVectorizeUnroll:
    cores: int = 1
    max_jobs_per_core: int = 16
    max_vectorize_extent: int = 64
    unroll_max_steps: tuple[int, ...] = (0, 16, 64, 512)

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        root = sch.get_block(sch.func.body.block.name)
        if PARALLEL in sch.get(root).annotations or UNROLL in sch.get(root).annotations:
            return [sch]  # once per program
        if self.max_jobs_per_core > 0:
            sch.annotate(root, PARALLEL, self.max_jobs_per_core * self.cores)
        if self.max_vectorize_extent > 0:
            sch.annotate(root, VECTORIZE, self.max_vectorize_extent)
        if self.unroll_max_steps:
            n = len(self.unroll_max_steps)
            step = sch.sample_categorical(list(self.unroll_max_steps), [1.0 / n] * n)
            sch.annotate(root, UNROLL, step)
        return [sch]


__all__ = ["ParallelizeVectorizeUnroll", "PARALLEL", "VECTORIZE", "UNROLL"]
