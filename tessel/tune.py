"""tune() and apply_best(): the one place where space, strategy, cost model, builder, runner and
database are wired together.

    result = tessel.tune(ops.SUITE["GMM"], trials=64, database="tessel.db")
    result.best_seconds, result.best_gflops, result.best_trace, result.module
    mod = tessel.apply_best(ops.SUITE["GMM"], database="tessel.db")

A run resumes from the database: the trials already stored for this workload and target count
toward `trials`, warm the cost model and are never proposed again. Every batch is committed
as soon as it is measured, so a killed run loses at most the batch in flight. At the end the
best few programs are measured again and the winner is the best re-measured one.

Ctrl-C (SIGINT, when tuning runs in the main thread) stops a run after the batch in flight is
measured and committed, and returns what was found (`TuneResult.interrupted`); a second
Ctrl-C stops at once (KeyboardInterrupt), losing only that batch.
"""
from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tessel import cost_model as cost_models
from tessel.codegen import Module, build
from tessel.database import Database, DatabaseError
from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.measure import LocalBuilder, LocalRunner, MeasureResult
from tessel.progress import TuneProgress
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.search import MODEL_BASED, Proposal, SearchStrategy, make_strategy
from tessel.search.base import program_key
from tessel.space import SpaceError, default_postprocs, final_func, make_space
from tessel.target import Target
from tessel.task import Task


class TuneError(TesselError, ValueError):
    """Bad tuning arguments, or (strict mode) nothing tuned for a workload."""


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
class _Run:
    task: Task
    strategy: SearchStrategy
    model: Any
    db: Database
    builder: Any
    runner: Any
    label: str = ""  # the run's name in the database (tuning curves group by it)
    history: list[Trial] = field(default_factory=list)
    best_seconds: float = math.inf
    done: int = 0
    last_gain: int = 0  # trial count at the last improvement
    resumed: list[float] = field(default_factory=list)  # stored records' seconds, oldest first
    last_id: int = 0  # the database's last record of this task this run has taken in


def tune(func: PrimFunc, target: Target | None = None, trials: int = 64, *,
         space: Any = "auto", strategy: str | SearchStrategy = "evolutionary",
         cost_model: str | Any = "xgb", database: str | Path | Database | None = None,
         runner: Any = None, builder: Any = None, batch_size: int = 16, seed: int = 0,
         early_stopping: int | None = None, rerun_top: int = 3, name: str = "",
         progress: bool = True, strategy_options: dict | None = None) -> TuneResult:
    """Search for a fast program of `func` on `target` within `trials` measurements in all
    (those already in the database included). Returns the best program found, built."""
    _check_args(func, trials, batch_size, early_stopping)
    task = Task(func, target if target is not None else Target("host"), name)
    run = _setup(task, space, strategy, cost_model, database, runner, builder, seed,
                 strategy_options or {})
    try:
        before = _resume(run)
        bar = TuneProgress(task.label, trials, run.done, task.flops, enabled=progress)
        with _stop_on_interrupt() as stop:
            try:
                _loop(run, trials, batch_size, early_stopping, bar, stop)
            finally:
                bar.close()
            return _finish(run, 1 if stop.is_set() else rerun_top, before, stop.is_set())
    finally:
        _close_owned(run, builder, runner)


def tune_tasks(tasks: Sequence[Task], trials: int, *, scheduler: str = "gradient",
               space: Any = "auto", strategy: str = "evolutionary", cost_model: str | Any = "xgb",
               database: str | Path | Database | None = None, runner: Any = None,
               builder: Any = None, batch_size: int = 16, seed: int = 0, rerun_top: int = 3,
               progress: bool = True, strategy_options: dict | None = None
               ) -> list[TuneResult]:
    """Tune many tasks (e.g. the layers of a model) within `trials` measurements in all: the
    task scheduler gives each round of `batch_size` trials to one task. One cost model, builder,
    runner and database serve every task."""
    from tessel.scheduler import TaskScheduler
    if not tasks:
        raise TuneError("tune_tasks needs at least one task")
    _check_args(tasks[0].workload, trials, batch_size, None)
    target = tasks[0].target
    model = cost_models.make(cost_model) if isinstance(cost_model, str) else cost_model
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
                                batch_size, rerun_top, progress, stop)
    finally:
        _close_owned(runs[0], given_builder, given_runner)


def _tune_rounds(runs: list[_Run], before: list[int], sched: Any, trials: int,
                 batch_size: int, rerun_top: int, progress: bool,
                 stop: threading.Event) -> list[TuneResult]:
    for k, run in enumerate(runs):  # the stored tuning curves, a round per batch
        best_so_far = list(itertools.accumulate(run.resumed, min))
        for end in range(batch_size, run.done + batch_size, batch_size):
            end = min(end, run.done)
            sched.record(k, end, best_so_far[end - 1])
    bar = TuneProgress(f"{len(runs)} tasks", trials, sum(before), enabled=progress,
                       latency=sched.total_latency)
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


def apply_best(func: PrimFunc, target: Target | None = None,
               database: str | Path | Database = "tessel.db", *, strict: bool = False) -> Module:
    """Build the best program the database knows for `func` on `target`. With nothing stored,
    warn and build the unscheduled program (strict: raise TuneError)."""
    target = target if target is not None else Target("host")
    db = database if isinstance(database, Database) else Database(database)
    mod = best_module(func, target, db)
    if mod is not None:
        return mod
    msg = (f"the database {db.path} holds no valid tuning record of {func.name} for target "
           f"{target}; run `tessel tune` first")
    if strict:
        raise TuneError(msg)
    warnings.warn(msg + " (building the unscheduled program)", stacklevel=2)
    return build(func, target)


def best_module(func: PrimFunc, target: Target, db: Database) -> Module | None:
    """The best of the database's records for `func` on `target` that still replays, built;
    None when there is none."""
    best = best_func(func, target, db)
    return build(best, target) if best is not None else None


def best_func(func: PrimFunc, target: Target, db: Database) -> PrimFunc | None:
    """The scheduled program of the best of the database's records for `func` on `target`
    that still replays (postprocessed, ready to build); None when there is none."""
    for record in db.top_k(func, target, k=5):
        if record.trace_json is None:
            continue
        try:
            sch = record.trace().apply(Schedule(func))
            return final_func(sch, default_postprocs(target))
        except (ScheduleError, SpaceError):
            continue  # recorded by an older tessel whose primitives differ: try the next
    return None


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


def _setup(task: Task, space: Any, strategy: Any, cost_model: Any, database: Any, runner: Any,
           builder: Any, seed: int, options: dict) -> _Run:
    space = make_space(space, task.target)
    model = cost_models.make(cost_model) if isinstance(cost_model, str) else cost_model
    uses_model = isinstance(strategy, SearchStrategy) or strategy in MODEL_BASED
    search = make_strategy(strategy, space, task.workload, seed=seed,
                           cost_model=model if uses_model else None,
                           postprocs=default_postprocs(task.target), **options)
    db = _open_database(database)
    builder = builder if builder is not None else LocalBuilder(task.target)
    runner = runner if runner is not None else LocalRunner(task.target)
    # unique among runs sharing the database: two runs started in one second differ by pid
    label = (f"{getattr(search, 'name', search)} {time.strftime('%Y-%m-%d %H:%M:%S')} "
             f"#{os.getpid()}")
    return _Run(task, search, model, db, builder, runner, label)


def _close_owned(run: _Run, builder: Any, runner: Any) -> None:
    """Close the builder and runner that tune() made itself (not those it was given)."""
    for given, made in ((builder, run.builder), (runner, run.runner)):
        if given is None and hasattr(made, "close"):
            made.close()


def _open_database(database: Any) -> Database:
    if isinstance(database, Database):
        return database
    if database is None:  # a throwaway database: nothing is kept after the run
        database = Path(tempfile.mkdtemp(prefix="tessel-")) / "records.db"
    return Database(database)


def _resume(run: _Run) -> int:
    """Feed the records already stored to the strategy and the model; return their count."""
    run.last_id, records = run.db.new_records(run.task.workload, run.task.target)
    _take_in(run, records)
    run.done = run.last_gain = len(records)
    run.resumed = [r.mean_secs for r in records]
    run.best_seconds = min(run.resumed, default=math.inf)
    return run.done


def _take_in(run: _Run, records: Sequence[Any]) -> None:
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
        _update_model(run, proposals, results)


def _sync(run: _Run) -> int:
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

    def interrupted(signum: int, frame: Any) -> None:
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


def _loop(run: _Run, trials: int, batch_size: int, early: int | None, bar: TuneProgress,
          stop: threading.Event) -> None:
    while run.done < trials and not stop.is_set():
        if not _round(run, min(batch_size, trials - run.done), bar, budget=trials):
            break  # nothing new left in the space
        if early is not None and run.done - run.last_gain >= early:
            break


def _round(run: _Run, n: int, bar: TuneProgress, budget: int | None = None) -> bool:
    """Measure one batch of up to n new programs (and no more than `budget` trials of the
    task in all); False when the strategy has none left. Programs another run sharing the
    database measures or has measured are left to it."""
    bar.others(_sync(run), run.best_seconds)
    if budget is not None:
        n = min(n, budget - run.done)
        if n <= 0:
            return True
    batch = run.strategy.ask(n)
    if not batch:
        return False
    granted = run.db.claim(run.task.workload, run.task.target,
                           [program_key(p) for p in batch], run.label)
    run.strategy.skip([p for p, ok in zip(batch, granted) if not ok])
    batch = [p for p, ok in zip(batch, granted) if ok]
    if not batch:
        return True
    results = _measure(run, batch)
    if _record(run, batch, results):
        run.last_gain = run.done
    bar.update(results, run.best_seconds)
    return True


def _measure(run: _Run, batch: Sequence[Proposal], commit: bool = True) -> list[MeasureResult]:
    cands = [p.candidate(run.task.workload) for p in batch]
    results = run.runner.run(cands, run.builder.build(cands))
    if commit:
        try:
            run.db.commit_results(run.task.target, cands, results, run=run.label,
                                  programs=[program_key(p) for p in batch])
        except DatabaseError as err:
            saved = _save_batch(run, cands, results)
            raise TuneError(f"{err}. The batch just measured ({len(cands)} records) is in "
                            f"{saved}: `tessel db import` adds it to a sound database") from None
    return results


def _save_batch(run: _Run, cands: Sequence[Any], results: Sequence[MeasureResult]) -> Path:
    """Write a measured batch the database refused to a JSON-lines file beside it (or in the
    temporary directory), so no measurement is lost."""
    from tessel.database import TuningRecord
    from tessel.database.jsonl import write_lines
    from tessel.ir import structural_hash
    from tessel.ir.serialize import to_json
    task, stamp = run.task, time.strftime("%Y%m%d-%H%M%S")
    key, target_key = structural_hash(task.workload), task.target.fingerprint_hash()
    records = [TuningRecord.from_measurement(key, target_key, c, r, run.label)
               for c, r in zip(cands, results)]
    workload = (key, task.workload.name, to_json(task.workload))
    target = (target_key, str(task.target), json.dumps(task.target.fingerprint()))
    for folder in (run.db.path.parent, Path(tempfile.gettempdir())):
        path = folder / f"{run.db.path.name}.unsaved-{stamp}.jsonl"
        try:
            write_lines(path, [workload], [target], records)
            return path
        except (DatabaseError, OSError):
            continue
    raise TuneError(f"the batch just measured could not be saved anywhere ({run.db.path})")


def _record(run: _Run, batch: Sequence[Proposal], results: Sequence[MeasureResult]) -> bool:
    """Tell the strategy and the model; extend the history. True if the best improved."""
    run.strategy.tell(batch, results)
    _update_model(run, batch, results)
    improved = False
    for res in results:
        if res.mean_secs < run.best_seconds and not res.disturbed:
            run.best_seconds, improved = res.mean_secs, True
        run.history.append(Trial(run.done, res.mean_secs, run.best_seconds, res.error_kind))
        run.done += 1
    return improved


def _update_model(run: _Run, batch: Sequence[Proposal], results: Sequence[MeasureResult]) -> None:
    """Train the cost model on the batch, leaving out timings taken on a busy machine (they
    would teach it that good programs are slow)."""
    kept = [(p, r) for p, r in zip(batch, results) if not r.disturbed]
    if run.model is not None and kept:
        run.model.update([p.candidate(run.task.workload) for p, _ in kept],
                         [r for _, r in kept])


def _finish(run: _Run, rerun_top: int, before: int, interrupted: bool = False) -> TuneResult:
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
        results = _measure(run, [p for _, p in top], commit=False)  # not new trials
        again = [r.mean_secs if r.ok and not r.disturbed else math.inf for r in results]
        if math.isfinite(min(again)):  # else every re-measurement failed: the stored best
            i = again.index(min(again))
    record, best = top[i]
    return TuneResult(task, record.mean_secs, best.trace, best.func, run.history,
                      build(best.func, task.target), before, interrupted,
                      again[i] if math.isfinite(again[i]) else math.nan)


def tune_model(model: Any, target: Target | None = None, trials: int = 256, *,
               database: str | Path | Database | None = "tessel.db",
               input_shapes: dict | None = None, example_inputs: tuple | None = None,
               **options: Any) -> list[TuneResult]:
    """Tune every distinct fused kernel of a model (a tessel Graph, an ONNX model or path, or
    a torch module with `example_inputs`) within `trials` measurements in all, shared by the
    task scheduler; `options` go to `tune_tasks`. `tessel.compile_model` then runs the model
    with what the database holds."""
    from tessel.graph.executor import load_model, model_tasks
    target = target if target is not None else Target("host")
    graph = load_model(model, input_shapes, example_inputs)
    _, tasks = model_tasks(graph, target)
    return tune_tasks(tasks, trials, database=database, **options)
