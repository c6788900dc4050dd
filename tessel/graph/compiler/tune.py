"""Tune a whole model: its tasks through the task scheduler (tessel.tuning.tune_tasks), then
each task's program chosen in the model's sequence (tessel.graph.compiler.select)."""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from tessel.database import Database
from tessel.graph.compiler.load import load_model
from tessel.graph.compiler.select import MAX_CANDIDATES, select_graph
from tessel.graph.compiler.tasks import graph_tasks
from tessel.graph.ir import check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS, apply_layout
from tessel.target import Target, as_target
from tessel.tuning import TuneResult, check_tune_tasks_args, tune_tasks

log = logging.getLogger("tessel")

SELECT_SHARE = 0.15  # of a time budget, kept for the choice in sequence
clock = time.monotonic  # (tests move it)


def tune_model(model: Any, target: Target | str | None = None, trials: int = 256, *,
               database: str | Path | Database | None = "tessel.db",
               input_shapes: dict | None = None, example_inputs: tuple | None = None,
               layout: str = DEFAULT_LAYOUT, select: int = 8, time_budget: float | None = None,
               **options: Any) -> list[TuneResult]:
    """Tune every distinct fused kernel of a model (a tessel Graph, an ONNX model or path, or
    a torch module with `example_inputs`) within `trials` measurements in all, shared by the
    task scheduler; `options` go to `tune_tasks`. Then, with `select` > 0 and a database,
    each task's `select` best records are timed in the model's sequence and the fastest
    there is stored as its choice (tessel.graph.compiler.select; not after an interrupted
    run). With a `time_budget` (seconds) the whole call ends about then, the clock started at
    this call (loading the model counts): tuning stops, whatever trials are left, where
    SELECT_SHARE of the budget is left, and the selection times as many ranks as fit
    before the end (select_graph's deadline).
    `tessel.compile_model` then runs the model with what the database holds (tune and
    compile in the same `layout`)."""
    start = clock()
    check(isinstance(select, int) and not isinstance(select, bool)
          and 0 <= select <= MAX_CANDIDATES,
          f"select must be an int >= 0 and <= {MAX_CANDIDATES}, got {select!r}")
    check(layout in LAYOUTS, f"layout must be one of {LAYOUTS}, got {layout!r}")
    target = as_target(target)
    check_tune_tasks_args(target, trials, database=database, time_budget=time_budget,
                          **options)  # before any work
    graph = apply_layout(load_model(model, input_shapes, example_inputs), layout, target)
    _, tasks = graph_tasks(graph, target)
    selects = bool(select) and database is not None
    time_budget, deadline = split_budget(start, time_budget, selects)
    results = tune_tasks(tasks, trials, database=database, time_budget=time_budget, **options)
    if selects and not any(r.interrupted for r in results):
        db = Database.open(database, create=False)
        chosen = select_graph(graph, target, db, candidates=select, layout=layout,
                              deadline=deadline)
        log.info("%s: %s", graph.name, chosen.line())
    return results


def split_budget(start: float, time_budget: float | None, selects: bool
                 ) -> tuple[float | None, float | None]:
    """(seconds left for tuning the tasks, the deadline of the whole run) of a run that began
    at `start` (clock()) with `time_budget` seconds: what passed since the start is spent,
    and a run that `selects` in sequence keeps SELECT_SHARE of the budget for that; (None,
    None) without a budget."""
    if time_budget is None:
        return None, None
    deadline = start + time_budget
    return max(deadline - clock() - selects * SELECT_SHARE * time_budget, 1e-3), deadline


__all__ = ["SELECT_SHARE", "split_budget", "tune_model"]
