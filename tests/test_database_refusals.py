"""A file that is no database is said to be what it is, at once; recover is bounded whatever
the damage (a zeroed header is rebuilt); a full disk and an I/O error are not called damage;
a database that may only be read is read; reading creates and leaves no file (issue 38)."""
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tessel import cli, ops
from tessel.database import Database, DatabaseError, TuningRecord
from tessel.database.recover import check_file, recover
from tessel.tuning import TuneError, apply_best

from test_database_damage import FUNC, HOST, damage, many_records

ROOT = Path(__file__).resolve().parents[1]


class TooManyQueries(BaseException):
    """Raised past a query budget: not an sqlite3.Error, so no recovery loop swallows it."""


@pytest.fixture
def query_limit(monkeypatch):
    """Every SQLite connection opened from now on raises TooManyQueries past `limit` queries
    in all: a hang shows up as this failure, not as a test that never ends."""
    count, real = [0], sqlite3.connect
    limit = 20_000

    class Counted(sqlite3.Connection):
        def execute(self, *args, **kwargs):
            count[0] += 1
            if count[0] > limit:
                raise TooManyQueries(f"more than {limit} queries")
            return super().execute(*args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: real(*a, factory=Counted, **k))
    return count


def beside(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.glob(path.name + "-*"))


@pytest.fixture
def good(tmp_path) -> Path:
    with Database(tmp_path / "good.db") as db:
        many_records(db, 8)
        db.export_jsonl(tmp_path / "good.jsonl")
    return tmp_path / "good.db"


def not_databases(folder: Path) -> dict[str, tuple[Path, str]]:
    (folder / "notes.txt").write_text("my notes\n" * 20)
    (folder / "blob.bin").write_bytes(bytes(range(256)) * 4)
    (folder / "empty.db").write_bytes(b"")
    return {
        "jsonl": (folder / "good.jsonl", "is not an SQLite database (it looks like JSON lines: "
                                         "use `tessel db import`)"),
        "text": (folder / "notes.txt", "is not an SQLite database (it is a text file)"),
        "binary": (folder / "blob.bin", "is not an SQLite database (it starts with bytes 00 01 "
                                        "02 03 04 05 06 07, not SQLite's header)"),
        "empty": (folder / "empty.db", "is empty (0 bytes), not a database"),
        "device": (Path("/dev/null"), "is a character device, not a database file"),
        "directory": (folder, "is a directory, not a database file"),
    }


@pytest.mark.parametrize("kind", ["jsonl", "text", "binary", "empty", "device", "directory"])
def test_recover_and_check_refuse_at_once_a_file_that_is_no_database(good, kind, query_limit):
    path, message = not_databases(good.parent)[kind]
    for act in (lambda: recover(path, good.parent / "new.db"), lambda: check_file(path)):
        with pytest.raises(DatabaseError) as err:
            act()
        assert str(err.value) == f"{path} {message}"
    assert not (good.parent / "new.db").exists() and query_limit[0] == 0


def test_the_cli_says_what_a_file_that_is_no_database_is(good, capsys, query_limit):
    jsonl = good.parent / "good.jsonl"
    said = f"{jsonl} is not an SQLite database (it looks like JSON lines: use `tessel db import`)"
    for argv, line in ((["db", "recover", str(jsonl), str(good.parent / "new.db")],
                        f"tessel db: {said}"),
                       (["db", "check", str(jsonl)], f"tessel db: {said}"),
                       (["db", "check", "/dev/null"],
                        "tessel db: /dev/null is a character device, not a database file"),
                       (["best", "GMM", "--db", "/dev/null"], "tessel best: /dev/null is a "
                        "character device, not a database file; it was left untouched")):
        assert cli.main(argv) == 2
        assert capsys.readouterr().err == line + "\n"
    assert not (good.parent / "new.db").exists()


def zero_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[:100] = bytes(100)
    path.write_bytes(bytes(data))


def test_a_zeroed_header_is_found_and_recover_rebuilds_it(tmp_path, capsys, query_limit):
    path = tmp_path / "zero.db"
    with Database(path) as db:
        stored = many_records(db, 600)
    zero_header(path)
    before = path.read_bytes()
    query_limit[0] = 0
    with pytest.raises(DatabaseError, match=r"zero.db is damaged \(its SQLite header, the first "
                                            r"100 bytes, is unreadable\); `tessel db recover "):
        Database(path)
    assert check_file(path) == ["its SQLite header (the first 100 bytes) is damaged: SQLite "
                                "cannot read it"]
    assert cli.main(["db", "check", str(path)]) == 1
    assert "tessel db recover" in capsys.readouterr().err
    report = recover(path, tmp_path / "saved.db")
    assert (report.records, report.lost_records, report.workloads) == (600, 0, 1)
    assert path.read_bytes() == before and beside(path) == []
    with Database(tmp_path / "saved.db") as saved:
        assert saved.records(FUNC, HOST) == stored


def test_nothing_readable_is_said_in_one_line(tmp_path, query_limit):
    path = tmp_path / "lost.db"
    with Database(path) as db:
        many_records(db, 50)
    zero_header(path)
    data = bytearray(path.read_bytes())
    data[108:4096] = b"\xff" * (4096 - 108)  # page 1's cells: the schema itself
    path.write_bytes(bytes(data))
    with pytest.raises(DatabaseError, match=r"nothing could be recovered from .*lost.db: its "
                                            "SQLite header is damaged, and its schema reads at "
                                            "no page size"):
        recover(path, tmp_path / "saved.db")
    assert not (tmp_path / "saved.db").exists()


def test_recover_is_bounded_when_no_last_row_can_be_read(tmp_path, query_limit):
    """The records table's root page and both its indexes damaged: no query finds the last
    rowid, and every row is out of reach; recover still ends, saying so."""
    path = tmp_path / "roots.db"
    with Database(path) as db:
        many_records(db, 2000)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        roots = [r for (r,) in conn.execute("SELECT rootpage FROM sqlite_master WHERE tbl_name"
                                            " = 'records'")]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    for root in roots:
        data[(root - 1) * size:root * size] = b"\xff" * size
    path.write_bytes(bytes(data))
    query_limit[0] = 0
    report = recover(path, tmp_path / "saved.db")
    assert (report.records, report.workloads, report.targets) == (0, 1, 1)
    # every row lost; with no last rowid known, rowids up to a bound from the file are probed,
    # and the count may include a few that never held a record
    assert 2000 <= report.lost_records <= 2200 and query_limit[0] < 20_000


def test_a_full_database_or_disk_is_not_called_damage(tmp_path):
    path = tmp_path / "full.db"
    with Database(path) as db:
        stored = many_records(db, 5)
        pages = db._conn.execute("PRAGMA page_count").fetchone()[0]
        db._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite then says SQLITE_FULL
        key = db.commit_workload(FUNC)
        with pytest.raises(DatabaseError) as err:
            db.commit([TuningRecord(key, HOST.fingerprint_hash(), None, ("x" * 500, i), (1.0,))
                       for i in range(400)])
    assert str(err.value) == (
        f"cannot write to {path}: the file system holding it is full, or the file reached its "
        "size limit (SQLite: database or disk is full); free some space and run again: the "
        "records stored before are kept")
    with Database(path) as db:
        assert db.records(FUNC, HOST) == stored


_WRITE_PAST_A_LIMIT = textwrap.dedent("""
    import os, resource, signal, sys
    from tessel.database import Database, DatabaseError, TuningRecord
    from test_database_damage import FUNC, HOST, many_records
    path, free = sys.argv[1], int(sys.argv[2])
    if free >= 0:  # the file system says how much is left: this much
        real = os.statvfs
        os.statvfs = lambda p: os.statvfs_result((4096, 4096, 1 << 20, 0, free // 4096,
                                                  1000, 0, 0, 0, 255))
    db = Database(path)
    many_records(db, 5)
    key = db.commit_workload(FUNC)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail (EFBIG)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 8192,
                                               resource.RLIM_INFINITY))
    try:
        for b in range(100):
            db.commit([TuningRecord(key, HOST.fingerprint_hash(), None, ("x" * 100, b, i),
                                    (1.0,)) for i in range(50)])
    except DatabaseError as err:
        print(err)
""")


@pytest.mark.parametrize("free, said", [
    (-1, "the system failed to read or write it (disk I/O error, SQLITE_IOERR_WRITE); the "
         "file is not known to be damaged (`tessel db check` tells)"),
    (0, "the file system holding it is full (0 bytes free; SQLite: disk I/O error); free "
        "some space and run again: the records stored before are kept")])
def test_an_io_error_is_not_damage_and_on_a_full_disk_says_so(tmp_path, free, said):
    """A real SQLITE_IOERR (a write past the process's file size limit); with the file system
    reporting no space left, it is the full disk a failing write on one gives."""
    if sys.version_info < (3, 11):
        pytest.skip("SQLite's error codes reach Python from 3.11 on")
    path = tmp_path / "io.db"
    out = subprocess.run([sys.executable, "-c", _WRITE_PAST_A_LIMIT, str(path), str(free)],
                         capture_output=True, text=True, cwd=ROOT / "tests",
                         env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert out.stdout == f"cannot write to {path}: {said}\n", out.stderr
    with Database(path) as db:
        assert db.count(FUNC, HOST) >= 5 and check_file(path) == []


def only_readable(monkeypatch, folder: Path) -> None:
    """This process may not write in `folder` (as root ignores file modes, os.access says so)."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and str(Path(path).resolve()).startswith(str(folder.resolve())):
            return False
        return real(path, mode, *args, **kwargs)
    monkeypatch.setattr(os, "access", access)


def test_a_database_that_may_only_be_read_is_read_and_not_written(good, monkeypatch, capsys):
    good.chmod(0o444)
    before = good.read_bytes()
    only_readable(monkeypatch, good.parent)
    with Database(good) as db:
        assert db.read_only and db.count(FUNC, HOST) == 8 and db.top_k(FUNC, HOST)
        assert beside(good) == []  # read as it is: no -wal/-shm made
        with pytest.raises(DatabaseError, match=r"cannot store anything in .*good.db: this "
                                                "process may not write it or its directory"):
            many_records(db, 1)
    assert cli.main(["best", "GMM", "--db", str(good)]) == 0
    assert "GFLOP/s" in capsys.readouterr().out
    assert cli.main(["db", "export", str(good), str(good.parent / "out" / "all.jsonl")]) == 0
    assert good.read_bytes() == before and beside(good) == []


_READ = textwrap.dedent("""
    import sys
    from tessel.database import Database
    from test_database_damage import FUNC, HOST
    with Database(sys.argv[1]) as db:
        print(db.read_only, db.count(FUNC, HOST), len(db.top_k(FUNC, HOST, k=3)))
""")


def as_nobody(argv: list[str]) -> tuple[list[str], dict]:
    """`argv` run as the user nobody when this is root (setpriv where there is one: it can
    start an interpreter root installed under /root), as it is otherwise."""
    if os.geteuid() != 0:
        return argv, {}
    if shutil.which("setpriv"):
        return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv], {}
    return argv, {"user": 65534, "group": 65534, "extra_groups": []}


def test_another_user_reads_a_read_only_file_in_a_read_only_directory(good):
    """The honest case: a process that really may not write (root runs it as nobody)."""
    folder = Path(tempfile.mkdtemp(prefix="tessel-ro-"))
    try:
        (folder / "r.db").write_bytes(good.read_bytes())
        (folder / "r.db").chmod(0o444)
        folder.chmod(0o555)
        env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
        probe, user = as_nobody([sys.executable, "-c", "import numpy"])
        try:
            reach = subprocess.run(probe, capture_output=True, text=True, env=env, **user)
        except PermissionError:
            pytest.skip("cannot start this interpreter as another user here")
        if reach.returncode != 0:
            # e.g. packages installed under a home directory only its owner may enter
            pytest.skip("another user cannot import this interpreter's packages here: "
                        + (reach.stderr.strip().splitlines() or ["?"])[-1])
        argv, user = as_nobody([sys.executable, "-c", _READ, str(folder / "r.db")])
        out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT / "tests",
                             env=env, **user)
        assert out.stdout == "True 8 3\n", out.stderr
        assert sorted(p.name for p in folder.iterdir()) == ["r.db"]
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_reading_commands_leave_nothing_beside_their_source(good, tmp_path):
    damaged = tmp_path / "damaged.db"
    with Database(damaged) as db:
        many_records(db, 600)
    damage(damaged)
    for source in (good, damaged):
        before = (source.read_bytes(), source.stat().st_mtime_ns)
        recover(source, tmp_path / f"{source.stem}.saved.db")
        check_file(source)
        assert beside(source) == [] and (source.read_bytes(), source.stat().st_mtime_ns) == before
    assert cli.main(["db", "export", str(good), str(tmp_path / "out.jsonl")]) == 0
    assert cli.main(["db", "export", str(tmp_path / "typo.db"), str(tmp_path / "t.jsonl")]) == 2
    assert beside(good) == [] and not (tmp_path / "typo.db").exists()


LONG = "a" * 300 + ".db"


@pytest.mark.parametrize("argv", [["tune", "GMM", "--trials", "1", "--db", "{dir}/" + LONG],
                                  ["best", "GMM", "--db", "{dir}/" + LONG],
                                  ["db", "check", "{dir}/" + LONG],
                                  ["db", "recover", "{dir}/" + LONG, "{dir}/new.db"],
                                  ["db", "export", "{dir}/good.db", "{dir}/" + LONG],
                                  ["db", "import", "{dir}/good.db", "{dir}/" + LONG]])
def test_a_name_too_long_is_one_line(good, argv, capsys):
    code = cli.main([a.format(dir=good.parent) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert (" is too long for the file system (303 characters in its last part" in err
            or "no such file to import" in err), err
    with pytest.raises(DatabaseError, match="is too long for the file system"):
        Database(good.parent / LONG)
    assert sorted(p.name for p in good.parent.iterdir()) == ["good.db", "good.jsonl"]


def test_apply_best_with_a_missing_database_creates_none(tmp_path):
    func, typo = ops.matmul(8, 8, 8), tmp_path / "typo.db"
    said = (f"the database {typo} does not exist, so it holds no valid tuning record of "
            "matmul for target")
    with pytest.warns(UserWarning, match=said):
        mod = apply_best(func, HOST, typo)
    assert mod.func is func
    with pytest.raises(TuneError, match=said):
        apply_best(func, HOST, str(typo), strict=True)
    assert list(tmp_path.iterdir()) == []
