"""The SearchSpace interface and the spaces that wrap plain Python: functions and unions.

A search space is a set of programs that all compute what one workload computes, given as
*traces*. Every space answers these questions (search strategies ask nothing else):

    designs = space.designs(func)          # design-space traces (sampling instructions inside)
    sch = space.sample(func, rng)          # one random member: a Schedule with its trace
    sch = space.replay(func, trace)        # a trace (e.g. with mutated decisions) -> Schedule
    n = space.mutate(func, trace, rng, mutators, postprocs)     # a Neighbour, or None
    cs = space.config_space(func)          # its knobs (AutoTVM templates), or None: no knobs

Rule spaces (tessel.space.rules) and template spaces (tessel.space.templates) are the two
big families; `FunctionSpace` makes a space of any probabilistic program written as a Python
function on a Schedule, and `UnionSpace` joins spaces.
"""
from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.ir.structural import structural_hash
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.schedule.replay import ReplayCache

if TYPE_CHECKING:
    from tessel.space.config import Config, ConfigSpace
    from tessel.space.mutators import Mutator
    from tessel.space.postproc import Postproc


class Neighbour(NamedTuple):
    """A mutated program: its schedule (with the new trace) and that schedule postprocessed
    (the same object when there are no postprocessors). Mutation validates by replaying and
    postprocessing, so both come out of it and nobody does the work twice."""

    schedule: Schedule
    final: Schedule


MAX_SAMPLE_TRIES = 16  # random draws per sample() before giving up
MAX_MUTANTS = 4096  # replayed mutants a space remembers (SearchSpace.mutants)
_CACHES = ("_designs", "_last_key", "_mutants", "_replays")  # SearchSpace._clear_caches


class SpaceError(TesselError, ValueError):
    """A search space is malformed or does not fit a workload; the message says which part."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise SpaceError(msg)


def fresh(trace: Trace) -> Trace:
    """The trace with every decision dropped: replaying it samples anew."""
    return Trace(trace.instructions)


def first_valid(make: Callable[[], Schedule], failure: str) -> Schedule:
    """What `make()` returns first without a ScheduleError, in MAX_SAMPLE_TRIES calls; else
    SpaceError: `failure` and the last error."""
    last = ""
    for _ in range(MAX_SAMPLE_TRIES):
        try:
            return make()
        except ScheduleError as err:
            last = str(err)
    raise SpaceError(f"{failure} in {MAX_SAMPLE_TRIES} tries (last error: {last})")


class SearchSpace(ABC):
    """A design space of a workload, as traces. Subclasses implement `designs`."""

    name = "space"

    def __init__(self) -> None:
        self._clear_caches()

    def _clear_caches(self) -> None:
        self._designs: dict[str, list[Trace]] = {}
        self._last_key: tuple[PrimFunc, str] | None = None
        self._mutants: tuple[PrimFunc | None, tuple, dict[str, Neighbour | None]] = (None, (), {})
        self._replays: ReplayCache | None = None

    def __getstate__(self) -> dict:
        """A space's caches are not part of it: a copy (a search worker's) starts without."""
        return {k: v for k, v in self.__dict__.items() if k not in _CACHES}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._clear_caches()

    @abstractmethod
    def generate(self, func: PrimFunc, seed: int = 0) -> list[Schedule]:
        """Run the space's program(s) once on `func`: one Schedule per design."""

    def designs(self, func: PrimFunc) -> list[Trace]:
        """The design-space traces of `func` (computed once per workload, then cached; the
        last function's hash is kept too, since a search asks for the same one each time)."""
        last = self._last_key
        key = last[1] if last is not None and last[0] is func else structural_hash(func)
        self._last_key = (func, key)
        if key not in self._designs:
            self._designs[key] = [s.trace for s in self.generate(func)]
        return self._designs[key]

    def sample(self, func: PrimFunc, rng: random.Random) -> Schedule:
        """A random member: a design replayed with fresh decisions."""
        designs = self.designs(func)
        return first_valid(
            lambda: fresh(rng.choice(designs)).apply(Schedule(func, seed=rng.randrange(2**31))),
            f"{self.name}: no valid sample of {func.name}")

    def replay(self, func: PrimFunc, trace: Trace) -> Schedule:
        """Rebuild the schedule a trace describes (ScheduleError when it does not fit). The
        work up to the first decision a trace does not share with one replayed before is not
        done again (tessel.schedule.replay), for one workload at a time."""
        if self._replays is None or self._replays.func is not func:
            self._replays = ReplayCache(func)
        return self._replays.apply(trace)

    def mutate(self, func: PrimFunc, trace: Trace, rng: random.Random,
               mutators: Sequence[tuple["Mutator", float]],
               postprocs: Sequence["Postproc"] = ()) -> Neighbour | None:
        """A neighbour of `trace`: one decision changed by a mutator drawn by weight, replayed
        and passing `postprocs`; None when the mutator finds none."""
        if not mutators:
            return None
        mutator = rng.choices([m for m, _ in mutators], weights=[w for _, w in mutators])[0]
        return mutator.apply(func, trace, rng, self, postprocs)

    def mutants(self, func: PrimFunc,
                postprocs: Sequence["Postproc"]) -> dict[str, Neighbour | None]:
        """The mutants already replayed for `func` under `postprocs`, by their trace's JSON
        (None: it did not replay or a postprocessor rejected it). About a third of the
        mutants of an evolutionary search repeat an earlier one; they are not replayed
        again. Kept for one workload and postprocessor list at a time, MAX_MUTANTS at most."""
        memo_func, memo_posts, memo = self._mutants
        if memo_func is not func or memo_posts != tuple(postprocs) or len(memo) >= MAX_MUTANTS:
            memo = {}
            self._mutants = (func, tuple(postprocs), memo)
        return memo

    # ---- knobs: AutoTVM template spaces have them (templates/base.py); others do not ----

    def config_space(self, func: PrimFunc) -> "ConfigSpace | None":
        """The knobs of `func`'s programs in this space; None: this space has no knobs."""
        return None

    def config_of(self, func: PrimFunc, trace: Trace) -> "Config | None":
        """The knob values a trace of this space stands for; None: no knobs."""
        return None

    def apply_config(self, func: PrimFunc, config: "Config") -> Schedule:
        raise SpaceError(f"{self.name}: a space without knobs has no configs to apply")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class FunctionSpace(SearchSpace):
    """A probabilistic program given as `fn(sch)`, run afresh for every sample (so Python
    control flow on sampled values is part of the space)."""

    def __init__(self, fn: Callable[[Schedule], object], name: str | None = None) -> None:
        super().__init__()
        check(callable(fn), f"a function space needs a callable, got {fn!r}")
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "function")

    def generate(self, func: PrimFunc, seed: int = 0) -> list[Schedule]:
        sch = Schedule(func, seed=seed)
        self.fn(sch)
        return [sch]

    def sample(self, func: PrimFunc, rng: random.Random) -> Schedule:
        return first_valid(lambda: self.generate(func, seed=rng.randrange(2**31))[0],
                           f"{self.name}: no valid sample of {func.name}")


class UnionSpace(SearchSpace):
    """The union of several spaces: a sample comes from one of them, chosen uniformly."""

    def __init__(self, spaces: Sequence[SearchSpace]) -> None:
        super().__init__()
        check(len(spaces) >= 1, "a union of spaces needs at least one space")
        self.spaces = list(spaces)
        self.name = " | ".join(s.name for s in self.spaces)

    def generate(self, func: PrimFunc, seed: int = 0) -> list[Schedule]:
        return [sch for space in self.spaces for sch in space.generate(func, seed)]

    def sample(self, func: PrimFunc, rng: random.Random) -> Schedule:
        return rng.choice(self.spaces).sample(func, rng)

    def replay(self, func: PrimFunc, trace: Trace) -> Schedule:
        errors = []
        for space in self.spaces:
            try:
                return space.replay(func, trace)
            except (ScheduleError, SpaceError) as err:
                errors.append(f"{space.name}: {err}")
        raise ScheduleError("no space of the union replays the trace: " + "; ".join(errors))


__all__ = ["SpaceError", "check", "fresh", "first_valid", "SearchSpace", "FunctionSpace",
           "UnionSpace"]
