"""Grid search over a template's ConfigSpace: configs in index order, skipping any that do
not build a valid schedule or were measured before."""
from __future__ import annotations

from tessel.schedule import Schedule
from tessel.search.base import SearchError, SearchStrategy


class GridSearch(SearchStrategy):
    name = "grid"

    def __init__(self, space, workload, **kw) -> None:
        super().__init__(space, workload, **kw)
        if not hasattr(space, "config_space"):
            raise SearchError(f"grid search needs a template space with knobs; {space!r} has "
                              "none (use random, evolutionary or annealing)")
        self.next_index = 0

    def ask(self, n: int) -> list[Schedule]:
        out: list[Schedule] = []
        size = len(self.space.config_space(self.workload))
        while len(out) < n and self.next_index < size:
            sch = self.space.from_index(self.workload, self.next_index)
            self.next_index += 1
            if sch is not None:
                out += self.take_new([sch], 1)
        return out
