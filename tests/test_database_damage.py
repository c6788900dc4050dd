"""A damaged database is refused with the way out, `recover` saves every readable record,
records whose stored fingerprint is another machine's are not trusted by their key, JSON-lines
files cut short are rejected, and a batch the database refuses mid-run is saved beside it."""
import json
import sqlite3
import struct

import pytest

from tessel import Schedule, Target, ops
from tessel.database import Database, DatabaseError, TuningRecord
from tessel.database.recover import check_file, recover
from tessel.ir import structural_hash
from tessel.space import default_postprocs, final_func
from tessel.tuning import TuneError

from test_tune import FakeRunner, fake_tune

HOST = Target("host")
FUNC = ops.SUITE["GMM"]


def many_records(db: Database, n: int) -> list[TuningRecord]:
    """n distinct records of GMM on this host (8 traces, distinct costs)."""
    key, target = db.commit_workload(FUNC), db.commit_target(HOST)
    traces = []
    for factor in (1, 2, 4, 8, 16, 32, 64, 128):
        sch = Schedule(FUNC)
        _, j, _ = sch.get_loops(sch.get_block("C"))
        sch.split(j, factors=[None, factor])
        traces.append(sch.trace.to_json())
    records = [TuningRecord(key, target, traces[i % 8], None, (1e-3 + i * 1e-7,),
                            timestamp=float(i), run="damage test") for i in range(n)]
    assert db.commit(records) == n
    return records


def leaf_pages(data: bytes, page: int, size: int) -> list[int]:
    """The leaf pages of the table B-tree rooted at `page` (1-based), read from the file."""
    base = (page - 1) * size + (100 if page == 1 else 0)
    kind, cells = data[base], struct.unpack(">H", data[base + 3:base + 5])[0]
    if kind == 0x0D:
        return [page]
    assert kind == 0x05, kind  # an interior table page: children, then the rightmost one
    pointers = [struct.unpack(">H", data[base + 12 + 2 * i:base + 14 + 2 * i])[0]
                for i in range(cells)]
    page_start = (page - 1) * size
    children = [struct.unpack(">I", data[page_start + p:page_start + p + 4])[0] for p in pointers]
    children.append(struct.unpack(">I", data[base + 8:base + 12])[0])
    return [leaf for child in children for leaf in leaf_pages(data, child, size)]


def damage(path, pages: int = 2) -> int:
    """Overwrite `pages` leaf pages of the records table in the middle; return the records
    they held."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'records'")
        root = root.fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    data = bytearray(path.read_bytes())
    leaves = leaf_pages(bytes(data), root, size)
    middle = leaves[len(leaves) // 2: len(leaves) // 2 + pages]
    lost = 0
    for page in middle:
        start = (page - 1) * size
        lost += struct.unpack(">H", data[start + 3:start + 5])[0]
        data[start:start + size] = b"\xff" * size
    path.write_bytes(bytes(data))
    return lost


def test_a_damaged_database_is_refused_and_recover_keeps_every_readable_record(tmp_path):
    path = tmp_path / "tessel.db"
    with Database(path) as db:
        stored = many_records(db, 2000)
    lost = damage(path)
    assert lost > 0
    before = path.read_bytes()
    with pytest.raises(DatabaseError, match=r"tessel.db is damaged \(.*\); `tessel db recover "):
        Database(path)
    assert check_file(path) and path.read_bytes() == before
    report = recover(path, tmp_path / "saved.db")
    assert path.read_bytes() == before  # the damaged file is read, never written
    assert (report.records, report.lost_records) == (len(stored) - lost, lost)
    assert (report.workloads, report.targets, report.lost_workloads) == (1, 1, 0)
    with Database(tmp_path / "saved.db") as saved:
        kept = saved.records(FUNC, HOST)
    by_time = {r.timestamp: r for r in stored}
    assert len(kept) == len(stored) - lost and all(by_time[r.timestamp] == r for r in kept)
    assert check_file(tmp_path / "saved.db") == []
    with pytest.raises(DatabaseError, match="exists; recover writes a new file"):
        recover(path, tmp_path / "saved.db")


def test_records_under_this_key_with_another_fingerprint_are_refused(tmp_path):
    path = tmp_path / "tessel.db"
    with Database(path) as db:
        many_records(db, 3)
    edited = dict(HOST.fingerprint(), cpu_model="Some Other CPU 9000")
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE targets SET fingerprint_json = ?", (json.dumps(edited),))
    conn.close()
    with Database(path) as db:
        for query in (lambda: db.top_k(FUNC, HOST), lambda: db.records(FUNC, HOST),
                      lambda: db.count(FUNC, HOST)):
            with pytest.raises(DatabaseError, match="measured on Some Other CPU 9000"):
                query()
        assert db.count(FUNC) == 3  # by key alone (no target) nothing is claimed


def test_jsonl_cut_short_or_not_text_is_refused_and_imports_nothing(tmp_path):
    with Database(tmp_path / "a.db") as a:
        many_records(a, 5)
        assert a.export_jsonl(tmp_path / "all.jsonl") == 5
    lines = (tmp_path / "all.jsonl").read_text().splitlines(keepends=True)
    cases = {
        "lines.jsonl": ("".join(lines[:-2]), "has no end line: the file was cut short after 4 "
                                            "records; nothing imported"),
        "mid.jsonl": ("".join(lines[:-2]) + lines[-2][:40], "ends in the middle of it"),
        "binary.jsonl": (None, "is not a tessel records file (not UTF-8 text"),
        "empty.jsonl": ("", "is empty; nothing imported"),
    }
    with Database(tmp_path / "b.db") as b:
        for name, (text, message) in cases.items():
            path = tmp_path / name
            if text is None:
                path.write_bytes(bytes(range(256)) * 4)
            else:
                path.write_text(text)
            with pytest.raises(DatabaseError, match=message.replace("(", r"\(")):
                b.import_jsonl(path)
            assert b.count() == 0
        added = b.import_jsonl(tmp_path / "all.jsonl")
        assert (int(added), added.read) == (5, 5)
        with pytest.raises(DatabaseError, match="is a directory"):
            b.export_jsonl(tmp_path)


def test_version_1_exports_import_with_a_warning(tmp_path):
    with Database(tmp_path / "a.db") as a:
        many_records(a, 2)
        a.export_jsonl(tmp_path / "v2.jsonl")
    lines = (tmp_path / "v2.jsonl").read_text().splitlines()
    old = [json.dumps({"type": "tessel.records", "version": 1})] + lines[1:-1]
    (tmp_path / "v1.jsonl").write_text("\n".join(old) + "\n")
    with Database(tmp_path / "b.db") as b, pytest.warns(RuntimeWarning, match="version-1"):
        assert b.import_jsonl(tmp_path / "v1.jsonl") == 2


def test_a_batch_the_database_refuses_mid_run_is_saved_beside_it(tmp_path, monkeypatch):
    db_path = tmp_path / "runs.db"
    calls = {"n": 0}
    original = Database.commit_results

    def failing(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseError(f"{self.path} is damaged (database disk image is malformed)")
        return original(self, *args, **kwargs)
    monkeypatch.setattr(Database, "commit_results", failing)
    runner = FakeRunner()
    with pytest.raises(TuneError, match=r"is damaged .*The batch just measured \(4 records\) "
                                        r"is in .*runs\.db\.unsaved-.*\.jsonl"):
        fake_tune(FUNC, 12, db_path, runner=runner)
    monkeypatch.undo()
    (saved,) = tmp_path.glob("runs.db.unsaved-*.jsonl")
    with Database(tmp_path / "sound.db") as sound:
        assert sound.import_jsonl(saved) == 4
        kept = sound.records(FUNC, Target("x86_64-avx2", cores=2))

    target = Target("x86_64-avx2", cores=2)  # test_tune's target
    programs = [final_func(r.trace().apply(Schedule(FUNC)), default_postprocs(target))
                for r in kept]
    assert [structural_hash(p) for p in programs] == runner.keys[4:8]
    assert Database(db_path).count() == 4  # the first batch, committed before the failure
