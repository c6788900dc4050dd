"""AddRFactor: for a reduction with little parallelism (few outputs, long reductions: the
rows of softmax and layer norm), fork designs that factor the reduction with rfactor, so
that partial results can be computed in parallel or with vectors.

    designs: the block as it is; rfactor on the outer split loop; rfactor on the inner one
    (the reduction loops are fused, then split in two by sample_perfect_tile)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from tessel.ir import REDUCE
from tessel.schedule import BlockRV, Schedule, ScheduleError
from tessel.space.rules.base import has_data_reuse, is_reduction, simple_loops


@dataclass(frozen=True)
class AddRFactor:
    cores: int = 1
    max_jobs_per_core: int = 16
    max_innermost_factor: int = 64

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        infos = simple_loops(sch, block)
        if not is_reduction(node) or has_data_reuse(node) or infos is None:
            return [sch]
        spatial = math.prod(i.extent for i in infos if i.kind != REDUCE)
        reduce = [i for i in infos if i.kind == REDUCE]
        reduce_extent = math.prod(i.extent for i in reduce)
        little = spatial <= reduce_extent or spatial < self.cores * self.max_jobs_per_core
        if not little or reduce_extent < 2 or infos[-len(reduce):] != reduce:
            return [sch]  # enough parallelism, or reduction loops not innermost
        base = sch.copy()
        loops = [i.loop for i in reduce]
        fused = base.fuse(*loops) if len(loops) > 1 else loops[0]
        factors = base.sample_perfect_tile(fused, 2, self.max_innermost_factor)
        split = base.split(fused, factors)
        designs = [sch]
        for loop in split:
            trial = base.copy()
            try:
                trial.rfactor(loop, factor_axis=-1)
            except ScheduleError:
                continue
            designs.append(trial)
        return designs


__all__ = ["AddRFactor"]
