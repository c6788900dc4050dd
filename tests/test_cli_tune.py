"""`tessel tune`, `tessel best` and `tessel report` on a tiny operator, and their errors."""
import re

import pytest

from tessel.cli import main
from tessel.database import Database


def test_tune_then_best_then_report(tmp_path, capsys):
    db, png = str(tmp_path / "r.db"), str(tmp_path / "curves.png")
    op = ["--op", "matmul", "--shape", "16,24,8", "--db", db]
    assert main(["tune", *op, "--trials", "4", "--batch-size", "4", "--strategy", "random",
                 "--cost-model", "random"]) == 0
    out = capsys.readouterr().out
    assert "matmul[16,24,8]: best" in out and "after 4 trials (4 new)" in out
    assert sum(Database(db).count(w.key) for w in Database(db).workloads()) == 4
    assert main(["best", *op]) == 0
    out = capsys.readouterr().out
    assert "GFLOP/s" in out and "# trace" in out and "sch.get_block(name='C')" in out
    assert "# program" in out and "def matmul" in out
    assert main(["report", *op, "--out", png]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].startswith("random 20") and "saved" in out
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("argv, message", [
    (["tune"], "name a suite workload"),
    (["tune", "NOPE"], "unknown workload 'NOPE'"),
    (["tune", "--op", "matmull"], "unknown operator 'matmull'"),
    (["tune", "--op", "matmul", "--shape", "4,x"], "comma-separated integers"),
    (["tune", "--op", "matmul", "--shape", "4,4,4", "--attrs", "stride"], "key=value"),
    (["tune", "GMM", "--op", "matmul"], "not both"),
    (["tune", "GMM", "--space", "nope", "--trials", "1"], "unknown space 'nope'"),
])
def test_bad_command_lines_are_named(argv, message, capsys, tmp_path):
    assert main([*argv, "--db", str(tmp_path / "r.db")]) == 2
    assert message in capsys.readouterr().err


def test_tune_model_refuses_a_negative_selection(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["tune-model", "resnet18", "--select", "-1"])
    assert stop.value.code == 2
    assert "--select: must be an int >= 0, got '-1'" in capsys.readouterr().err


def test_best_and_report_on_an_empty_database(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    Database(db).close()
    assert main(["best", "GMM", "--db", db]) == 1
    assert "holds no valid record" in capsys.readouterr().err
    assert main(["report", "GMM", "--db", db]) == 1
    assert "holds no records" in capsys.readouterr().err


def test_the_command_logs_only_when_asked(tmp_path, capfd):
    from tessel import cli
    db = str(tmp_path / "r.db")
    assert cli.main(["tune", "--op", "matmul", "--shape", "8,8,8", "--trials", "2",
                     "--batch-size", "2", "--strategy", "random", "--db", db]) == 0
    assert "tessel INFO" not in capfd.readouterr().err
    assert cli.main(["-v", "tune", "--op", "matmul", "--shape", "8,8,8", "--trials", "4",
                     "--batch-size", "2", "--strategy", "random", "--db", db]) == 0
    err = capfd.readouterr().err
    # how many of the two ran cleanly is the machine's business (a busy CI runner once timed
    # one out); that the batch line is logged, with its counts, is this test's
    assert re.search(r"tessel INFO: matmul\[8,8,8\]: 2 measured \([0-2] ok\), 4 trials in all",
                     err), err
