"""The values stored in a tessel database: workloads and tuning records."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Sequence

from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.measure.result import MeasureCandidate, MeasureResult
from tessel.schedule import Trace
from tessel.target import Target

# Flags of a choice: a record of a program already measured, timed again to choose among the
# best few: in its model's sequence (tessel.graph.compiler.select), or alone in rounds as a user's
# process times it (tessel.tuning.loop, at the end of a run). Not a trial: only
# Database.selection returns one, never the tuner's reads.
IN_SEQUENCE = "in_sequence"
RETIMED = "retimed"
CHOICES = (IN_SEQUENCE, RETIMED)
NOT_A_CHOICE = " AND ".join(f"instr(flags, '{flag}') = 0" for flag in CHOICES)  # (SQL)

RECORD_COLUMNS = ("workload, target, trace_json, knobs_json, costs_json, error_kind, error_msg, "
                  "build_secs, run_secs, timestamp, run, flags")  # the order of TuningRecord.row()


class DatabaseError(TesselError, RuntimeError):
    """The file is not a usable tessel database, or a record or import is malformed."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise DatabaseError(msg)


@dataclass(frozen=True)
class Workload:
    key: str
    func: PrimFunc


@dataclass(frozen=True)
class TuningRecord:
    """One measurement of one candidate of a workload on a target (keys, not objects)."""
    workload_key: str
    target_key: str
    trace_json: str | None
    knobs: tuple[Any, ...] | None
    costs: tuple[float, ...]
    error_kind: str | None = None
    error_msg: str = ""
    build_secs: float = 0.0
    run_secs: float = 0.0
    timestamp: float = 0.0
    run: str = ""  # the tuning run that made it (a label, for tuning curves)
    flags: str = ""  # comma-separated: what the runner noticed ("disturbed": a busy machine)

    @classmethod
    def from_measurement(cls, workload_key: str, target: Target | str,
                         candidate: MeasureCandidate, result: MeasureResult,
                         run: str = "") -> "TuningRecord":
        trace = candidate.trace.to_json() if candidate.trace is not None else None
        knobs = tuple(candidate.knobs) if candidate.knobs is not None else None
        return cls(workload_key, target_key(target), trace, knobs, tuple(result.costs),
                   result.error_kind, result.error_msg, result.build_secs, result.run_secs,
                   result.timestamp, run, ",".join(result.flags))

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def mean_secs(self) -> float:
        return self.result().mean_secs

    def result(self) -> MeasureResult:
        return MeasureResult(self.costs, self.error_kind, self.error_msg, self.build_secs,
                             self.run_secs, self.timestamp,
                             tuple(f for f in self.flags.split(",") if f))

    def trace(self) -> Any:
        """The tessel.Trace that made the candidate (None for a hand-written program)."""
        return Trace.from_json(self.trace_json) if self.trace_json is not None else None

    def row(self) -> tuple:
        knobs = json.dumps(list(self.knobs)) if self.knobs is not None else None
        return (self.workload_key, self.target_key, self.trace_json, knobs,
                json.dumps(list(self.costs)), self.error_kind, self.error_msg,
                float(self.build_secs), float(self.run_secs), float(self.timestamp), self.run,
                self.flags)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "TuningRecord":
        workload, target, trace, knobs, costs, kind, msg, build, run, stamp, label, flags = row
        return cls(workload, target, trace, tuple(json.loads(knobs)) if knobs else None,
                   tuple(json.loads(costs)), kind, msg, build, run, stamp, label or "",
                   flags or "")


def target_key(target: Target | str) -> str:
    """A target's fingerprint hash (a string is taken to be one already)."""
    return target if isinstance(target, str) else target.fingerprint_hash()


def record_digest(row: tuple) -> str:
    """Identity of a record row (TuningRecord.row()): duplicates are skipped on insert. A row
    without flags hashes as before flags existed, so old records keep their identity."""
    return hashlib.sha256(json.dumps(row if row[-1] else row[:-1]).encode()).hexdigest()


__all__ = ["CHOICES", "IN_SEQUENCE", "NOT_A_CHOICE", "RETIMED", "RECORD_COLUMNS", "DatabaseError",
           "TuningRecord", "Workload", "check", "record_digest", "target_key"]
