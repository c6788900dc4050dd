"""The values that flow through measurement: what to measure, and what came of it.

    cand = MeasureCandidate(workload=ops.matmul(64, 64, 64), func=sch.func, trace=sch.trace)
    result = runner.run([artifact])[0]          # a MeasureResult, never an exception
    result.ok, result.mean_secs, result.error_kind

Failures are data: a candidate that does not compile, crashes, hangs or computes garbage
yields a MeasureResult with an `error_kind` from ERROR_KINDS and the message, and tuning
goes on. Throughput is derived from a task's flop count, never stored.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from tessel.ir import PrimFunc

ERROR_KINDS = ("compile_error", "runtime_error", "timeout", "wrong_result", "invalid_schedule")


@dataclass(frozen=True, eq=False)
class MeasureCandidate:
    """One program to measure: the scheduled `func` of `workload` (the unscheduled program,
    whose output is the reference), the trace that made it (None for a hand-written program)
    and, for template spaces, the knob values of its config."""
    workload: PrimFunc
    func: PrimFunc
    trace: Any = None  # tessel.Trace; Any keeps this module free of the schedule package
    knobs: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class MeasureResult:
    """Seconds of every repeat (empty on error), or an error kind and its message."""
    costs: tuple[float, ...] = ()
    error_kind: str | None = None
    error_msg: str = ""
    build_secs: float = 0.0
    run_secs: float = 0.0
    timestamp: float = field(default_factory=time.time)
    flags: tuple[str, ...] = ()  # what the runner noticed, e.g. ("disturbed",): a busy machine

    def __post_init__(self) -> None:
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.error_kind!r}; use one of {ERROR_KINDS}")
        if self.error_kind is None and not self.costs:
            raise ValueError("a successful MeasureResult needs at least one cost")

    @property
    def ok(self) -> bool:
        return self.error_kind is None

    @property
    def disturbed(self) -> bool:
        """The runner saw the machine busy while it timed this (its costs are not trusted)."""
        return "disturbed" in self.flags

    @property
    def mean_secs(self) -> float:
        """Mean of the repeats; infinity for a failed measurement."""
        return statistics.fmean(self.costs) if self.ok else float("inf")

    @property
    def min_secs(self) -> float:
        return min(self.costs) if self.ok else float("inf")

    @classmethod
    def error(cls, kind: str, msg: str, **kw: Any) -> "MeasureResult":
        return cls(error_kind=kind, error_msg=msg, **kw)
