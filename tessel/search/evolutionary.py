"""MetaSchedule's learning-driven evolutionary search.

Each `ask(n)`:
  1. initial population: the best measured programs (init_measured_ratio of it), the
     best-scored programs of the last ask that were not proposed (up to carry_ratio of it:
     already replayed and postprocessed, they cost nothing to bring back) and fresh samples
     of the space for the rest;
  2. for `generations` rounds, the cost model scores the population and the next one is drawn
     from it in proportion to rank; a drawn parent is mutated by the space's mutators with
     probability mutate_prob (an invalid mutant is dropped: the space validates it);
  3. the batch is the best-scored programs seen in any generation that were never proposed
     before, with an epsilon fraction replaced by fresh random samples.

With `priors` (the default), the space's expert priors (tessel.space.priors: register-blocked
programs that uniform sampling rarely finds, two or so per design) open a task's first batch
whatever the model says, and join its first initial population. An informed model (a
pretrained global model, or records) chooses the rest of that batch from an evolved
population; under an uninformed one (a cold "xgb") scores are noise, so the rest is random
samples: evolving under noise would only cost time. The priors are measured even when an
informed model ranks them low: on MobileNet-v2's depthwise and 1x1 convolutions the pretrained
model ranked them out of the first batch, and in 296 trials the search never found what the
prior gives (the best it found re-timed at 0.137-0.18 ms, the prior at 0.101, for the
56x56 stride-2 depthwise).

Programs carried over from other shapes of the workload tuned before (`carry_over`: the best
of the nearest tasks in the database, fitted to this shape; tessel.tuning.knowledge) join
the priors in the first batch, up to `transplants` of them, and its first initial population.
"""
from __future__ import annotations

import numpy as np

from tessel.ir import PrimFunc
from tessel.search.base import Proposal, SearchError, SearchStrategy, program_key
from tessel.space import SearchSpace


class EvolutionarySearch(SearchStrategy):
    name = "evolutionary"

    def __init__(self, space: SearchSpace, workload: PrimFunc, *,
                 population: int = 64, generations: int = 3,
                 init_measured_ratio: float = 0.2, mutate_prob: float = 0.85,
                 epsilon: float = 0.05, priors: bool = True, carry_ratio: float = 0.4,
                 transplants: int = 8, **kw) -> None:
        super().__init__(space, workload, **kw)
        if population < 2 or generations < 0 or not 0 <= epsilon <= 1 or \
                not 0 <= carry_ratio + init_measured_ratio <= 1 or transplants < 0:
            raise SearchError(f"evolutionary: need population >= 2, generations >= 0, "
                              f"0 <= epsilon <= 1, 0 <= carry_ratio + init_measured_ratio <= 1, "
                              f"transplants >= 0 (got {population}, {generations}, {epsilon}, "
                              f"{carry_ratio}, {init_measured_ratio}, {transplants})")
        self.population, self.generations = population, generations
        self.init_measured_ratio, self.mutate_prob, self.epsilon = (init_measured_ratio,
                                                                    mutate_prob, epsilon)
        self.use_priors, self.carry_ratio = priors, carry_ratio
        self.max_transplants = transplants
        self._carry: list[tuple[str, Proposal]] = []  # the last ask's best unproposed, by key

    def ask(self, n: int) -> list[Proposal]:
        starts = self._starts() if not self.measured else []
        if starts:
            first = self.take_new(starts, n)
            if getattr(self.cost_model, "informed", False):
                return first + (self._evolve(n - len(first)) if n > len(first) else [])
            return first + self.sample_new(n - len(first))  # noise would rank them at random
        return self._evolve(n)

    def _evolve(self, n: int) -> list[Proposal]:
        pool: dict[str, tuple[float, Proposal]] = {}  # every program scored, by key
        pop = self._initial_population()
        for gen in range(self.generations + 1):
            scores = self._score(pop, pool)
            if gen < self.generations and pop:
                pop = self._next_generation(pop, scores)
        ranked = sorted(pool.items(), key=lambda item: -item[1][0])
        n_random = int(round(n * self.epsilon)) if self.cost_model is not None else 0
        batch = self.take_new([p for _, (_, p) in ranked], n - n_random)
        self._carry = [(key, p) for key, (_, p) in ranked if key not in self.seen]
        return batch + self.sample_new(n - len(batch))

    def _starts(self) -> list[Proposal]:
        """What a first batch measures whatever the model says: the priors, then the programs
        carried over from other shapes."""
        priors = self.priors() if self.use_priors else []
        return priors + self.transplants[:self.max_transplants]

    def _initial_population(self) -> list[Proposal]:
        starts = self._starts() if not self.measured else []
        if starts:
            best = starts[:self.population // 2]
        else:
            best = self.best_measured(int(self.population * self.init_measured_ratio))
        carried = [p for key, p in self._carry if key not in self.seen]
        best += carried[:int(self.population * self.carry_ratio)]
        fresh = [s for s in self.sample_many(self.population - len(best)) if s is not None]
        return best + fresh

    def _score(self, pop: list[Proposal], pool: dict[str, tuple[float, Proposal]]) -> np.ndarray:
        scores = self.predict(pop)
        for sch, score in zip(pop, scores):
            pool.setdefault(program_key(sch), (float(score), sch))
        return scores

    def _next_generation(self, pop: list[Proposal], scores: np.ndarray) -> list[Proposal]:
        ranks = np.argsort(np.argsort(-scores))  # 0 = best
        weights = 1.0 / (1.0 + ranks)
        parents = self.rng.choices(pop, weights=weights.tolist(), k=self.population)
        mutated = [k for k in range(len(parents)) if self.rng.random() < self.mutate_prob]
        children = list(parents)
        for k, child in zip(mutated, self.mutate_many([parents[k] for k in mutated])):
            if child is not None:
                children[k] = child
        return children
