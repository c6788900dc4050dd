"""Make tests/data/replay_v1.db (committed gzipped): records stored by tessel before issue 15's restructuring, and
the structural hashes of the programs they replay to (tests/data/replay_v1.json).

Run once, with the tessel of commit d9d881a (before instructions had a registry), from a
checkout of that commit:

    PYTHONPATH=. python tests/data/make_replay_fixture.py

A run that stops resumes where it stopped (trials already stored count, as in `tessel tune`).

tests/test_replay_fixture.py replays every record with today's tessel and checks that each
gives the program it gave then (scheduled and postprocessed), so a change to a primitive, its
arguments or the record format that silently changes old records fails a test.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import tessel
from tessel.database import Database
from tessel.ir.structural import structural_hash
from tessel.ops import SUITE
from tessel.schedule import Schedule
from tessel.space import default_postprocs, final_func
from tessel.target import Target

HERE = Path(__file__).parent
DB = HERE / "replay_v1.db"
EXPECTED = HERE / "replay_v1.json"
POSTPROC_TARGET = "x86_64-avx512"
# (workload, space, trials in all): the auto space on every kind of suite operator, then each
# template (its trials come on top of the auto space's, as the workload's records all count)
RUNS = [("GMM", "auto", 16), ("GMM-1024", "auto", 16), ("R18-C6", "auto", 16),
        ("SFM", "auto", 8), ("NRM", "auto", 8), ("C1D", "auto", 8), ("DEP", "auto", 8),
        ("GRP", "auto", 8), ("T2D", "auto", 8), ("TBG", "auto", 8), ("CBR", "auto", 8),
        ("GMM", "matmul", 24), ("TBG", "batch_matmul", 16), ("R18-C6", "conv2d", 24),
        ("DEP", "depthwise_conv2d", 16)]


def expected_hashes(db: Database) -> dict[str, list[str]]:
    """{trace json's sha: [scheduled program hash, postprocessed program hash]}"""
    import hashlib
    target = Target(POSTPROC_TARGET)
    out = {}
    for wl in db.workloads():
        for record in db.records(wl.key):
            if record.trace_json is None:
                continue
            sch = record.trace().apply(Schedule(wl.func))
            try:
                final = structural_hash(final_func(sch, default_postprocs(target)))
            except tessel.TesselError as err:
                final = f"error: {type(err).__name__}"
            key = hashlib.sha256(record.trace_json.encode()).hexdigest()
            out[key] = [structural_hash(sch.func), final]
    return out


def main() -> int:
    os.environ.setdefault("TESSEL_BUSY_CORES", "0")
    for name, space, trials in RUNS:
        tessel.tune(SUITE[name], trials=trials, space=space, database=str(DB), batch_size=8,
                    seed=1)
    with Database(DB) as db:
        hashes = expected_hashes(db)
    EXPECTED.write_text(json.dumps({"postproc_target": POSTPROC_TARGET, "programs": hashes},
                                   indent=0, sort_keys=True) + "\n")
    print(f"{len(hashes)} records -> {DB.name}, {EXPECTED.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
