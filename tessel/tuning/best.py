"""The database's best program of a workload, replayed, postprocessed and built.

    mod = tessel.apply_best(ops.SUITE["GMM"], database="tessel.db")
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

from tessel.codegen import Module, build
from tessel.database import Database
from tessel.database.files import status
from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.schedule import Schedule, ScheduleError
from tessel.space import Postproc, SpaceError, final_func, postprocs_for
from tessel.target import Target


class TuneError(TesselError, ValueError):
    """Bad tuning arguments, or (strict mode) nothing tuned for a workload."""


def apply_best(func: PrimFunc, target: Target | None = None,
               database: str | Path | Database = "tessel.db", *, strict: bool = False) -> Module:
    """Build the best program the database knows for `func` on `target`. With nothing stored
    (or no database file of that name: it is not created), warn and build the unscheduled
    program (strict: raise TuneError)."""
    target = target if target is not None else Target("host")
    db = _open(database)
    try:
        mod = best_module(func, target, db) if db is not None else None
    finally:
        if db is not None and db is not database:
            db.close()
    if mod is not None:
        return mod
    where = (f"the database {db.path}" if db is not None else
             f"the database {Path(database).expanduser()} does not exist, so it")
    msg = (f"{where} holds no valid tuning record of {func.name} for target {target}; run "
           "`tessel tune` first")
    if strict:
        raise TuneError(msg)
    warnings.warn(msg + " (building the unscheduled program)", stacklevel=2)
    return build(func, target)


def _open(database: str | Path | Database) -> Database | None:
    """The database to read; None when no file of that name exists (reading creates none)."""
    if isinstance(database, Database):
        return database
    if status(Path(database).expanduser()) is None:
        return None
    return Database(database, create=False)


def best_module(func: PrimFunc, target: Target, db: Database) -> Module | None:
    """The best of the database's records for `func` on `target` that still replays, built;
    None when there is none."""
    best = best_func(func, target, db)
    return build(best, target) if best is not None else None


def best_func(func: PrimFunc, target: Target, db: Database,
              postprocs: Sequence[Postproc] | None = None, *,
              records_of: PrimFunc | None = None) -> PrimFunc | None:
    """The scheduled program of the best of the database's records for `func` on `target`
    that still replays (postprocessed by `postprocs`, postprocs_for(func, target) by default,
    ready to build); None when there is none. The best is the current choice of
    tessel.graph.select (timed in its model's sequence) where there is one, else the fastest
    record. `records_of`: the workload whose records to replay on `func` instead of its own
    (the same program measured under an older protocol: tessel.graph.executor)."""
    posts = list(postprocs) if postprocs is not None else postprocs_for(func, target)
    owner = records_of if records_of is not None else func
    chosen = db.selection(owner, target)  # timed in its model's sequence (tessel.graph.select)
    for record in ([chosen] if chosen is not None else []) + db.top_k(owner, target, k=5):
        if record.trace_json is None:
            continue
        try:
            sch = record.trace().apply(Schedule(func))
            return final_func(sch, posts)
        except (ScheduleError, SpaceError):
            continue  # recorded by an older tessel whose primitives differ: try the next
    return None


__all__ = ["TuneError", "apply_best", "best_module", "best_func"]
