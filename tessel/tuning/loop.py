"""tune() and tune_tasks(): the one place where space, strategy, cost model, builder, runner,
database and measure callbacks are wired together.

    result = tessel.tune(ops.SUITE["GMM"], trials=64, database="tessel.db")
    result.best_seconds, result.best_gflops, result.best_trace, result.module

A run resumes from the database: the trials already stored for this workload and target count
toward `trials`, warm the cost model and are never proposed again. tune() is pipelined: the
next batch is proposed while one compiles (`_loop`). Every batch is committed as soon as it
is measured, so a killed run loses at most the batch in flight (and the proposals made
meanwhile, never measured). At the end the best few programs are measured again and the
winner is the best re-measured one.

Ctrl-C (SIGINT, when tuning runs in the main thread) stops a run after the batch in flight is
measured and committed, and returns what was found (`TuneResult.interrupted`); a second
Ctrl-C stops at once (KeyboardInterrupt), losing only that batch.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from tessel import cost_model as cost_models
from tessel.codegen import Module, build
from tessel.cost_model import CostModel
from tessel.database import Database, TuningRecord
from tessel.ir import PrimFunc
from tessel.measure import Builder, LocalBuilder, LocalRunner, MeasureResult, Runner
from tessel.schedule import Trace
from tessel.search import MODEL_BASED, Proposal, SearchStrategy, make_strategy
from tessel.search.base import program_key
from tessel.space import SpaceLike, make_space, postprocs_for
from tessel.target import Target
from tessel.tuning.best import TuneError
from tessel.tuning.callbacks import MeasureCallback, default_callbacks, update_model
from tessel.tuning.progress import TuneProgress
from tessel.tuning.scheduler import TaskScheduler
from tessel.tuning.task import Task


@dataclass(frozen=True)
class Trial:
    """One measurement of a run: its index among the workload's trials, its mean seconds (inf
    for an error) and the best seconds so far."""
    index: int
    seconds: float
    best_seconds: float
    error_kind: str | None = None


@dataclass
class TuneResult:
    task: Task
    best_seconds: float
    best_trace: Trace | None
    best_func: PrimFunc
    history: list[Trial] = field(default_factory=list)
    module: Module | None = None
    trials_before: int = 0
    interrupted: bool = False  # stopped by Ctrl-C after committing the batch in flight
    remeasured_seconds: float = math.nan  # the winner timed again at the end (nan: not)

    @property
    def best_gflops(self) -> float:
        return self.task.gflops(self.best_seconds)


@dataclass
class TuneRun:
    """The state of one task's tuning: what measure callbacks see."""
    task: Task
    strategy: SearchStrategy
    model: CostModel | None
    db: Database
    builder: Builder
    runner: Runner
    label: str = ""  # the run's name in the database (tuning curves group by it)
    history: list[Trial] = field(default_factory=list)
    best_seconds: float = math.inf
    done: int = 0
    last_gain: int = 0  # trial count at the last improvement
    resumed: list[float] = field(default_factory=list)  # stored records' seconds, oldest first
    last_id: int = 0  # the database's last record of this task this run has taken in
    callbacks: list[MeasureCallback] = field(default_factory=list)


def tune(func: PrimFunc, target: Target | None = None, trials: int = 64, *,
         space: SpaceLike = "auto", strategy: str | SearchStrategy = "evolutionary",
         cost_model: str | CostModel = cost_models.DEFAULT,
         database: str | Path | Database | None = None,
         runner: Runner | None = None, builder: Builder | None = None, batch_size: int = 16,
         seed: int = 0, early_stopping: int | None = None, rerun_top: int = 3, name: str = "",
         progress: bool = True, strategy_options: dict[str, object] | None = None,
         callbacks: Sequence[MeasureCallback] = ()) -> TuneResult:
    """Search for a fast program of `func` on `target` within `trials` measurements in all
    (those already in the database included). Returns the best program found, built.
    `callbacks` run after each batch, after the built-in ones (tessel.tuning.callbacks)."""
    _check_args(func, trials, batch_size, early_stopping)
    task = Task(func, target if target is not None else Target("host"), name)
    run = _setup(task, space, strategy, cost_model, database, runner, builder, seed,
                 strategy_options or {})
    try:
        before = _resume(run)
        bar = TuneProgress(task.label, trials, run.done, task.flops, enabled=progress)
        run.callbacks = [*default_callbacks(bar), *callbacks]
        with _stop_on_interrupt() as stop:
            try:
                _loop(run, trials, batch_size, early_stopping, bar, stop)
            finally:
                bar.close()
            return _finish(run, 1 if stop.is_set() else rerun_top, before, stop.is_set())
    finally:
        _close_owned(run, builder, runner, database)


def tune_tasks(tasks: Sequence[Task], trials: int, *, scheduler: str = "gradient",
               space: SpaceLike = "auto", strategy: str = "evolutionary",
               cost_model: str | CostModel = cost_models.DEFAULT,
               database: str | Path | Database | None = None, runner: Runner | None = None,
               builder: Builder | None = None, batch_size: int = 16, seed: int = 0,
               rerun_top: int = 3, progress: bool = True,
               strategy_options: dict[str, object] | None = None,
               callbacks: Sequence[MeasureCallback] = ()) -> list[TuneResult]:
    """Tune many tasks (e.g. the layers of a model) within `trials` measurements in all: the
    task scheduler gives each round of `batch_size` trials to one task. One cost model, builder,
    runner and database serve every task."""
    if not tasks:
        raise TuneError("tune_tasks needs at least one task")
    _check_args(tasks[0].workload, trials, batch_size, None)
    target = tasks[0].target
    model = (cost_models.make(cost_model, target) if isinstance(cost_model, str)
             else cost_model)
    db = _open_database(database)
    given_builder, given_runner = builder, runner
    builder = builder if builder is not None else LocalBuilder(target)
    runner = runner if runner is not None else LocalRunner(target)
    runs = [_setup(t, space, strategy, model, db, runner, builder, seed + k,
                   strategy_options or {}) for k, t in enumerate(tasks)]
    before = [_resume(run) for run in runs]
    try:
        with _stop_on_interrupt() as stop:
            return _tune_rounds(runs, before, TaskScheduler(tasks, scheduler, seed=seed), trials,
                                batch_size, rerun_top, progress, stop, callbacks)
    finally:
        _close_owned(runs[0], given_builder, given_runner, database)


def _tune_rounds(runs: list[TuneRun], before: list[int], sched: TaskScheduler, trials: int,
                 batch_size: int, rerun_top: int, progress: bool, stop: threading.Event,
                 callbacks: Sequence[MeasureCallback]) -> list[TuneResult]:
    for k, run in enumerate(runs):  # the stored tuning curves, a round per batch
        best_so_far = list(itertools.accumulate(run.resumed, min))
        for end in range(batch_size, run.done + batch_size, batch_size):
            end = min(end, run.done)
            sched.record(k, end, best_so_far[end - 1])
    bar = TuneProgress(f"{len(runs)} tasks", trials, sum(before), enabled=progress,
                       latency=sched.total_latency)
    for run in runs:
        run.callbacks = [*default_callbacks(bar), *callbacks]
    try:
        while sum(r.done for r in runs) < trials and not stop.is_set() and \
                (k := sched.next_task()) is not None:
            left = trials - sum(r.done for r in runs)
            if not _round(runs[k], min(batch_size, left), bar):
                sched.finish(k)
            sched.record(k, runs[k].done, runs[k].best_seconds)
            bar.refresh()
    finally:
        bar.close()
    if stop.is_set():
        rerun_top = 1
    return [_finish(run, rerun_top, b, stop.is_set()) for run, b in zip(runs, before)]


# ---- steps ----

def _check_args(func: PrimFunc, trials: int, batch_size: int, early: int | None) -> None:
    if not isinstance(func, PrimFunc):
        raise TuneError(f"tune needs a PrimFunc (e.g. tessel.ops.SUITE['GMM']), got "
                        f"{type(func).__name__}")
    for label, value in (("trials", trials), ("batch_size", batch_size)):
        if not isinstance(value, int) or value < 1:
            raise TuneError(f"{label} must be a positive int, got {value!r}")
    if early is not None and (not isinstance(early, int) or early < 1):
        raise TuneError(f"early_stopping must be None or a positive int, got {early!r}")


def _setup(task: Task, space: SpaceLike, strategy: str | SearchStrategy,
           cost_model: str | CostModel, database: str | Path | Database | None,
           runner: Runner | None, builder: Builder | None, seed: int,
           options: dict[str, object]) -> TuneRun:
    space = make_space(space, task.target)
    model = (cost_models.make(cost_model, task.target) if isinstance(cost_model, str)
             else cost_model)
    uses_model = isinstance(strategy, SearchStrategy) or strategy in MODEL_BASED
    search = make_strategy(strategy, space, task.workload, seed=seed,
                           cost_model=model if uses_model else None,
                           postprocs=postprocs_for(task.workload, task.target), **options)
    db = _open_database(database)
    builder = builder if builder is not None else LocalBuilder(task.target)
    runner = runner if runner is not None else LocalRunner(task.target)
    # unique among runs sharing the database: two runs started in one second differ by pid
    label = (f"{getattr(search, 'name', search)} {time.strftime('%Y-%m-%d %H:%M:%S')} "
             f"#{os.getpid()}")
    return TuneRun(task, search, model, db, builder, runner, label)


def _close_owned(run: TuneRun, builder: Builder | None, runner: Runner | None,
                 database: str | Path | Database | None) -> None:
    """Close the builder, runner and database that tune() made itself (not those it was
    given)."""
    for given, made in ((builder, run.builder), (runner, run.runner)):
        if given is None:
            made.close()
    if not isinstance(database, Database):
        run.db.close()


def _open_database(database: str | Path | Database | None) -> Database:
    if isinstance(database, Database):
        return database
    if database is None:  # a throwaway database: nothing is kept after the run
        database = Path(tempfile.mkdtemp(prefix="tessel-")) / "records.db"
    return Database(database)


def _resume(run: TuneRun) -> int:
    """Feed the records already stored to the strategy and the model; return their count."""
    run.last_id, records = run.db.new_records(run.task.workload, run.task.target)
    _take_in(run, records)
    run.done = run.last_gain = len(records)
    run.resumed = [r.mean_secs for r in records]
    run.best_seconds = min(run.resumed, default=math.inf)
    return run.done


def _take_in(run: TuneRun, records: Sequence[TuningRecord]) -> None:
    """Tell the strategy and the model about stored records (replayed; a trace that no longer
    replays is skipped)."""
    proposals, results = [], []
    for record in records:
        trace = record.trace()
        p = run.strategy.replay(trace) if trace is not None else None
        if p is not None:
            proposals.append(p)
            results.append(record.result())
    if proposals:
        run.strategy.tell(proposals, results)
        update_model(run, proposals, results)


def _sync(run: TuneRun) -> int:
    """Take in what other runs sharing the database committed for this task since this run
    last looked: they count toward the budget and are never proposed again. Returns how many."""
    run.last_id, records = run.db.new_records(run.task.workload, run.task.target, run.last_id)
    others = [r for r in records if r.run != run.label]
    _take_in(run, others)
    run.done += len(others)
    run.best_seconds = min([run.best_seconds, *(r.mean_secs for r in others
                                                if not r.result().disturbed)])
    return len(others)


@contextlib.contextmanager
def _stop_on_interrupt():
    """An Event set by the first Ctrl-C (the run then stops after its batch in flight); the
    second raises KeyboardInterrupt. Only in the main thread (elsewhere signals cannot be
    caught), and only where SIGINT has Python's default handler (a caller's own is kept)."""
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or \
            previous is not signal.default_int_handler:
        yield stop
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print("\ntessel: stopping after the batch in flight is measured and stored "
              "(Ctrl-C again to stop now)", file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, interrupted)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def _loop(run: TuneRun, trials: int, batch_size: int, early: int | None, bar: TuneProgress,
          stop: threading.Event) -> None:
    """The pipelined loop: while one batch builds (compiler processes), the next is proposed
    (Python); measuring has the machine to itself. A batch is proposed from what was measured
    before the batch in flight (one batch behind), and claimed in the database when proposed,
    so nothing is proposed or measured twice. A batch proposed but not measured when the run
    stops gives its claims back; a run killed at any moment loses at most the batch being
    measured and the one proposed after it (their claims lapse with the process)."""
    def propose(in_flight: int) -> list[Proposal] | None:
        return _propose(run, min(batch_size, trials - run.done - in_flight), bar, trials,
                        in_flight)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tessel-build") as pool:
        following: list[Proposal] | None = []
        while run.done < trials and not stop.is_set():
            batch = following or propose(0)
            if batch is None:
                break  # nothing new left in the space
            if not batch:
                continue  # every program proposed is another run's to measure
            cands = _candidates(run, batch)
            building = pool.submit(run.builder.build, cands)
            following = propose(len(batch)) if not stop.is_set() else []
            try:
                _told(run, batch, run.runner.run(cands, building.result()))
            except BaseException:  # what was not committed is given back
                _release(run, [*batch, *(following or [])])
                raise
            if following is None:
                break
            if early is not None and run.done - run.last_gain >= early:
                break
        _release(run, following)


def _release(run: TuneRun, batch: Sequence[Proposal] | None) -> None:
    """Give back the claims of proposed programs that will not be measured."""
    if batch:
        run.db.release(run.task.workload, run.task.target, [program_key(p) for p in batch],
                       run.label)


def _round(run: TuneRun, n: int, bar: TuneProgress, budget: int | None = None) -> bool:
    """Measure one batch of up to n new programs (and no more than `budget` trials of the
    task in all); False when the strategy has none left. Programs another run sharing the
    database measures or has measured are left to it."""
    batch = _propose(run, n, bar, budget)
    if batch is None:
        return False
    if batch:
        _told(run, batch, _measure(run, batch))
    return True


def _propose(run: TuneRun, n: int, bar: TuneProgress, budget: int | None = None,
             in_flight: int = 0) -> list[Proposal] | None:
    """Up to n new programs claimed for this run (no more than `budget` trials in all, counting
    `in_flight` ones); [] when none could be claimed or the budget is spent, None when the
    strategy has nothing new left."""
    bar.others(_sync(run), run.best_seconds)
    if budget is not None:
        n = min(n, budget - run.done - in_flight)
    if n <= 0:
        return []
    batch = run.strategy.ask(n)
    if not batch:
        return None
    granted = run.db.claim(run.task.workload, run.task.target,
                           [program_key(p) for p in batch], run.label)
    run.strategy.skip([p for p, ok in zip(batch, granted) if not ok])
    return [p for p, ok in zip(batch, granted) if ok]


def _told(run: TuneRun, batch: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
    """Record a measured batch and run the measure callbacks (commit, cost model, progress
    line, log, the user's)."""
    if _record(run, batch, results):
        run.last_gain = run.done
    for callback in run.callbacks:
        callback(run, batch, results)


def _candidates(run: TuneRun, batch: Sequence[Proposal]) -> list:
    return [p.candidate(run.task.workload) for p in batch]


def _measure(run: TuneRun, batch: Sequence[Proposal]) -> list[MeasureResult]:
    cands = _candidates(run, batch)
    return run.runner.run(cands, run.builder.build(cands))


def _record(run: TuneRun, batch: Sequence[Proposal], results: Sequence[MeasureResult]) -> bool:
    """Tell the strategy; extend the history. True if the best improved."""
    run.strategy.tell(batch, results)
    improved = False
    for res in results:
        if res.mean_secs < run.best_seconds and not res.disturbed:
            run.best_seconds, improved = res.mean_secs, True
        run.history.append(Trial(run.done, res.mean_secs, run.best_seconds, res.error_kind))
        run.done += 1
    return improved


def _finish(run: TuneRun, rerun_top: int, before: int, interrupted: bool = False) -> TuneResult:
    """Measure the database's best few again; the best re-measured one wins (a lucky stored
    time does not). Its time is the database's (`best_seconds`), the re-measure beside it
    (`remeasured_seconds`): both runs of a shared database report the same records. Build it."""
    task = run.task
    top = [(r, run.strategy.replay(r.trace())) for r in
           run.db.top_k(task.workload, task.target, k=max(1, rerun_top)) if r.trace_json]
    top = [(r, p) for r, p in top if p is not None]
    if not top:
        return TuneResult(task, math.inf, None, task.workload, run.history, None, before,
                          interrupted)
    again, i = [math.nan], 0
    if rerun_top > 1 and len(top) > 1:
        results = _measure(run, [p for _, p in top])  # not new trials: no callbacks
        again = [r.mean_secs if r.ok and not r.disturbed else math.inf for r in results]
        if math.isfinite(min(again)):  # else every re-measurement failed: the stored best
            i = again.index(min(again))
    record, best = top[i]
    return TuneResult(task, record.mean_secs, best.trace, best.func, run.history,
                      build(best.func, task.target), before, interrupted,
                      again[i] if math.isfinite(again[i]) else math.nan)
