"""Training data for cost models: (MeasureCandidate, MeasureResult) pairs from stored records.

    pairs = pairs_from_database(tessel.Database("records.db"), target)   # all workloads
    glob = pretrain_global(pairs)                                          # transfer.py

Each record's trace is replayed on its workload to rebuild the scheduled program (records
without a trace, or whose trace no longer replays, are skipped). `pairs_from_fixture` reads
the gzipped JSON written by benchmarks/make_transfer_fixture.py.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Iterable

from tessel.cost_model.base import check
from tessel.ir import PrimFunc, from_json
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.schedule import Schedule, ScheduleError, Trace

FIXTURE_FORMAT = "tessel.transfer_fixture/1"
Pair = tuple[MeasureCandidate, MeasureResult]


def replay(workload: PrimFunc, trace: Any, result: MeasureResult,
           knobs: tuple | None = None) -> Pair | None:
    """The candidate a trace makes on `workload`, paired with its result; None if it fails."""
    try:
        func = trace.apply(Schedule(workload)).func
    except ScheduleError:
        return None
    return MeasureCandidate(workload, func, trace, knobs), result


def pairs_from_database(db: Any, target: Any = None,
                        workloads: Iterable[str] | None = None) -> dict[str, list[Pair]]:
    """{workload key: pairs} of a tessel.Database's records on `target` (all if None),
    for the given workload keys (all if None)."""
    wanted = set(workloads) if workloads is not None else None
    out: dict[str, list[Pair]] = {}
    for wl in db.workloads():
        if wanted is not None and wl.key not in wanted:
            continue
        pairs = [replay(wl.func, r.trace(), r.result(), r.knobs)
                 for r in db.records(wl.key, target) if r.trace_json is not None]
        kept = [p for p in pairs if p is not None]
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
        pairs = []
        for rec in wl["records"][:limit]:
            result = (MeasureResult(costs=tuple(rec["costs"])) if "costs" in rec
                      else MeasureResult.error(rec["error"], rec.get("msg", "")))
            pair = replay(func, Trace.from_json(json.dumps(rec["trace"])), result)
            if pair is not None:
                pairs.append(pair)
        out[wl["name"]] = pairs
    return out
