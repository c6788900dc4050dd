"""Database: records by workload and target fingerprint, top-k, JSON-lines exchange, bad files,
several writing processes, and a writer killed mid-run."""
import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from tessel import Schedule, Target, ops
from tessel.database import Database, DatabaseError, TuningRecord
from tessel.database.record import IN_SEQUENCE
from tessel.ir import structural_equal, structural_hash
from tessel.measure import MeasureCandidate, MeasureResult

HOST = Target("host")
OTHER = Target("x86_64-avx512", cores=64)


def split_candidate(func, factor):
    sch = Schedule(func)
    _, j, _ = sch.get_loops(sch.get_block("C"))
    sch.split(j, factors=[None, factor])
    return MeasureCandidate(func, sch.func, sch.trace)


def measured_batch(func):
    cands = [split_candidate(func, f) for f in (2, 3, 4, 5)]
    results = [MeasureResult((3e-3, 5e-3)), MeasureResult((1e-3, 1e-3, 1e-3)),
               MeasureResult.error("wrong_result", "2 of 9 elements differ"),
               MeasureResult((2e-3,), build_secs=0.5, run_secs=0.25)]
    return cands, results


def test_commit_and_query_by_workload_and_target(tmp_path):
    func = ops.matmul(9, 10, 11)
    cands, results = measured_batch(func)
    with Database(tmp_path / "missing" / "dir" / "r.db") as db:
        records = db.commit_results(HOST, cands, results)
        db.commit_results(OTHER, cands[:1], [MeasureResult((1e-9,))])
        assert db.count() == 5 and db.count(func) == 5 and db.count(func, HOST) == 4
        assert db.count(target=OTHER) == 1 and db.count(ops.matmul(9, 10, 12)) == 0
        top = db.top_k(func, HOST, k=10)
        assert [r.mean_secs for r in top] == [1e-3, 2e-3, 4e-3]  # errors and OTHER left out
        assert top[1].build_secs == 0.5 and top[1].run_secs == 0.25
        assert db.top_k(func, OTHER, k=10)[0].costs == (1e-9,)
        everything = db.records(func, HOST)
        assert everything == records and everything[2].error_msg == "2 of 9 elements differ"
        assert not everything[2].ok and everything[2].result().error_kind == "wrong_result"
        assert set(db.targets()) == {HOST.fingerprint_hash(), OTHER.fingerprint_hash()}
        (workload,) = db.workloads()
        assert workload.key == structural_hash(func) and structural_equal(workload.func, func)


def test_record_trace_replays_to_the_measured_program(tmp_path):
    func = ops.matmul(7, 12, 5)
    cands, results = measured_batch(func)
    with Database(tmp_path / "r.db") as db:
        db.commit_results(HOST, cands, results)
        best = db.top_k(func, HOST)[0]
        replayed = best.trace().apply(Schedule(db.workload(best.workload_key)))
    assert structural_equal(replayed.func, cands[1].func)


def test_top_k_keeps_the_best_of_each_trace_and_knobs(tmp_path):
    func = ops.matmul(4, 4, 4)
    cand = split_candidate(func, 2)
    knobbed = [MeasureCandidate(func, func, knobs=(k, "x")) for k in (1, 2)]
    with Database(tmp_path / "r.db") as db:
        db.commit_results(HOST, [cand, cand, *knobbed],
                          [MeasureResult((5.0,)), MeasureResult((2.0,)),
                           MeasureResult((3.0,)), MeasureResult((1.0,))])
        top = db.top_k(func, HOST, k=5)
    assert [(r.mean_secs, r.knobs) for r in top] == [(1.0, (2, "x")), (2.0, None),
                                                     (3.0, (1, "x"))]


def test_an_in_sequence_choice_is_apart_from_the_tuning_records_and_goes_stale(tmp_path):
    """A record timed in its model's sequence (tessel.graph.compiler.select) is another
    protocol: the
    tuner's reads never see it, Database.selection does, until a newer tuning record."""
    func = ops.matmul(9, 10, 11)
    cands, results = measured_batch(func)
    with Database(tmp_path / "r.db") as db:
        records = db.commit_results(HOST, cands, results)
        assert db.selection(func, HOST) is None
        slow = records[3]  # 2e-3 s alone; say it ran fastest in its model's sequence
        choice = dataclasses.replace(slow, costs=(1.5e-3,), flags=IN_SEQUENCE,
                                     timestamp=max(r.timestamp for r in records) + 1)
        db.commit([choice])
        assert db.count(func) == 4 and len(db.records(func, HOST)) == 4
        assert [r.mean_secs for r in db.top_k(func, HOST, k=10)] == [1e-3, 2e-3, 4e-3]
        assert db.new_records(func, HOST)[1] == records
        got = db.selection(func, HOST)
        assert got is not None and got.trace_json == slow.trace_json and got.costs == (1.5e-3,)
        # a tuning record after the choice: the choice did not see it, so it no longer holds
        db.commit([dataclasses.replace(records[1], timestamp=choice.timestamp + 1)])
        assert db.selection(func, HOST) is None
        out = tmp_path / "r.jsonl"
        assert db.export_jsonl(out) == 6  # the choice is exported with everything else


def test_records_need_their_workload(tmp_path):
    with Database(tmp_path / "r.db") as db:
        record = TuningRecord("f" * 64, "t", None, None, (1.0,))
        with pytest.raises(DatabaseError, match="commit_workload"):
            db.commit([record])
        key = db.commit_workload(ops.relu(5))
        assert db.commit([TuningRecord(key, "t", None, None, (1.0,))]) == 1
        assert db.commit([TuningRecord(key, "t", None, None, (1.0,))]) == 0  # duplicate


def test_export_import_round_trip_skips_duplicates(tmp_path):
    func = ops.matmul(6, 5, 4)
    cands, results = measured_batch(func)
    with Database(tmp_path / "a.db") as a, Database(tmp_path / "b.db") as b:
        a.commit_results(HOST, cands, results)
        assert a.export_jsonl(tmp_path / "out" / "r.jsonl") == 4
        assert b.import_jsonl(tmp_path / "out" / "r.jsonl") == 4
        assert b.import_jsonl(tmp_path / "out" / "r.jsonl") == 0
        assert b.records(func) == a.records(func) and b.targets() == a.targets()
        assert structural_equal(b.workloads()[0].func, func)


def test_bad_import_names_the_line_and_imports_nothing(tmp_path):
    func = ops.matmul(3, 3, 3)
    cands, results = measured_batch(func)
    with Database(tmp_path / "a.db") as a, Database(tmp_path / "b.db") as b:
        a.commit_results(HOST, cands, results)
        a.export_jsonl(tmp_path / "r.jsonl")
        lines = (tmp_path / "r.jsonl").read_text().splitlines()
        (tmp_path / "bad.jsonl").write_text("\n".join(lines[:-1] + ["{oops"]) + "\n")
        with pytest.raises(DatabaseError, match=f"bad.jsonl:{len(lines)}"):
            b.import_jsonl(tmp_path / "bad.jsonl")
        tampered = json.loads(lines[1])
        tampered["key"] = "0" * 64
        (tmp_path / "key.jsonl").write_text("\n".join([lines[0], json.dumps(tampered)]) + "\n")
        with pytest.raises(DatabaseError, match="not its program's hash"):
            b.import_jsonl(tmp_path / "key.jsonl")
        bogus = json.loads(lines[-2])  # the last record (the end line follows it)
        bogus["error_kind"] = "melted"
        (tmp_path / "kind.jsonl").write_text(
            "\n".join(lines[:-2] + [json.dumps(bogus), lines[-1]]) + "\n")
        with pytest.raises(DatabaseError, match="unknown error kind 'melted'"):
            b.import_jsonl(tmp_path / "kind.jsonl")
        assert b.commit([]) == 0
        assert b.count() == 0 and b.workloads() == []


def test_foreign_and_corrupt_files_are_refused_and_left_untouched(tmp_path):
    junk = tmp_path / "notes.db"
    junk.write_bytes(b"these are my notes, not a database\n" * 10)
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE photos (id INTEGER, path TEXT)")
    conn.close()
    corrupt = tmp_path / "corrupt.db"
    Database(corrupt).close()
    data = bytearray(corrupt.read_bytes())
    data[100:] = b"\xff" * (len(data) - 100)
    corrupt.write_bytes(bytes(data))
    for path, message in ((junk, r"is not an SQLite database \(it is a text file\)"),
                          (foreign, "another program"),
                          (corrupt, "is damaged .*tessel db recover")):
        before = path.read_bytes()
        with pytest.raises(DatabaseError, match=message):
            Database(path)
        assert path.read_bytes() == before
    with pytest.raises(DatabaseError, match="is a directory"):
        Database(tmp_path)


def test_other_schema_version_is_refused(tmp_path):
    Database(tmp_path / "r.db").close()
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'version'")
    conn.close()
    with pytest.raises(DatabaseError, match="schema version 99"):
        Database(tmp_path / "r.db")


_WRITER = textwrap.dedent("""
    import sys, time
    from tessel import ops
    from tessel.database import Database, TuningRecord
    path, name, batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    db = Database(path)
    key = db.commit_workload(ops.matmul(4, 4, 4))
    for b in range(batches):
        db.commit([TuningRecord(key, "t", None, (name, b, i), (1e-3 * (i + 1),),
                                timestamp=time.time()) for i in range(size)])
        print(b, flush=True)
""")


def _writer(path, name, batches, size):
    return subprocess.Popen([sys.executable, "-c", _WRITER, str(path), name, str(batches),
                             str(size)], stdout=subprocess.PIPE, text=True)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "shared.db"
    writers = [_writer(path, name, 40, 5) for name in ("a", "b")]
    for w in writers:
        w.communicate(timeout=120)
        assert w.returncode == 0
    with Database(path) as db:
        records = db.records(ops.matmul(4, 4, 4))
    assert len(records) == 400
    assert {r.knobs for r in records} == {(n, b, i) for n in "ab" for b in range(40)
                                          for i in range(5)}


def test_writer_killed_mid_run_leaves_every_committed_batch(tmp_path):
    path = tmp_path / "killed.db"
    writer = _writer(path, "k", 100000, 7)
    done = [int(writer.stdout.readline()) for _ in range(15)]
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    with Database(path) as db:
        count = db.count()
        batches = {r.knobs[1] for r in db.records(ops.matmul(4, 4, 4))}
    assert count % 7 == 0 and count >= 7 * len(done)  # whole batches only, none lost
    assert batches == set(range(count // 7))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


def test_a_schema_2_database_is_migrated_in_place_and_keeps_its_records(tmp_path):
    """A database written before flags and claims existed (schema 2) opens, gains them, and
    keeps every record (with the digest it had, so a re-import adds nothing)."""
    func = ops.matmul(5, 6, 7)
    cands, results = measured_batch(func)
    path = tmp_path / "old.db"
    with Database(path) as db:
        db.commit_results(HOST, cands, results)
        db.export_jsonl(tmp_path / "old.jsonl")
    with sqlite3.connect(path) as conn:  # back to schema 2
        conn.execute("DROP TABLE claims")
        conn.execute("ALTER TABLE records DROP COLUMN flags")
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'version'")
    conn.close()
    with Database(path) as db:
        assert db.count(func, HOST) == 4 and db.top_k(func, HOST, k=1)[0].flags == ""
        assert db.import_jsonl(tmp_path / "old.jsonl") == 0
        assert db.claim(func, HOST, ["p1"], "run a") == [True]
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == ("3",)
    conn.close()


def test_claims_give_each_program_to_one_live_run(tmp_path):
    func = ops.matmul(5, 6, 7)
    with Database(tmp_path / "r.db") as db:
        assert db.claim(func, HOST, ["a", "b"], "run 1") == [True, True]
        assert db.claim(func, HOST, ["a", "c"], "run 2") == [False, True]
        assert db.claim(func, HOST, ["a"], "run 1") == [True]  # its own claim
        cands, results = measured_batch(func)
        db.commit_results(HOST, cands[:1], results[:1], run="run 1", programs=["a"])
        assert db.claim(func, HOST, ["a"], "run 1") == [False]  # measured: for good
        with sqlite3.connect(tmp_path / "r.db") as conn:  # run 2's process is gone
            conn.execute("UPDATE claims SET pid = 999999999 WHERE program = 'c'")
        conn.close()
        assert db.claim(func, HOST, ["c"], "run 3") == [True]
        last, records = db.new_records(func, HOST)
        assert len(records) == 1 and db.new_records(func, HOST, last) == (last, [])


def test_a_second_connection_does_not_reopen_the_file_under_the_first(tmp_path, monkeypatch):
    """Closing any descriptor of a file drops this process's POSIX locks on it, SQLite's
    included: the header is read directly only while no Database of this process has it."""
    import builtins
    path = tmp_path / "records.db"
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(os.path.realpath(file) if isinstance(file, (str, os.PathLike)) else file)
        return real_open(file, *args, **kwargs)
    Database(path).close()
    monkeypatch.setattr(builtins, "open", spy)
    first = Database(path)
    assert opened == [os.path.realpath(path)]  # its header checked once, nothing open yet
    second = Database(path)
    third = Database(path)
    assert opened == [os.path.realpath(path)]
    for db in (second, first, third):
        db.close()
    Database(path).close()  # all closed: checked again
    assert opened == [os.path.realpath(path)] * 2
