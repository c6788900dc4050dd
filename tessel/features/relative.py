"""Per-store features of a program and their difference from its workload's unscheduled
program: what a schedule changed, beside what it is.

A global cost model ranks the programs of workloads of every size. Absolute features (log2
of bytes, executions, loop lengths) mix what the workload is with what the schedule did; the
difference from the unscheduled program is the schedule's part alone (how much longer the
vectorized run, how many fewer cache lines, how much more reuse), which carries from one
shape to another. The unscheduled program's vector is computed once per workload.
"""
from __future__ import annotations

import numpy as np

from tessel.features import store
from tessel.features.analysis import check
from tessel.features.walker import vector
from tessel.ir import PrimFunc

WIDTH = 2 * store.WIDTH


def cached_per_store(func: PrimFunc) -> np.ndarray:
    """store.per_store(func), computed once per program object (features.walker.vector)."""
    return vector(func, "per_store", store.per_store)


def baseline(workload: PrimFunc) -> np.ndarray:
    """The per-store vector of the unscheduled `workload` (computed once per object)."""
    return cached_per_store(workload)


def relative(candidate: object) -> np.ndarray:
    """[per_store(program), per_store(program) - per_store(workload)] of a MeasureCandidate."""
    workload, func = getattr(candidate, "workload", None), getattr(candidate, "func", None)
    check(isinstance(workload, PrimFunc) and isinstance(func, PrimFunc),
          "relative features need a candidate with its workload and program; got "
          f"{type(candidate).__name__}")
    own = cached_per_store(func)
    return np.concatenate([own, own - baseline(workload)])
