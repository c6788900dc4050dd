"""A tuning record made into its program again: its trace replayed on a fresh Schedule of the
workload, then postprocessed as a search does before it builds. A record an older tessel made
may no longer make one (its trace format, primitives or postprocessors differ): it is skipped.

    func = record_program(record, workload, postprocs_for(workload, target))   # or None
"""
from __future__ import annotations

from typing import Iterable, Sequence

from tessel.database.record import TuningRecord
from tessel.ir import PrimFunc
from tessel.schedule import Schedule, ScheduleError
from tessel.space import Postproc, SpaceError, final_func


def record_program(record: TuningRecord, func: PrimFunc,
                   postprocs: Sequence[Postproc]) -> PrimFunc | None:
    """The program `record`'s trace makes of `func`, postprocessed by `postprocs` (ready to
    build); None without a trace (a hand-written program), or for a trace this tessel cannot
    read or replay (ScheduleError) or whose program a postprocessor rejects (SpaceError)."""
    if record.trace_json is None:
        return None
    try:
        return final_func(record.trace().apply(Schedule(func)), postprocs)
    except (ScheduleError, SpaceError):
        return None


def first_program(records: Iterable[TuningRecord], func: PrimFunc,
                  postprocs: Sequence[Postproc]) -> tuple[TuningRecord, PrimFunc] | None:
    """The first of `records` that makes a program of `func`, and that program (or None)."""
    for record in records:
        program = record_program(record, func, postprocs)
        if program is not None:
            return record, program
    return None


__all__ = ["record_program", "first_program"]
