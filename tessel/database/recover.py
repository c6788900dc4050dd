"""A damaged database: find the damage, and copy every readable record to a new file.

    problems = check_file("tessel.db")            # [] when SQLite's integrity check passes
    report = recover("tessel.db", "saved.db")     # Recovery(workloads=.., records=.., lost=..)

`recover` reads the damaged file read-only and never changes it. Each table is read by rowid
ranges; a range that hits a damaged page is split in halves until the unreadable rows are
isolated, so every row on an intact page is kept. A workload whose program no longer hashes
to its key, and a record that does not parse or whose workload was lost, are counted as lost.
"""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tessel.database.record import RECORD_COLUMNS, DatabaseError, TuningRecord, check
from tessel.database.sqlite import Database
from tessel.ir import structural_hash
from tessel.ir.serialize import from_json as func_from_json

_MAX_ROWID = 2**62


@dataclass(frozen=True)
class Recovery:
    """What `recover` copied and what it could not."""
    workloads: int
    targets: int
    records: int
    lost_workloads: int
    lost_records: int  # unreadable, malformed, or of a lost workload
    unreadable_ranges: int  # rowid ranges of the records table on damaged pages

    def __str__(self) -> str:
        return (f"recovered {self.records} records, {self.workloads} workloads and "
                f"{self.targets} targets; lost {self.lost_records} records and "
                f"{self.lost_workloads} workloads ({self.unreadable_ranges} unreadable ranges "
                "of records)")


def check_file(path: str | Path) -> list[str]:
    """SQLite's full integrity check of `path`: the problems found, [] for a sound file."""
    conn = _open_read_only(Path(path))
    try:
        return [row[0] for row in conn.execute("PRAGMA integrity_check(20)")
                if row[0] != "ok"]
    except sqlite3.DatabaseError as err:
        return [str(err)]
    finally:
        conn.close()


def recover(source: str | Path, destination: str | Path) -> Recovery:
    """Copy every readable workload, target and record of `source` (a damaged tessel database,
    left untouched) into `destination`, a new database file."""
    source, destination = Path(source), Path(destination)
    check(source.resolve() != destination.resolve(),
          "recover writes a new file: give a destination other than the damaged database")
    check(not destination.exists() or destination.stat().st_size == 0,
          f"{destination} exists; recover writes a new file (remove it or pick another name)")
    conn = _open_read_only(source)
    try:
        workloads, lost_workloads = _workloads(conn)
        targets = _rows(conn, "targets", "key, description, fingerprint_json")[0]
        rows, unreadable = _rows(conn, "records", RECORD_COLUMNS)
    finally:
        conn.close()
    records = [r for r in map(_record, rows) if r is not None and r.workload_key in workloads]
    with Database(destination) as db:
        db._write(lambda c: _insert(c, workloads, targets))  # noqa: SLF001 - same package
        db.commit(records)
    return Recovery(len(workloads), len(targets), len(records), lost_workloads,
                    len(rows) - len(records) + unreadable, unreadable)


def _open_read_only(path: Path) -> sqlite3.Connection:
    check(path.is_file(), f"no such database file: {path}")
    try:
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as err:
        raise DatabaseError(f"cannot open {path} at all: {err}") from None


def _rows(conn: sqlite3.Connection, table: str, columns: str) -> tuple[list[tuple], int]:
    """Every readable row of `table`, and how many rowid ranges could not be read."""
    out: list[tuple] = []
    unreadable = 0

    def scan(lo: int, hi: int) -> None:
        nonlocal unreadable
        # one row: a point lookup (a range query steps on to the next row, and the next page
        # may be the damaged one)
        where, args = ("rowid = ?", (lo,)) if lo == hi else ("rowid BETWEEN ? AND ?", (lo, hi))
        try:
            out.extend(conn.execute(f"SELECT {columns} FROM {table} WHERE {where} "
                                    "ORDER BY rowid", args).fetchall())
        except sqlite3.DatabaseError:
            if lo == hi:
                unreadable += 1
                return
            mid = (lo + hi) // 2
            scan(lo, mid)
            scan(mid + 1, hi)
    scan(0, _last_rowid(conn, table))
    return out, unreadable


def _last_rowid(conn: sqlite3.Connection, table: str) -> int:
    try:
        return conn.execute(f"SELECT MAX(rowid) FROM {table}").fetchone()[0] or 0
    except sqlite3.DatabaseError:  # the damage is on the way to the last row: search it all
        return _MAX_ROWID


def _workloads(conn: sqlite3.Connection) -> tuple[dict[str, tuple], int]:
    rows = _rows(conn, "workloads", "key, name, func_json")[0]
    good = {key: (key, name, text) for key, name, text in rows if _hashes_to(text, key)}
    return good, len(rows) - len(good)


def _hashes_to(func_json: str, key: str) -> bool:
    try:
        return structural_hash(func_from_json(func_json)) == key
    except Exception:  # noqa: BLE001 - any damage to the program text loses the workload
        return False


def _record(row: tuple) -> TuningRecord | None:
    try:
        record = TuningRecord.from_row(row)
        record.result()
        if record.trace_json is not None:
            json.loads(record.trace_json)
        return record
    except Exception:  # noqa: BLE001 - a damaged row is a lost record
        return None


def _insert(c: sqlite3.Connection, workloads: dict[str, tuple], targets: list[tuple]) -> None:
    c.executemany("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?)", list(workloads.values()))
    c.executemany("INSERT OR IGNORE INTO targets VALUES (?, ?, ?)", targets)


__all__ = ["Recovery", "check_file", "recover"]
