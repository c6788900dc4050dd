"""The database as knowledge: a new task's first batch holds the best programs of the
nearest tasks already tuned, fitted to its shape (transfer-tuning).

    traces = nearest_traces([db, other_db], task.workload, target)   # best first
    strategy.carry_over(traces)        # replayed with tile sizes fitted (schedule.transplant)

Tasks are near when their programs are the same loop nest over other extents: the same
program name and blocks (names, iteration kinds, reads and writes) in the same order; the
nearest are those whose extents differ least (sum of |log2| of the ratios). A model's layers
are mostly such relatives of each other and of other models' layers (every ResNet has 3x3
convolutions of a few widths, every transformer the same dense layers), so the register tile
and loop order that won on one are a strong first guess on another, better than the priors
when the relative was tuned for long (transfer-tuning, Gibson and Cano, 2022: half of
Ansor's gain at zero search). Records of the same target only (a program's speed on another
CPU says little here), and the best programs of the shipped cost model's training workloads
for the target's ISA family (tessel.cost_model.pretrained.shipped_programs).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

from tessel.cost_model.pretrained import shipped_programs
from tessel.database import Database
from tessel.ir import BlockRealize, PrimFunc, collect_stmts
from tessel.schedule import Trace
from tessel.target import Target

NEAREST_TASKS = 4  # relatives whose programs a new task starts from
PER_TASK = 2  # best programs taken from each


def shape_of(func: PrimFunc) -> tuple[str, tuple[int, ...]]:
    """(signature, extents): what two shapes of one program share (its name, its parameters'
    element types, its blocks in order with their iteration kinds, reads and writes), and
    what differs (the blocks' iteration extents)."""
    blocks = [r.block for r in collect_stmts(func.body, BlockRealize)]
    parts = [f"{b.name}:{''.join(iv.kind[0] for iv in b.iter_vars)}:{len(b.reads)}:"
             f"{len(b.writes)}" for b in blocks]
    extents = tuple(iv.extent for b in blocks for iv in b.iter_vars)
    dtypes = ",".join(p.dtype for p in func.params)
    return f"{func.name}({dtypes})|{';'.join(parts)}", extents


def distance(a: Sequence[int], b: Sequence[int]) -> float:
    """How far apart two shapes of one signature are: sum of |log2| of the extent ratios."""
    return sum(abs(math.log2(x / y)) for x, y in zip(a, b) if x > 0 and y > 0)


def nearest_traces(databases: Sequence[Database], workload: PrimFunc, target: Target,
                   tasks: int = NEAREST_TASKS, per_task: int = PER_TASK,
                   shipped: bool = True) -> list[Trace]:
    """The best traces (fastest first within a task) of the `tasks` nearest shapes of
    `workload` tuned on `target` in any of `databases` and, with `shipped`, among the best
    programs shipped with the cost model of the target's ISA family (its training
    workloads'), nearest task first: the workload itself first where a database holds it
    (another database than the run's: a run asks only for a task that its own database has
    no records of)."""
    signature, extents = shape_of(workload)
    found: list[tuple[float, Callable[[], list[Trace]]]] = []
    for db in databases:
        if target.fingerprint_hash() not in db.targets():
            continue
        for wl in db.workloads(name=workload.name):
            sig, ext = shape_of(wl.func)
            if sig == signature:
                found.append((distance(extents, ext), partial(_best, db, wl.key, target,
                                                              per_task)))
    for func, traces in shipped_programs(target, workload.name) if shipped else ():
        sig, ext = shape_of(func)
        if sig == signature:
            found.append((distance(extents, ext), partial(list, traces[:per_task])))
    found.sort(key=lambda f: f[0])
    return [trace for _, best in found[:tasks] for trace in best()]


def _best(db: Database, key: str, target: Target, k: int) -> list[Trace]:
    return [t for r in db.top_k(key, target, k) if (t := r.trace()) is not None]


__all__ = ["NEAREST_TASKS", "PER_TASK", "distance", "nearest_traces", "shape_of"]
