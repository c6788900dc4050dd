"""The database as knowledge: tile sizes fitted to another extent, traces transplanted to
another shape of their program, the nearest tasks found, and a new task's first batch
holding their best programs (tessel.tuning.knowledge)."""
import math
import random

import pytest
from hypothesis import given, strategies as st

import tessel
from tessel import ops
from tessel.database import Database, record_program
from tessel.ir import structural_equal, structural_hash
from tessel.schedule import Schedule, ScheduleError, fit_tile, transplant
from tessel.search import make_strategy
from tessel.space import make_space, postprocs_for
from tessel.space.priors import partial_rows
from tessel.tuning import TuneError, tune
from tessel.tuning import knowledge
from tessel.tuning.knowledge import distance, nearest_traces, shape_of

from test_tune import SMALL, TARGET, FakeBuilder, FakeRunner

A = ops.matmul(64, 96, 80)  # three shapes of one program, B nearer to A than C is
B = ops.matmul(48, 128, 72)
C = ops.matmul(256, 24, 512)


@pytest.fixture
def no_shipped(monkeypatch):
    """Relatives from the databases of the test only (not the shipped model's programs)."""
    monkeypatch.setattr(knowledge, "shipped_programs", lambda target, name: [])


@given(extent=st.integers(1, 5000), decision=st.lists(st.integers(1, 64), min_size=1,
                                                      max_size=4), cap=st.integers(1, 64))
def test_fitted_tiles_multiply_to_the_extent_with_the_innermost_capped(extent, decision, cap):
    out = fit_tile(decision, extent, cap)
    assert len(out) == len(decision) and math.prod(out) == extent
    assert all(f >= 1 for f in out)
    if len(out) > 1:
        assert out[-1] <= cap


def test_fitted_tiles_keep_the_inner_factors_that_divide():
    assert fit_tile((7, 4, 16), 7 * 4 * 16, 16) == [7, 4, 16]  # the same extent: unchanged
    assert fit_tile((7, 4, 16), 96, 16) == [2, 3, 16]  # 16 divides 96; 3 is 6's nearest to 4
    assert fit_tile((1, 8), 100, 16) == [10, 10]  # 100's divisors nearest 8: 10 over 5
    assert fit_tile((3, 2, 16), 17, 16) == [17, 1, 1]  # a prime keeps nothing


def _sampled_trace(func, seed=0):
    space, rng = make_space("auto", TARGET), random.Random(seed)
    return space.sample(func, rng).trace


def test_a_transplanted_trace_builds_the_other_shape_with_fitted_tiles():
    for seed in range(4):
        trace = _sampled_trace(A, seed)
        sch = transplant(trace, Schedule(B))
        tiles = [i for i in trace.decisions
                 if trace.instructions[i].kind == "sample_perfect_tile"]
        assert [inst.kind for inst in sch.trace.instructions] == \
            [inst.kind for inst in trace.instructions]
        assert any(sch.trace.decisions[i] != trace.decisions[i] for i in tiles)  # fitted
        # a design splitting the rows by a register tile's count first tiles those splits
        split = partial_rows(trace)
        extents = set(shape_of(B)[1]) | {-(-e // split[1]) for e in shape_of(B)[1] if split}
        assert all(math.prod(sch.trace.decisions[i]) in extents for i in tiles)
        assert structural_equal(sch.trace.apply(Schedule(B)).func, sch.func)  # it replays


def test_on_its_own_shape_a_transplant_is_a_replay():
    trace = _sampled_trace(A, 3)
    assert structural_equal(transplant(trace, Schedule(A)).func, trace.apply(Schedule(A)).func)


def test_a_trace_of_another_program_does_not_transplant():
    with pytest.raises(ScheduleError):
        transplant(_sampled_trace(A), Schedule(ops.softmax(16, 24)))


def test_shapes_of_one_program_share_a_signature_and_differ_in_extents():
    (sa, ea), (sb, eb), (sc, ec) = shape_of(A), shape_of(B), shape_of(C)
    assert sa == sb == sc and shape_of(ops.softmax(16, 24))[0] != sa
    assert shape_of(ops.matmul(64, 96, 80, dtype="float64"))[0] != sa  # another element type
    assert ea == (64, 96, 80) and distance(ea, eb) < distance(ea, ec)
    assert distance(ea, ea) == 0


def _tuned(db, func, trials=8, **kw):
    return tune(func, TARGET, trials, strategy="evolutionary", cost_model="random", database=db,
                runner=FakeRunner(), builder=FakeBuilder(), batch_size=4, progress=False,
                strategy_options=SMALL["evolutionary"], rerun_top=0, **kw)


def _programs(db, func):
    posts = postprocs_for(func, TARGET)
    return {structural_hash(p) for r in db.records(func, TARGET)
            if (p := record_program(r, func, posts)) is not None}


def _transplants(dbs, func):
    strategy = make_strategy("evolutionary", make_space("auto", TARGET), func,
                             postprocs=postprocs_for(func, TARGET))
    strategy.carry_over(nearest_traces(dbs, func, TARGET))
    return {structural_hash(p.func) for p in strategy.transplants}


def test_nearest_tasks_come_first_the_task_itself_before_all(tmp_path, no_shipped):
    with Database(tmp_path / "r.db") as db:
        _tuned(db, A)
        _tuned(db, C)
        best_a, best_c = ([r.trace() for r in db.top_k(f, TARGET, 2)] for f in (A, C))
        assert nearest_traces([db], B, TARGET) == best_a + best_c
        assert nearest_traces([db], B, TARGET, tasks=1) == best_a
        assert nearest_traces([db], A, TARGET, tasks=1) == best_a  # another database's
        assert nearest_traces([db], A, TARGET) == best_a + best_c
        assert nearest_traces([db], ops.softmax(16, 24), TARGET) == []
        assert nearest_traces([db], B, tessel.Target("x86_64-sse")) == []  # another target's


def test_a_new_tasks_first_batch_holds_its_relatives_best_programs(tmp_path, no_shipped):
    with Database(tmp_path / "r.db") as db:
        _tuned(db, A)
        carried = _transplants([db], B)
        assert carried
        _tuned(db, B, trials=len(carried) + 4)
        assert carried <= _programs(db, B)


def test_another_database_is_read_and_never_written(tmp_path, no_shipped):
    with Database(tmp_path / "other.db") as other:
        _tuned(other, A)
        before = other.count()
        carried = _transplants([other], B)
    with Database(tmp_path / "own.db") as own:
        _tuned(own, B, trials=len(carried) + 4, transfer_from=[tmp_path / "other.db"])
        assert carried <= _programs(own, B)
    with Database(tmp_path / "other.db") as other:
        assert other.count() == before and other.count(B) == 0


def test_no_transplants_when_the_strategy_is_told_so(tmp_path, no_shipped):
    with Database(tmp_path / "r.db") as db:
        _tuned(db, A)
        carried = _transplants([db], B)
        tune(B, TARGET, 4, strategy="evolutionary", cost_model="random", database=db,
             runner=FakeRunner(), builder=FakeBuilder(), batch_size=4, progress=False,
             strategy_options={**SMALL["evolutionary"], "transplants": 0,
                               "priors": False}, rerun_top=0)
        assert not carried & _programs(db, B)


def test_a_missing_database_to_learn_from_is_refused_in_one_line(tmp_path):
    with pytest.raises(TuneError, match=r"transfer_from\[0\] must be an existing database"):
        _tuned(tmp_path / "r.db", B, transfer_from=[tmp_path / "nowhere.db"])
    assert not (tmp_path / "nowhere.db").exists() and not (tmp_path / "r.db").exists()
    with pytest.raises(TuneError, match="transfer_from must be a list"):
        _tuned(tmp_path / "r.db", B, transfer_from=str(tmp_path / "x.db"))


def test_the_shipped_models_programs_are_relatives_too(tmp_path, monkeypatch):
    from tessel.cost_model import pretrain_global, pairs_from_database, pretrained
    with Database(tmp_path / "r.db") as db:
        _tuned(db, A)
        model = pretrain_global([p for ps in pairs_from_database(db, TARGET).values()
                                 for p in ps], feature="per_store")
        best = [r.trace() for r in db.top_k(A, TARGET, 3)]
    path = pretrained.save_global(model, tmp_path / "family.json.gz", TARGET.isa_family,
                                  programs=[(A, best)])
    monkeypatch.setattr(pretrained, "path_for", lambda family: path)
    pretrained.forget()
    try:
        assert nearest_traces([], B, TARGET) == best[:2]
        assert nearest_traces([], B, TARGET, per_task=3) == best
        assert nearest_traces([], B, TARGET, shipped=False) == []
        assert nearest_traces([], ops.softmax(16, 24), TARGET) == []
        shipped = _transplants([], B)
        assert shipped  # a task tuned from an empty database starts from them
        # they come with the shipped cost model, not with a model from scratch
        for name, model, wanted in (("cold", "random", False),
                                    ("warm", pretrained.PretrainedModel(TARGET), True)):
            with Database(tmp_path / f"{name}.db") as db:
                tune(B, TARGET, 4, strategy="evolutionary", cost_model=model, database=db,
                     runner=FakeRunner(), builder=FakeBuilder(), batch_size=4,
                     progress=False, rerun_top=0,
                     strategy_options={**SMALL["evolutionary"], "priors": False})
                assert bool(shipped & _programs(db, B)) == wanted, name
    finally:
        pretrained.forget()
