"""Bad arguments from Python are refused up front with one line (a TesselError naming the
argument), before any work: nothing measured, no database file made; and what was taken as
garbage before (a bool for a count, 2.5 for a size) is refused too. Issue 38's probe."""
import re

import numpy as np
import pytest

import tessel
from tessel import ops, te
from tessel.graph import Graph, GraphError
from tessel.ops import OpError
from tessel.te import TEError
from tessel.tuning import Task, TuneError, tune, tune_tasks

from test_tune import TARGET, FakeBuilder, FakeRunner

FUNC = ops.matmul(16, 16, 16)


def noop_callback(run, batch, results):
    pass


class NotAModel:
    """Looks like neither a registry name nor a cost model."""


BAD_TUNE_ARGS = [
    (dict(target=123), "target must be a tessel.Target"),
    (dict(target="x86_64-avx9"), "unknown target 'x86_64-avx9'"),
    (dict(database=42), "database must be a file path"),
    (dict(cost_model=5), "cost_model must be a cost model name"),
    (dict(cost_model="xgboost"), "unknown cost model 'xgboost'; known: "),
    (dict(cost_model=NotAModel()), "cost_model must be a cost model name"),
    (dict(callbacks=[1]), r"callbacks\[0\] must be a callable"),
    (dict(callbacks=noop_callback), "callbacks must be a list"),
    (dict(strategy_options={"bogus": 1}), "random takes no option 'bogus'"),
    (dict(strategy_options={"seed": 1}), r"takes no option 'seed' \(tune sets it\)"),
    (dict(strategy_options=[("population", 4)]), "strategy_options must be a dict"),
    (dict(strategy="evolutionary", strategy_options={"population": "many"}),
     "strategy_options .*population"),
    (dict(runner=3), "runner must be None or a Runner"),
    (dict(builder="x"), "builder must be None or a Builder"),
    (dict(space=42), "cannot make a search space of 42"),
    (dict(space="nonsense"), "unknown space 'nonsense'"),
    (dict(space=lambda: None), "a function space takes one argument"),
    (dict(strategy=5), "strategy must be a strategy name"),
    (dict(strategy=["random"]), "strategy must be a strategy name"),
    (dict(strategy="magic"), "unknown search strategy 'magic'; use one of"),
    (dict(trials=True), "trials must be a positive int, got True"),
    (dict(trials=2.5), "trials must be a positive int"),
    (dict(seed="x"), "seed must be an int >= 0, got 'x'"),
    (dict(seed=-1), "seed must be an int >= 0"),
    (dict(rerun_top=-1), "rerun_top must be an int >= 0, got -1"),
    (dict(batch_size=True), "batch_size must be a positive int, got True"),
    (dict(early_stopping=0), "early_stopping must be None or a positive int, got 0"),
    (dict(early_stopping=True), "early_stopping must be None or a positive int"),
    (dict(name=5), "name must be a str"),
    (dict(progress="yes"), "progress must be True or False"),
]


def tune_kwargs(tmp_path, fake_runner, **bad):
    kw = dict(target=TARGET, trials=4, strategy="random", cost_model="random",
              database=tmp_path / "r.db", runner=fake_runner, builder=FakeBuilder(),
              batch_size=2, progress=False)
    return kw | bad


def _case_id(value) -> str:
    """A test id that is the same in every process (no function addresses)."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))[:40]


@pytest.mark.parametrize("bad, match", BAD_TUNE_ARGS, ids=_case_id)
def test_tune_refuses_a_bad_argument_before_any_work(tmp_path, bad, match):
    runner = FakeRunner()
    with pytest.raises(tessel.TesselError, match=match) as err:
        tune(FUNC, **tune_kwargs(tmp_path, runner, **bad))
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
    assert runner.batches == 0  # nothing measured
    assert not (tmp_path / "r.db").exists()  # no file made


@pytest.mark.parametrize("bad, match", [b for b in BAD_TUNE_ARGS
                                        if not {"target", "early_stopping", "name"} & set(b[0])],
                         ids=_case_id)
def test_tune_tasks_refuses_a_bad_argument_before_any_work(tmp_path, bad, match):
    runner = FakeRunner()
    kw = tune_kwargs(tmp_path, runner, **bad)
    del kw["target"]
    with pytest.raises(tessel.TesselError, match=match):
        tune_tasks([Task(FUNC, TARGET)], **kw)
    assert runner.batches == 0 and not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("tasks, match", [
    ([], "non-empty list of Tasks"), ("GMM", "non-empty list of Tasks"),
    ([FUNC], r"tasks\[0\] must be a Task"),
    ([Task(FUNC, TARGET), Task(FUNC, tessel.Target("x86_64-sse"))], "takes one target")])
def test_tune_tasks_refuses_bad_tasks(tmp_path, tasks, match):
    with pytest.raises(TuneError, match=match):
        tune_tasks(tasks, 4, database=tmp_path / "r.db", progress=False)
    assert not (tmp_path / "r.db").exists()


def test_tune_tasks_refuses_a_strategy_object_and_an_unknown_scheduler(tmp_path):
    from tessel.search import make_strategy
    from tessel.space import make_space
    strategy = make_strategy("random", make_space("auto", TARGET), FUNC)
    with pytest.raises(TuneError, match="takes a strategy name"):
        tune_tasks([Task(FUNC, TARGET)], 4, strategy=strategy, database=tmp_path / "r.db")
    with pytest.raises(TuneError, match="scheduler must be one of"):
        tune_tasks([Task(FUNC, TARGET)], 4, scheduler="fastest", database=tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


@pytest.mark.parametrize("options, match", [
    (dict(cost_model=5), "cost_model must be a cost model name"),
    (dict(bogus=1), "no argument 'bogus'"),
    (dict(callbacks=[1]), r"callbacks\[0\]"), (dict(trials=True), "trials must be"),
    (dict(target=123), "target must be a tessel.Target"),
    (dict(layout="sideways"), "layout must be one of"), (dict(select=True), "select must be")])
def test_tune_model_refuses_bad_options_before_loading_the_model(tmp_path, options, match):
    """The model is a file that does not exist: a check made after loading would say so."""
    kw = dict(trials=4, database=tmp_path / "r.db") | options
    with pytest.raises(tessel.TesselError, match=match):
        tessel.tune_model(tmp_path / "missing.onnx", **kw)
    assert not (tmp_path / "r.db").exists()


def test_a_target_may_be_given_by_name(tmp_path):
    runner = FakeRunner()
    result = tune(FUNC, **tune_kwargs(tmp_path, runner, target="x86_64-avx2"))
    assert result.task.target.name == "x86_64-avx2" and len(result.history) == 4
    func = ops.relu((3, 5))
    mod = tessel.build(func, "host")
    x, y = np.linspace(-1, 1, 15, dtype=np.float32).reshape(3, 5), np.zeros((3, 5), np.float32)
    mod(x, y)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(tessel.TargetError, match="target must be a tessel.Target"):
        tessel.build(func, 123)


# ---- input_shapes ----

@pytest.fixture(scope="module")
def dynamic_relu():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "dyn", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shapes, match", [
    ({"x": (2.5, 4)}, r"input_shapes\['x'\] must be a tuple of positive ints, got \(2.5, 4\)"),
    ({"x": (True, 4)}, "must be a tuple of positive ints"),
    ({"x": (0, 4)}, "must be a tuple of positive ints"),
    ({"x": "2,4"}, "must be a tuple of positive ints"),
    ({"y": (2, 4)}, r"names \['y'\], which are not inputs of the model; its inputs are \['x'\]"),
    ([("x", (2, 4))], "input_shapes must be a dict")])
def test_compile_model_refuses_input_shapes_that_are_no_shapes(tmp_path, dynamic_relu, shapes,
                                                              match):
    with pytest.raises(GraphError, match=match):
        tessel.compile_model(dynamic_relu, TARGET, input_shapes=shapes)
    with pytest.raises(GraphError, match=match):
        tessel.tune_model(dynamic_relu, TARGET, 4, input_shapes=shapes,
                          database=tmp_path / "r.db")
    assert not (tmp_path / "r.db").exists()


def test_compile_model_takes_int_input_shapes_and_only_for_onnx(dynamic_relu):
    model = tessel.compile_model(dynamic_relu, input_shapes={"x": (2, 4)})
    x = np.arange(-4, 4, dtype=np.float32).reshape(2, 4)
    (y,) = model(x)
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    with pytest.raises(GraphError, match="input_shapes is for ONNX models"):
        tessel.compile_model(Graph("g"), input_shapes={"x": (2, 4)})


# ---- operator and tensor-expression sizes ----

@pytest.mark.parametrize("make, error, match", [
    (lambda: ops.matmul(2**40, 8, 8), OpError, r"matmul: M = 1099511627776 is more than 2\*\*31"),
    (lambda: ops.matmul(2**30, 2**30, 2**30), TEError,
     r"placeholder A: shape \(1073741824, 1073741824\) of float32 takes 4 EiB, more than"),
    (lambda: ops.relu((2**24, 2**24)), TEError, "takes 1 PiB"),
    (lambda: ops.relu((2**40, 2)), OpError, "relu: shape .* more than 2\\*\\*31"),
    (lambda: ops.matmul(8, True, 8), OpError, "N must be a positive int, got True"),
    (lambda: ops.dense(4, 4, 4, bias="no"), OpError, "bias must be True or False")])
def test_ops_refuse_sizes_no_buffer_can_have(make, error, match):
    with pytest.raises(error, match=match):
        make()


@pytest.mark.parametrize("make, match", [
    (lambda: te.placeholder((0,)), r"shape \(0,\) must be positive integers"),
    (lambda: te.placeholder((-1,)), r"shape \(-1,\) must be positive integers"),
    (lambda: te.placeholder((2.5,)), r"shape \(2.5,\) must be positive integers"),
    (lambda: te.placeholder(True), "shape must be an int or a tuple of ints, got True"),
    (lambda: te.placeholder(None), "shape must be an int or a tuple of ints, got None"),
    (lambda: te.placeholder((2**31,)), r"at most 2\*\*31 - 1"),
    (lambda: te.placeholder((2**20,) * 3, "float64"), "of float64 takes 8 EiB"),
    (lambda: te.placeholder(4, name=3), "name must be a non-empty str"),
    (lambda: te.compute((4,), 5), "fcompute must be a function"),
    (lambda: te.compute((2**25, 2**25), lambda i, j: i + j), "of int32 takes 4 PiB"),
    (lambda: te.reduce_axis(2.5), "range must be an int or a pair of ints, got 2.5"),
    (lambda: te.reduce_axis(True), "range must be an int or a pair of ints, got True"),
    (lambda: te.reduce_axis((3, 1)), r"empty range \(3, 1\)")])
def test_te_refuses_shapes_that_are_no_shapes(make, match):
    with pytest.raises(TEError, match=match):
        make()
