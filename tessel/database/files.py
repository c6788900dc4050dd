"""What a file named as a database is, how to read one without changing it, and what an
SQLite failure means, each told in one line.

    st = status(path)                      # None: nothing there (a name the system refuses
                                           # raises DatabaseError)
    check_sqlite_file(path, st)            # DatabaseError saying what the file is, unless
                                           # SQLite's; True: its header alone is damaged
    conn = connect_read_only(path)         # never writes; leaves no -wal/-shm beside it
    raise sql_error(path, err, "read")     # damage, a full disk, a lock, an I/O error

SQLite answers a JSON-lines file with "file is not a database" (as it answers damage), and
/dev/null with "disk I/O error", so files are told apart before SQLite opens them; and an
SQLite failure is told by its result code: a full disk or an I/O error is not damage.
"""
from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path

from tessel.database.record import DatabaseError

SQLITE_MAGIC = b"SQLite format 3\x00"
HEADER_BYTES = 100  # SQLite's file header; page 1's b-tree header follows it
_TABLE_PAGES = (0x05, 0x0D)  # interior and leaf pages of a table b-tree (sqlite_master's root)
_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket"}
# files this process holds open through a Database, with how many connections: closing any
# descriptor of a file drops every POSIX lock this process holds on it, SQLite's included
# (sqlite.org/howtocorrupt.html, 2.2), so an open file's header is never read directly
OPEN_FILES: dict[Path, int] = {}
# SQLite's primary result codes (sqlite.org/rescode.html)
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _NOTADB = 5, 6, 8, 10, 11, 13, 26
_NEARLY_FULL = 1 << 20  # bytes left on a file system that count as none (SQLite needs pages)


def status(path: Path) -> os.stat_result | None:
    """`path`'s status (links followed); None when nothing is there. DatabaseError for a name
    the system refuses (too long, a folder that may not be searched, ...)."""
    try:
        return path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        raise DatabaseError(unusable_name(path, err)) from None


def unusable_name(path: Path, err: OSError) -> str:
    """One line for an OSError on the name `path` itself."""
    if err.errno == errno.ENAMETOOLONG:
        text = str(path)
        short = text if len(text) <= 80 else f"{text[:48]}...{text[-24:]}"
        return (f"the file name {short} is too long for the file system ({len(path.name)} "
                f"characters in its last part, {len(text)} in all)")
    return f"cannot use {path}: {err.strerror or err}"


def writable(path: Path) -> bool:
    """Whether this process may write `path` and create files beside it (SQLite's -wal)."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)


def read_head(path: Path, size: int = 512) -> bytes:
    """The first bytes of a file (one no Database of this process has open: OPEN_FILES)."""
    try:
        with open(path, "rb") as file:
            return file.read(size)
    except OSError as err:
        raise DatabaseError(f"cannot read {path}: {err.strerror or err}") from None


def check_sqlite_file(path: Path, st: os.stat_result, tail: str = "") -> bool:
    """DatabaseError saying what the existing file at `path` is (`tail` appended to it) unless
    it is an SQLite database; whether its header alone is damaged (header_damaged)."""
    if stat.S_ISDIR(st.st_mode):
        raise DatabaseError(f"{path} is a directory, not a database file{tail}")
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise DatabaseError(f"{path} is {kind}, not a database file{tail}")
    if st.st_size == 0:
        raise DatabaseError(f"{path} is empty (0 bytes), not a database{tail}")
    if path.resolve() in OPEN_FILES:
        return False  # opened as a database by this process; reading it would drop its locks
    head = read_head(path)
    if head.startswith(SQLITE_MAGIC) or header_damaged(head):
        return not head.startswith(SQLITE_MAGIC)
    raise DatabaseError(f"{path} is not an SQLite database ({_looks_like(head)}){tail}")


def header_damaged(head: bytes) -> bool:
    """Whether a file without SQLite's magic is an SQLite database whose 100-byte header
    alone is damaged: page 1's b-tree header, right after it, is sound (a table page with
    cells), and the header is not text."""
    if len(head) < HEADER_BYTES + 8 or head.startswith(SQLITE_MAGIC) or _is_text(head[:100]):
        return False
    kind, cells = head[HEADER_BYTES], int.from_bytes(head[103:105], "big")
    content = int.from_bytes(head[105:107], "big") or 65536
    return kind in _TABLE_PAGES and 0 < cells and HEADER_BYTES + 8 + 2 * cells <= content


def _is_text(data: bytes) -> bool:
    if b"\x00" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start >= len(data) - 3  # a character cut by the end of what was read
    return True


def _looks_like(head: bytes) -> str:
    if _is_text(head):
        if head.lstrip()[:1] == b"{":
            return "it looks like JSON lines: use `tessel db import`"
        return "it is a text file"
    return f"it starts with bytes {head[:8].hex(' ')}, not SQLite's header"


def has_log(path: Path) -> bool:
    """Whether a writer's log (-wal, or a rollback -journal) is beside `path`: what was
    committed last may be in it, not yet in the file."""
    return any(Path(f"{path}{end}").exists() for end in ("-wal", "-journal"))


def connect_read_only(path: Path, timeout_s: float = 60.0) -> sqlite3.Connection:
    """A connection that reads `path` and cannot change it, and leaves no -wal/-shm beside it:
    with a writer's log beside the file, read-only through the log (the files are there
    already); when this process may write it, with the usual locks (a writer may start) and
    every statement refused a write (SQLite removes its -wal/-shm on closing); else (a file
    or directory this process cannot write, no log) as an immutable file, without locks."""
    if has_log(path):
        query = "mode=ro"
    elif writable(path):
        query = "mode=rw"
    else:
        query = "mode=ro&immutable=1"
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?{query}", uri=True,
                               timeout=timeout_s, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA query_only = ON")
    except sqlite3.Error as err:
        raise sql_error(path, err, "open", timeout_s) from None
    return conn


def sql_error(path: Path, err: sqlite3.Error, doing: str, busy_timeout_s: float = 60.0,
              hint: str = "") -> DatabaseError:
    """One DatabaseError for an SQLite failure while `doing` (open, read, write to) `path`:
    damage (with `hint`, the way out), a full disk, a lock held too long, or else."""
    text, code = str(err), _code(err)
    if damage(err):
        return DatabaseError(f"{path} is damaged ({text}){'; ' + hint if hint else ''}")
    free = free_bytes(path)
    no_space = free is not None and free < _NEARLY_FULL
    if code == _FULL or (code == _IOERR and no_space):
        where = (f"the file system holding it is full ({free} bytes free; SQLite: {text})"
                 if no_space else "the file system holding it is full, or the file reached "
                                  f"its size limit (SQLite: {text})")
        return DatabaseError(f"cannot {doing} {path}: {where}; free some space and run again: "
                             "the records stored before are kept")
    if code in (_BUSY, _LOCKED):
        return DatabaseError(f"{path} stayed locked by another process for "
                             f"{busy_timeout_s:g} s ({doing}: {text})")
    if code == _READONLY:
        return DatabaseError(f"cannot {doing} {path}: it may only be read ({text})")
    if code == _IOERR:
        name = getattr(err, "sqlite_errorname", "SQLITE_IOERR")
        return DatabaseError(f"cannot {doing} {path}: the system failed to read or write it "
                             f"({text}, {name}); the file is not known to be damaged "
                             "(`tessel db check` tells)")
    return DatabaseError(f"cannot {doing} {path}: {text}")


def damage(err: sqlite3.Error) -> bool:
    """Whether `err` says the file is damaged (not busy, full, read-only or an I/O error)."""
    return _code(err) in (_CORRUPT, _NOTADB)


def _code(err: sqlite3.Error) -> int | None:
    """SQLite's primary result code of `err` (told from its text before Python 3.11)."""
    code = getattr(err, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF
    text = str(err).lower()
    for words, primary in ((("malformed", "corrupt"), _CORRUPT), (("not a database",), _NOTADB),
                           (("is full",), _FULL), (("disk i/o",), _IOERR),
                           (("locked",), _LOCKED), (("busy",), _BUSY),
                           (("readonly",), _READONLY)):
        if any(word in text for word in words):
            return primary
    return None


def free_bytes(path: Path) -> int | None:
    """Bytes this process may still use on the file system holding `path` (None: unknown)."""
    try:
        fs = os.statvfs(path.parent)
    except OSError:
        return None
    return fs.f_bavail * fs.f_frsize


__all__ = ["HEADER_BYTES", "OPEN_FILES", "SQLITE_MAGIC", "check_sqlite_file",
           "connect_read_only", "damage", "free_bytes", "has_log", "header_damaged", "read_head",
           "sql_error", "status", "unusable_name", "writable"]
