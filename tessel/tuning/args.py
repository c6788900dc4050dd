"""Checks of the arguments of tune(), tune_tasks() and tune_model(), made before any work: a
bad argument is refused with one TuneError line naming it, not found deep in the loop after a
batch was measured (a cost model or callback of the wrong type), nor silently taken (a bool
for a count, a strategy option no strategy reads).

    check_args(target, trials=64, batch_size=16, cost_model="xgb", callbacks=[log])
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from tessel import cost_model as cost_models
from tessel.database import Database
from tessel.ir import PrimFunc
from tessel.search import STRATEGIES, SearchStrategy
from tessel.space import SearchSpace, make_space, required_positional
from tessel.target import Target
from tessel.tuning.best import TuneError
from tessel.tuning.scheduler import SCHEDULERS

SET_BY_TUNE = ("seed", "cost_model", "postprocs")  # strategy arguments the loop gives itself


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise TuneError(msg)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def check_args(target: Target, **args: Any) -> None:
    """TuneError for the first bad one of `args` (named as tune's keyword arguments)."""
    for name, value in args.items():
        if name in _CHECKS:
            _CHECKS[name](name, value)
    if "space" in args:
        _check_space(args["space"], target)
    if "strategy_options" in args:
        _check_options(args.get("strategy", "evolutionary"), args["strategy_options"])


def check_func(func: Any) -> None:
    check(isinstance(func, PrimFunc), f"tune needs a PrimFunc (e.g. tessel.ops.SUITE['GMM']), "
                                      f"got {type(func).__name__}")


def _positive(name: str, value: Any) -> None:
    check(_is_int(value) and value >= 1, f"{name} must be a positive int, got {value!r}")


def _non_negative(name: str, value: Any) -> None:
    check(_is_int(value) and value >= 0, f"{name} must be an int >= 0, got {value!r}")


def _optional_positive(name: str, value: Any) -> None:
    check(value is None or _is_int(value) and value >= 1,
          f"{name} must be None or a positive int, got {value!r}")


def _seconds(name: str, value: Any) -> None:
    check(value is None or isinstance(value, (int, float)) and not isinstance(value, bool)
          and 0 < value < float("inf"),
          f"{name} must be None or a positive number of seconds, got {_kind(value)}")


def _of_type(kind: type | tuple[type, ...], what: str) -> Callable[[str, Any], None]:
    def checker(name: str, value: Any) -> None:
        check(isinstance(value, kind), f"{name} must be {what}, got {_kind(value)}")
    return checker


def _strategy(name: str, value: Any) -> None:
    if isinstance(value, str):  # (the words of tessel.search.make_strategy)
        check(value in STRATEGIES, f"unknown search strategy {value!r}; use one of "
                                   f"{sorted(STRATEGIES)}")
    check(isinstance(value, (str, SearchStrategy)), f"{name} must be a strategy name "
          f"({', '.join(sorted(STRATEGIES))}) or a SearchStrategy, got {_kind(value)}")


def _cost_model(name: str, value: Any) -> None:
    if isinstance(value, str):  # (the words of tessel.cost_model.make)
        check(value in cost_models.MODELS, f"unknown cost model {value!r}; known: "
                                           f"{sorted(cost_models.MODELS)}")
    check(isinstance(value, str) or all(callable(getattr(value, m, None))
                                        for m in ("update", "predict")),
          f"{name} must be a cost model name ({', '.join(sorted(cost_models.MODELS))}) or a "
          f"CostModel (with update and predict), got {_kind(value)}")


def _database(name: str, value: Any) -> None:
    check(value is None or isinstance(value, Database) or
          isinstance(value, (str, os.PathLike)) and str(value) != "",
          f"{name} must be a file path, a tessel Database or None, got {_kind(value)}")


def _knowledge(name: str, value: Any) -> None:
    check(isinstance(value, Sequence) and not isinstance(value, (str, bytes)),
          f"{name} must be a list of databases (paths or tessel Databases), got {_kind(value)}")
    for k, db in enumerate(value):
        check(isinstance(db, Database) or isinstance(db, (str, os.PathLike)) and
              os.path.isfile(db), f"{name}[{k}] must be an existing database file or a tessel "
                                  f"Database, got {_kind(db)}")


def _has_method(method: str, what: str) -> Callable[[str, Any], None]:
    def checker(name: str, value: Any) -> None:
        check(value is None or callable(getattr(value, method, None)),
              f"{name} must be None or {what} (with a {method} method), got {_kind(value)}")
    return checker


def _callbacks(name: str, value: Any) -> None:
    check(isinstance(value, Sequence) and not isinstance(value, str),
          f"{name} must be a list of callables (run, batch, results), got {_kind(value)}")
    for k, callback in enumerate(value):
        check(callable(callback), f"{name}[{k}] must be a callable (run, batch, results), "
                                  f"got {_kind(callback)}")


def _scheduler(name: str, value: Any) -> None:
    check(isinstance(value, str) and value in SCHEDULERS,
          f"{name} must be one of {SCHEDULERS}, got {_kind(value)}")


_CHECKS: dict[str, Callable[[str, Any], None]] = {
    "trials": _positive, "batch_size": _positive, "rerun_top": _non_negative, "seed": _non_negative,
    "early_stopping": _optional_positive, "name": _of_type(str, "a str"),
    "progress": _of_type(bool, "True or False"), "strategy": _strategy,
    "cost_model": _cost_model, "database": _database,
    "runner": _has_method("run", "a Runner"), "builder": _has_method("build", "a Builder"),
    "callbacks": _callbacks, "scheduler": _scheduler,
    "strategy_options": _of_type((dict, type(None)), "a dict of keyword arguments or None"),
    "time_budget": _seconds, "transfer_from": _knowledge,
}


def _check_space(space: Any, target: Target) -> None:
    """make_space's own check (SpaceError), and a function of neither one argument (a
    probabilistic program) nor two (a template) refused before it is first called."""
    make_space(space, target)
    if callable(space) and not isinstance(space, SearchSpace) and \
            not callable(getattr(space, "apply", None)):  # (a schedule rule)
        required = required_positional(space)  # a builtin (None) says itself what it takes
        check(required in (None, 1, 2), f"space: a function space takes one argument (a "
                                        f"Schedule) or two (cfg, sch); "
                                        f"{getattr(space, '__name__', 'it')} takes {required}")


def _check_options(strategy: Any, options: dict[str, Any] | None) -> None:
    """Every option names an argument of the strategy's constructor that tune leaves to the
    caller; a strategy object takes none (it was configured when it was made)."""
    if not options:
        return
    check(not isinstance(strategy, SearchStrategy), "strategy_options apply to a strategy "
          "named by a string; give a SearchStrategy object its settings when you make it")
    accepted = _keywords(STRATEGIES[strategy]) - {"space", "workload"}
    for key in options:
        check(isinstance(key, str) and key not in SET_BY_TUNE and key in accepted,
              f"strategy_options: {strategy} takes no option {key!r}"
              + (" (tune sets it)" if key in SET_BY_TUNE else
                 f"; its options: {', '.join(sorted(accepted - set(SET_BY_TUNE)))}"))


def _keywords(cls: type) -> set[str]:
    """The keyword arguments `cls(...)` accepts, through the **kw its constructors pass up."""
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[1:]
        names.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD,
                                                           p.KEYWORD_ONLY))
        if not any(p.kind == p.VAR_KEYWORD for p in params):
            break  # the chain ends here
    return names


__all__ = ["check_args", "check_func", "SET_BY_TUNE"]
