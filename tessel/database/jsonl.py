"""JSON-lines exchange format for tuning records: one JSON object per line.

    {"type": "tessel.records", "version": 1}                        (header)
    {"type": "workload", "key": ..., "name": ..., "func": {...}}    (serialized PrimFunc)
    {"type": "target", "key": ..., "description": ..., "fingerprint": {...}}
    {"type": "record", "workload": ..., "target": ..., "trace": "<Trace JSON>" | null,
     "knobs": [...] | null, "costs": [...], "error_kind": ..., "error_msg": ..., ...}

Imports check every line (a workload's key must be the structural hash of its program) before
anything is written, so a bad file imports nothing.
"""
from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

from tessel.database.record import RECORD_COLUMNS, DatabaseError, TuningRecord, check
from tessel.ir import structural_hash
from tessel.ir.serialize import from_json as func_from_json

HEADER = {"type": "tessel.records", "version": 1}
_RECORD_FIELDS = ("workload", "target", "trace", "knobs", "costs", "error_kind", "error_msg",
                  "build_secs", "run_secs", "timestamp")


def export_lines(conn: sqlite3.Connection, path: Path) -> int:
    """Write everything in `conn` to `path` (atomically); return the number of records."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    count = 0
    try:
        with os.fdopen(fd, "w") as out:
            _write(out, HEADER)
            for key, name, func in conn.execute("SELECT * FROM workloads ORDER BY rowid"):
                _write(out, {"type": "workload", "key": key, "name": name,
                             "func": json.loads(func)})
            for key, description, fingerprint in conn.execute(
                    "SELECT * FROM targets ORDER BY rowid"):
                _write(out, {"type": "target", "key": key, "description": description,
                             "fingerprint": json.loads(fingerprint)})
            for row in conn.execute(f"SELECT {RECORD_COLUMNS} FROM records ORDER BY id"):
                _write(out, _record_line(TuningRecord.from_row(row)))
                count += 1
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return count


def _write(out, obj: dict) -> None:
    out.write(json.dumps(obj, separators=(",", ":")) + "\n")


def _record_line(r: TuningRecord) -> dict:
    values = (r.workload_key, r.target_key, r.trace_json,
              list(r.knobs) if r.knobs is not None else None, list(r.costs), r.error_kind,
              r.error_msg, r.build_secs, r.run_secs, r.timestamp)
    return {"type": "record", **dict(zip(_RECORD_FIELDS, values)), "run": r.run}


def parse_lines(path: Path) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(workload rows, target rows, record rows) of an export file; DatabaseError naming the
    line on anything malformed."""
    check(path.is_file(), f"no such file to import: {path}")
    workloads, targets, records = [], [], []
    with open(path) as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                _parse(obj, number, workloads, targets, records)
            except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError is a ValueError
                raise DatabaseError(f"{path}:{number}: not a tessel record line: {err}") from err
    return workloads, targets, records


def _parse(obj: dict, number: int, workloads: list, targets: list, records: list) -> None:
    kind = obj["type"]
    if number == 1:
        check(obj == HEADER, f"line 1 is not a tessel records header ({HEADER})")
    elif kind == "workload":
        text = json.dumps(obj["func"], separators=(",", ":"))
        check(structural_hash(func_from_json(text)) == obj["key"],
              f"line {number}: workload key {obj['key'][:16]} is not its program's hash")
        workloads.append((obj["key"], obj["name"], text))
    elif kind == "target":
        targets.append((obj["key"], obj["description"], json.dumps(obj["fingerprint"])))
    elif kind == "record":
        w, t, trace, knobs, costs, ek, em, b, r, ts = (obj[f] for f in _RECORD_FIELDS)
        knobs = tuple(knobs) if knobs is not None else None
        record = TuningRecord(w, t, trace, knobs, tuple(costs), ek, em, b, r, ts,
                              str(obj.get("run", "")))
        record.result()  # ValueError on an unknown error kind or a success without costs
        records.append(record.row())
    else:
        raise DatabaseError(f"line {number}: unknown line type {kind!r}")


__all__ = ["HEADER", "export_lines", "parse_lines"]
