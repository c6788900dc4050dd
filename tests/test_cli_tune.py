"""`tessel tune`, `tessel best` and `tessel report` on a tiny operator, and their errors; the
bounds on what a command line can ask for (the priors' divisors, in-sequence selection) and a
Dask scheduler that does not answer."""
import math
import re

import numpy as np
import pytest

import tessel
from tessel import ops
from tessel.cli import main
from tessel.cli.tune import duration
from tessel.database import Database
from tessel.graph import GraphError
from tessel.space import make_space
from tessel.space.priors import _divisors, ranked_priors


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
    assert main(["tune-model", "resnet18", "--select", "-1"]) == 2
    assert capsys.readouterr().err == "tessel tune-model: argument --select: must be an int " \
                                      "from 0 to 64, got '-1' (see `tessel tune-model -h`)\n"


def test_a_dask_scheduler_that_does_not_answer_is_one_line(monkeypatch, capsys, tmp_path):
    """Dask's own connect timeout was 30 s, then an OSError traceback; nothing is created."""
    pytest.importorskip("distributed")
    from tessel.measure import dask
    monkeypatch.setattr(dask, "CONNECT_TIMEOUT_S", 0.5)
    db = tmp_path / "r.db"
    assert main(["tune", "GMM", "--runner", "dask", "--scheduler", "tcp://127.0.0.1:9",
                 "--device", "cpu", "--db", str(db)]) == 2
    assert capsys.readouterr().err == "tessel tune: no Dask scheduler answered at " \
        "tcp://127.0.0.1:9 within 0.5 s; start one (`dask scheduler`) or check the address\n"
    assert not db.exists()
    with pytest.raises(dask.DaskError, match="'nowhere' is not a Dask scheduler address"):
        dask.DaskRunner("nowhere", device="cpu")


def test_in_sequence_selection_tries_no_more_ranks_than_records(tmp_path, monkeypatch, capsys):
    """`tune-model M --select N` with 2 records compiled N variants of the model (999999: past
    150 s); each rank past a task's records repeats its slowest, so 2 variants say it all."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    from tessel.graph.compiler import select
    weight = numpy_helper.from_array(np.ones((16, 16), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "mm.onnx")
    compiled = []

    def counted(*args, **kwargs):
        compiled.append(kwargs["rank"])
        assert len(compiled) <= 2, "a variant per requested rank"
        return compile_variant(*args, **kwargs)
    compile_variant = select.compile_graph
    monkeypatch.setattr(select, "compile_graph", counted)
    db = str(tmp_path / "r.db")
    assert main(["tune-model", str(tmp_path / "mm.onnx"), "--trials", "2", "--batch-size",
                 "2", "--strategy", "random", "--cost-model", "random", "--select", "64",
                 "--db", db]) == 0
    assert "in-sequence selection: " in capsys.readouterr().out
    assert compiled[0] == 0 and len(compiled) <= 2
    with pytest.raises(GraphError, match="candidates must be an int >= 1 and <= 64"):
        select.select_in_sequence(str(tmp_path / "mm.onnx"), database=db, candidates=999999)


def test_tune_model_by_the_clock_ends_with_the_selection_inside_its_time(monkeypatch,
                                                                          capsys):
    """`tune-model M --time 10m`: the tasks get the time left of 600 s less SELECT_SHARE of
    it, and the choice in sequence a deadline 600 s after the command began."""
    from tessel.cli import model as cli_model
    from tessel.graph.compiler import select, tune
    seen = {}
    ticks = iter([1000.0, 1004.0])  # the command's start; the model loaded 4 s later
    monkeypatch.setattr(tune, "clock", lambda: next(ticks))

    def fake_tune(graph, target, trials, *, time_budget, select, **options):
        seen.update(tuning=time_budget, select=select)
        return []

    def fake_select(graph, target, db, *, candidates, layout, deadline):
        seen["deadline"] = deadline
        return select.Selection({}, {}, 0.0, 0.0, skipped="no time left")

    monkeypatch.setattr(tessel, "tune_model", fake_tune)
    monkeypatch.setattr(cli_model, "select_in_sequence", fake_select)
    assert main(["tune-model", "dqn", "--time", "10m", "--db", "unused.db"]) == 0
    assert seen == {"tuning": pytest.approx(600.0 - 4.0 - tune.SELECT_SHARE * 600.0),
                    "select": 0, "deadline": 1600.0}
    assert "in-sequence selection skipped: no time left" in capsys.readouterr().out


def test_prior_divisors_come_from_prime_factors():
    """The expert priors counted divisors one by one: a 10**9-wide matmul hung the search."""
    assert _divisors(10**18) == sorted(2**a * 5**b for a in range(19) for b in range(19))
    assert all(_divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
               for n in range(1, 500))
    assert _divisors(2**31 - 1) == [1, 2**31 - 1]  # a prime
    space = make_space("auto", tessel.Target("host"))
    priors = ranked_priors(space, ops.matmul(8, 10**9, 8))
    assert priors
    for design, decisions in priors:
        tiles = [decisions[s] for s in design.sampling_sites()
                 if isinstance(decisions.get(s), tuple) and math.prod(decisions[s]) == 10**9]
        assert tiles, decisions


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


def test_a_time_span_is_read_in_hours_minutes_and_seconds():
    assert [duration(t) for t in ("90s", "10m", "1h30m", "45", "0.5h", "2m30s")] == \
        [90, 600, 5400, 45, 1800, 150]
