"""A damaged database: find the damage, and copy every readable record to a new file.

    problems = check_file("tessel.db")            # [] when SQLite's integrity check passes
    report = recover("tessel.db", "saved.db")     # Recovery(workloads=.., records=.., lost=..)

`recover` reads the damaged file read-only and never changes it (nor leaves files beside it).
Each table is read by rowid ranges; a range that hits a damaged page is split in halves until
the unreadable rows are isolated, so every row on an intact page is kept. The splitting is
bounded: at most four queries per cell of the file's table pages, whatever the damage. A file
whose 100-byte header alone is damaged is read from a copy with the header rebuilt; a file
that is no SQLite database is refused at once, saying what it is. A workload whose program no
longer hashes to its key, and a record that does not parse or whose workload was lost, are
counted as lost.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tessel.database.files import (HEADER_BYTES, OPEN_FILES, SQLITE_MAGIC, check_sqlite_file,
                                   connect_read_only, damage, sql_error, status)
from tessel.database.record import RECORD_COLUMNS, DatabaseError, TuningRecord, check
from tessel.database.sqlite import Database
from tessel.ir import structural_hash
from tessel.ir.serialize import from_json as func_from_json

_PAGE_SIZES = (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512)  # the default first


@dataclass(frozen=True)
class Recovery:
    """What `recover` copied and what it could not."""
    workloads: int
    targets: int
    records: int
    lost_workloads: int
    # unreadable, malformed, or of a lost workload (when damage hides a table's last rowid
    # from the table and its indexes, a few rowids past its end may be counted)
    lost_records: int
    unreadable_ranges: int  # rowid ranges of the records table on damaged pages

    def __str__(self) -> str:
        return (f"recovered {self.records} records, {self.workloads} workloads and "
                f"{self.targets} targets; lost {self.lost_records} records and "
                f"{self.lost_workloads} workloads ({self.unreadable_ranges} unreadable ranges "
                "of records)")


def check_file(path: str | Path) -> list[str]:
    """SQLite's full integrity check of `path`: the problems found, [] for a sound file;
    DatabaseError saying what the file is when it is no SQLite database at all."""
    path = Path(path).expanduser()
    if _check_source(path):
        return ["its SQLite header (the first 100 bytes) is damaged: SQLite cannot read it"]
    with contextlib.closing(connect_read_only(path)) as conn:
        try:
            return [row[0] for row in conn.execute("PRAGMA integrity_check(20)")
                    if row[0] != "ok"]
        except sqlite3.Error as err:
            if damage(err):
                return [str(err)]
            raise sql_error(path, err, "check") from None


def recover(source: str | Path, destination: str | Path) -> Recovery:
    """Copy every readable workload, target and record of `source` (a damaged tessel database,
    left untouched) into `destination`, a new database file."""
    source, destination = Path(source).expanduser(), Path(destination).expanduser()
    rebuild_header = _check_source(source)
    check(source.resolve() != destination.resolve(),
          "recover writes a new file: give a destination other than the damaged database")
    there = status(destination)
    check(there is None or there.st_size == 0,
          f"{destination} exists; recover writes a new file (remove it or pick another name)")
    if rebuild_header:
        with tempfile.TemporaryDirectory(prefix="tessel-recover-") as scratch:
            found = _read(_with_header(source, Path(scratch) / "header.db"), source)
    else:
        found = _read(source, source)
    workloads, lost_workloads, targets, rows, unreadable = found
    records = [r for r in map(_record, rows) if r is not None and r.workload_key in workloads]
    with Database(destination) as db:
        db._write(lambda c: _insert(c, workloads, targets))  # noqa: SLF001 - same package
        db.commit(records)
    return Recovery(len(workloads), len(targets), len(records), lost_workloads,
                    len(rows) - len(records) + unreadable, unreadable)


def _check_source(path: Path) -> bool:
    """DatabaseError unless `path` is an SQLite file; whether its header alone is damaged."""
    st = status(path)
    check(st is not None, f"no such database file: {path}")
    return check_sqlite_file(path, st)


def _read(path: Path, source: Path) -> tuple[dict[str, tuple], int, list[tuple], list[tuple],
                                              int]:
    """(workloads, lost workloads, targets, record rows, unreadable ranges) read from `path`
    (`source`, or a copy of it with its header rebuilt)."""
    budget = 4 * (_leaf_cells(path) + 64)  # read before SQLite opens it: no lock of it dropped
    with contextlib.closing(connect_read_only(path)) as conn:
        _check_schema(conn, source)
        workloads, lost_workloads = _workloads(conn, budget, source)
        targets = _rows(conn, "targets", "key, description, fingerprint_json", budget, source)[0]
        rows, unreadable = _rows(conn, "records", RECORD_COLUMNS, budget, source)
    return workloads, lost_workloads, targets, rows, unreadable


def _check_schema(conn: sqlite3.Connection, source: Path) -> None:
    try:
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as err:
        if not damage(err):
            raise sql_error(source, err, "read") from None
        raise DatabaseError(f"nothing could be recovered from {source}: its schema (page 1) "
                            f"is unreadable ({err})") from None
    check({"workloads", "targets", "records"} <= tables,
          f"nothing to recover from {source}: it holds no tessel tables (tables: "
          f"{', '.join(sorted(tables)) or 'none'})")


def _leaf_cells(path: Path) -> int:
    """The cells of the file's table leaf pages (read from its sound header and pages): a
    bound on its rows, and on their rowids (tessel never deletes a workload, target or record,
    so rowids run 1, 2, 3, ...)."""
    if path.resolve() in OPEN_FILES:  # reading it would drop this process's locks on it
        return path.stat().st_size // 4  # a cell takes 4 bytes at least
    cells = 0
    with open(path, "rb") as file:
        size = int.from_bytes(file.read(18)[16:18], "big")
        size = 65536 if size == 1 else max(size, 512)
        for page in range(path.stat().st_size // size):
            file.seek(page * size + (HEADER_BYTES if page == 0 else 0))
            head = file.read(5)
            if len(head) == 5 and head[0] == 0x0D:
                cells += int.from_bytes(head[3:5], "big")
    return cells


def _rows(conn: sqlite3.Connection, table: str, columns: str, budget: int,
          source: Path) -> tuple[list[tuple], int]:
    """Every readable row of `table` (by rowid), and how many rowid ranges could not be read:
    a range that hits damage is split in halves until single rows, at most `budget` queries
    (past it, each range left counts as unreadable)."""
    out: list[tuple] = []
    unreadable = 0
    ranges = [(0, _last_rowid(conn, table, budget // 4, source))]
    while ranges:
        lo, hi = ranges.pop()
        budget -= 1
        if budget < 0:
            unreadable += 1
            continue
        # one row: a point lookup (a range query steps on to the next row, and the next page
        # may be the damaged one)
        where, args = ("rowid = ?", (lo,)) if lo == hi else ("rowid BETWEEN ? AND ?", (lo, hi))
        try:
            out.extend(conn.execute(f"SELECT {columns} FROM {table} WHERE {where} "
                                    "ORDER BY rowid", args).fetchall())
        except sqlite3.Error as err:
            if not damage(err):
                raise sql_error(source, err, "read") from None
            if lo == hi:
                unreadable += 1
            else:
                mid = (lo + hi) // 2
                ranges += [(mid + 1, hi), (lo, mid)]  # the lower half first: rowid order
    return out, unreadable


def _last_rowid(conn: sqlite3.Connection, table: str, bound: int, source: Path) -> int:
    """The table's largest rowid, read from the table or else from one of its indexes (they
    hold every rowid); `bound` when the damage hides it from all of them."""
    indexes = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (table,))]
    for using in ["", *(f' INDEXED BY "{name}"' for name in indexes)]:
        try:
            return conn.execute(f"SELECT MAX(rowid) FROM {table}{using}").fetchone()[0] or 0
        except sqlite3.Error as err:  # the damage is on the way to the last row
            if not damage(err):
                raise sql_error(source, err, "read") from None
    return bound


def _with_header(source: Path, copy: Path) -> Path:
    """`copy`: a copy of `source`, whose SQLite header is damaged, with a header written over
    it for the page size at which most of its tables' root pages are b-tree pages."""
    shutil.copyfile(source, copy)
    scores = {size: _score(copy, size) for size in _PAGE_SIZES}
    best = max(_PAGE_SIZES, key=lambda size: scores[size])
    check(scores[best] > 0, f"nothing could be recovered from {source}: its SQLite header is "
                            "damaged, and its schema reads at no page size")
    _write_header(copy, best)
    return copy


def _score(copy: Path, size: int) -> int:
    """How many of the root pages the schema names (read with the header for pages of `size`
    bytes) are b-tree pages: 0 when the schema does not read."""
    _write_header(copy, size)
    with contextlib.closing(connect_read_only(copy)) as conn:
        try:
            roots = [r for (r,) in conn.execute("SELECT rootpage FROM sqlite_master") if r]
        except sqlite3.Error:
            return 0
    with open(copy, "rb") as file:
        kinds = []
        for root in roots:
            file.seek((root - 1) * size + (HEADER_BYTES if root == 1 else 0))
            kinds.append(file.read(1))
    return sum(kind in (b"\x02", b"\x05", b"\x0a", b"\x0d") for kind in kinds)


def _write_header(copy: Path, page_size: int) -> None:
    """Write an SQLite header for pages of `page_size` bytes: no WAL to read, no free list,
    UTF-8, schema format 4; the page count is then the file's size (sqlite.org/fileformat)."""
    head = bytearray(HEADER_BYTES)
    head[:16] = SQLITE_MAGIC
    head[16:18] = (page_size if page_size < 65536 else 1).to_bytes(2, "big")
    head[18:24] = bytes([1, 1, 0, 64, 32, 32])  # legacy journal; payload fractions
    head[44:48] = (4).to_bytes(4, "big")  # schema format
    head[56:60] = (1).to_bytes(4, "big")  # text encoding: UTF-8
    with open(copy, "r+b") as file:
        file.write(head)


def _workloads(conn: sqlite3.Connection, budget: int,
               source: Path) -> tuple[dict[str, tuple], int]:
    rows = _rows(conn, "workloads", "key, name, func_json", budget, source)[0]
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
