"""The tuning loop end to end: a real smoke run, every strategy with a fake runner, resuming,
interruption, early stopping, task scheduling and apply_best."""
import math
import re
import sqlite3
import threading

import numpy as np
import pytest

import tessel
from tessel import ops
from tessel.database import Database
from tessel.ir import structural_hash
from tessel.measure import MeasureResult
from tessel.search import make_strategy
from tessel.space import make_space
from tessel.tuning.task import Task
from tessel.tuning import TuneError, apply_best, tune, tune_tasks

TARGET = tessel.Target("x86_64-avx2", cores=2)
SMALL = {"evolutionary": dict(population=12, generations=1),
         "annealing": dict(n_chains=6, max_steps=4, early_stop=2), "genetic": dict(population=4)}


class FakeBuilder:
    def build(self, cands):
        return [None] * len(cands)


class FakeRunner:
    """Seeded pseudo-costs from each program's structural hash; remembers what it measured."""
    def __init__(self, fail_on_batch=None, constant=None):
        self.keys, self.batches = [], 0
        self.fail_on_batch, self.constant = fail_on_batch, constant

    def run(self, cands, builds):
        self.batches += 1
        if self.batches == self.fail_on_batch:
            raise KeyboardInterrupt("killed mid-run")
        out = []
        for c in cands:
            key = structural_hash(c.func)
            self.keys.append(key)
            secs = self.constant or 1e-5 * (1 + int(key[:6], 16) % 997)
            out.append(MeasureResult(costs=(secs, secs)))
        return out

    def close(self):
        pass


def fake_tune(func, trials, db, runner=None, strategy="random", **kw):
    return tune(func, TARGET, trials, strategy=strategy, cost_model="random", database=db,
                runner=runner or FakeRunner(), builder=FakeBuilder(), batch_size=4,
                progress=False, strategy_options=SMALL.get(strategy), **kw)


def test_smoke_tunes_a_tiny_matmul_for_real(tmp_path):
    func = ops.matmul(24, 20, 12)
    result = tune(func, TARGET, 6, strategy="random", cost_model="random", batch_size=3,
                  database=tmp_path / "r.db", progress=False)
    assert math.isfinite(result.best_seconds) and result.best_seconds > 0
    assert len(result.history) == 6 and result.best_gflops > 0
    records = Database(tmp_path / "r.db").records(func, TARGET)
    assert len(records) == 6 and len({r.run for r in records}) == 1
    assert records[0].run.startswith("random 20")  # strategy and start time
    a, b = (np.random.default_rng(0).standard_normal(s).astype(np.float32)
            for s in ((24, 12), (12, 20)))
    c = np.zeros((24, 20), np.float32)
    result.module(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("strategy", ["random", "evolutionary", "annealing", "genetic"])
def test_each_strategy_runs_end_to_end_without_repeats(tmp_path, strategy):
    runner = FakeRunner()
    result = fake_tune(ops.matmul(32, 24, 16), 12, tmp_path / "r.db", runner, strategy)
    assert len(result.history) == 12
    measured = runner.keys[:12]  # then the re-measurement of the best few
    assert len(set(measured)) == 12
    assert math.isclose(result.best_seconds, min(h.seconds for h in result.history))


def test_grid_search_over_a_template(tmp_path):
    runner = FakeRunner()
    result = tune(ops.matmul(32, 24, 16), TARGET, 8, space="matmul", strategy="grid",
                  cost_model="random", database=tmp_path / "r.db", runner=runner,
                  builder=FakeBuilder(), batch_size=4, progress=False)
    assert len(result.history) == 8 and len(set(runner.keys[:8])) == 8


def test_a_second_run_resumes_from_the_database(tmp_path):
    func, db, runner = ops.matmul(32, 24, 16), tmp_path / "r.db", FakeRunner()
    fake_tune(func, 8, db, runner, "evolutionary", rerun_top=0)
    second = fake_tune(func, 14, db, runner, "evolutionary", rerun_top=0)
    assert second.trials_before == 8 and len(second.history) == 6
    assert len(set(runner.keys)) == len(runner.keys) == 14
    assert Database(db).count(func, TARGET) == 14


def test_an_interrupted_run_restarts_to_the_same_count_without_repeats(tmp_path):
    func, db = ops.matmul(32, 24, 16), tmp_path / "r.db"
    killed = FakeRunner(fail_on_batch=3)
    with pytest.raises(KeyboardInterrupt):
        fake_tune(func, 16, db, killed)
    assert Database(db).count(func, TARGET) == 8  # two whole batches were committed
    again = FakeRunner()
    result = fake_tune(func, 16, db, again, rerun_top=0)
    assert result.trials_before == 8 and len(result.history) == 8
    assert not set(killed.keys) & set(again.keys)
    assert Database(db).count(func, TARGET) == 16


class WaitingBuilder:
    """Finishes building batch k only once batch k + 1 has been asked for (it notes whether
    that happened within a few seconds): a loop that proposes while it builds passes, a
    sequential one waits out every timeout."""
    def __init__(self, strategy, batches):
        self.asks, self.builds, self.batches, self.overlapped = 0, 0, batches, []
        self.cond = threading.Condition()
        ask = strategy.ask

        def counted(n):
            with self.cond:
                self.asks += 1
                self.cond.notify_all()
            return ask(n)
        strategy.ask = counted

    def build(self, cands):
        self.builds += 1
        if self.builds < self.batches:  # the last batch has no next one
            with self.cond:
                self.overlapped.append(self.cond.wait_for(lambda: self.asks > self.builds, 5))
        return [None] * len(cands)


def test_the_next_batch_is_proposed_while_one_builds_and_nothing_is_measured_twice(tmp_path):
    func = ops.matmul(32, 24, 16)
    strategy = make_strategy("random", make_space("auto", TARGET), func, seed=0)
    builder, runner = WaitingBuilder(strategy, 4), FakeRunner()
    result = tune(func, TARGET, 16, strategy=strategy, cost_model="random",
                  database=tmp_path / "r.db", runner=runner, builder=builder, batch_size=4,
                  progress=False, rerun_top=0)
    assert builder.overlapped == [True, True, True]
    assert len(result.history) == 16 and len(set(runner.keys)) == len(runner.keys) == 16
    assert Database(tmp_path / "r.db").count(func, TARGET) == 16


class FailingRunner(FakeRunner):
    """Sees batch `fail_on_batch` and then fails, as a runner whose machine went away."""
    def run(self, cands, builds):
        if self.batches + 1 == self.fail_on_batch:
            self.batches += 1
            self.lost = [structural_hash(c.func) for c in cands]
            raise RuntimeError("the device pool went away")
        return super().run(cands, builds)


def test_a_failed_batch_loses_nothing_measured_and_gives_its_claims_back(tmp_path):
    func, db = ops.matmul(32, 24, 16), tmp_path / "r.db"
    runner = FailingRunner(fail_on_batch=3)
    with pytest.raises(RuntimeError, match="went away"):
        fake_tune(func, 24, db, runner)
    assert Database(db).count(func, TARGET) == 8  # the two batches measured are stored
    with sqlite3.connect(db) as c:  # the failed batch and the one proposed after it
        pending = c.execute("SELECT COUNT(*) FROM claims WHERE done = 0").fetchone()[0]
    assert pending == 0
    again = Database(db)
    assert all(again.claim(func, TARGET, runner.lost, "another run"))
    again.close()


def test_early_stopping_ends_a_run_without_progress(tmp_path):
    result = fake_tune(ops.matmul(32, 24, 16), 40, tmp_path / "r.db",
                       FakeRunner(constant=1e-4), early_stopping=8)
    assert len(result.history) == 12  # the first batch sets the best; two more find nothing


def test_tune_tasks_spreads_the_budget(tmp_path):
    tasks = [Task(ops.matmul(32, 24, 16), TARGET, "a"), Task(ops.matmul(16, 40, 8), TARGET, "b", 3)]
    results = tune_tasks(tasks, 16, cost_model="random", database=tmp_path / "r.db",
                         runner=FakeRunner(), builder=FakeBuilder(), batch_size=4,
                         progress=False, strategy="random")
    counts = [len(r.history) for r in results]
    assert sum(counts) == 16 and min(counts) >= 4
    assert all(math.isfinite(r.best_seconds) for r in results)


def test_resumed_tasks_give_the_scheduler_their_stored_tuning_curves(tmp_path, monkeypatch):
    """A second tune_tasks replays each task's stored records as rounds of batch_size, so the
    gradient scheduler knows how long a task has gone without improving."""
    from tessel.tuning.scheduler import TaskScheduler
    tasks = [Task(ops.matmul(32, 24, 16), TARGET, "a"), Task(ops.matmul(16, 40, 8), TARGET, "b")]
    kw = dict(cost_model="random", database=tmp_path / "r.db", builder=FakeBuilder(),
              batch_size=4, progress=False, strategy="random")
    tune_tasks(tasks, 16, runner=FakeRunner(), **kw)
    stored = [Database(tmp_path / "r.db").records(t.workload, TARGET) for t in tasks]
    calls = []
    real = TaskScheduler.record
    monkeypatch.setattr(TaskScheduler, "record",
                        lambda self, i, n, best: (calls.append((i, n, best)),
                                                  real(self, i, n, best)))
    tune_tasks(tasks, 20, runner=FakeRunner(), **kw)
    assert sum(map(len, stored)) == 16
    for i, records in enumerate(stored):
        replayed = [(n, best) for k, n, best in calls[:16 // 4] if k == i]
        ends = list(range(4, len(records) + 1, 4))
        assert [n for n, _ in replayed] == ends and len(records) % 4 == 0
        assert [b for _, b in replayed] == [min(r.mean_secs for r in records[:n]) for n in ends]


def test_a_resumed_model_trains_once_and_retimes_only_what_it_measured(tmp_path,
                                                                       monkeypatch):
    """Resuming many tasks trains the shared cost model once on all their records (it
    trained once per task); a task the second call measures nothing of keeps its stored
    choice, not re-timed."""
    from tessel.cost_model.base import CostModel
    tasks = [Task(ops.matmul(32, 24, 16), TARGET, "a"), Task(ops.matmul(16, 40, 8), TARGET, "b")]
    kw = dict(cost_model="xgb", database=tmp_path / "r.db", builder=FakeBuilder(),
              batch_size=4, progress=False, runner=FakeRunner(),
              strategy_options=SMALL["evolutionary"])
    tune_tasks(tasks, 16, **kw)
    updates = []
    real = CostModel.update
    monkeypatch.setattr(CostModel, "update", lambda self, cands, results: (
        updates.append(len({id(c.workload) for c in cands})), real(self, cands, results)))
    second = tune_tasks(tasks, 20, scheduler="round-robin", **kw)  # one round: to task a
    assert updates == [2, 1]  # both tasks' records at once, then the one round's
    stored = [Database(tmp_path / "r.db").records(t.workload, TARGET) for t in tasks]
    assert sum(map(len, stored)) == 20
    measured, kept = (second[0], second[1]) if second[0].history else (second[1], second[0])
    assert len(measured.history) == 4 and not kept.history
    assert math.isfinite(measured.remeasured_seconds) and math.isnan(kept.remeasured_seconds)
    assert math.isfinite(kept.best_seconds)


def test_apply_best_says_when_nothing_is_tuned(tmp_path):
    func = ops.matmul(8, 8, 8)
    with pytest.warns(UserWarning, match="holds no valid tuning record of matmul"):
        mod = apply_best(func, TARGET, tmp_path / "empty.db")
    assert mod.func is func
    with pytest.raises(TuneError, match="run `tessel tune` first"):
        apply_best(func, TARGET, tmp_path / "empty.db", strict=True)


def test_apply_best_builds_the_best_record(tmp_path):
    func, db = ops.matmul(24, 20, 12), tmp_path / "r.db"
    result = fake_tune(func, 8, db, rerun_top=0)
    mod = apply_best(func, TARGET, db, strict=True)
    assert structural_hash(mod.func) == structural_hash(result.best_func)
    a, b = ops.reference_inputs(func, seed=1)
    c = np.zeros((24, 20), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kw, match", [(dict(trials=0), "trials must be a positive int"),
                                       (dict(batch_size=-1), "batch_size"),
                                       (dict(early_stopping=0), "early_stopping")])
def test_bad_arguments_are_named(kw, match):
    with pytest.raises(TuneError, match=match):
        tune(ops.matmul(8, 8, 8), TARGET, **({"trials": 4} | kw), progress=False)
    with pytest.raises(TuneError, match="needs a PrimFunc"):
        tune("GMM", TARGET, 4)


class ErrorEveryThird(FakeRunner):
    """Every third program fails to run (a "runtime_error" with a message)."""
    def run(self, cands, builds):
        out = super().run(cands, builds)
        return [MeasureResult.error("runtime_error", f"kernel {k} crashed\nat line 3")
                if (len(self.keys) - len(out) + k) % 3 == 2 else r for k, r in enumerate(out)]


def test_user_callbacks_see_every_batch_after_it_is_stored(tmp_path):
    seen = []

    def callback(run, batch, results):
        stored = Database(run.db.path).count(run.task.workload, run.task.target)
        seen.append((len(batch), len(results), run.done, stored))
    fake_tune(ops.matmul(16, 16, 16), 10, tmp_path / "r.db", callbacks=[callback])
    assert [n for n, _, _, _ in seen] == [4, 4, 2]
    assert all(n == m for n, m, _, _ in seen)
    assert [done for _, _, done, _ in seen] == [4, 8, 10]
    assert [stored for _, _, _, stored in seen] == [4, 8, 10]  # committed before it is called


def test_the_tessel_logger_says_each_batch_and_each_kind_of_error(tmp_path, caplog):
    caplog.set_level("INFO", logger="tessel")
    fake_tune(ops.matmul(32, 32, 32), 8, tmp_path / "r.db", runner=ErrorEveryThird())
    batches = [r for r in caplog.records if r.levelname == "INFO"]
    assert len(batches) == 2 and "trials in all" in batches[0].getMessage()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2  # one per batch: its only kind of error
    assert all("runtime_error in this batch, e.g.: kernel" in w and "line 3" not in w
               for w in warnings)


def test_tune_closes_the_database_it_opened_and_keeps_one_it_was_given(tmp_path):
    db = Database(tmp_path / "given.db")
    fake_tune(ops.matmul(16, 16, 16), 4, db)
    assert db.count() == 4  # still open
    fake_tune(ops.matmul(16, 16, 16), 4, tmp_path / "own.db")
    assert not list(tmp_path.glob("own.db-wal"))  # closed: SQLite removed its WAL


# ---- runs sharing a database share its budget ----

class GatedRunner(FakeRunner):
    """Holds its first batch until the test opens the gate, and says when it got there."""
    def __init__(self):
        super().__init__()
        self.arrived, self.gate = threading.Event(), threading.Event()

    def run(self, cands, builds):
        if self.batches == 0:
            self.arrived.set()
            self.gate.wait()
        return super().run(cands, builds)


def run_in_threads(jobs):
    """Start each job in a thread; return a function that joins them and gives their results
    (re-raising the first error)."""
    results, errors = [None] * len(jobs), []

    def call(k):
        try:
            results[k] = jobs[k]()
        except BaseException as err:  # noqa: BLE001 (re-raised in the test's thread)
            errors.append(err)
    threads = [threading.Thread(target=call, args=(k,)) for k in range(len(jobs))]

    def join():
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return results
    return threads, join


def test_runs_sharing_a_database_never_overshoot_its_budget(tmp_path):
    """Run A claims its first batch and the next one and is held measuring; run B then gets
    only what is left of the 12 trials (before, it claimed a whole batch beyond them, and
    each measured two batches: 16 records). Both report the database's best."""
    func, db = ops.matmul(32, 24, 16), tmp_path / "shared.db"
    Database(db).close()  # (made before: runs opening a new file at once is another matter)
    runners = [GatedRunner(), GatedRunner()]
    threads, join = run_in_threads([lambda k=k: fake_tune(func, 12, db, runners[k], seed=k,
                                                          rerun_top=0) for k in range(2)])
    for thread, runner in zip(threads, runners):  # A holds 8 claims, then B takes 4
        thread.start()
        runner.arrived.wait()
    for runner in runners:
        runner.gate.set()
    results = join()
    with Database(db) as database:
        stored = database.records(func, TARGET)
        best = database.top_k(func, TARGET, k=1)[0]
        assert database.trials(func, TARGET) == 12  # and no claim left pending
    assert len(stored) == 12 and sorted(len(r.history) for r in results) == [4, 8]
    assert len({r.run for r in stored}) == 2
    assert [r.best_seconds for r in results] == [best.mean_secs] * 2


def test_three_runs_of_one_budget_store_it_exactly_and_agree_on_the_best(tmp_path):
    func, db = ops.matmul(32, 24, 16), tmp_path / "shared.db"
    Database(db).close()
    threads, join = run_in_threads([lambda k=k: fake_tune(func, 12, db, seed=k % 2)
                                    for k in range(3)])
    for thread in threads:
        thread.start()
    results = join()
    with Database(db) as database:
        stored = database.records(func, TARGET)
        best = database.top_k(func, TARGET, k=1)[0]
        chosen = database.selection(func, TARGET)
    assert len(stored) == 12 and sum(len(r.history) for r in results) == 12
    assert all(math.isclose(r.best_seconds, best.mean_secs) for r in results)
    assert chosen.trace_json == best.trace_json and math.isclose(chosen.mean_secs,
                                                                 best.mean_secs)
    assert all(r.trials_before + len(r.history) <= 12 for r in results)


def test_an_error_while_the_next_batch_is_proposed_gives_the_claims_back(tmp_path):
    """Claims a run will not commit do not hold other runs' shared budget until it exits."""
    func, db = ops.matmul(32, 24, 16), tmp_path / "r.db"
    strategy = make_strategy("random", make_space("auto", TARGET), func, seed=0)
    ask, calls = strategy.ask, []

    def ask_then_break(n):
        calls.append(n)
        if len(calls) == 2:  # the batch after the first, proposed while the first builds
            raise RuntimeError("the strategy broke")
        return ask(n)
    strategy.ask = ask_then_break
    with pytest.raises(RuntimeError, match="broke"):
        tune(func, TARGET, 12, strategy=strategy, cost_model="random", database=db,
             runner=FakeRunner(), builder=FakeBuilder(), batch_size=4, progress=False)
    with Database(db) as database:
        assert database.trials(func, TARGET) == 0  # the first batch's 4 claims are given back


def test_a_claim_past_a_shared_budget_is_refused(tmp_path):
    func = ops.matmul(8, 8, 8)
    with Database(tmp_path / "r.db") as db:
        assert db.claim(func, TARGET, ["a", "b", "c"], "run 1", budget=4) == [True] * 3
        assert db.claim(func, TARGET, ["a", "d", "e"], "run 2", budget=4) == [False, True, False]
        assert db.claim(func, TARGET, ["b", "f"], "run 1", budget=4) == [True, False]  # b: its own
        assert db.trials(func, TARGET) == 4
        db.release(func, TARGET, ["a"], "run 1")
        assert db.trials(func, TARGET) == 3
        assert db.claim(func, TARGET, ["f"], "run 2", budget=4) == [True]


def test_the_progress_line_keeps_a_total_when_other_runs_pass_it(capsys):
    from tessel.tuning.progress import TuneProgress
    bar = TuneProgress("GMM", 12, 10)
    bar.others(4, 1e-3)  # another run sharing the database had a larger budget
    assert bar.bar.n == 14 and bar.bar.total == 14
    bar.close()
    assert "14/14 trials" in capsys.readouterr().err


def test_the_progress_line_of_a_run_by_the_clock_shows_the_time_left(capsys):
    import time
    from tessel.tuning.progress import TuneProgress
    bar = TuneProgress("3 tasks", 10**9, 0, deadline=time.monotonic() + 600)
    bar.update([MeasureResult(costs=(1e-3,))], 1e-3)
    bar.close()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.search(r"^3 tasks 1 trials \[00:0\d\], 09:5\d left \| ", line), line


def test_tune_tasks_by_the_clock_starts_no_round_past_its_budget(tmp_path, monkeypatch):
    """With a time budget the rounds stop once the clock passes it, whatever trials are left:
    here the clock jumps past the budget after the first round."""
    from tessel.tuning import loop
    ticks = iter([0.0, 0.0] + [100.0] * 50)
    monkeypatch.setattr(loop, "clock", lambda: next(ticks))
    tasks = [Task(ops.matmul(32, 24, 16), TARGET, "a"), Task(ops.matmul(16, 40, 8), TARGET, "b")]
    results = tune_tasks(tasks, 64, cost_model="random", database=tmp_path / "r.db",
                         runner=FakeRunner(), builder=FakeBuilder(), batch_size=4,
                         progress=False, strategy="random", time_budget=5.0)
    assert sum(len(r.history) for r in results) == 4


@pytest.mark.parametrize("budget", [0, -1.0, float("inf"), float("nan"), "10m", True])
def test_a_time_budget_that_is_no_span_of_seconds_is_refused(budget):
    task = Task(ops.matmul(32, 24, 16), TARGET, "a")
    with pytest.raises(TuneError, match="time_budget must be None or a positive number"):
        tune_tasks([task], 8, time_budget=budget)
