"""The database's best program of a workload, replayed, postprocessed and built.

    mod = tessel.apply_best(ops.SUITE["GMM"], database="tessel.db")
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Sequence

from tessel.codegen import Module, build
from tessel.database import Database, TuningRecord, first_program
from tessel.errors import TesselError
from tessel.ir import PrimFunc
from tessel.space import Postproc, postprocs_for
from tessel.target import Target


class TuneError(TesselError, ValueError):
    """Bad tuning arguments, or (strict mode) nothing tuned for a workload."""


def apply_best(func: PrimFunc, target: Target | None = None,
               database: str | Path | Database = "tessel.db", *, strict: bool = False) -> Module:
    """Build the best program the database knows for `func` on `target`. With nothing stored
    (or no database file of that name: it is not created), warn and build the unscheduled
    program (strict: raise TuneError)."""
    target = target if target is not None else Target("host")
    db = Database.open(database, create=False)  # a missing file: nothing stored, none made
    try:
        best = best_func(func, target, db) if db is not None else None
    finally:
        if db is not None and db is not database:
            db.close()
    if best is not None:
        return build(best, target)
    where = (f"the database {db.path}" if db is not None else
             f"the database {Path(database).expanduser()} does not exist, so it")
    msg = (f"{where} holds no valid tuning record of {func.name} for target {target}; run "
           "`tessel tune` first")
    if strict:
        raise TuneError(msg)
    warnings.warn(msg + " (building the unscheduled program)", stacklevel=2)
    return build(func, target)


def best_func(func: PrimFunc, target: Target, db: Database,
              postprocs: Sequence[Postproc] | None = None, *,
              records_of: PrimFunc | None = None) -> PrimFunc | None:
    """The program of best_record (postprocessed, ready to build); None when there is none."""
    found = best_record(func, target, db, postprocs, records_of=records_of)
    return found[1] if found is not None else None


def best_record(func: PrimFunc, target: Target, db: Database,
                postprocs: Sequence[Postproc] | None = None, *,
                records_of: PrimFunc | None = None) -> tuple[TuningRecord, PrimFunc] | None:
    """The best of the database's records for `func` on `target` that still makes a program
    (tessel.database.record_program, postprocessed by `postprocs`, postprocs_for(func, target)
    by default), with that program; None when there is none. The best is the current choice
    of tessel.graph.compiler.select (timed in its model's sequence) where there is one, else the
    fastest record. `records_of`: the workload whose records to replay on `func` instead of
    its own (the same program measured under an older protocol:
    tessel.graph.compiler.compile.protocols)."""
    posts = list(postprocs) if postprocs is not None else postprocs_for(func, target)
    owner = records_of if records_of is not None else func
    chosen = db.selection(owner, target)
    return first_program(([chosen] if chosen is not None else []) + db.top_k(owner, target, k=5),
                         func, posts)


__all__ = ["TuneError", "apply_best", "best_func", "best_record"]
