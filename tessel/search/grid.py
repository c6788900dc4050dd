"""Grid search over a template's ConfigSpace: configs in index order, skipping any that do
not build a valid schedule or were measured before."""
from __future__ import annotations

from tessel.ir import PrimFunc
from tessel.search.base import Proposal, SearchError, SearchStrategy
from tessel.space import SearchSpace


class GridSearch(SearchStrategy):
    name = "grid"

    def __init__(self, space: SearchSpace, workload: PrimFunc, **kw) -> None:
        super().__init__(space, workload, **kw)
        if space.config_space(workload) is None:
            raise SearchError(f"grid search needs a template space with knobs; {space!r} has "
                              "none (use random, evolutionary or annealing)")
        self.next_index = 0

    def ask(self, n: int) -> list[Proposal]:
        out: list[Proposal] = []
        configs = self.space.config_space(self.workload)
        while len(out) < n and self.next_index < configs.size:
            config = configs.get(self.next_index)
            self.next_index += 1
            try:
                p = self.finalize(self.space.apply_config(self.workload, config))
            except ValueError:  # ScheduleError / SpaceError: an illegal config
                continue
            if p is not None:
                out += self.take_new([p], 1)
        return out
