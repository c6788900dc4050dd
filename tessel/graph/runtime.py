"""The runtime of a compiled model: its kernels bound to arrays planned once, called in order.

    model = tessel.compile_model("resnet18.onnx", Target("host"), database="tessel.db")
    (logits,) = model(image)               # numpy in, numpy out
    print(model.report())                  # which tasks were tuned, which fell back (and how)

Every intermediate tensor gets its storage once, when the model is put together: a value's
block is reused by later values as soon as its last reader has run (reshapes alias their
input's block), so a call allocates nothing but its result copies. Kernels are bound to their
arrays once, so a call is a list of C calls. What runs comes from the model compiler
(tessel.graph.compiler): built kernels and how each task got its program; this module knows
nothing of tuning records or schedules.
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tessel.codegen import Module
from tessel.codegen.emulate import check_timeable, kernel_sequence
from tessel.codegen.module import BoundCall, aligned, aligned_empty
from tessel.database import TuningRecord
from tessel.graph.export import ExportSummary, export_model
from tessel.graph.fuse import FusedGroup
from tessel.graph.ir import Graph, check
from tessel.ir import PrimFunc, structural_hash
from tessel.prepack import Prepack
from tessel.runtime import median_seconds, random_arrays
from tessel.target import Target
from tessel.tuning import Task

FALLBACKS = ("prior", "unscheduled")  # how a task without a tuned program runs


@dataclass(frozen=True)
class GroupKernel:
    """One kernel of the model: the group, its PrimFunc, and the graph values bound to the
    PrimFunc's parameters (inputs in order, then the output)."""
    group: FusedGroup
    func: PrimFunc
    params: tuple[str, ...]

    @functools.cached_property
    def key(self) -> str:
        """The kernel's task (structural hash of its PrimFunc: computed once, it walks the
        whole program)."""
        return structural_hash(self.func)



@dataclass(frozen=True)
class TaskStatus:
    """How the runtime runs one task: "tuned" (the database's best program), "prior" (the
    auto space's first expert prior, tessel.space.priors, or its first design for a copy) or
    "unscheduled"."""
    task: Task
    how: str
    record: TuningRecord | None = None  # the record a ranked compile replayed (select.py)

    @property
    def tuned(self) -> bool:
        return self.how == "tuned"

    def line(self) -> str:
        how = {"tuned": "tuned", "prior": "fallback (expert prior)",
               "unscheduled": "fallback (unscheduled)"}[self.how]
        return f"{self.task.label:<44} x{int(self.task.weight):<3} {how}"



@dataclass(frozen=True)
class BuiltKernel:
    """A task's kernel, the constant packing stages split out of it, and where each of the
    kernel's arguments comes from: ("param", k), the k-th value bound to the kernel before
    the split, or ("pack", j), the output of packs[j]."""
    main: Module
    packs: list[tuple[Prepack, Module]]
    args: tuple[tuple[str, int], ...]



class CompiledModel:
    """A model ready to run: `model(*inputs)` returns its outputs as a list of arrays."""

    def __init__(self, graph: Graph, groups: list[FusedGroup], kernels: list[GroupKernel],
                 built: dict[str, BuiltKernel], statuses: list[TaskStatus], target: Target,
                 layout: str = "plain") -> None:
        self.statuses = statuses
        self.target = target
        # where the programs came from (compile_graph sets it; an export records it)
        self.provenance: dict[str, object] = {"database": None, "trials": 0}
        self.layout = layout  # the graph's convolution layout (tessel.graph.layout)
        self.layout_times: dict[str, float] | None = None  # layout="auto": seconds per call
        self.input_names = list(graph.inputs)
        self._arrays = _plan_memory(graph, groups)
        self.kernels = kernels
        self.calls: list[BoundCall] = []
        # a weight that every kernel reads packed is kept only packed: let go of the original
        # as soon as its last packing ran (the peak holds one weight twice, not all of them)
        read = {k.params[i] for k in kernels for kind, i in built[k.key].args if kind == "param"}
        read.update(graph.outputs)
        last_pack = {k.params[pack.source]: step for step, k in enumerate(kernels)
                     for pack, _ in built[k.key].packs}
        free_after: dict[int, list[str]] = {}
        for v, step in last_pack.items():
            if v not in read:
                free_after.setdefault(step, []).append(v)
        constants = graph.constants  # compile_model's own graph: it lets go of them too
        # constants packed once, here; a weight that calls of one task read alike (an unrolled
        # recurrent net's, at every step) packed once for all of them
        shared: dict[tuple[str, str, int], np.ndarray] = {}
        for step, k in enumerate(kernels):
            b = built[k.key]
            packed = []
            for j, (pack, module) in enumerate(b.packs):
                key = (k.params[pack.source], k.key, j)
                if key not in shared:
                    shared[key] = aligned_empty(pack.packed.shape, pack.packed.dtype)
                    module(self._arrays[key[0]], shared[key])
                packed.append(shared[key])
            self.calls.append(b.main.bind(*(self._arrays[k.params[i]] if kind == "param"
                                             else packed[i] for kind, i in b.args)))
            for v in free_after.get(step, ()):
                del self._arrays[v], constants[v]
        self._sequence = kernel_sequence(self.calls, target)  # (emulated: another arch)
        self.prepacked = len(shared)
        for v in set(constants) - read:  # read by no kernel at all
            del self._arrays[v], constants[v]
        self.graph = graph

    def value_array(self, name: str) -> np.ndarray:
        """The array a graph value lives in while the model runs (an input's, an output's,
        an intermediate's planned storage; a constant's, unless no kernel reads it)."""
        check(name in self._arrays, f"model {self.graph.name} keeps no array for {name!r}")
        return self._arrays[name]

    @property
    def planned_values(self) -> list[str]:
        """The values with planned storage: inputs, intermediates and outputs (constants
        excluded): what an export puts in its arena."""
        return [v for v in self._arrays if v not in self.graph.constants]

    def export(self, path: str | Path, **options: Any) -> ExportSummary:
        """Write this model as one self-contained shared library (tessel.graph.export)."""
        return export_model(self, path, **options)

    @property
    def tasks(self) -> list[Task]:
        return [s.task for s in self.statuses]

    def __call__(self, *inputs: np.ndarray, **named: np.ndarray) -> list[np.ndarray]:
        for name, value in self._bind_inputs(inputs, named).items():
            np.copyto(self._arrays[name], value)
        self._sequence()
        return [self._arrays[v].copy() for v in self.graph.outputs]

    def _bind_inputs(self, inputs: tuple, named: dict) -> dict[str, np.ndarray]:
        check(not (inputs and named), "pass the model's inputs by position or by name, not both")
        feeds = dict(zip(self.input_names, inputs)) if inputs else dict(named)
        check(sorted(feeds) == sorted(self.input_names) and len(inputs) <= len(self.input_names),
              f"model {self.graph.name} takes inputs {self.input_names}, got "
              f"{list(feeds) if named else f'{len(inputs)} arrays'}")
        for name, value in feeds.items():
            want = self.graph.types[name]
            value = np.asarray(value)
            check(value.shape == want.shape, f"input {name}: shape {value.shape}, expected "
                                             f"{want.shape}")
            check(value.dtype == np.dtype(want.dtype), f"input {name}: dtype {value.dtype}, "
                                                        f"expected {want.dtype}")
        return feeds

    def report(self) -> str:
        count = {how: sum(s.how == how for s in self.statuses) for how in ("tuned",
                                                                            *FALLBACKS)}
        lines = [f"{self.graph.name}: {len(self.kernels)} kernels, {len(self.statuses)} "
                 f"distinct tasks, {count['tuned']} tuned, {count['prior']} on an expert "
                 f"prior, {count['unscheduled']} unscheduled; {self.prepacked} constant "
                 f"weights packed at compile time; {self.layout} layout"]
        if self.layout_times:
            lines[0] += " (measured: " + ", ".join(
                f"{k} {v * 1e3:.3f} ms" for k, v in self.layout_times.items()) + ")"
        return "\n".join(lines + [s.line() for s in self.statuses])

    def latency(self, budget: float = 0.3, seed: int = 0) -> float:
        """Median seconds of a call on random inputs, over about `budget` seconds (one warm-up
        call first, at least 3 timed)."""
        check_timeable(self._sequence, f"model {self.graph.name}")
        feeds = self.random_inputs(seed)
        return median_seconds(lambda: self(*feeds), budget)

    def profile(self, repeat: int = 3, in_sequence: bool = False) -> list[tuple[str, float]]:
        """(kernel name, seconds) for each kernel in run order, on the inputs of the last call:
        the best of `repeat` calls of the kernel alone, or with `in_sequence` the median of
        its calls within `repeat` whole runs of the sequence (its caches as the kernels
        before it leave them: what a model run sees)."""
        check_timeable(self._sequence, f"model {self.graph.name}")
        names = [kernel.func.name for kernel in self.kernels]
        if not in_sequence:
            out = []
            for name, call in zip(names, self.calls):
                best = math.inf
                for _ in range(repeat):
                    start = time.perf_counter()
                    call()
                    best = min(best, time.perf_counter() - start)
                out.append((name, best))
            return out
        times = [self.time_kernels() for _ in range(repeat)]
        return list(zip(names, np.median(times, axis=0).tolist()))

    def time_kernels(self, out: np.ndarray | None = None) -> np.ndarray:
        """Seconds of each kernel in one run of the sequence on the inputs of the last call,
        each timed as it runs there (into `out` if given)."""
        check_timeable(self._sequence, f"model {self.graph.name}")
        out = np.empty(len(self.calls)) if out is None else out
        clock = time.perf_counter
        for k, call in enumerate(self.calls):
            start = clock()
            call()
            out[k] = clock() - start
        return out

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Arrays of the model's input shapes and dtypes, in input order: standard normal
        floats, integers in [0, 8] (valid token ids and indices), 0/1 bools."""
        types = [self.graph.types[v] for v in self.input_names]
        return random_arrays([(t.shape, np.bool_ if t.dtype == "bool" else t.dtype)
                              for t in types], seed)

    @property
    def kernel_funcs(self) -> list[PrimFunc]:
        """The PrimFunc of each kernel, in run order (as `profile` lists them)."""
        return [kernel.func for kernel in self.kernels]


def _plan_memory(graph: Graph, groups: list[FusedGroup]) -> dict[str, np.ndarray]:
    """An array for every value the groups read or write; intermediate values share blocks
    whose lifetimes do not overlap, reshapes alias their input, the inputs of an in-place
    concat are slices of its output."""
    root, end = _lifetimes(graph, groups)
    for v, array in graph.constants.items():  # (the graph is compile_model's own)
        graph.constants[v] = aligned(array)
    arrays: dict[str, np.ndarray] = dict(graph.constants)
    blocks: dict[str, np.ndarray] = {}
    free: list[np.ndarray] = []
    for v in graph.inputs:
        blocks[v] = aligned_empty(graph.types[v].nbytes)
        arrays[v] = _view(blocks[v], graph, v)
    for step, group in enumerate(groups):
        out = group.output
        if group.is_view:
            arrays[out] = arrays[group.nodes[0].inputs[0]].reshape(graph.types[out].shape)
            continue
        if root[out] != out:  # an input of an in-place concat: a slice of the concat's block
            concat = root[out]
            if concat not in blocks:
                blocks[concat] = _take(free, graph.types[concat].nbytes)
                arrays[concat] = _view(blocks[concat], graph, concat)
            start, stop = _concat_slice(graph, concat, out)
            arrays[out] = arrays[concat].reshape(-1)[start:stop].reshape(graph.types[out].shape)
        elif not group.in_place:  # (an in-place concat's block exists since its first input)
            blocks[out] = _take(free, graph.types[out].nbytes)
            arrays[out] = _view(blocks[out], graph, out)
        for r, last in end.items():
            if last == step and r in blocks and r not in graph.inputs:
                free.append(blocks.pop(r))
    return arrays


def _lifetimes(graph: Graph, groups: list[FusedGroup]) -> tuple[dict[str, str], dict[str, int]]:
    """Each value's storage root (itself, or what a reshape aliases) and the step after which
    each root's block is free (never, for model outputs)."""
    root = {v: v for v in graph.inputs}
    root.update({c: c for c in graph.constants})
    into = {v: g.output for g in groups if g.in_place for v in g.nodes[0].inputs}
    end: dict[str, float] = {}
    for step, group in enumerate(groups):
        out = group.output
        root[out] = root[group.nodes[0].inputs[0]] if group.is_view else into.get(out, out)
        end.setdefault(root[out], step)
        for v in group.external_inputs():
            end[root[v]] = max(end.get(root[v], step), step)
    for v in graph.outputs:
        end[root[v]] = math.inf
    return root, end


def _concat_slice(graph: Graph, concat: str, value: str) -> tuple[int, int]:
    """The elements of in-place concat `concat`'s flat output that input `value` fills."""
    node = next(n for n in graph.nodes if n.output == concat)
    start = 0
    for v in node.inputs:
        size = math.prod(graph.types[v].shape)
        if v == value:
            return start, start + size
        start += size
    raise AssertionError(f"{value} is not an input of {concat}")


def _take(free: list[np.ndarray], nbytes: int) -> np.ndarray:
    """The smallest free block that holds `nbytes`, else a new one."""
    fits = [k for k, b in enumerate(free) if b.nbytes >= nbytes]
    if not fits:
        return aligned_empty(nbytes)
    return free.pop(min(fits, key=lambda k: free[k].nbytes))


def _view(block: np.ndarray, graph: Graph, value: str) -> np.ndarray:
    t = graph.types[value]
    return block[:t.nbytes].view(t.dtype).reshape(t.shape)



__all__ = ["BuiltKernel", "CompiledModel", "FALLBACKS", "GroupKernel", "TaskStatus"]
