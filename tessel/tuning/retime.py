"""The end of a tuning run: its best few programs timed again as a user's process times them,
and the fastest stored as the workload's choice.

    choice = retime(runner, builder, workload, [(record, proposal), ...], rounds=3)
    choice.seconds, choice.record          # what the run reports, what the database keeps

The time a search measured for its best program is the lowest of many noisy timings, each
taken in whatever phase the machine was in (on this project's shared machines, phases of
seconds to minutes run up to 2x slower): the fastest of 64 is biased low. On a Zen 3,
`tessel tune GMM-1024` reported 14.41 ms where the kernel ran 18.8-19.4 ms in a user's
process. So the best few are timed again, `rounds` rounds of each program in turn (a phase
slows them alike), each timing the runner's calibrated batches of at least min_repeat_ms, as
Module.time does; the lowest mean of those wins. That time is what the run reports, and a
record of the chosen program with those costs (flag RETIMED; not a trial) is stored as the
workload's choice (Database.selection): `tessel best`, apply_best and compile_model then build
and show the program the run reported. When the re-timed time differs from the time in search
by more than DRIFT, the choice is also flagged DRIFTED and the run says so.
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from dataclasses import dataclass
from typing import Sequence

from tessel.database import TuningRecord
from tessel.database.record import RETIMED
from tessel.ir import PrimFunc
from tessel.measure import Builder, Runner
from tessel.search import Proposal

RETIME_ROUNDS = 5  # rounds of the best few, each timed in turn, at the end of tune()
DRIFT = 0.05  # a re-timed best this much slower or faster than in search: flagged DRIFTED
DRIFTED = "drifted"


@dataclass(frozen=True)
class Choice:
    """The program a run chose: its search record and proposal, and its time re-timed (the
    record of the choice, with those costs; None when nothing could be re-timed)."""
    record: TuningRecord
    proposal: Proposal
    retimed: TuningRecord | None = None

    @property
    def seconds(self) -> float:
        """Mean seconds per call re-timed (nan: not re-timed)."""
        return self.retimed.mean_secs if self.retimed is not None else math.nan

    @property
    def drift(self) -> float:
        """Re-timed over in-search seconds, minus one (nan: not re-timed)."""
        return self.seconds / self.record.mean_secs - 1


def retime(runner: Runner, builder: Builder, workload: PrimFunc,
           top: Sequence[tuple[TuningRecord, Proposal]], rounds: int, run: str) -> Choice:
    """Time each of `top`'s programs in `rounds` interleaved rounds (built once); the one with
    the lowest mean of its undisturbed costs is the choice (the first of `top`, not
    re-timed, when every timing failed). `run` labels the choice's record."""
    cands = [p.candidate(workload) for _, p in top]
    builds = builder.build(cands)
    costs: list[list[float]] = [[] for _ in top]
    for _ in range(rounds):
        for k, result in enumerate(runner.run(cands, builds)):
            if result.ok and not result.disturbed:
                costs[k].extend(result.costs)
    means = [statistics.fmean(c) if c else math.inf for c in costs]
    best = min(range(len(top)), key=means.__getitem__)
    record, proposal = top[best]
    if not math.isfinite(means[best]):
        return Choice(record, proposal)
    drifted = abs(means[best] / record.mean_secs - 1) > DRIFT
    retimed = dataclasses.replace(
        record, costs=tuple(costs[best]), timestamp=time.time(), run=run, run_secs=0.0,
        flags=",".join([RETIMED, *([DRIFTED] if drifted else [])]))
    return Choice(record, proposal, retimed)


__all__ = ["Choice", "DRIFT", "DRIFTED", "RETIME_ROUNDS", "retime"]
