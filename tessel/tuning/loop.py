"""tune() and tune_tasks(): the one place where space, strategy, cost model, builder, runner,
database and measure callbacks are wired together.

    result = tessel.tune(ops.SUITE["GMM"], trials=64, database="tessel.db")
    result.best_seconds, result.best_gflops, result.best_trace, result.module

A run resumes from the database: the trials already stored for this workload and target count
toward `trials`, warm the cost model and are never proposed again. Runs sharing a database
share the budget: what the others have stored or are measuring counts too, so asking each for
`trials` stores `trials` in all. The strategies make their programs (and replay the stored
ones) in one search process per core (tessel.search.workers), the same programs as made
here. tune() is pipelined: the next batch is proposed while one compiles (`_loop`). Every
batch is committed as soon as it is measured, so a killed run loses at most the batch in
flight (and the proposals made meanwhile, never measured). At the end the best few programs
are measured again and the winner is the best re-measured one.

Ctrl-C (SIGINT, when tuning runs in the main thread) stops a run after the batch in flight is
measured and committed, and returns what was found (`TuneResult.interrupted`); a second
Ctrl-C stops at once (KeyboardInterrupt), losing only that batch.
"""
from __future__ import annotations

import contextlib
import inspect
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
from tessel.database import Database, DatabaseError, TuningRecord
from tessel.ir import PrimFunc
from tessel.measure import Builder, LocalBuilder, LocalRunner, MeasureResult, Runner
from tessel.schedule import Trace
from tessel.search import MODEL_BASED, Proposal, SearchStrategy, make_strategy
from tessel.search.base import program_key
from tessel.search.workers import SearchWorkers
from tessel.space import SpaceLike, make_space, postprocs_for
from tessel.target import Target, as_target, count_cores
from tessel.tuning.args import check, check_args, check_func
from tessel.tuning.best import TuneError
from tessel.tuning.callbacks import MeasureCallback, default_callbacks, update_model
from tessel.tuning.knowledge import nearest_traces
from tessel.tuning.progress import TuneProgress
from tessel.tuning.retime import RETIME_ROUNDS, Choice, retime
from tessel.tuning.scheduler import TaskScheduler
from tessel.tuning.task import Task

WAIT_S = 0.5  # how often a run whose last trials other runs are measuring looks again
_RUNS = itertools.count()  # runs started in this process: each label is unique


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
    """What a run found. `best_seconds` is the chosen program's time re-timed at the end, as a
    user's process times it (tessel.tuning.retime), or its time in search (`search_seconds`)
    when it could not be re-timed (`remeasured_seconds` nan: an interrupted run)."""
    task: Task
    best_seconds: float
    best_trace: Trace | None
    best_func: PrimFunc
    history: list[Trial] = field(default_factory=list)
    module: Module | None = None
    trials_before: int = 0
    interrupted: bool = False  # stopped by Ctrl-C after committing the batch in flight
    remeasured_seconds: float = math.nan  # the winner re-timed at the end (nan: not)
    search_seconds: float = math.nan  # the winner's time in search (its tuning record's)

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
    knowledge: list[Database] = field(default_factory=list)  # other databases to learn from
    carried: bool = False  # whether the nearest tasks' programs were offered (_carry_over)
    workers: SearchWorkers | None = None  # the search processes the run gave its strategy


def tune(func: PrimFunc, target: Target | str | None = None, trials: int = 64, *,
         space: SpaceLike = "auto", strategy: str | SearchStrategy = "evolutionary",
         cost_model: str | CostModel = cost_models.DEFAULT,
         database: str | Path | Database | None = None,
         runner: Runner | None = None, builder: Builder | None = None, batch_size: int = 16,
         seed: int = 0, early_stopping: int | None = None, rerun_top: int = 3, name: str = "",
         progress: bool = True, strategy_options: dict[str, object] | None = None,
         callbacks: Sequence[MeasureCallback] = (),
         transfer_from: Sequence[str | Path | Database] = ()) -> TuneResult:
    """Search for a fast program of `func` on `target` (a Target or its name; None: this
    host) within `trials` measurements in all (those already in the database included, and
    those other runs sharing it are measuring). Returns the best program found, built.
    `callbacks` run after each batch, after the built-in ones (tessel.tuning.callbacks). At
    the end the best `rerun_top` are timed again, as a user's process times them, and the
    fastest is the result and the workload's stored choice (tessel.tuning.retime; 0: the
    fastest in search, not re-timed). A task new to the database starts from the best
    programs of its nearest relatives tuned before, in it and in `transfer_from` (databases
    read, never written; tessel.tuning.knowledge). Every argument is checked before any work
    (TuneError)."""
    check_func(func)
    target = as_target(target)
    check_args(target, trials=trials, space=space, strategy=strategy, cost_model=cost_model,
               database=database, runner=runner, builder=builder, batch_size=batch_size,
               seed=seed, early_stopping=early_stopping, rerun_top=rerun_top, name=name,
               progress=progress, strategy_options=strategy_options, callbacks=callbacks,
               transfer_from=transfer_from)
    task = Task(func, target, name)
    (run,) = _make_runs([task], space, strategy, _make_model(cost_model, target), database,
                        runner, builder, seed, strategy_options or {})
    try:
        run.knowledge = _open_knowledge(transfer_from)
        (before,) = _resume([run])
        bar = TuneProgress(task.label, trials, run.done, task.flops, enabled=progress)
        run.callbacks = [*default_callbacks(bar), *callbacks]
        with _stop_on_interrupt() as stop:
            with contextlib.closing(bar):
                _loop(run, trials, batch_size, early_stopping, bar, stop)
            return _finish(run, rerun_top, RETIME_ROUNDS, before, stop.is_set())
    finally:
        _close_knowledge(run.knowledge, transfer_from)
        _close_owned(run, builder, runner, database)


def tune_tasks(tasks: Sequence[Task], trials: int, *, scheduler: str = "gradient",
               space: SpaceLike = "auto", strategy: str = "evolutionary",
               cost_model: str | CostModel = cost_models.DEFAULT,
               database: str | Path | Database | None = None, runner: Runner | None = None,
               builder: Builder | None = None, batch_size: int = 16, seed: int = 0,
               rerun_top: int = 3, progress: bool = True,
               strategy_options: dict[str, object] | None = None,
               callbacks: Sequence[MeasureCallback] = (),
               time_budget: float | None = None,
               transfer_from: Sequence[str | Path | Database] = ()) -> list[TuneResult]:
    """Tune many tasks (e.g. the layers of a model; one target) within `trials` measurements
    in all: the task scheduler gives each round of `batch_size` trials to one task. With a
    `time_budget` (seconds, from this call) no round starts once it is spent: the round in
    flight ends, and the final re-timing of the best few of each task it measured follows
    (the others keep their stored choice). One cost model, builder, runner and database
    serve every task. A task new to the database starts from the best programs of its
    nearest relatives tuned before (in it, the other tasks' first rounds included, and in
    `transfer_from`). Every argument is checked before any work (TuneError)."""
    start = clock()
    target = _check_tasks(tasks)
    check_tune_tasks_args(target, trials, scheduler=scheduler, space=space, strategy=strategy,
                          cost_model=cost_model, database=database, runner=runner,
                          builder=builder, batch_size=batch_size, seed=seed,
                          rerun_top=rerun_top, progress=progress,
                          strategy_options=strategy_options, callbacks=callbacks,
                          time_budget=time_budget, transfer_from=transfer_from)
    runs = _make_runs(tasks, space, strategy, _make_model(cost_model, target), database,
                      runner, builder, seed, strategy_options or {})
    try:
        knowledge = _open_knowledge(transfer_from)
        for run in runs:
            run.knowledge = knowledge
        before = _resume(runs)
        with _stop_on_interrupt() as stop:
            rounds = Rounds(TaskScheduler(tasks, scheduler, seed=seed), trials, batch_size,
                            None if time_budget is None else start + time_budget)
            return _tune_rounds(runs, before, rounds, rerun_top, progress, stop, callbacks)
    finally:
        _close_knowledge(runs[0].knowledge, transfer_from)
        _close_owned(runs[0], builder, runner, database, runs)


def check_tune_tasks_args(target: Target, trials: int, **options: object) -> None:
    """TuneError for the first bad argument of tune_tasks(tasks, trials, **options), an
    unknown name included: tessel.tune_model checks its options so before loading a model."""
    known = [p for p in inspect.signature(tune_tasks).parameters if p not in ("tasks", "trials")]
    for key in options:
        check(key in known, f"tune_tasks takes no argument {key!r}; its arguments: "
                            f"{', '.join(known)}")
    check(not isinstance(options.get("strategy"), SearchStrategy),
          "tune_tasks takes a strategy name (it makes one strategy per task), not a "
          "SearchStrategy")
    check_args(target, trials=trials, **options)


def _check_tasks(tasks: object) -> Target:
    """The one target of a non-empty sequence of Tasks."""
    check(isinstance(tasks, Sequence) and not isinstance(tasks, str) and len(tasks) > 0,
          f"tune_tasks needs a non-empty list of Tasks, got {type(tasks).__name__}")
    for k, task in enumerate(tasks):
        check(isinstance(task, Task), f"tasks[{k}] must be a Task, got {type(task).__name__}")
        check(task.target == tasks[0].target, f"tasks[{k}] is for {task.target}, tasks[0] for "
                                              f"{tasks[0].target}: tune_tasks takes one target")
    return tasks[0].target


clock = time.monotonic  # the clock of time budgets (its deadlines are compared with it)


@dataclass
class Rounds:
    """How tune_tasks hands out its rounds: the task scheduler, the budget of measurements in
    all, a round's size, and the monotonic clock's deadline (None: no clock)."""
    sched: TaskScheduler
    trials: int
    batch_size: int
    deadline: float | None = None

    def left(self, runs: list[TuneRun]) -> int:
        """Trials a next round may take: none once the budget or the clock is spent."""
        if self.deadline is not None and clock() >= self.deadline:
            return 0
        return min(self.batch_size, self.trials - sum(r.done for r in runs))


def _tune_rounds(runs: list[TuneRun], before: list[int], rounds: Rounds, rerun_top: int,
                 progress: bool, stop: threading.Event,
                 callbacks: Sequence[MeasureCallback]) -> list[TuneResult]:
    sched, batch_size = rounds.sched, rounds.batch_size
    for k, run in enumerate(runs):  # the stored tuning curves, a round per batch
        best_so_far = list(itertools.accumulate(run.resumed, min))
        for end in range(batch_size, run.done + batch_size, batch_size):
            end = min(end, run.done)
            sched.record(k, end, best_so_far[end - 1])
    bar = TuneProgress(f"{len(runs)} tasks", rounds.trials, sum(before), enabled=progress,
                       latency=sched.total_latency, deadline=rounds.deadline)
    for run in runs:
        run.callbacks = [*default_callbacks(bar), *callbacks]
    with contextlib.closing(bar):
        while (left := rounds.left(runs)) > 0 and not stop.is_set() and \
                (k := sched.next_task()) is not None:
            if not _round(runs[k], left, bar):
                sched.finish(k)
            sched.record(k, runs[k].done, runs[k].best_seconds)
            bar.refresh()
    # one round: a model's kernels are chosen again in their model's sequence
    # (graph.compiler.select); a task this call measured nothing of keeps its stored choice
    return [_finish(run, rerun_top if run.history else 0, 1, b, stop.is_set())
            for run, b in zip(runs, before)]


# ---- steps ----

def _make_model(cost_model: str | CostModel, target: Target) -> CostModel:
    return cost_models.make(cost_model, target) if isinstance(cost_model, str) else cost_model


def _make_runs(tasks: Sequence[Task], space: SpaceLike, strategy: str | SearchStrategy,
               model: CostModel, database: str | Path | Database | None,
               runner: Runner | None, builder: Builder | None, seed: int,
               options: dict[str, object]) -> list[TuneRun]:
    """A run per task, sharing the model, builder, runner and database: their strategies
    are made first, the database opened last (a refused strategy option leaves no file)."""
    searches = [_make_strategy(task, space, strategy, model, seed + k, options)
                for k, task in enumerate(tasks)]
    builder, runner, db = _parts(tasks[0].target, builder, runner, database)
    runs = [TuneRun(task, search, model, db, builder, runner, _label(search))
            for task, search in zip(tasks, searches)]
    if count_cores() >= 2:  # the strategies make their programs on every core
        workers = SearchWorkers()
        for run in runs:
            if run.strategy.workers is None:  # (a strategy given with its own keeps them)
                run.strategy.workers = run.workers = workers
    return runs


def _make_strategy(task: Task, space: SpaceLike, strategy: str | SearchStrategy,
                   model: CostModel, seed: int, options: dict[str, object]) -> SearchStrategy:
    uses_model = isinstance(strategy, SearchStrategy) or strategy in MODEL_BASED
    try:
        return make_strategy(strategy, make_space(space, task.target), task.workload, seed=seed,
                             cost_model=model if uses_model else None,
                             postprocs=postprocs_for(task.workload, task.target), **options)
    except TypeError as err:  # an option's value of the wrong type (names are checked)
        if not options:
            raise
        raise TuneError(f"strategy_options {options!r}: {err}") from None


def _parts(target: Target, builder: Builder | None, runner: Runner | None,
           database: str | Path | Database | None) -> tuple[Builder, Runner, Database]:
    """The builder, runner and database given, or new ones (closed again when making the
    next one fails)."""
    made: list[Builder | Runner] = []
    try:
        if builder is None:
            builder = LocalBuilder(target)
            made.append(builder)
        if runner is None:
            runner = LocalRunner(target)
            made.append(runner)
        if database is None:  # a throwaway database: nothing is kept after the run
            database = Path(tempfile.mkdtemp(prefix="tessel-")) / "records.db"
        return builder, runner, Database.open(database, create=True)
    except BaseException:
        for part in made:
            part.close()
        raise


def _label(search: SearchStrategy) -> str:
    """The run's name in the database: unique among runs sharing it (two runs started in one
    second differ by process and by their count in it)."""
    return (f"{getattr(search, 'name', search)} {time.strftime('%Y-%m-%d %H:%M:%S')} "
            f"#{os.getpid()}.{next(_RUNS)}")


def _open_knowledge(sources: Sequence[str | Path | Database]) -> list[Database]:
    """The databases of `transfer_from`, opened (the paths were checked to exist)."""
    opened: list[Database] = []
    try:
        for source in sources:
            opened.append(source if isinstance(source, Database) else Database(source))
    except BaseException:
        _close_knowledge(opened, sources)
        raise
    return opened


def _close_knowledge(opened: Sequence[Database], sources: Sequence[object]) -> None:
    for db in opened:
        if not any(db is source for source in sources):
            db.close()


def _carry_over(run: TuneRun) -> None:
    """Offer a task new to the database the best programs of its nearest relatives tuned
    before, in the run's database and its knowledge (tessel.tuning.knowledge), and with the
    shipped cost model those shipped beside it, once."""
    run.carried = True
    if not run.strategy.max_transplants:
        return  # a strategy that measures none (or was told to take none)
    shipped = run.model is not None and run.model.ships_programs
    traces = nearest_traces([run.db, *run.knowledge], run.task.workload, run.task.target,
                            shipped=shipped)
    if traces:
        run.strategy.carry_over(traces)


def _close_owned(run: TuneRun, builder: Builder | None, runner: Runner | None,
                 database: str | Path | Database | None,
                 runs: Sequence[TuneRun] = ()) -> None:
    """Close the builder, runner and database that tune() made itself (not those it was
    given), and the search workers it gave `runs`' strategies (taken back from them)."""
    for each in runs or [run]:
        if each.workers is not None:
            each.strategy.workers = None
            each.workers.close()
    for given, made in ((builder, run.builder), (runner, run.runner)):
        if given is None:
            made.close()
    if not isinstance(database, Database):
        run.db.close()


def _resume(runs: Sequence[TuneRun]) -> list[int]:
    """Feed the records already stored to each run's strategy and to the model; return each
    run's count."""
    stored = []
    for run in runs:
        run.last_id, records = run.db.new_records(run.task.workload, run.task.target)
        stored.append((run, records))
        run.done = run.last_gain = len(records)
        run.resumed = [r.mean_secs for r in records]
        run.best_seconds = min(run.resumed, default=math.inf)
    _take_in(stored)
    return [run.done for run in runs]


def _take_in(stored: Sequence[tuple[TuneRun, Sequence[TuningRecord]]]) -> None:
    """Tell each run's strategy about its stored records (replayed, by its search workers
    when it has them; a trace that no longer replays is skipped), and the cost model all of
    them at once: one training, not one per task (a model of 68 tasks resuming from 1,156
    records trained 68 times, 12 s)."""
    taken: list[tuple[TuneRun, list[Proposal], list[MeasureResult]]] = []
    for run, records in stored:
        traces = [(record, record.trace()) for record in records]
        traces = [(record, trace) for record, trace in traces if trace is not None]
        made = run.strategy.replay_many([trace for _, trace in traces])
        kept = [(p, record.result()) for p, (record, _) in zip(made, traces) if p is not None]
        if kept:
            proposals, results = [p for p, _ in kept], [r for _, r in kept]
            run.strategy.tell(proposals, results)
            taken.append((run, proposals, results))
    if taken:  # the runs share one model (_make_runs)
        update_model(taken[0][0], [p for _, ps, _ in taken for p in ps],
                     [r for _, _, rs in taken for r in rs],
                     [run.task.workload for run, ps, _ in taken for _ in ps])


def _sync(run: TuneRun) -> int:
    """Take in what other runs sharing the database committed for this task since this run
    last looked: they count toward the budget and are never proposed again. Returns how many."""
    run.last_id, records = run.db.new_records(run.task.workload, run.task.target, run.last_id)
    others = [r for r in records if r.run != run.label]
    _take_in([(run, others)])
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
    so nothing is proposed or measured twice and runs sharing the database share `trials`
    (Database.trials counts what they have stored and what they are measuring). A batch
    proposed but not measured when the run stops gives its claims back; a run killed at any
    moment loses at most the batch being measured and the one proposed after it (their claims
    lapse with the process)."""
    batch: list[Proposal] | None = []
    following: list[Proposal] | None = []
    try:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tessel-build") as pool:
            while run.done < trials and not stop.is_set():
                batch, following = following or _propose(run, batch_size, bar, trials), []
                if batch is None:
                    break  # nothing new left in the space
                if not batch:  # every program proposed is another run's, or the rest of trials
                    _wait_for_others(run, trials, stop)
                    continue
                cands = _candidates(run, batch)
                building = pool.submit(run.builder.build, cands)
                following = _propose(run, batch_size, bar, trials) if not stop.is_set() else []
                _told(run, batch, run.runner.run(cands, building.result()))
                if following is None:
                    break
                if early is not None and run.done - run.last_gain >= early:
                    break
    finally:  # claims not committed (a batch that failed, one proposed after it) are given back
        _release(run, [*(batch or []), *(following or [])])


def _wait_for_others(run: TuneRun, budget: int, stop: threading.Event) -> None:
    """When other runs sharing the database are measuring the rest of the budget, wait a moment
    before looking again: for their commits, or for their claims to lapse (their process
    gone, or CLAIM_TTL_S passed)."""
    if run.db.trials(run.task.workload, run.task.target) >= budget:
        stop.wait(WAIT_S)


def _release(run: TuneRun, batch: Sequence[Proposal] | None) -> None:
    """Give back the claims of proposed programs that will not be measured (committed ones
    stay; a database that cannot be written keeps them until they lapse: the error that
    stopped the run is the one to report)."""
    if batch:
        with contextlib.suppress(DatabaseError):
            run.db.release(run.task.workload, run.task.target,
                           [program_key(p) for p in batch], run.label)


def _round(run: TuneRun, n: int, bar: TuneProgress) -> bool:
    """Measure one batch of up to n new programs; False when the strategy has none left.
    Programs another run sharing the database measures or has measured are left to it."""
    batch = _propose(run, n, bar)
    if batch is None:
        return False
    try:
        if batch:
            _told(run, batch, _measure(run, batch))
    except BaseException:  # what was not committed is given back
        _release(run, batch)
        raise
    return True


def _propose(run: TuneRun, n: int, bar: TuneProgress,
             budget: int | None = None) -> list[Proposal] | None:
    """Up to n new programs claimed for this run, no more than `budget` trials of the task in
    all, counting those stored and those claimed (this run's batch in flight and other runs'
    included); [] when none could be claimed or the budget is taken up, None when the strategy
    has nothing new left."""
    bar.others(_sync(run), run.best_seconds)
    if budget is not None:
        n = min(n, budget - run.db.trials(run.task.workload, run.task.target))
    if n <= 0:
        return []
    if run.done == 0 and not run.carried:
        _carry_over(run)
    batch = run.strategy.ask(n)
    if not batch:
        return None
    granted = run.db.claim(run.task.workload, run.task.target,
                           [program_key(p) for p in batch], run.label, budget)
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


def _finish(run: TuneRun, rerun_top: int, rounds: int, before: int,
            interrupted: bool = False) -> TuneResult:
    """Time the database's best `rerun_top` again in `rounds` rounds, as a user's process
    times them (tessel.tuning.retime; with rerun_top 0 or when interrupted, the fastest
    stored one is the best, not re-timed); store the choice and report it. Build it."""
    task = run.task
    top = [(r, run.strategy.replay(r.trace())) for r in
           run.db.top_k(task.workload, task.target, k=max(1, rerun_top)) if r.trace_json]
    top = [(r, p) for r, p in top if p is not None]
    if not top:
        return TuneResult(task, math.inf, None, task.workload, run.history, None, before,
                          interrupted)
    if interrupted or rerun_top == 0:
        choice = Choice(*top[0])
    else:  # not new trials: no callbacks
        choice = retime(run.runner, run.builder, task.workload, top, rounds, run.label)
    if choice.retimed is not None:
        run.db.commit([choice.retimed])
    found = choice.proposal
    seconds = choice.seconds if math.isfinite(choice.seconds) else choice.record.mean_secs
    return TuneResult(task, seconds, found.trace, found.func, run.history,
                      build(found.func, task.target), before, interrupted, choice.seconds,
                      choice.record.mean_secs)
