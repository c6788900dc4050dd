"""JSON-lines exchange format for tuning records: one JSON object per line.

    {"type": "tessel.records", "version": 2}                        (header)
    {"type": "workload", "key": ..., "name": ..., "func": {...}}    (serialized PrimFunc)
    {"type": "target", "key": ..., "description": ..., "fingerprint": {...}}
    {"type": "record", "workload": ..., "target": ..., "trace": "<Trace JSON>" | null,
     "knobs": [...] | null, "costs": [...], "error_kind": ..., "error_msg": ..., ...}
    {"type": "end", "records": N}                                   (the last line)

Imports check every line (a workload's key must be the structural hash of its program) before
anything is written, so a bad file imports nothing. The end line makes a file cut short
detectable even when it was cut at a line boundary; version-1 files (no end line) still
import, with a warning that their completeness cannot be told.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Iterable

from tessel.database.files import status
from tessel.database.record import RECORD_COLUMNS, DatabaseError, TuningRecord, check
from tessel.ir import structural_hash
from tessel.ir.serialize import from_json as func_from_json

VERSION = 2
HEADER = {"type": "tessel.records", "version": VERSION}
_RECORD_FIELDS = ("workload", "target", "trace", "knobs", "costs", "error_kind", "error_msg",
                  "build_secs", "run_secs", "timestamp")


def export_lines(conn: sqlite3.Connection, path: Path) -> int:
    """Write everything in `conn` to `path` (atomically); return the number of records."""
    return write_lines(
        path, conn.execute("SELECT * FROM workloads ORDER BY rowid"),
        conn.execute("SELECT * FROM targets ORDER BY rowid"),
        (TuningRecord.from_row(row) for row in
         conn.execute(f"SELECT {RECORD_COLUMNS} FROM records ORDER BY id")))


def write_lines(path: Path, workloads: Iterable[tuple[str, str, str]],
                targets: Iterable[tuple[str, str, str]],
                records: Iterable[TuningRecord]) -> int:
    """Write (key, name, func JSON) workload rows, (key, description, fingerprint JSON)
    target rows and records to `path`, atomically; return the number of records."""
    path = Path(path)
    there = status(path)
    check(there is None or not stat.S_ISDIR(there.st_mode),
          f"{path} is a directory; give the name of a file to write")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise DatabaseError(f"cannot write {path}: {err.strerror or err}") from None
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            _write(out, HEADER)
            for key, name, func in workloads:
                _write(out, {"type": "workload", "key": key, "name": name,
                             "func": json.loads(func)})
            for key, description, fingerprint in targets:
                _write(out, {"type": "target", "key": key, "description": description,
                             "fingerprint": json.loads(fingerprint)})
            for record in records:
                _write(out, _record_line(record))
                count += 1
            _write(out, {"type": "end", "records": count})
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
    line = {"type": "record", **dict(zip(_RECORD_FIELDS, values)), "run": r.run}
    return {**line, "flags": r.flags} if r.flags else line


def parse_lines(path: Path) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(workload rows, target rows, record rows) of an export file; DatabaseError naming the
    line on anything malformed, and on a file cut short."""
    path = Path(path)
    there = status(path)
    check(there is not None and stat.S_ISREG(there.st_mode), f"no such file to import: {path}")
    workloads, targets, records = [], [], []
    version, end, number = None, None, 0
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                check(end is None, f"{path}:{number}: a line after the end line")
                obj = _load(line, path, number, last=line[-1:] != "\n")
                if number == 1:
                    version = _header(obj, path)
                elif obj.get("type") == "end":
                    end = obj
                else:
                    _parse(obj, path, number, workloads, targets, records)
    except UnicodeDecodeError as err:
        raise DatabaseError(f"{path} is not a tessel records file (not UTF-8 text: byte "
                            f"{err.start} of a line)") from None
    except OSError as err:
        raise DatabaseError(f"cannot read {path}: {err.strerror or err}") from None
    check(version is not None, f"{path} is empty; nothing imported")
    _check_end(path, version, end, len(records))
    return workloads, targets, records


def _load(line: str, path: Path, number: int, last: bool) -> dict:
    try:
        obj = json.loads(line)
    except ValueError as err:
        cut = " (the file ends in the middle of it: cut short?)" if last else ""
        raise DatabaseError(f"{path}:{number}: not a tessel record line{cut}: {err}") from None
    check(isinstance(obj, dict), f"{path}:{number}: not a tessel record line (a JSON "
                                 f"{type(obj).__name__}, not an object)")
    return obj


def _header(obj: dict, path: Path) -> int:
    version = obj.get("version")
    check(obj.get("type") == HEADER["type"] and version in (1, VERSION),
          f"{path}:1 is not a tessel records header ({HEADER}); nothing imported")
    return version


def _check_end(path: Path, version: int, end: dict | None, count: int) -> None:
    if version == 1:
        warnings.warn(f"{path} is a version-1 export without an end line: whether it is "
                      f"complete cannot be told ({count} records read)", RuntimeWarning,
                      stacklevel=4)
        return
    check(end is not None, f"{path} has no end line: the file was cut short after {count} "
                           "records; nothing imported")
    check(end.get("records") == count,
          f"{path}: its end line counts {end.get('records')} records but {count} were read; "
          "nothing imported")


def _parse(obj: dict, path: Path, number: int, workloads: list, targets: list,
           records: list) -> None:
    try:
        kind = obj["type"]
        if kind == "workload":
            text = json.dumps(obj["func"], separators=(",", ":"))
            check(structural_hash(func_from_json(text)) == obj["key"],
                  f"workload key {obj['key'][:16]} is not its program's hash")
            workloads.append((obj["key"], obj["name"], text))
        elif kind == "target":
            targets.append((obj["key"], obj["description"], json.dumps(obj["fingerprint"])))
        elif kind == "record":
            w, t, trace, knobs, costs, ek, em, b, r, ts = (obj[f] for f in _RECORD_FIELDS)
            knobs = tuple(knobs) if knobs is not None else None
            record = TuningRecord(w, t, trace, knobs, tuple(costs), ek, em, b, r, ts,
                                  str(obj.get("run", "")), str(obj.get("flags", "")))
            record.result()  # ValueError on an unknown error kind or a success without costs
            records.append(record.row())
        else:
            raise DatabaseError(f"unknown line type {kind!r}")
    except (DatabaseError, ValueError, KeyError, TypeError) as err:
        detail = f"missing field {err}" if isinstance(err, KeyError) else str(err)
        raise DatabaseError(f"{path}:{number}: not a tessel record line: {detail}; nothing "
                            "imported") from None


__all__ = ["HEADER", "VERSION", "export_lines", "parse_lines", "write_lines"]
