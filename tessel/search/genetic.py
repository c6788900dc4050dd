"""AutoTVM's genetic-algorithm baseline: no cost model; the measured throughput is the fitness.

Until `population` programs are measured, it proposes random samples. Then each child comes
from two parents drawn in proportion to measured throughput: uniform crossover of their
decisions (site by site, when both come from the same design, i.e. the same instructions),
then mutation by the space's mutators with probability mutate_prob. Invalid or already
proposed children are dropped and replaced by fresh samples if nothing new comes.
"""
from __future__ import annotations

import math

from tessel.ir import PrimFunc
from tessel.schedule import Trace
from tessel.search.base import Proposal, SearchError, SearchStrategy
from tessel.space import SearchSpace


class GeneticSearch(SearchStrategy):
    name = "genetic"

    def __init__(self, space: SearchSpace, workload: PrimFunc, *,
                 population: int = 32, mutate_prob: float = 0.2,
                 **kw) -> None:
        super().__init__(space, workload, **kw)
        if population < 2 or not 0 <= mutate_prob <= 1:
            raise SearchError(f"genetic: need population >= 2 and 0 <= mutate_prob <= 1 (got "
                              f"{population}, {mutate_prob})")
        self.population, self.mutate_prob = population, mutate_prob

    def ask(self, n: int) -> list[Proposal]:
        parents = [(sch, 1.0 / secs) for sch, secs in self.measured[-self.population * 4:]
                   if math.isfinite(secs) and secs > 0]
        if len(parents) < 2 or len(self.measured) < self.population:
            return self.sample_new(n)
        parents = sorted(parents, key=lambda p: -p[1])[: self.population]
        out = self.sample_new(n, lambda: self._child(parents))
        return out + self.sample_new(n - len(out))

    def _child(self, parents: list[tuple[Proposal, float]]) -> Proposal | None:
        weights = [fit for _, fit in parents]
        a, b = (p for p, _ in self.rng.choices(parents, weights=weights, k=2))
        child = self.replay(self._crossover(a.trace, b.trace))
        if child is not None and self.rng.random() < self.mutate_prob:
            child = self.mutate(child) or child
        return child

    def _crossover(self, a: Trace, b: Trace) -> Trace:
        if a.instructions != b.instructions:
            return a
        decisions = {site: (a if self.rng.random() < 0.5 else b).decisions.get(site)
                     for site in a.sampling_sites()}
        return Trace(a.instructions, decisions)
