"""Random search: fresh samples of the space, never one proposed before (the baseline)."""
from __future__ import annotations

from tessel.search.base import Proposal, SearchStrategy


class RandomSearch(SearchStrategy):
    name = "random"

    def ask(self, n: int) -> list[Proposal]:
        return self.sample_new(n)
