"""Random search: fresh samples of the space, never one proposed before (the baseline)."""
from __future__ import annotations

from tessel.schedule import Schedule
from tessel.search.base import SearchStrategy


class RandomSearch(SearchStrategy):
    name = "random"

    def ask(self, n: int) -> list[Schedule]:
        return self.sample_new(n)
