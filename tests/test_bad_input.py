"""Every bad command line gets one line that says what is wrong (exit status 2, no traceback),
and no file changes: the table of issue 14's cases and the class each stands for."""
import json
import sqlite3
from pathlib import Path

import pytest

from tessel import cli
from tessel.database import Database

from test_database_damage import FUNC, HOST, damage, many_records


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bad_input")
    with Database(root / "good.db") as db:
        many_records(db, 8)
        db.export_jsonl(root / "good.jsonl")
    with Database(root / "damaged.db") as db:
        many_records(db, 600)
    damage(root / "damaged.db")
    with Database(root / "edited.db") as db:
        many_records(db, 3)
    with sqlite3.connect(root / "edited.db") as conn:
        other = dict(HOST.fingerprint(), cpu_model="Some Other CPU 9000")
        conn.execute("UPDATE targets SET fingerprint_json = ?", (json.dumps(other),))
    conn.close()
    lines = (root / "good.jsonl").read_text().splitlines(keepends=True)
    (root / "cut.jsonl").write_text("".join(lines[:-1]))
    (root / "binary.jsonl").write_bytes(bytes(range(256)) * 8)
    (root / "garbage.onnx").write_bytes(b"\x08\x07garbage, not protobuf\xff\xfe" * 20)
    (root / "empty.onnx").write_bytes(b"")
    (root / "a_file").write_text("not a directory\n")
    (root / "a_dir").mkdir()
    return root


CASES = [
    # the workload on the command line
    ("tune --op matmul --shape 8,8",
     "tessel tune: matmul(M, N, K, dtype=float32, out_dtype=None): missing a required argument: "
     "'K' (--shape gives the positional sizes, --attrs the keywords)"),
    ("tune --op matmul --shape 8,8,8 --attrs bogus=1",
     "tessel tune: matmul(M, N, K, dtype=float32, out_dtype=None): got an unexpected keyword "
     "argument 'bogus' (--shape gives the positional sizes, --attrs the keywords)"),
    ("tune --op matmul --shape 8,x,8", "tessel tune: --shape takes comma-separated integers, got "
                                       "'8,x,8'"),
    ("tune --op nosuch", "tessel tune: unknown operator 'nosuch'; known: "),
    ("tune NOPE", "tessel tune: unknown workload 'NOPE'; see `tessel ops`, or use --op"),
    # the search's parts
    ("tune GMM --strategy magic", "tessel tune: unknown search strategy 'magic'; use one of "
                                  "['annealing', 'evolutionary', 'ga', 'genetic', 'grid', "
                                  "'random']"),
    ("tune GMM --cost-model magic", "tessel tune: unknown cost model 'magic'; known: "
                                    "['ensemble', 'pretrained', 'random', 'transfer', "
                                    "'treegru', 'xgb', 'xgb-reg']"),
    ("tune GMM --space magic", "tessel tune: unknown space 'magic'; known: auto, "),
    ("tune GMM --trials 0", "tessel tune: trials must be a positive int, got 0"),
    # files: the database
    ("tune GMM --db {root}/a_file/x.db",
     "tessel tune: cannot create the directory of {root}/a_file/x.db: {root}/a_file is a file, "
     "not a directory"),
    ("tune GMM --db {root}/a_dir", "tessel tune: {root}/a_dir is a directory, not a database "
                                   "file"),
    ("tune GMM --db {root}/damaged.db", "tessel tune: {root}/damaged.db is damaged ("),
    ("best GMM --db {root}/damaged.db", "tessel best: {root}/damaged.db is damaged ("),
    ("report GMM --db {root}/damaged.db", "tessel report: {root}/damaged.db is damaged ("),
    ("best GMM --db {root}/edited.db",
     "tessel best: {root}/edited.db: the records under this target's key "),
    ("best GMM --db {root}/typo.db", "tessel best: no database {root}/typo.db; run `tessel tune` "
                                     "first, or name one with --db"),
    ("report GMM --db {root}/good.db --out {root}/a_dir",
     "tessel report: {root}/a_dir is a directory; give a file name, e.g. {root}/a_dir/curves.png"),
    ("report GMM --db {root}/good.db --out {root}/nowhere/c.png",
     "tessel report: the directory {root}/nowhere does not exist"),
    ("report GMM --db {root}/good.db --out {root}/curves.txt",
     "tessel report: {root}/curves.txt: plots are written as .png, .pdf, .svg, .jpg, .jpeg"),
    # files: record exchange
    ("db import {root}/good.db {root}/binary.jsonl",
     "tessel db: {root}/binary.jsonl is not a tessel records file (not UTF-8 text: byte "),
    ("db import {root}/good.db {root}/cut.jsonl",
     "tessel db: {root}/cut.jsonl has no end line: the file was cut short after 8 records; "
     "nothing imported"),
    ("db import {root}/good.db {root}/missing.jsonl",
     "tessel db: no such file to import: {root}/missing.jsonl"),
    ("db export {root}/good.db {root}/a_dir",
     "tessel db: {root}/a_dir is a directory; give the name of a file to write"),
    ("db recover {root}/damaged.db {root}/good.db",
     "tessel db: {root}/good.db exists; recover writes a new file (remove it or pick another "
     "name)"),
    # files: models
    ("run-model {root}/garbage.onnx", "tessel run-model: {root}/garbage.onnx is not an ONNX "
                                      "model (it does not parse as one: "),
    ("run-model {root}/empty.onnx", "tessel run-model: {root}/empty.onnx is empty: not an ONNX "
                                    "model"),
    ("run-model {root}/missing.onnx", "tessel run-model: no such model file: "
                                      "{root}/missing.onnx"),
    ("tasks nomodel", "tessel tasks: 'nomodel' is neither an ONNX file nor a zoo model"),
]


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("argv, message", CASES, ids=[c[0].split("{")[0] for c in CASES])
def test_bad_input_is_one_line_and_changes_no_file(files, argv, message, capsys, monkeypatch):
    monkeypatch.chdir(files)
    before = snapshot(files)
    code = cli.main(argv.format(root=files).split())
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(message.format(root=files)), err
    assert snapshot(files) == before
    assert not (files / "tessel.db").exists()


def test_db_check_lists_the_damage_and_recover_saves_the_rest(files, capsys, tmp_path):
    assert cli.main(["db", "check", str(files / "damaged.db")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{files / 'damaged.db'} is damaged:\n") and "tessel db recover" in err
    assert cli.main(["db", "check", str(files / "good.db")]) == 0
    assert capsys.readouterr().out == f"{files / 'good.db'}: ok; 1 workloads, 1 targets, 8 " \
                                      "records\n"
    assert cli.main(["db", "recover", str(files / "damaged.db"), str(tmp_path / "new.db")]) == 0
    out = capsys.readouterr().out
    assert "recovered " in out and " lost " in out
    with Database(tmp_path / "new.db") as db:
        assert 0 < db.count(FUNC, HOST) < 600
