"""Mutators: propose a neighbour of a trace by changing one of its decisions.

    MutateTileSize          move a factor d between two tiles of one sample_perfect_tile
    MutateRegisterTile      reshape a register tile: rows and vector width change together
    MutateUnroll            another candidate of the unroll sample_categorical
    MutateParallel          another meta_schedule.parallel extent (fuses a different number
                            of outer loops into the parallel loop)
    MutateComputeLocation   resample a sample_compute_location

`mutator.apply(func, trace, rng, space, postprocs)` returns a Neighbour: the replayed schedule
of a new trace and that schedule postprocessed, or None when the mutator finds no valid
neighbour (or has nothing to mutate) within a few tries.
"""
from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from typing import Any, Sequence

from tessel.ir import PrimFunc
from tessel.schedule import Instruction, Schedule, ScheduleError, Trace
from tessel.schedule.sampling import divisors
from tessel.space.base import Neighbour, SearchSpace, SpaceError
from tessel.space.postproc import (Postproc, fusible_prefix, parallel_plan, postprocess)
from tessel.space.rules.base import leaf_blocks
from tessel.space.rules.parallel import PARALLEL, UNROLL

MAX_TRIES = 8


class Mutator(ABC):
    name = "mutator"

    @abstractmethod
    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        """A trace with one decision changed (not yet checked), or None if nothing to mutate."""

    def apply(self, func: PrimFunc, trace: Trace, rng: random.Random,
              space: SearchSpace | None = None,
              postprocs: Sequence[Postproc] = ()) -> Neighbour | None:
        memo = space.mutants(func, postprocs) if space is not None else {}
        for _ in range(MAX_TRIES):
            new = self.propose(func, trace, rng)
            if new is None:
                return None
            key = new.to_json()
            if key not in memo:
                memo[key] = self._replay(func, new, space, postprocs)
            if memo[key] is not None:
                return memo[key]
        return None

    @staticmethod
    def _replay(func: PrimFunc, trace: Trace, space: SearchSpace | None,
                postprocs: Sequence[Postproc]) -> Neighbour | None:
        """The schedule `trace` gives and its postprocessed form; None if either fails."""
        try:
            sch = space.replay(func, trace) if space is not None else trace.apply(Schedule(func))
        except (ScheduleError, SpaceError):
            return None
        final = postprocess(sch, postprocs) if postprocs else sch
        return Neighbour(sch, final) if final is not None else None

    def __repr__(self) -> str:
        return type(self).__name__ + "()"


def _sites(trace: Trace, kind: str) -> list[int]:
    return [i for i, inst in enumerate(trace.instructions) if inst.kind == kind]


def _arg(inst: Instruction, name: str, default: Any = None) -> Any:
    return dict(inst.args).get(name, default)


class MutateTileSize(Mutator):
    name = "tile_size"

    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        sites = [i for i in _sites(trace, "sample_perfect_tile")
                 if len(trace.decisions.get(i) or ()) >= 2 and max(trace.decisions[i]) > 1]
        if not sites:
            return None
        for _ in range(MAX_TRIES):
            site = rng.choice(sites)
            factors = list(trace.decisions[site])
            src = rng.choice([i for i, f in enumerate(factors) if f > 1])
            dst = rng.choice([i for i in range(len(factors)) if i != src])
            d = rng.choice(divisors(factors[src])[1:])
            factors[src] //= d
            factors[dst] *= d
            limit = _arg(trace.instructions[site], "max_innermost_factor", 16)
            if factors[-1] <= limit:
                return trace.with_decision(site, tuple(factors))
        return None


class MutateRegisterTile(Mutator):
    """Reshapes the register tile: the innermost tiles of the last two 4-level spatial tilings
    of a block (the vector axis and the row axis before it, as tessel.space.priors reads
    them) change together, keeping the tile's area (accumulators) within a factor of two, so a
    search can trade rows for vector width in one step; one tile alone changed that way first
    spills or starves the registers. Outer levels absorb the change."""

    name = "register_tile"

    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        pairs = _register_tile_sites(trace)
        if not pairs:
            return None
        for _ in range(MAX_TRIES):
            row, vec = rng.choice(pairs)
            old_r, old_v = trace.decisions[row][-1], trace.decisions[vec][-1]
            limit = _arg(trace.instructions[vec], "max_innermost_factor", 16)
            area = old_r * old_v
            shapes = [(r, v) for r in divisors(math.prod(trace.decisions[row])) if r <= 16
                      for v in divisors(math.prod(trace.decisions[vec])) if v <= limit
                      and area / 2 <= r * v <= area * 2 and r != old_r and v != old_v]
            if not shapes:
                continue
            r, v = rng.choice(shapes)
            return trace.with_decision(row, _with_inner(trace.decisions[row], r)) \
                .with_decision(vec, _with_inner(trace.decisions[vec], v))
        return None


def _register_tile_sites(trace: Trace) -> list[tuple[int, int]]:
    """(row site, vector site) of each block's last two 4-level spatial tilings."""
    by_loop_block: dict[Any, list[int]] = {}
    for i in _sites(trace, "sample_perfect_tile"):
        inst = trace.instructions[i]
        if _arg(inst, "n") == 4 and len(trace.decisions.get(i) or ()) == 4:
            by_loop_block.setdefault(_block_of(trace, i), []).append(i)
    return [(sites[-2], sites[-1]) for sites in by_loop_block.values() if len(sites) >= 2]


def _block_of(trace: Trace, site: int) -> Any:
    """The get_loops instruction whose loop the tiling at `site` samples (one per block)."""
    loop = _arg(trace.instructions[site], "loop")
    for i in range(site - 1, -1, -1):
        if loop in trace.instructions[i].outputs:
            return i
    return None


def _with_inner(factors: tuple[int, ...], inner: int) -> tuple[int, ...]:
    """The tiling with innermost factor `inner`, the middle levels kept where they still
    divide, the outermost taking the rest."""
    extent, middle = math.prod(factors), list(factors[1:-1])
    while middle and (extent // inner) % math.prod(middle):
        middle[middle.index(max(middle))] = 1
    return (extent // inner // math.prod(middle), *middle, inner)


class MutateUnroll(Mutator):
    """Changes a sample_categorical whose value becomes an unroll annotation."""

    name = "unroll"

    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        used = {_arg(inst, "value") for inst in trace.instructions if inst.kind == "annotate"
                and _arg(inst, "key") in (UNROLL, "pragma_auto_unroll_max_step")}
        sites = [i for i in _sites(trace, "sample_categorical")
                 if set(trace.instructions[i].outputs) & used
                 and len(_arg(trace.instructions[i], "candidates")) > 1]
        if not sites:
            return None
        site = rng.choice(sites)
        n = len(_arg(trace.instructions[site], "candidates"))
        choice = rng.choice([c for c in range(n) if c != trace.decisions.get(site)])
        return trace.with_decision(site, choice)


class MutateParallel(Mutator):
    """Changes the meta_schedule.parallel extent so that a different number of outer loops
    is fused into the parallel loop of some nest."""

    name = "parallel"

    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        sites = [i for i, inst in enumerate(trace.instructions)
                 if inst.kind == "annotate" and _arg(inst, "key") == PARALLEL]
        if not sites:
            return None
        site = sites[-1]
        current = _arg(trace.instructions[site], "value")
        try:
            sch = trace.apply(Schedule(func))
        except ScheduleError:
            return None
        prefixes = [fusible_prefix(sch, sch.get_loops(sch.get_block(b.name)))
                    for b in leaf_blocks(sch.func)]
        plan = [parallel_plan(p, current) for p in prefixes]
        # max extent p[:n] fuses the loops up to the first that makes the product exceed it
        options = sorted({_prod(p[:n]) for p in prefixes for n in range(1, len(p) + 1)})
        options = [v for v in options if [parallel_plan(p, v) for p in prefixes] != plan]
        if not options:
            return None
        return _with_arg(trace, site, "value", rng.choice(options))


class MutateComputeLocation(Mutator):
    """Resamples one sample_compute_location (replaying the trace up to it)."""

    name = "compute_location"

    def propose(self, func: PrimFunc, trace: Trace, rng: random.Random) -> Trace | None:
        sites = _sites(trace, "sample_compute_location")
        if not sites:
            return None
        site = rng.choice(sites)
        prefix = Trace(trace.instructions[:site + 1],
                       {k: v for k, v in trace.decisions.items() if k < site})
        for _ in range(4):
            try:
                sch = prefix.apply(Schedule(func, seed=rng.randrange(2**31)))
            except ScheduleError:
                return None
            decision = sch.trace.decisions[site]
            if decision != trace.decisions.get(site):
                return trace.with_decision(site, decision)
        return None


def _prod(values: list[int]) -> int:
    out = 1
    for v in values:
        out *= v
    return out


def _with_arg(trace: Trace, index: int, name: str, value: Any) -> Trace:
    inst = trace.instructions[index]
    args = tuple((k, value if k == name else v) for k, v in inst.args)
    insts = list(trace.instructions)
    insts[index] = Instruction(inst.kind, args, inst.outputs)
    return Trace(insts, trace.decisions)


MUTATORS: dict[str, type[Mutator]] = {
    "tile_size": MutateTileSize, "register_tile": MutateRegisterTile, "unroll": MutateUnroll,
    "parallel": MutateParallel, "compute_location": MutateComputeLocation,
}

__all__ = ["Mutator", "MutateTileSize", "MutateRegisterTile", "MutateUnroll", "MutateParallel",
           "MutateComputeLocation", "MUTATORS"]
