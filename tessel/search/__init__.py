"""Search strategies: which programs of a space to measure next.

    strategy = make_strategy("evolutionary", space, workload, cost_model=model, seed=0)
    batch = strategy.ask(16); ...; strategy.tell(batch, results)
"""
from __future__ import annotations

from tessel.search.annealing import AnnealingSearch
from tessel.search.base import (
    MUTATOR_PROBS,
    Proposal,
    SearchError,
    SearchStrategy,
    program_key,
)
from tessel.search.evolutionary import EvolutionarySearch
from tessel.search.genetic import GeneticSearch
from tessel.search.grid import GridSearch
from tessel.search.random import RandomSearch

STRATEGIES: dict[str, type[SearchStrategy]] = {
    "random": RandomSearch,
    "grid": GridSearch,
    "genetic": GeneticSearch,
    "ga": GeneticSearch,
    "annealing": AnnealingSearch,
    "evolutionary": EvolutionarySearch,
}
MODEL_BASED = ("annealing", "evolutionary")


def make_strategy(name: str | SearchStrategy, space, workload, **kw) -> SearchStrategy:
    if isinstance(name, SearchStrategy):
        return name
    if name not in STRATEGIES:
        raise SearchError(f"unknown search strategy {name!r}; use one of {sorted(STRATEGIES)}")
    return STRATEGIES[name](space, workload, **kw)


__all__ = ["STRATEGIES", "MODEL_BASED", "MUTATOR_PROBS", "Proposal", "SearchError", "SearchStrategy", "make_strategy",
           "program_key", "RandomSearch", "GridSearch", "GeneticSearch", "AnnealingSearch",
           "EvolutionarySearch"]
