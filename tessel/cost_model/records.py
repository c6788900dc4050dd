"""Training data for cost models: (MeasureCandidate, MeasureResult) pairs from stored records.

    pairs = pairs_from_database(tessel.Database("records.db"), target)   # all workloads
    glob = pretrain_global(pairs)                                          # transfer.py

Each record's trace is replayed on its workload and postprocessed as a search does before it
builds (tessel.database.record_program, with tessel.space.default_postprocs of the target), so
that a model trained on these pairs sees the programs a search scores (records without a trace,
or whose trace no longer replays, are skipped). `pairs_from_fixture` reads the gzipped JSON
written by benchmarks/make_transfer_fixture.py.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable, Sequence

from tessel.cost_model.base import check
from tessel.database import TuningRecord, record_program
from tessel.ir import PrimFunc, from_json
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.space import Postproc, postprocs_for
from tessel.target import Target

FIXTURE_FORMAT = "tessel.transfer_fixture/1"
Pair = tuple[MeasureCandidate, MeasureResult]


def pair(workload: PrimFunc, record: TuningRecord,
         postprocs: Sequence[Postproc] = ()) -> Pair | None:
    """The candidate `record` makes of `workload` (tessel.database.record_program), paired
    with its result; None if it makes none."""
    program = record_program(record, workload, postprocs)
    if program is None:
        return None
    return MeasureCandidate(workload, program, record.trace(), record.knobs), record.result()


def pairs_from_database(db: Any, target: Any = None,
                        workloads: Iterable[str] | None = None) -> dict[str, list[Pair]]:
    """{workload key: pairs} of a tessel.Database's records on `target` (all if None; then
    programs are postprocessed for the host), for the given workload keys (all if None).
    Programs are postprocessed as a search of the workload does (`postprocs_for`)."""
    wanted = set(workloads) if workloads is not None else None
    post_target = target if isinstance(target, Target) else Target("host")
    out: dict[str, list[Pair]] = {}
    for wl in db.workloads():
        if wanted is not None and wl.key not in wanted:
            continue
        posts = postprocs_for(wl.func, post_target)
        kept = [p for p in (pair(wl.func, r, posts) for r in db.records(wl.key, target))
                if p is not None]
        if kept:
            out[wl.key] = kept
    return out


def pairs_from_fixture(path: str | Path, limit: int | None = None) -> dict[str, list[Pair]]:
    """{workload name: pairs} of a measurement fixture (the first `limit` per workload)."""
    with gzip.open(path, "rt") as f:
        data = json.load(f)
    check(data.get("format") == FIXTURE_FORMAT,
          f"{path}: not a measurement fixture (expected format {FIXTURE_FORMAT!r})")
    out: dict[str, list[Pair]] = {}
    for wl in data["workloads"]:
        func = from_json(json.dumps(wl["workload"]))
        records = (TuningRecord(wl["name"], "", json.dumps(rec["trace"]), None,
                                tuple(rec.get("costs", ())), rec.get("error"), rec.get("msg", ""))
                   for rec in wl["records"][:limit])
        out[wl["name"]] = [p for p in (pair(func, r) for r in records) if p is not None]
    return out
