"""Measure callbacks: what the tuning loop does after each batch is measured.

    tessel.tune(func, trials=64, callbacks=[my_callback])   # after the built-in ones

The loop first tells the search strategy and extends the run's history, then calls each
callback with the run, the batch and its results, in order: AddToDatabase (commit; a batch
the database refuses is saved beside it and the run stops with TuneError), UpdateCostModel,
ProgressLine, LogBatch, then the user's. A callback is any callable with that signature.
"""
from __future__ import annotations

import json
import logging
import math
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from tessel.database import DatabaseError, TuningRecord
from tessel.database.jsonl import write_lines
from tessel.ir import PrimFunc, structural_hash
from tessel.ir.serialize import to_json
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.search import Proposal
from tessel.search.base import program_key
from tessel.tuning.best import TuneError
from tessel.tuning.progress import TuneProgress

if TYPE_CHECKING:
    from tessel.tuning.loop import TuneRun

log = logging.getLogger("tessel")


class MeasureCallback(Protocol):
    def __call__(self, run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult]) -> None: ...


class AddToDatabase:
    """Commit the batch (with the claims that made it this run's); a refused batch goes to
    a JSON-lines file beside the database, so no measurement is lost."""

    def __call__(self, run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult]) -> None:
        cands = [p.candidate(run.task.workload) for p in batch]
        try:
            run.db.commit_results(run.task.target, cands, results, run=run.label,
                                  programs=[program_key(p) for p in batch])
        except DatabaseError as err:
            saved = save_batch(run, cands, results)
            raise TuneError(f"{err}. The batch just measured ({len(cands)} records) is in "
                            f"{saved}: `tessel db import` adds it to a sound database") from None


class UpdateCostModel:
    """Train the cost model on the batch (timings flagged as disturbed left out)."""

    def __call__(self, run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult]) -> None:
        update_model(run, batch, results)


class ProgressLine:
    """Move the progress line on."""

    def __init__(self, bar: TuneProgress) -> None:
        self.bar = bar

    def __call__(self, run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult]) -> None:
        self.bar.update(results, run.best_seconds)


class LogBatch:
    """One INFO line per batch on the `tessel` logger, one WARNING per kind of error."""

    def __call__(self, run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult]) -> None:
        task = run.task
        best = (f"{task.gflops(run.best_seconds):.1f} GFLOP/s ({run.best_seconds * 1e3:.4g} ms)"
                if math.isfinite(run.best_seconds) else "none yet")
        ok = sum(r.ok for r in results)
        log.info("%s: %d measured (%d ok), %d trials in all, best %s", task.label,
                 len(results), ok, run.done, best)
        kinds = Counter(r.error_kind for r in results if not r.ok)
        for kind, count in kinds.items():
            first = next(r for r in results if r.error_kind == kind)
            log.warning("%s: %d %s in this batch, e.g.: %s", task.label, count, kind,
                        first.error_msg.splitlines()[0] if first.error_msg else "(no message)")


def default_callbacks(bar: TuneProgress) -> list[MeasureCallback]:
    return [AddToDatabase(), UpdateCostModel(), ProgressLine(bar), LogBatch()]


def update_model(run: "TuneRun", batch: Sequence[Proposal],
                 results: Sequence[MeasureResult],
                 workloads: Sequence[PrimFunc] | None = None) -> None:
    """Train the cost model on measured programs, leaving out timings taken on a busy
    machine (they would teach it that good programs are slow). `workloads`: each program's
    (default: the run's task's; a resume trains once on the records of every task)."""
    workloads = workloads or [run.task.workload] * len(batch)
    kept = [(p.candidate(w), r) for p, r, w in zip(batch, results, workloads)
            if not r.disturbed]
    if run.model is None or not kept:
        return
    run.model.update([c for c, _ in kept], [r for _, r in kept])
    log.debug("%s: cost model %s updated with %d records", run.task.label,
              type(run.model).__name__, len(kept))


def save_batch(run: "TuneRun", cands: Sequence[MeasureCandidate],
               results: Sequence[MeasureResult]) -> Path:
    """Write a measured batch the database refused to a JSON-lines file beside it (or in the
    temporary directory), so no measurement is lost."""
    task, stamp = run.task, time.strftime("%Y%m%d-%H%M%S")
    key, target_key = structural_hash(task.workload), task.target.fingerprint_hash()
    records = [TuningRecord.from_measurement(key, target_key, c, r, run.label)
               for c, r in zip(cands, results)]
    workload = (key, task.workload.name, to_json(task.workload))
    target = (target_key, str(task.target), json.dumps(task.target.fingerprint()))
    for folder in (run.db.path.parent, Path(tempfile.gettempdir())):
        path = folder / f"{run.db.path.name}.unsaved-{stamp}.jsonl"
        try:
            write_lines(path, [workload], [target], records)
            return path
        except (DatabaseError, OSError):
            continue
    raise TuneError(f"the batch just measured could not be saved anywhere ({run.db.path})")


__all__ = ["MeasureCallback", "AddToDatabase", "UpdateCostModel", "ProgressLine", "LogBatch",
           "default_callbacks", "update_model", "save_batch"]
