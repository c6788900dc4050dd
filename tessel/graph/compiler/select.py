"""Choose each kernel of a model among its task's best records by timing them in sequence.

The tuner times a kernel alone, repeated: its inputs, its output and its scratch buffers stay
in cache from one call to the next. In the model a kernel runs once, after the others have
filled the caches with their own data, and programs that tie when repeated do not tie there.
On MobileNet-v2 (Zen 4, 2 threads) the tuner's best of the 56x56 stride-2 depthwise conv
took 0.21 ms in the model's sequence, its fourth best 0.13 ms; choosing each task's program
among its eight best in sequence made the whole model 6% faster.

    summary = select_in_sequence("model.onnx", database="tessel.db")   # after tune_model

Each of `candidates` variants of the compiled model runs each task's rank-j record (the
tuner's best is rank 0); the variants run in turn, `rounds` times, every kernel timed as it
runs in the sequence; a task takes the rank whose kernels took least in all (median per
kernel), when that beats the tuner's best by more than `margin`. The choice is stored as a
record flagged "in_sequence" (another protocol: only Database.selection returns it, and a
newer tuning record makes it stale), which compile_model then uses. The variants are all in
memory at once (candidates times the model's weights): at most MAX_CANDIDATES of them, and no
more than the most records a task has (a rank past a task's records repeats its slowest).

With a `deadline` (a time.monotonic() value: tune_model's time budget) the variants are
compiled while the time left holds another compile and MIN_ROUNDS rounds of timing them all,
and the rounds stop at the deadline once MIN_ROUNDS have run: a model of 80 tasks compiles
640 kernels for eight variants, minutes more than the budget it was tuned in.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tessel.database import Database
from tessel.database.record import IN_SEQUENCE
from tessel.graph.compiler.compile import compile_graph
from tessel.graph.compiler.load import load_model
from tessel.graph.ir import Graph, check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS, apply_layout
from tessel.graph.runtime import CompiledModel
from tessel.target import Target

MARGIN = 0.03  # a rank other than the tuner's best must be this much faster in sequence
MAX_CANDIDATES = 64  # variants of the model in memory at once
MIN_ROUNDS = 3  # rounds in sequence a choice needs, whatever the deadline
clock = time.monotonic  # (tests move it)


@dataclass(frozen=True)
class Selection:
    """What select_in_sequence chose: per task label, the rank taken (0: the tuner's best)
    and the seconds its kernels took per model call in sequence; before and after, the sum
    over the model's kernels."""
    ranks: dict[str, int]
    seconds: dict[str, float]
    before: float
    after: float
    skipped: str = ""  # why nothing was timed (a deadline that left no time)

    @property
    def changed(self) -> int:
        return sum(r > 0 for r in self.ranks.values())

    def line(self) -> str:
        if self.skipped:
            return f"in-sequence selection skipped: {self.skipped}"
        return (f"in-sequence selection: {self.changed} of {len(self.ranks)} tasks changed, "
                f"kernels in sequence {self.before * 1e3:.3f} -> {self.after * 1e3:.3f} ms")


def select_in_sequence(model: Any, target: Target | None = None,
                       database: str | Path | Database = "tessel.db", *,
                       candidates: int = 8, rounds: int = 30, margin: float = MARGIN,
                       layout: str = DEFAULT_LAYOUT, input_shapes: dict | None = None,
                       example_inputs: tuple | None = None, seed: int = 0,
                       deadline: float | None = None) -> Selection:
    """Time the `candidates` best records of each task of `model` in the model's sequence
    and store the choice in `database` (see the module doc), by a `deadline` (clock())
    when given. Tasks without records keep their fallback and are not listed."""
    _check_options(candidates, rounds, margin)  # (before the model is loaded)
    check(layout in LAYOUTS, f"layout must be one of {LAYOUTS}, got {layout!r}")
    target = target if target is not None else Target("host")
    check(database is not None, "select_in_sequence needs a database of tuning records")
    db = Database.open(database, create=False)
    check(db is not None, f"database {database} does not exist")
    graph = apply_layout(load_model(model, input_shapes, example_inputs), layout, target)
    return select_graph(graph, target, db, candidates=candidates, rounds=rounds,
                        margin=margin, layout=layout, seed=seed, deadline=deadline)


def select_graph(graph: Graph, target: Target, db: Database, *, candidates: int = 8,
                 rounds: int = 30, margin: float = MARGIN, layout: str = DEFAULT_LAYOUT,
                 seed: int = 0, deadline: float | None = None) -> Selection:
    """select_in_sequence on a simplified graph already in `layout`; with a `deadline`
    (time.monotonic()), as many variants and rounds as fit before it (see the module doc)."""
    _check_options(candidates, rounds, margin)
    fallbacks: dict = {}  # the untuned tasks' programs, the same in every variant
    started = clock()
    variants = [_variant(graph, target, db, layout, 0, fallbacks)]
    compile_secs = clock() - started
    useful = max((len(db.top_k(s.task.workload, target, k=candidates))
                  for s in variants[0].statuses if s.tuned), default=1)
    call_secs = variants[0].latency(budget=0.0) if deadline is not None else 0.0
    for rank in range(1, useful):
        if deadline is not None and clock() + compile_secs + \
                MIN_ROUNDS * (len(variants) + 1) * 2 * call_secs > deadline:
            break  # (each round runs every variant, each kernel timed: about twice a call)
        began = clock()
        variants.append(_variant(graph, target, db, layout, rank, fallbacks))
        compile_secs = clock() - began
    if len(variants) == 1 and useful > 1:  # no time for another rank: nothing to choose
        return Selection({}, {}, 0.0, 0.0, skipped="no time left to compile a second rank "
                                               "of the records; each task's fastest stays")
    times = _time_in_sequence(variants, rounds, seed, deadline)  # (variant, kernel) medians
    kernels = variants[0].kernels  # (rank 0 is the fastest record, not an earlier choice)
    per_task: dict[str, np.ndarray] = {}
    for k, kernel in enumerate(kernels):
        per_task[kernel.key] = per_task.get(kernel.key, 0.0) + times[:, k]
    ranks, seconds, chosen, gain = {}, {}, [], 0.0
    for i, status in enumerate(variants[0].statuses):
        task = status.task
        if not status.tuned:
            continue
        t = per_task[task.key]
        best = int(np.argmin(t))
        rank = best if t[best] < (1 - margin) * t[0] else 0
        record = variants[rank].statuses[i].record  # what that variant's compile replayed
        if record is None:
            continue
        ranks[task.label], seconds[task.label] = rank, float(t[rank])
        gain += float(t[0] - t[rank])
        chosen.append(dataclasses.replace(  # seconds of one of its kernels' calls
            record, costs=(float(t[rank]) / task.weight,), timestamp=time.time(),
            run="in-sequence", flags=IN_SEQUENCE, run_secs=0.0))
    db.commit(chosen)
    before = float(times[0].sum())
    return Selection(ranks, seconds, before, before - gain)


def _check_options(candidates: Any, rounds: Any, margin: Any) -> None:
    check(isinstance(candidates, int) and not isinstance(candidates, bool) and
          1 <= candidates <= MAX_CANDIDATES, f"candidates must be an int >= 1 and <= "
                                             f"{MAX_CANDIDATES}, got {candidates!r}")
    check(isinstance(rounds, int) and rounds >= 1, f"rounds must be an int >= 1, got {rounds!r}")
    check(0 <= margin < 1, f"margin must be in [0, 1), got {margin!r}")


def _variant(graph: Graph, target: Target, db: Database, layout: str, rank: int,
             fallbacks: dict) -> CompiledModel:
    """The model compiled with each task's rank-th fastest record."""
    own = copy.copy(graph)  # each variant lets go of the weights it packs: its own dict
    own.constants = dict(graph.constants)
    return compile_graph(own, target, db, layout=layout, rank=rank, fallbacks=fallbacks)


def _time_in_sequence(models: list[CompiledModel], rounds: int, seed: int,
                      deadline: float | None = None) -> np.ndarray:
    """Median seconds of each kernel of each model, every model run in turn `rounds` times
    (fewer, at least MIN_ROUNDS, once the clock passes a `deadline`) on the same random
    inputs, each kernel timed as it runs in its model's sequence."""
    feeds = models[0].random_inputs(seed)
    for m in models:
        m(*feeds)  # warm up, and bind the inputs
    samples = np.zeros((len(models), len(models[0].calls), rounds))
    done = 0
    while done < rounds and (deadline is None or done < MIN_ROUNDS or clock() < deadline):
        for j, m in enumerate(models):
            m.time_kernels(samples[j, :, done])
        done += 1
    return np.median(samples[:, :, :done], axis=2)


__all__ = ["MARGIN", "MAX_CANDIDATES", "MIN_ROUNDS", "Selection", "select_graph",
           "select_in_sequence"]
