"""The SearchStrategy interface and what every strategy shares.

    strategy = make_strategy("evolutionary", space, workload, cost_model=model, seed=0)
    strategy.warm_start(records)               # (trace, seconds) already in the database
    while budget:
        batch = strategy.ask(16)               # Proposals (trace + program) never proposed before
        results = measure(batch)
        strategy.tell(batch, results)

A strategy proposes each program (by structural hash of the scheduled program) at most once,
counting what the database already holds; `ask` returns fewer than asked, possibly none,
when it cannot find anything new (the space is exhausted for it).

A Proposal pairs the trace (replayable in the space: what the database stores and mutators
change) with the program to build: the trace's schedule after the postprocessors, which also
reject invalid programs before anything is built.

A strategy's programs are made by its `Proposer` from jobs (a sample, a mutant of a trace or
a trace replayed, with a seed drawn from the strategy's generator): `sample_many`,
`mutate_many` and `replay_many` hand their jobs to the strategy's search workers when it has
them (tessel.search.workers, one process per core) and make the same programs here when not.
"""
from __future__ import annotations

import functools
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tessel.cost_model import CostModel
from tessel.errors import TesselError
from tessel.ir import PrimFunc, structural_hash
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.schedule import Schedule, ScheduleError, Trace, transplant
from tessel.space import MUTATORS, Mutator, Postproc, SearchSpace, postprocess
from tessel.space.priors import prior_schedules

if TYPE_CHECKING:
    from tessel.search.workers import SearchWorkers

MAX_SAMPLE_TRIES = 8  # per wanted sample, before a strategy calls the space exhausted
# How often each mutator is picked: MetaSchedule's CPU defaults, with a sixth of the tile-size
# moves reshaping a register tile instead (rows and vector width together)
MUTATOR_PROBS = {"tile_size": 0.75, "register_tile": 0.15, "compute_location": 0.05,
                 "unroll": 0.03, "parallel": 0.02}


class SearchError(TesselError, ValueError):
    """A strategy that cannot run: unknown name, a space it does not support, bad settings."""


@dataclass(frozen=True, eq=False)
class Proposal:
    trace: Trace  # replays in the space
    func: PrimFunc  # the postprocessed program to build
    knobs: tuple[Any, ...] | None = None  # a template config's knob choices

    def candidate(self, workload: PrimFunc) -> MeasureCandidate:
        return MeasureCandidate(workload, self.func, self.trace, self.knobs)

    @functools.cached_property
    def key(self) -> str:
        """The program's structural hash (computed once; a search worker sends it along)."""
        return structural_hash(self.func)


def program_key(p: Proposal | Schedule) -> str:
    return p.key if isinstance(p, Proposal) else structural_hash(p.func)


# What a search worker makes one program from: ("sample", None, seed) a random sample,
# ("mutate", trace, seed) a mutant of the trace, each with a generator seeded by the seed
# alone; ("replay", trace, 0) the trace replayed (a stored record's, when a run resumes)
Job = tuple[str, Trace | None, int]


@dataclass(frozen=True)
class Proposer:
    """What makes programs of one workload in a space, without any search state: sampling,
    replaying, mutating, postprocessing. Picklable (a search worker holds strategies'
    Proposers: tessel.search.workers); a job's program depends on the job alone."""
    space: SearchSpace
    workload: PrimFunc
    postprocs: tuple[Postproc, ...] = ()
    mutators: tuple[tuple[Mutator, float], ...] = ()

    def make(self, job: Job) -> Proposal | None:
        kind, trace, seed = job
        if kind == "replay":
            p = self.replay(trace)
        elif kind == "mutate":
            p = self.mutate(trace, random.Random(seed))
        else:
            p = self.sample(random.Random(seed))
        if p is not None:
            _ = p.key  # hashed where it is made
        return p

    def finalize(self, sch: Schedule | None) -> Proposal | None:
        if sch is None:
            return None
        final = sch
        if self.postprocs:
            final = postprocess(sch, self.postprocs)
            if final is None:
                return None
        return Proposal(sch.trace, final.func, self.knobs(sch.trace))

    def knobs(self, trace: Trace) -> tuple[Any, ...] | None:
        try:
            config = self.space.config_of(self.workload, trace)
        except ValueError:
            return None
        return config.choices if config is not None else None

    def replay(self, trace: Trace) -> Proposal | None:
        try:
            return self.finalize(self.space.replay(self.workload, trace))
        except (ScheduleError, ValueError):
            return None

    def sample(self, rng: random.Random) -> Proposal | None:
        for _ in range(MAX_SAMPLE_TRIES):
            try:
                p = self.finalize(self.space.sample(self.workload, rng))
            except (ScheduleError, ValueError):
                return None
            if p is not None:
                return p
        return None

    def mutate(self, trace: Trace, rng: random.Random) -> Proposal | None:
        try:
            n = self.space.mutate(self.workload, trace, rng, self.mutators, self.postprocs)
        except (ScheduleError, ValueError):
            return None
        if n is None:
            return None
        return Proposal(n.schedule.trace, n.final.func, self.knobs(n.schedule.trace))


class SearchStrategy(ABC):
    name = "strategy"
    max_transplants = 0  # programs carried over from other shapes it measures (carry_over)

    def __init__(self, space: SearchSpace, workload: PrimFunc, *,
                 cost_model: CostModel | None = None, seed: int = 0,
                 postprocs: Sequence[Postproc] = (),
                 mutator_probs: Mapping[str, float] | None = None) -> None:
        self.space, self.workload, self.cost_model = space, workload, cost_model
        self.postprocs = list(postprocs)
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.measured: list[tuple[Proposal, float]] = []  # (proposal, mean seconds; inf: error)
        self.transplants: list[Proposal] = []  # other shapes' best programs (carry_over)
        self.mutators = _mutators(mutator_probs or MUTATOR_PROBS)
        self.workers: SearchWorkers | None = None  # processes that make programs (make)
        self._priors: list[Proposal] | None = None  # priors(), made once

    # ---- the interface ----

    @abstractmethod
    def ask(self, n: int) -> list[Proposal]:
        """Up to n new programs to measure."""

    def tell(self, batch: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
        for sch, res in zip(batch, results, strict=True):
            self.seen.add(program_key(sch))
            self.measured.append((sch, res.mean_secs))

    def skip(self, batch: Sequence[Proposal]) -> None:
        """Never propose these (another run sharing the database measures them)."""
        self.seen.update(program_key(p) for p in batch)

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

    def carry_over(self, traces: Iterable[Trace]) -> int:
        """Take the best programs of other shapes of this workload (tessel.tuning.knowledge),
        fitted to its extents (tessel.schedule.transplant), for a search to measure early;
        those that do not fit or that a postprocessor rejects are dropped. Returns how many
        were kept."""
        keys = {program_key(p) for p in self.transplants}
        for trace in traces:
            p = self.transplant(trace)
            if p is not None and program_key(p) not in keys:
                keys.add(program_key(p))
                self.transplants.append(p)
        return len(self.transplants)

    # ---- shared helpers ----

    @property
    def proposer(self) -> "Proposer":
        """What makes this strategy's programs (sampling, replaying, mutating,
        postprocessing): the part a search worker runs."""
        return Proposer(self.space, self.workload, tuple(self.postprocs), tuple(self.mutators))

    def transplant(self, trace: Trace) -> Proposal | None:
        """The proposal a trace recorded on another shape of the workload makes of this one,
        or None."""
        try:
            return self.finalize(transplant(trace, Schedule(self.workload)))
        except (ScheduleError, ValueError):
            return None

    def finalize(self, sch: Schedule | None) -> Proposal | None:
        """The proposal of a schedule: its postprocessed program (None if a postprocessor
        rejects it), and its knobs when the space is a template."""
        return self.proposer.finalize(sch)

    def replay(self, trace: Trace) -> Proposal | None:
        return self.proposer.replay(trace)

    def sample(self) -> Proposal | None:
        """A random valid member of the space, or None when the space gives nothing valid."""
        return self.make([("sample", None, self._seed())])[0]

    def mutate(self, p: Proposal) -> Proposal | None:
        """A valid neighbour of `p` from the space (a template changes one knob; other spaces
        change one decision with a mutator drawn by `mutator_probs`), or None."""
        return self.make([("mutate", p.trace, self._seed())])[0]

    def sample_many(self, k: int) -> list[Proposal | None]:
        """k samples (each None when the space gave nothing valid), made side by side by the
        search workers when the strategy has them."""
        return self.make([("sample", None, self._seed()) for _ in range(k)])

    def mutate_many(self, parents: Sequence[Proposal]) -> list[Proposal | None]:
        """A neighbour of each parent (or None), made side by side as sample_many's."""
        return self.make([("mutate", p.trace, self._seed()) for p in parents])

    def replay_many(self, traces: Sequence[Trace]) -> list[Proposal | None]:
        """Each trace's program (None: it no longer replays), made side by side as
        sample_many's (a run resuming from a database of thousands of records)."""
        return self.make([("replay", trace, 0) for trace in traces])

    def make(self, jobs: Sequence[Job]) -> list[Proposal | None]:
        """Each job's program (Proposer.make): in the search workers (tessel.search.workers)
        when the strategy has them and there is more than one, else here; the same programs
        either way."""
        if self.workers is not None and len(jobs) > 1:
            return self.workers.make(self, jobs)
        return self.make_here(jobs)

    def make_here(self, jobs: Sequence[Job]) -> list[Proposal | None]:
        """Each job's program, made in this process."""
        proposer = self.proposer
        return [proposer.make(job) for job in jobs]

    def _seed(self) -> int:
        """A job's own seed, drawn from the strategy's generator: each program depends on its
        job alone, wherever it is made."""
        return self.rng.getrandbits(63)

    def priors(self) -> list[Proposal]:
        """The space's expert priors (tessel.space.priors): register-blocked programs that a
        search measures before it has data to learn from (made once)."""
        if self._priors is None:
            try:
                schedules = prior_schedules(self.space, self.workload)
            except (ScheduleError, ValueError):
                schedules = []
            self._priors = [p for p in map(self.finalize, schedules) if p is not None]
        return list(self._priors)

    def take_new(self, candidates: Iterable[Proposal], n: int,
                 taken: set[str] | None = None) -> list[Proposal]:
        """The first n candidates not proposed before (marking them proposed)."""
        out: list[Proposal] = []
        taken = self.seen if taken is None else taken
        for sch in candidates:
            if len(out) >= n:
                break
            key = program_key(sch)
            if key not in taken:
                taken.add(key)
                out.append(sch)
        return out

    def sample_new(self, n: int, make: Callable[[], Proposal | None] | None = None
                   ) -> list[Proposal]:
        """Up to n programs never proposed before, each from `make` (None: it made none this
        time; default: fresh random samples, made as many at a time as are missing), in
        n * MAX_SAMPLE_TRIES tries at most."""
        out: list[Proposal] = []
        tries = n * MAX_SAMPLE_TRIES
        while len(out) < n and tries > 0:
            k = 1 if make is not None else min(n - len(out), tries)
            made = [make()] if make is not None else self.sample_many(k)
            tries -= k
            out += self.take_new([p for p in made if p is not None], n - len(out))
        return out

    def best_measured(self, k: int) -> list[Proposal]:
        ok = [(secs, i) for i, (_, secs) in enumerate(self.measured) if math.isfinite(secs)]
        return [self.measured[i][0] for _, i in sorted(ok)[:k]]

    def predict(self, batch: Sequence[Proposal]) -> np.ndarray:
        """The cost model's scores (higher: predicted faster); zeros without a model."""
        if self.cost_model is None or not batch:
            return np.zeros(len(batch))
        cands = [p.candidate(self.workload) for p in batch]
        return np.asarray(self.cost_model.predict(cands), dtype=float)


def _mutators(probs: Mapping[str, float]) -> list[tuple[Mutator, float]]:
    unknown = set(probs) - set(MUTATORS)
    if unknown:
        raise SearchError(f"unknown mutator(s) {sorted(unknown)}; known: {sorted(MUTATORS)}")
    return [(MUTATORS[name](), w) for name, w in probs.items() if w > 0]


def decision_items(trace: Trace) -> set[tuple[int, str]]:
    """A trace's (sampling site, decision) pairs: its "knob values" for diversity."""
    return {(site, repr(value)) for site, value in trace.decisions.items()}
