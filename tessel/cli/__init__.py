"""The `tessel` command: main.py (the parser, the small commands, error handling), tune.py
(tune, best, report, ops), model.py (tasks, tune-model, run-model), db.py (db check, recover,
export, import)."""
from tessel.cli.main import main, make_parser, run_suite_workload

__all__ = ["main", "make_parser", "run_suite_workload"]
