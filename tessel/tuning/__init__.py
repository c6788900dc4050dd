"""Tuning: the loop that searches a task's space with measurements, and what it needs.

    result = tessel.tune(ops.SUITE["GMM"], trials=64, database="tessel.db")
    results = tessel.tune_tasks(tasks, trials=512)          # many tasks, one task scheduler
    mod = tessel.apply_best(ops.SUITE["GMM"], database="tessel.db")

The loop (loop.py) depends only on contracts: a SearchSpace (tessel.space.base: sample,
replay, mutate, knobs), a SearchStrategy (tessel.search.base: ask, tell, skip, replay), a
CostModel (tessel.cost_model.base: update, predict, predict_with_std), a Builder and a Runner
(tessel.measure.runner: build, run, close), the record Database, and measure callbacks
(callbacks.py: commit, model update, progress line, log; users may add theirs). It logs on
the `tessel` logger (silent unless configured; `tessel -v` turns it on).
"""
from tessel.tuning.best import TuneError, apply_best, best_func, best_record
from tessel.tuning.callbacks import (AddToDatabase, LogBatch, MeasureCallback, ProgressLine,
                                     UpdateCostModel)
from tessel.tuning.loop import (Trial, TuneResult, TuneRun, check_tune_tasks_args, tune,
                                 tune_tasks)
from tessel.tuning.scheduler import TaskScheduler
from tessel.tuning.task import Task, TaskError

__all__ = ["tune", "tune_tasks", "apply_best", "best_func", "best_record", "TuneError",
           "TuneResult", "TuneRun", "Trial", "Task", "TaskError", "TaskScheduler",
           "MeasureCallback", "AddToDatabase", "UpdateCostModel", "ProgressLine", "LogBatch",
           "check_tune_tasks_args"]
