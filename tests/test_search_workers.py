"""Search workers (tessel.search.workers): the programs a strategy makes in its worker
processes are the ones it makes alone; a failing worker, or a strategy the workers cannot
take, changes only where they are made; tune() lends its strategies workers and takes them
back."""
import pickle

import pytest

import tessel
from tessel import ops
from tessel.measure import MeasureResult
from tessel.schedule import Schedule
from tessel.search import make_strategy, program_key
from tessel.search import base as search_base
from tessel.search import worker as search_worker
from tessel.search import workers as search_workers
from tessel.search.workers import MAX_FAILURES, SearchWorkers
from tessel.space import FunctionSpace, make_space, postprocs_for
from tessel.tuning import tune

TARGET = tessel.Target("x86_64-avx2", cores=2)
FUNC = ops.matmul(48, 40, 36)


def strategy(name="evolutionary", seed=3, space=None, **kw):
    space = space or make_space("auto", TARGET)
    return make_strategy(name, space, FUNC, seed=seed, postprocs=postprocs_for(FUNC, TARGET),
                         **kw)


def keys(programs):
    return [None if p is None else program_key(p) for p in programs]


def measured(batch):
    """Seeded pseudo-times from each program's hash."""
    return [MeasureResult(costs=(1e-5 * (1 + int(program_key(p)[:6], 16) % 997),) * 2)
            for p in batch]


@pytest.fixture
def workers():
    pool = SearchWorkers(2)
    yield pool
    pool.close()


def test_workers_make_the_programs_made_here(workers):
    alone, helped = strategy(), strategy()
    helped.workers = workers
    samples = alone.sample_many(10)
    assert keys(helped.sample_many(10)) == keys(samples)
    parents = [p for p in samples if p is not None] * 2
    mutants = alone.mutate_many(parents)
    assert sum(m is not None for m in mutants) >= len(parents) // 2
    assert keys(helped.mutate_many(parents)) == keys(mutants)
    traces = [m.trace for m in mutants if m is not None]  # as a resumed run replays records
    assert keys(helped.replay_many(traces)) == keys(alone.replay_many(traces)) == \
        keys([m for m in mutants if m is not None])
    assert workers.failures == 0
    for _ in range(3):  # whole evolutionary rounds: the priors, then evolved batches
        a, b = alone.ask(8), helped.ask(8)
        assert keys(a) == keys(b) and len(a) == 8
        alone.tell(a, measured(a))
        helped.tell(b, measured(b))
    # and their programs come back hashed (the key travels with them)
    assert all("key" in vars(p) for p in helped.sample_many(3) if p is not None)


def test_annealing_with_workers_proposes_the_same_batches(workers):
    alone, helped = (strategy("annealing", seed=5, n_chains=6, max_steps=3) for _ in range(2))
    helped.workers = workers
    alone.tell(first := alone.ask(6), measured(first))
    helped.tell(second := helped.ask(6), measured(second))
    assert keys(alone.ask(6)) == keys(helped.ask(6))


def test_a_failing_worker_only_moves_the_work_here(workers, capsys):
    alone, helped = strategy(), strategy()
    helped.workers = workers
    for proc in workers._procs:
        proc.module = "tessel.no_such_module"  # each process dies as it starts
    made = helped.sample_many(8)
    assert keys(made) == keys(alone.sample_many(8))
    assert workers.failures >= 1
    while workers.usable:
        helped.sample_many(8), alone.sample_many(8)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"a search process failed {MAX_FAILURES} times" in line
    assert "made in this process" in line and "no_such_module" in line
    assert keys(helped.sample_many(4)) == keys(alone.sample_many(4))  # made here from now on


def test_a_strategy_the_workers_cannot_take_is_served_here(workers):
    space = FunctionSpace(lambda sch: None, name="as written")  # a lambda does not pickle
    helped = make_strategy("random", space, FUNC, seed=0)
    helped.workers = workers
    assert len([p for p in helped.sample_many(4) if p is not None]) == 4
    assert workers.failures == 0 and len(workers._here_only) == 1


def test_a_worker_answers_a_proposer_it_cannot_load_with_its_reason():
    blob = b"cno_such_module\nX\n."  # a pickle naming a class of a module it lacks
    reply = search_worker.handle({"key": "k", "proposer": blob,
                                  "jobs": [("sample", None, 1)]})
    assert reply["error"] == "proposer" and "no_such_module" in reply["msg"]
    good = search_worker.handle({"key": "g", "proposer": pickle.dumps(strategy().proposer),
                                 "jobs": [("sample", None, 1), ("sample", None, 2)]})
    assert isinstance(good, list) and len(good) == 2


def test_a_strategy_makes_its_priors_once(monkeypatch):
    s, calls = strategy(), []
    real = search_base.prior_schedules
    monkeypatch.setattr(search_base, "prior_schedules",
                        lambda space, func: calls.append(func) or real(space, func))
    first = s.priors()
    assert first and keys(s.priors()) == keys(first) and len(calls) == 1


def test_jobs_of_one_parent_go_out_together():
    a, b = Schedule(FUNC).trace, Schedule(FUNC).trace
    jobs = [("mutate", a, 1), ("sample", None, 2), ("mutate", b, 3), ("mutate", a, 4),
            ("sample", None, 5), ("mutate", b, 6)]
    assert search_workers._by_parent(jobs) == [1, 4, 0, 3, 2, 5]


def test_a_space_pickles_without_its_caches():
    s = strategy()
    assert s.sample() is not None and s.space._designs
    copy = pickle.loads(pickle.dumps(s.space))
    assert copy._designs == {} and copy._replays is None and s.space._designs
    assert copy.rules and len(copy.designs(FUNC)) == len(s.space.designs(FUNC))


def test_tune_lends_its_strategy_workers_and_takes_them_back(tmp_path, monkeypatch):
    monkeypatch.setattr("tessel.tuning.loop.count_cores", lambda: 2)
    given = strategy("evolutionary", population=12, generations=1)
    lent = []
    real_make = SearchWorkers.make

    def spy(self, strat, jobs):
        lent.append(len(jobs))
        return real_make(self, strat, jobs)
    monkeypatch.setattr(SearchWorkers, "make", spy)
    result = tune(FUNC, TARGET, 12, strategy=given, cost_model="random",
                  database=tmp_path / "t.db", batch_size=4, progress=False, rerun_top=0,
                  runner=FakeRunner(), builder=FakeBuilder())
    assert len(result.history) == 12 and lent  # the workers made programs
    assert given.workers is None  # given back as it came


class FakeBuilder:
    def build(self, cands):
        return [None] * len(cands)

    def close(self):
        pass


class FakeRunner:
    def run(self, cands, builds):
        return [MeasureResult(costs=(1e-5 * (1 + int(program_key(c)[:6], 16) % 997),) * 2)
                for c in cands]

    def close(self):
        pass
