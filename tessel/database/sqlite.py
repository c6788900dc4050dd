"""Tuning records: what was measured, where, and how fast — in one SQLite file.

    db = Database("records.db")                  # created if missing (and its directory)
    db = Database("records.db", create=False)    # reading: a missing file is refused
    key = db.commit_workload(func)               # structural hash of the unscheduled program
    db.commit_results(target, candidates, results)   # one transaction per measured batch
    best = db.top_k(func, target, k=5)           # successful records, fastest first
    train = db.records(func, target)             # everything, errors included (cost models)

The file is in WAL mode with a busy timeout, and every write is one short transaction, so
several tuning processes can share it and a killed process loses at most the batch it had not
committed. A record belongs to a workload (structural hash, names ignored) and a target
fingerprint (`Target.fingerprint_hash`: ISA, CPU model, cores, compiler): queries for one
target never return records measured on another, and a stored fingerprint that differs from
the target's (an edited or damaged file) is refused, not trusted by its key. A file that is not
a tessel database (or of another schema version) raises DatabaseError saying what it is
(tessel.database.files) and is left untouched; a full disk, an I/O error or a lock is said as
such, never called damage.

An existing file gets SQLite's quick integrity check when it is opened; a damaged one (and any
later read or write that finds damage) raises DatabaseError naming the file and the way out:
`tessel db recover DAMAGED.db NEW.db` (tessel.database.recover) copies every readable record.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tessel.database.files import (OPEN_FILES, check_sqlite_file, connect_read_only,
                                   sql_error, status, writable)
from tessel.database.jsonl import export_lines, parse_lines
from tessel.database.record import (NOT_A_CHOICE, RECORD_COLUMNS, DatabaseError, TuningRecord,
                                    Workload, check, record_digest, target_key)
from tessel.ir import PrimFunc, structural_hash
from tessel.ir.serialize import from_json as func_from_json
from tessel.ir.serialize import to_json as func_to_json
from tessel.measure.result import MeasureCandidate, MeasureResult
from tessel.target import Target

FORMAT = "tessel.database"
SCHEMA_VERSION = 3
CLAIM_TTL_S = 3600.0  # a claim not committed after this long is taken over (its run hung)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads (key TEXT PRIMARY KEY, name TEXT NOT NULL,
                                      func_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS targets (key TEXT PRIMARY KEY, description TEXT NOT NULL,
                                    fingerprint_json TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY, digest TEXT NOT NULL UNIQUE,
    workload TEXT NOT NULL REFERENCES workloads(key), target TEXT NOT NULL,
    trace_json TEXT, knobs_json TEXT, costs_json TEXT NOT NULL, mean_secs REAL,
    error_kind TEXT, error_msg TEXT NOT NULL, build_secs REAL NOT NULL,
    run_secs REAL NOT NULL, timestamp REAL NOT NULL, run TEXT NOT NULL DEFAULT '',
    flags TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS records_by_speed ON records (workload, target, mean_secs);
CREATE TABLE IF NOT EXISTS claims (
    workload TEXT NOT NULL, target TEXT NOT NULL, program TEXT NOT NULL, run TEXT NOT NULL,
    pid INTEGER NOT NULL, host TEXT NOT NULL, claimed_at REAL NOT NULL,
    done INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (workload, target, program));
"""
# schema version -> the statements that bring a database of that version to the next one
_MIGRATIONS = {2: ("ALTER TABLE records ADD COLUMN flags TEXT NOT NULL DEFAULT ''",
                   "CREATE TABLE IF NOT EXISTS claims (workload TEXT NOT NULL, target TEXT NOT "
                   "NULL, program TEXT NOT NULL, run TEXT NOT NULL, pid INTEGER NOT NULL, host "
                   "TEXT NOT NULL, claimed_at REAL NOT NULL, done INTEGER NOT NULL DEFAULT 0, "
                   "PRIMARY KEY (workload, target, program))")}


def _workload_key(workload: PrimFunc | str) -> str:
    return workload if isinstance(workload, str) else structural_hash(workload)


def _target_description(target: Target) -> str:
    return f"{target.cpu_model}; {target}"


_READ_ONLY = "this process may not write it or its directory (it is open for reading only)"


def recover_hint(path: Path) -> str:
    return (f"`tessel db recover {path} NEW.db` copies every readable record to a new file "
            "(`tessel db check` lists the damage)")


class Database(contextlib.AbstractContextManager):
    """SQLite store of workloads and tuning records; safe for several processes at once.

    With `check_integrity` (the default), an existing file is checked (SQLite's quick_check)
    when opened, and a damaged one is refused. Without `create`, a missing or empty file is
    refused instead of becoming a new database (reading commands: a typo creates nothing). A
    file this process may not write, or whose directory it may not write (SQLite's -wal goes
    there), is opened for reading only (`read_only`): queries work, writes raise
    DatabaseError."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 60.0,
                 check_integrity: bool = True, create: bool = True) -> None:
        self.path = Path(path).expanduser()
        self.busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        self._verified: set[str] = set()  # target keys whose stored fingerprint was compared
        self._file: Path | None = None
        existed = self._check_file(create)
        # a file this process may not write (or not create a -wal beside) is read, not written
        self.read_only = existed and not writable(self.path)
        self._conn = None
        try:
            self._conn = self._connect()
            if existed and check_integrity:
                self._quick_check()
            self._open_schema()
            if not self.read_only:
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = FULL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._file = self.path.resolve()
            OPEN_FILES[self._file] = OPEN_FILES.get(self._file, 0) + 1
        except (sqlite3.Error, DatabaseError) as err:
            if self._conn is not None:
                self._conn.close()  # no -wal/-shm files left beside a refused file
            if isinstance(err, DatabaseError):
                raise
            raise self._sql_error(err, "open") from None

    @classmethod
    def open(cls, database: str | os.PathLike | Database | None, *,
             create: bool) -> Database | None:
        """The database a user names: a Database or None as given, a path opened for writing
        (`create`: a missing file is made) or reading (a missing file is None: nothing stored)."""
        if database is None or isinstance(database, Database):
            return database
        check(isinstance(database, (str, os.PathLike)), "database must be a file path, a "
              f"tessel Database or None, got {type(database).__name__}")
        if not create and status(Path(database).expanduser()) is None:
            return None
        return cls(database, create=create)

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            return connect_read_only(self.path, self.busy_timeout_s)
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_s * 1000)}")
        return conn

    def _check_file(self, create: bool) -> bool:
        """Whether the file exists with content; DatabaseError if it is not a database (or,
        without `create`, if it is missing or empty)."""
        st = status(self.path)
        if st is None:
            check(create, f"no database file {self.path}: it does not exist")
            self._make_directory()
            return False
        if self.path.resolve() in OPEN_FILES:
            return True  # checked when first opened; reading it now would drop its locks
        if create and stat.S_ISREG(st.st_mode) and st.st_size == 0:
            return False  # a new database is written into it
        check(not check_sqlite_file(self.path, st, "; it was left untouched"),
              f"{self.path} is damaged (its SQLite header, the first 100 bytes, is unreadable); "
              f"{recover_hint(self.path)}")
        return True

    def _make_directory(self) -> None:
        blocking = next((p for p in self.path.parents if p.exists() and not p.is_dir()), None)
        check(blocking is None, f"cannot create the directory of {self.path}: {blocking} is a "
                                "file, not a directory")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise DatabaseError(f"cannot create the directory of {self.path}: "
                                f"{err.strerror or err}") from None
        check(os.access(self.path.parent, os.W_OK),
              f"cannot create {self.path}: this process may not write its directory")

    def _quick_check(self) -> None:
        problems = [row[0] for row in self._conn.execute("PRAGMA quick_check(3)")]
        check(problems == ["ok"], f"{self.path} is damaged ({problems[0]}"
                                  f"{'; and more' if len(problems) > 1 else ''}); "
                                  f"{recover_hint(self.path)}")

    def _sql_error(self, err: sqlite3.Error, doing: str) -> DatabaseError:
        """One DatabaseError for an SQLite failure: damage, a full disk, a lock held too
        long, or else."""
        return sql_error(self.path, err, doing, self.busy_timeout_s, recover_hint(self.path))

    def _open_schema(self) -> None:
        tables = {r[0] for r in self._conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        check(not tables or "meta" in tables,
               f"{self.path} is an SQLite file of another program (tables: "
               f"{', '.join(sorted(tables))}); it was left untouched")
        if not tables:
            check(not self.read_only, f"{self.path} is an SQLite file without tables, and "
                                      f"{_READ_ONLY}")
            self._write(_create_schema)
        meta = dict(self._conn.execute("SELECT key, value FROM meta"))
        check(meta.get("format") == FORMAT,
               f"{self.path} is not a tessel database (format {meta.get('format')!r})")
        version = int(meta["version"]) if str(meta.get("version", "")).isdigit() else None
        check(version is not None and version <= SCHEMA_VERSION and
              (version == SCHEMA_VERSION or version in _MIGRATIONS),
              f"{self.path} has tessel database schema version {meta.get('version')}, but this "
              f"tessel reads version {SCHEMA_VERSION}")
        if version < SCHEMA_VERSION:
            check(not self.read_only, f"{self.path} has tessel database schema version "
                                      f"{version}, to be brought up to {SCHEMA_VERSION} by "
                                      f"writing it, but {_READ_ONLY}")
            self._write(lambda c: _migrate(c, version))

    def _write(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `body` in one IMMEDIATE transaction (all or nothing)."""
        check(not self.read_only, f"cannot store anything in {self.path}: {_READ_ONLY}")
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    out = body(self._conn)
                except BaseException:
                    self._rollback()
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as err:
                self._rollback()
                raise self._sql_error(err, "write to") from None
            return out

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")

    def _read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple]:
        return self._reading(lambda c: c.execute(sql, tuple(args)).fetchall())

    def _reading(self, body: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run `body` under the lock; an SQLite failure is the one DatabaseError for a read."""
        with self._lock:
            try:
                return body(self._conn)
            except sqlite3.Error as err:
                raise self._sql_error(err, "read") from None

    def _verify_target(self, target: Target | str | None) -> None:
        """Refuse a target key whose stored fingerprint is not `target`'s own: its records were
        measured elsewhere, whatever the key says (an edited or damaged file)."""
        if not isinstance(target, Target):
            return
        key = target.fingerprint_hash()
        if key in self._verified:
            return
        rows = self._read("SELECT fingerprint_json FROM targets WHERE key = ?", (key,))
        if rows:
            try:
                stored = json.loads(rows[0][0])
            except ValueError:
                stored = rows[0][0]
            check(stored == json.loads(json.dumps(target.fingerprint())),
                  f"{self.path}: the records under this target's key {key} say they were "
                  f"measured on {_describe(stored)}, not on {target} ({target.cpu_model}); "
                  "the file was edited or is damaged, and they are not used")
        self._verified.add(key)

    # ---- writing ----

    def commit_workload(self, func: PrimFunc) -> str:
        """Store `func` (if new); return its key, the structural hash."""
        key = structural_hash(func)
        self._write(lambda c: _insert_workload(c, key, func.name, func_to_json(func)))
        return key

    def commit_target(self, target: Target) -> str:
        """Store `target`'s fingerprint (if new); return its key."""
        key = target.fingerprint_hash()
        self._write(lambda c: _insert_target(c, key, target))
        return key

    def commit(self, records: Iterable[TuningRecord]) -> int:
        """Store a batch in one transaction; return how many were new (duplicates skipped)."""
        rows = [r.row() for r in records]
        return self._write(lambda c: _insert_records(c, rows))

    def commit_results(self, target: Target, candidates: Sequence[MeasureCandidate],
                       results: Sequence[MeasureResult], run: str = "",
                       programs: Sequence[str] | None = None) -> list[TuningRecord]:
        """Store a measured batch (workloads, target and records) in one transaction; `run`
        labels the tuning run that measured it. `programs` (the candidates' structural
        hashes, as claimed) are marked measured, for good."""
        check(len(candidates) == len(results),
               f"{len(candidates)} candidates but {len(results)} results")
        self._verify_target(target)
        target_key = target.fingerprint_hash()
        funcs = {id(c.workload): c.workload for c in candidates}
        keys = {i: structural_hash(f) for i, f in funcs.items()}
        records = [TuningRecord.from_measurement(keys[id(c.workload)], target_key, c, r, run)
                   for c, r in zip(candidates, results)]

        done = [(keys[id(c.workload)], target_key, program, run, os.getpid(),
                 socket.gethostname(), time.time())
                for c, program in zip(candidates, programs or ())]

        def body(c: sqlite3.Connection) -> None:
            _insert_target(c, target_key, target)
            for i, func in funcs.items():
                _insert_workload(c, keys[i], func.name, func_to_json(func))
            _insert_records(c, [r.row() for r in records])
            c.executemany("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, 1)", done)
        self._write(body)
        return records

    # ---- reading ----

    def top_k(self, workload: PrimFunc | str, target: Target | str,
              k: int = 1) -> list[TuningRecord]:
        """The k fastest successful records (the best of each distinct trace/knobs), on this
        target only; measurements the runner flagged as disturbed (a busy machine) are not
        among them."""
        self._verify_target(target)
        rows = self._read(
            f"SELECT {RECORD_COLUMNS} FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "
            "trace_json, knobs_json ORDER BY mean_secs, id) AS rank FROM records WHERE "
            "workload = ? AND target = ? AND error_kind IS NULL AND "
            f"instr(flags, 'disturbed') = 0 AND {NOT_A_CHOICE}) WHERE rank = 1 "
            "ORDER BY mean_secs, id LIMIT ?",
            (_workload_key(workload), target_key(target), int(k)))
        return [TuningRecord.from_row(r) for r in rows]

    def selection(self, workload: PrimFunc | str, target: Target | str) -> TuningRecord | None:
        """The last choice among `workload`'s best programs, while it is current: the one
        tessel.graph.compiler.select chose by timing its model's kernels in sequence, or the one a
        tuning run chose at its end by timing its best few again as a user's process times
        them (record.CHOICES), whichever is newer; None when there is none, or when a tuning
        record arrived after it (the choice did not see that one)."""
        self._verify_target(target)
        key, tkey = _workload_key(workload), target_key(target)
        rows = self._read(f"SELECT {RECORD_COLUMNS} FROM records WHERE workload = ? AND "
                          f"target = ? AND NOT ({NOT_A_CHOICE}) ORDER BY timestamp DESC, "
                          "id DESC LIMIT 1", (key, tkey))
        if not rows:
            return None
        chosen = TuningRecord.from_row(rows[0])
        newer = self._read("SELECT COUNT(*) FROM records WHERE workload = ? AND target = ? AND "
                           f"{NOT_A_CHOICE} AND timestamp > ?",
                           (key, tkey, chosen.timestamp))[0][0]
        return None if newer else chosen

    def records(self, workload: PrimFunc | str,
                target: Target | str | None = None) -> list[TuningRecord]:
        """Every tuning record of a workload (on `target`, if given), errors included, oldest
        first (not the choices: Database.selection)."""
        self._verify_target(target)
        where, args = _filters(workload, target)
        rows = self._read(f"SELECT {RECORD_COLUMNS} FROM records{where} ORDER BY id", args)
        return [TuningRecord.from_row(r) for r in rows]

    def new_records(self, workload: PrimFunc | str, target: Target | str,
                    after: int = 0) -> tuple[int, list[TuningRecord]]:
        """(the last id, the records of `workload` on `target` stored after id `after`, oldest
        first): what other runs sharing the file committed since a run last looked."""
        self._verify_target(target)
        where, args = _filters(workload, target)
        rows = self._read(f"SELECT id, {RECORD_COLUMNS} FROM records{where} AND id > ? "
                          "ORDER BY id", [*args, int(after)])
        last = rows[-1][0] if rows else int(after)
        return last, [TuningRecord.from_row(r[1:]) for r in rows]

    def claim(self, workload: PrimFunc | str, target: Target, programs: Sequence[str],
              run: str, budget: int | None = None) -> list[bool]:
        """Claim programs (structural hashes of scheduled programs) of a workload for `run` to
        measure; True for each granted: one no run has measured, and no other live run is
        measuring (a claim of a process that is gone, or older than CLAIM_TTL_S, is taken
        over). Runs sharing the file so never measure a program twice. With `budget`, no
        claim is granted that would make the workload's `trials` exceed it (runs sharing a
        budget so never overshoot it, checked in the same transaction)."""
        self._verify_target(target)
        keys = (_workload_key(workload), target_key(target))
        me = (run, os.getpid(), socket.gethostname(), time.time())

        def body(c: sqlite3.Connection) -> list[bool]:
            room = budget - _trials(c, *keys) if budget is not None else len(programs)
            granted = []
            for program in programs:
                held = c.execute("SELECT run, pid, host, claimed_at, done FROM claims WHERE "
                                 "workload = ? AND target = ? AND program = ?",
                                 (*keys, program)).fetchone()
                mine = held is not None and not held[4] and held[0] == run  # counted already
                ok = mine or room > 0 and (held is None or not held[4] and _stale(*held[1:4]))
                if ok:
                    c.execute("INSERT OR REPLACE INTO claims VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                              (*keys, program, *me))
                    room -= not mine
                granted.append(ok)
            return granted
        return self._write(body)

    def trials(self, workload: PrimFunc | str, target: Target | str) -> int:
        """The trials of `workload` on `target` stored or under way: its records, plus the
        programs live runs have claimed and not yet committed (what a shared budget counts)."""
        self._verify_target(target)
        keys = (_workload_key(workload), target_key(target))
        return self._reading(lambda c: _trials(c, *keys))

    def release(self, workload: PrimFunc | str, target: Target, programs: Sequence[str],
                run: str) -> None:
        """Give up `run`'s claims on programs it will not measure after all (claims already
        committed are kept): any run may then measure them."""
        keys = (_workload_key(workload), target_key(target))

        def body(c: sqlite3.Connection) -> None:
            c.executemany("DELETE FROM claims WHERE workload = ? AND target = ? AND program = ? "
                          "AND run = ? AND done = 0", [(*keys, p, run) for p in programs])
        if programs:
            self._write(body)

    def count(self, workload: PrimFunc | str | None = None,
              target: Target | str | None = None) -> int:
        self._verify_target(target)
        where, args = _filters(workload, target)
        return self._read(f"SELECT COUNT(*) FROM records{where}", args)[0][0]

    def workloads(self, name: str | None = None) -> list[Workload]:
        """Every workload stored (those whose program is called `name`, if given)."""
        if name is None:
            rows = self._read("SELECT key, func_json FROM workloads ORDER BY rowid")
        else:
            rows = self._read("SELECT key, func_json FROM workloads WHERE name = ? ORDER BY "
                              "rowid", (name,))
        return [Workload(key, func_from_json(text)) for key, text in rows]

    def workload(self, key: str) -> PrimFunc:
        rows = self._read("SELECT func_json FROM workloads WHERE key = ?", (key,))
        check(bool(rows), f"no workload {key!r} in {self.path}")
        return func_from_json(rows[0][0])

    def targets(self) -> dict[str, str]:
        """Fingerprint key -> readable description of every target stored."""
        return dict(self._read("SELECT key, description FROM targets ORDER BY rowid"))

    # ---- exchange ----

    def export_jsonl(self, path: str | Path) -> int:
        """Write workloads, targets and records as JSON lines; return the number of records."""
        return self._reading(lambda c: export_lines(c, Path(path)))

    def import_jsonl(self, path: str | Path) -> "Imported":
        """Read JSON lines written by export_jsonl (in one transaction); return how many
        records were new (an int; `.read` says how many the file held)."""
        workloads, targets, rows = parse_lines(Path(path))

        def body(c: sqlite3.Connection) -> int:
            c.executemany("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?)", workloads)
            c.executemany("INSERT OR IGNORE INTO targets VALUES (?, ?, ?)", targets)
            return _insert_records(c, rows)
        return Imported(self._write(body), read=len(rows))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
            count = OPEN_FILES.pop(self._file, 0) - 1 if self._file is not None else 0
            if count > 0:
                OPEN_FILES[self._file] = count
            self._file = None

    def __exit__(self, *exc: object) -> None:
        self.close()


class Imported(int):
    """How many records an import added; `read`: how many the file held."""

    def __new__(cls, new: int, read: int) -> "Imported":
        out = super().__new__(cls, new)
        out.read = read
        return out


def _trials(c: sqlite3.Connection, workload: str, target: str) -> int:
    """Records of a workload on a target, plus the claims of live runs not yet committed."""
    where, args = _filters(workload, target)
    stored = c.execute(f"SELECT COUNT(*) FROM records{where}", args).fetchone()[0]
    pending = c.execute("SELECT pid, host, claimed_at FROM claims WHERE workload = ? AND "
                        "target = ? AND done = 0", (workload, target)).fetchall()
    return stored + sum(not _stale(*row) for row in pending)


def _stale(pid: int, host: str, claimed_at: float) -> bool:
    """A claim nobody will commit: its process is gone (this host), or it is too old."""
    if time.time() - claimed_at > CLAIM_TTL_S:
        return True
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def _describe(fingerprint: Any) -> str:
    if isinstance(fingerprint, dict):
        return (f"{fingerprint.get('cpu_model', '?')} ({fingerprint.get('arch', '?')}, "
                f"{fingerprint.get('cores', '?')} cores)")
    return repr(fingerprint)[:80]


def _filters(workload: PrimFunc | str | None, target: Target | str | None) -> tuple[str, list]:
    """WHERE clauses for a workload and a target, and never a choice (a program timed again
    by another protocol: Database.selection's)."""
    clauses, args = [NOT_A_CHOICE], []
    if workload is not None:
        clauses.append("workload = ?")
        args.append(_workload_key(workload))
    if target is not None:
        clauses.append("target = ?")
        args.append(target_key(target))
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def _insert_workload(c: sqlite3.Connection, key: str, name: str, func_json: str) -> None:
    c.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?)", (key, name, func_json))


def _insert_target(c: sqlite3.Connection, key: str, target: Target) -> None:
    c.execute("INSERT OR IGNORE INTO targets VALUES (?, ?, ?)",
              (key, _target_description(target), json.dumps(target.fingerprint())))


def _migrate(c: sqlite3.Connection, version: int) -> None:
    """Bring a database of an older schema version to this one (in the caller's transaction;
    another process may have done it meanwhile)."""
    now = int(c.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()[0])
    while now < SCHEMA_VERSION:
        for statement in _MIGRATIONS[now]:
            c.execute(statement)
        now += 1
    c.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION),))


def _create_schema(c: sqlite3.Connection) -> None:
    for statement in filter(str.strip, _SCHEMA.split(";")):
        c.execute(statement)
    c.executemany("INSERT OR IGNORE INTO meta VALUES (?, ?)",
                  [("format", FORMAT), ("version", str(SCHEMA_VERSION))])


def _insert_records(c: sqlite3.Connection, rows: Sequence[tuple]) -> int:
    """Insert record rows (duplicates skipped); every workload must be stored already."""
    wanted = sorted({row[0] for row in rows})
    marks = ", ".join("?" * len(wanted))
    known = {r[0] for r in c.execute(f"SELECT key FROM workloads WHERE key IN ({marks})", wanted)}
    unknown = [key for key in wanted if key not in known]
    check(not unknown, f"records for unknown workload(s) {', '.join(k[:16] for k in unknown)}; "
                       "commit_workload() first")
    before = c.total_changes
    c.executemany(
        f"INSERT OR IGNORE INTO records (digest, {RECORD_COLUMNS}, mean_secs) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(record_digest(row), *row, _mean(row)) for row in rows])
    return c.total_changes - before


def _mean(row: tuple) -> float | None:
    costs = json.loads(row[4])
    return None if row[5] is not None or not costs else sum(costs) / len(costs)


__all__ = ["Database", "FORMAT", "Imported", "SCHEMA_VERSION", "recover_hint"]
