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
    _dynamic_onnx(root / "dyn.onnx")
    return root


def _dynamic_onnx(path: Path) -> None:
    """A Relu whose input's first dimension is open ("batch")."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "dyn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


CASES = [
    # the workload on the command line
    ("tune --op matmul --shape 8,8",
     "tessel tune: matmul(M, N, K, dtype=float32, out_dtype=None, b_dtype=None): missing a "
     "required argument: 'K' (--shape gives the positional sizes, --attrs the keywords)"),
    ("tune --op matmul --shape 8,8,8 --attrs bogus=1",
     "tessel tune: matmul(M, N, K, dtype=float32, out_dtype=None, b_dtype=None): got an "
     "unexpected keyword argument 'bogus' (--shape gives the positional sizes, --attrs the "
     "keywords)"),
    ("tune --op matmul --shape 8,x,8", "tessel tune: --shape takes comma-separated integers, got "
                                       "'8,x,8'"),
    ("tune --op nosuch", "tessel tune: unknown operator 'nosuch'; known: "),
    ("tune NOPE", "tessel tune: unknown workload 'NOPE'; see `tessel ops`, or use --op"),
    ("tune --op matmul --shape 8,8,8,8",
     "tessel tune: matmul takes 3 sizes (M, N, K), got 4 in --shape 8,8,8,8"),
    ("best --op relu --shape 4,8 --db {root}/typo.db",  # accepted: relu takes one shape
     "tessel best: no database {root}/typo.db"),
    ("tune --op matmul --shape 2097152,2097152,2097152",  # 16 TiB a buffer
     "tessel tune: matmul[2097152,2097152,2097152]: its buffers (A, B, C) take 48 TiB, more "
     "than the "),
    ("tune --op matmul --shape 1000000000,1000000000,1000000000", "tessel tune: "),
    # the search's parts
    ("tune GMM --strategy magic", "tessel tune: unknown search strategy 'magic'; use one of "
                                  "['annealing', 'evolutionary', 'ga', 'genetic', 'grid', "
                                  "'random']"),
    ("tune GMM --cost-model magic", "tessel tune: unknown cost model 'magic'; known: "
                                    "['ensemble', 'pretrained', 'random', 'transfer', "
                                    "'treegru', 'xgb', 'xgb-reg']"),
    ("tune GMM --space magic", "tessel tune: unknown space 'magic'; known: auto, "),
    ("tune GMM --strategy magic --db {root}/new.db", "tessel tune: unknown search strategy "),
    ("tune-model {root}/dyn.onnx --strategy magic --db {root}/m5.db",
     "tessel tune-model: unknown search strategy 'magic'"),
    ("tune-model {root}/dyn.onnx --cost-model magic --db {root}/m5.db",
     "tessel tune-model: unknown cost model 'magic'"),
    ("tune GMM --scheduler tcp://127.0.0.1:9",
     "tessel tune: --scheduler and --device go with --runner dask"),
    ("tune GMM --runner dask --device cpu",
     "tessel tune: --runner dask needs --scheduler ADDRESS and --device KEY"),
    # numbers on the command line: argparse's one line
    ("tune GMM --trials 0", "tessel tune: argument --trials: must be an int >= 1, got '0' "
                            "(see `tessel tune -h`)"),
    ("tune GMM --trials many", "tessel tune: argument --trials: must be an int >= 1, got "
                               "'many'"),
    ("tune GMM --batch-size 0", "tessel tune: argument --batch-size: must be an int >= 1"),
    ("tune GMM --early-stopping -3", "tessel tune: argument --early-stopping: must be an int "
                                     ">= 1"),
    ("tune GMM --seed -1", "tessel tune: argument --seed: must be an int >= 0, got '-1'"),
    ("suite NRM --budget nan", "tessel suite: argument --budget: must be seconds > 0 and <= "
                               "3600, got 'nan'"),
    ("suite --budget -1", "tessel suite: argument --budget: must be seconds > 0"),
    ("suite --budget inf", "tessel suite: argument --budget: must be seconds > 0"),
    ("tasks resnet18 --image -5", "tessel tasks: argument --image: must be an int from 1 to "
                                  "4096, got '-5'"),
    ("tasks dqn --image 0", "tessel tasks: argument --image: must be an int from 1 to 4096, "
                            "got '0'"),
    ("run-model dqn --repeat 0", "tessel run-model: argument --repeat: must be an int >= 1, "
                                 "got '0'"),
    ("run-model dqn --seed x", "tessel run-model: argument --seed: must be an int >= 0"),
    ("tune-model dqn --select 999999", "tessel tune-model: argument --select: must be an int "
                                       "from 0 to 64, got '999999'"),
    ("tune-model dqn --trials 0", "tessel tune-model: argument --trials: must be an int >= 1"),
    ("tune-model dqn --time 10x", "tessel tune-model: argument --time: must be a time such as "
                                  "90s, 10m or 1h30m, got '10x'"),
    ("tune-model dqn --time 0m", "tessel tune-model: argument --time: must be a time such as "
                                 "90s, 10m or 1h30m, got '0m'"),
    ("tune-model dqn --batch-size -2", "tessel tune-model: argument --batch-size: must be an "
                                       "int >= 1"),
    ("worker --scheduler tcp://127.0.0.1:9 --device cpu --wait 0",
     "tessel worker: argument --wait: must be seconds > 0"),
    ("", "tessel: the following arguments are required: command"),
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
    # a model's flags: each applies to ONNX files or to zoo models, never ignored
    ("tasks {root}/dyn.onnx", "tessel tasks: input x: dim 0 (batch) is dynamic; pass --input "
                              "x=d0,d1,... with a concrete size"),
    ("tasks {root}/dyn.onnx --input x=0,8", "tessel tasks: --input takes NAME=d0,d1,... with "
                                           "positive sizes, got 'x=0,8'"),
    ("tasks {root}/dyn.onnx --input x=2,8,1", "tessel tasks: input x: --input gives (2, 8, 1), "
                                             "but the model's input has rank 2"),
    ("tasks {root}/dyn.onnx --image 64", "tessel tasks: --image applies to zoo models; "
                                         "{root}/dyn.onnx is an ONNX file"),
    ("tasks dqn --frontend onnx --input x=1,4,84,84",
     "tessel tasks: --input applies to ONNX files; zoo model dqn's inputs are fixed"),
    ("run-model dqn --input x=1,4,84,84", "tessel run-model: --input applies to ONNX files"),
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
