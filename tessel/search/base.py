"""The SearchStrategy interface and what every strategy shares.

    strategy = make_strategy("evolutionary", space, workload, cost_model=model, seed=0)
    strategy.warm_start(records)               # (trace, seconds) already in the database
    while budget:
        batch = strategy.ask(16)               # distinct Schedules never proposed before
        results = measure(batch)
        strategy.tell(batch, results)

A strategy proposes each program (by structural hash of the scheduled program) at most once,
counting what the database already holds; `ask` returns fewer than asked, possibly none,
when it cannot find anything new (the space is exhausted for it).
"""
from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

from tessel.ir import PrimFunc, structural_hash
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.schedule import Schedule, ScheduleError, Trace

MAX_SAMPLE_TRIES = 8  # per wanted sample, before a strategy calls the space exhausted


class SearchError(ValueError):
    """A strategy that cannot run: unknown name, a space it does not support, bad settings."""


def program_key(sch: Schedule) -> str:
    return structural_hash(sch.func)


class SearchStrategy(ABC):
    name = "strategy"

    def __init__(self, space, workload: PrimFunc, *, cost_model=None, seed: int = 0) -> None:
        self.space, self.workload, self.cost_model = space, workload, cost_model
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.measured: list[tuple[Schedule, float]] = []  # (schedule, mean seconds; inf: error)

    # ---- the interface ----

    @abstractmethod
    def ask(self, n: int) -> list[Schedule]:
        """Up to n new programs to measure."""

    def tell(self, batch: Sequence[Schedule], results: Sequence[MeasureResult]) -> None:
        for sch, res in zip(batch, results, strict=True):
            self.seen.add(program_key(sch))
            self.measured.append((sch, res.mean_secs))

    def warm_start(self, records: Iterable[tuple[Trace, float]]) -> int:
        """Take (trace, seconds) pairs measured before (e.g. from the database); traces that
        no longer replay are skipped. Returns how many were taken."""
        taken = 0
        for trace, secs in records:
            sch = self.replay(trace)
            if sch is not None:
                self.seen.add(program_key(sch))
                self.measured.append((sch, secs))
                taken += 1
        return taken

    # ---- shared helpers ----

    def replay(self, trace: Trace) -> Schedule | None:
        try:
            return self.space.replay(self.workload, trace)
        except (ScheduleError, ValueError):
            return None

    def sample(self) -> Schedule | None:
        """A random member of the space, or None when the space gives nothing valid."""
        try:
            return self.space.sample(self.workload, self.rng)
        except (ScheduleError, ValueError):
            return None

    def mutate(self, sch: Schedule) -> Schedule | None:
        """A neighbour of `sch` through the space's mutators, or None."""
        return self.space.mutate(self.workload, sch.trace, self.rng)

    def take_new(self, candidates: Iterable[Schedule], n: int,
                 taken: set[str] | None = None) -> list[Schedule]:
        """The first n candidates not proposed before (marking them proposed)."""
        out: list[Schedule] = []
        taken = self.seen if taken is None else taken
        for sch in candidates:
            if len(out) >= n:
                break
            key = program_key(sch)
            if key not in taken:
                taken.add(key)
                out.append(sch)
        return out

    def sample_new(self, n: int) -> list[Schedule]:
        """Up to n fresh random programs never proposed before."""
        out: list[Schedule] = []
        for _ in range(n * MAX_SAMPLE_TRIES):
            if len(out) >= n:
                break
            sch = self.sample()
            if sch is not None:
                out += self.take_new([sch], 1)
        return out

    def best_measured(self, k: int) -> list[Schedule]:
        ok = [(secs, i) for i, (_, secs) in enumerate(self.measured) if math.isfinite(secs)]
        return [self.measured[i][0] for _, i in sorted(ok)[:k]]

    def predict(self, batch: Sequence[Schedule]) -> np.ndarray:
        """The cost model's scores (higher: predicted faster); zeros without a model."""
        if self.cost_model is None or not batch:
            return np.zeros(len(batch))
        cands = [MeasureCandidate(self.workload, s.func, s.trace) for s in batch]
        return np.asarray(self.cost_model.predict(cands), dtype=float)


def decision_items(trace: Trace) -> set[tuple[int, str]]:
    """A trace's (sampling site, decision) pairs: its "knob values" for diversity."""
    return {(site, repr(value)) for site, value in trace.decisions.items()}
