"""Compile a whole model into a callable: the best known kernel per fused group, memory planned
up front.

    model = tessel.compile_model("resnet18.onnx", Target("host"), database="tessel.db")
    (logits,) = model(image)               # numpy in, numpy out
    print(model.report())                  # which tasks were tuned, which fell back (and how)

Every intermediate tensor gets its storage once, at compile time: a value's block is reused by
later values as soon as its last reader has run (reshapes alias their input's block), so a call
allocates nothing but its result copies. Kernels are bound to their arrays once, so a call is a
list of C calls.
"""
from __future__ import annotations

import copy
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from tessel.codegen import Module, build
from tessel.codegen.emulate import check_timeable, kernel_sequence
from tessel.codegen.module import BoundCall, aligned, aligned_empty
from tessel.database import Database, TuningRecord, first_program
from tessel.graph.fold import simplify
from tessel.graph.fuse import FusedGroup, fuse
from tessel.extras import require
from tessel.graph.ir import Graph, GraphError, check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS, apply_layout
from tessel.prepack import Prepack, split_prepacks
from tessel.graph.tasks import GroupKernel, extract_tasks, lower_groups
from tessel.ir import CONSTANT_PARAMS, MEASURE, PARTITION, REDUCE, PrimFunc
from tessel.ir.visitor import blocks
from tessel.schedule import Schedule, ScheduleError
from tessel.space import Postproc, default_postprocs, make_space, postprocess
from tessel.space.priors import ranked_priors
from tessel.target import Target, as_target
from tessel.tuning import Task, TuneResult, best_func, check_tune_tasks_args, tune_tasks


log = logging.getLogger("tessel")
FALLBACKS = ("prior", "unscheduled")


@dataclass(frozen=True)
class TaskStatus:
    """How the executor runs one task: "tuned" (the database's best program), "prior" (the
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


def load_model(model: Any, input_shapes: dict[str, Sequence[int]] | None = None,
               example_inputs: tuple | None = None) -> Graph:
    """A Graph from a Graph, an ONNX model (proto or path), or a torch.nn.Module (with
    `example_inputs`); then simplified (constants and batch norms folded). `input_shapes`
    fills an ONNX model's dynamic dimensions (tessel.graph.onnx_import)."""
    if isinstance(model, Graph):
        check(not input_shapes, "input_shapes is for ONNX models; a tessel Graph has its shapes")
        graph = model
    elif _is_torch_module(model):
        check(example_inputs is not None, "a torch module needs example_inputs (a tuple of "
                                          "tensors of the shapes to compile for)")
        check(not input_shapes, "input_shapes is for ONNX models; a torch module is compiled "
                                "for the shapes of its example_inputs")
        from tessel.graph.torch_import import from_torch
        graph = from_torch(model, tuple(example_inputs))
    elif isinstance(model, (str, Path)) or type(model).__name__ == "ModelProto":
        check(example_inputs is None, "example_inputs is for torch modules; give an ONNX "
                                      "model's shapes with input_shapes")
        require("onnx", "importing an ONNX model")
        from tessel.graph.onnx_import import from_onnx
        graph = from_onnx(model, input_shapes=input_shapes)
    else:
        raise GraphError(f"cannot compile a {type(model).__name__}: pass a tessel Graph, an "
                         f"ONNX model (ModelProto or path) or a torch.nn.Module")
    return simplify(graph)


def _is_torch_module(model: Any) -> bool:
    return any(c.__module__.startswith("torch.nn") and c.__name__ == "Module"
               for c in type(model).__mro__)


def model_tasks(graph: Graph, target: Target, layout: str = DEFAULT_LAYOUT
                ) -> tuple[list[GroupKernel], list[Task]]:
    """The kernels of a simplified graph in `layout` (tessel.graph.layout) and its tuning
    tasks (one per distinct kernel)."""
    graph = apply_layout(graph, layout, target.vector_lanes("float32"))
    kernels = lower_groups(graph, fuse(graph), target.cores)
    return kernels, extract_tasks(kernels, target)


def tune_model(model: Any, target: Target | str | None = None, trials: int = 256, *,
               database: str | Path | Database | None = "tessel.db",
               input_shapes: dict | None = None, example_inputs: tuple | None = None,
               layout: str = DEFAULT_LAYOUT, select: int = 8,
               **options: Any) -> list[TuneResult]:
    """Tune every distinct fused kernel of a model (a tessel Graph, an ONNX model or path, or
    a torch module with `example_inputs`) within `trials` measurements in all, shared by the
    task scheduler; `options` go to `tune_tasks`. Then, with `select` > 0 and a database,
    each task's `select` best records are timed in the model's sequence and the fastest
    there is stored as its choice (tessel.graph.select; not after an interrupted run).
    `tessel.compile_model` then runs the model with what the database holds (tune and compile
    in the same `layout`)."""
    check(isinstance(select, int) and not isinstance(select, bool) and select >= 0,
          f"select must be an int >= 0, got {select!r}")
    check(layout in LAYOUTS, f"layout must be one of {LAYOUTS}, got {layout!r}")
    target = as_target(target)
    check_tune_tasks_args(target, trials, database=database, **options)  # before any work
    graph = load_model(model, input_shapes, example_inputs)
    _, tasks = model_tasks(graph, target, layout)
    results = tune_tasks(tasks, trials, database=database, **options)
    if select and database is not None and not any(r.interrupted for r in results):
        from tessel.graph.select import select_in_sequence
        chosen = select_in_sequence(graph, target, database, candidates=select, layout=layout)
        log.info("%s: %s", graph.name, chosen.line())
    return results


def compile_model(model: Any, target: Target | str | None = None,
                  database: str | Path | Database | None = None, *,
                  input_shapes: dict[str, Sequence[int]] | None = None,
                  example_inputs: tuple | None = None,
                  fallback: str = "prior", prepack: bool = True,
                  layout: str = DEFAULT_LAYOUT) -> "CompiledModel":
    """Compile `model` for `target` with the best kernel `database` holds for each task. A task
    without a record runs, with fallback="prior", the auto space's first expert prior (a
    register-blocked program, as AutoTVM's fallback configuration) where it has one, the
    space's first design for a copy (a concat runs parallel and vectorized), else its
    unscheduled program (see `CompiledModel.report`). With `prepack`, kernels that copy a
    constant weight into a packed layout get it packed once, here (tessel.prepack).

    `layout` "blocked" runs convolutions in blocked channel layouts (NCHW[b]c, converted at
    the network's boundaries: tessel.graph.layout), "winograd" (the default) as blocked with
    the 3x3 convolutions over many tiles as Winograd F(4x4, 3x3) (tessel.graph.winograd),
    "plain" as the model states them; "auto" compiles each, times each on random inputs and
    keeps the fastest (compiling takes that many times as long, and two are in memory for a
    moment)."""
    check(fallback in FALLBACKS, f"fallback must be one of {FALLBACKS}, got {fallback!r}")
    check(layout in (*LAYOUTS, "auto"), f"layout must be one of {(*LAYOUTS, 'auto')}, got "
                                        f"{layout!r}")
    target = as_target(target)
    graph = load_model(model, input_shapes, example_inputs)
    del model  # an ONNX proto (or module) the caller does not hold is freed before packing
    db = Database.open(database, create=False)
    check(db is not None or database is None, f"database {database} does not exist")
    lanes = target.vector_lanes("float32")
    if layout != "auto":
        graph = apply_layout(graph, layout, lanes)  # (the graph before it is let go)
        return _compile(graph, target, db, fallback, prepack, layout)
    best, times = None, {}
    for candidate in LAYOUTS:
        own = copy.copy(apply_layout(graph, candidate, lanes))  # (its constants let go as
        own.constants = dict(own.constants)                    # packed, not the shared ones)
        compiled = _compile(own, target, db, fallback, prepack, candidate)
        times[candidate] = compiled.latency()
        if best is None or times[candidate] < times[best.layout]:
            best = compiled
        del compiled
    best.layout_times = times
    return best


def _compile(graph: Graph, target: Target, db: Database | None, fallback: str, prepack: bool,
             layout: str, rank: int | None = None) -> "CompiledModel":
    """The compiled model; each task runs the database's best program (best_func: its
    in-sequence choice, else its fastest record), or with a `rank` its rank-th fastest record
    (the slowest it has if fewer: tessel.graph.select's candidates)."""
    groups = fuse(graph)
    kernels = lower_groups(graph, groups, target.cores)
    tasks = extract_tasks(kernels, target)
    built: dict[str, _Built] = {}
    statuses = []
    space = make_space("auto", target) if fallback == "prior" else None
    for task in tasks:
        # the kernel's parameters that are the model's weights (lower_group): their packing
        # runs once, here, as the tuner measured it (pack stages at the root: postprocs_for)
        constant = set(task.workload.constant_params) if prepack else set()
        posts = default_postprocs(target, pack_panels=not constant)
        record, func = None, None
        if db is not None and rank is not None:  # the rank-th fastest, else the next that replays
            found = first_program(reversed(db.top_k(task.workload, target, k=rank + 1)),
                                  task.workload, posts)
            record, func = found if found is not None else (None, None)
        elif db is not None:
            func = next((f for f in (best_func(task.workload, target, db, posts, records_of=w)
                                     for w in _protocols(task.workload)) if f is not None), None)
        how = "tuned"
        if func is None:
            func, how = _fallback(task.workload, space, posts)
        statuses.append(TaskStatus(task, how, record))
        main, packs = split_prepacks(func, constant, drop_unread=True)
        built[task.key] = _Built(build(main, target), [(p, build(p.func, target)) for p in packs],
                                 _arg_sources(main, func, packs))
    return CompiledModel(graph, groups, kernels, built, statuses, target, layout)


@dataclass(frozen=True)
class _Built:
    """A task's kernel, the constant packing stages split out of it, and where each of the
    kernel's arguments comes from: ("param", k), the k-th value bound to the kernel before
    the split, or ("pack", j), the output of packs[j]."""
    main: Module
    packs: list[tuple[Prepack, Module]]
    args: tuple[tuple[str, int], ...]


def _arg_sources(main: PrimFunc, func: PrimFunc, packs: list[Prepack]) -> tuple:
    position = {id(p): k for k, p in enumerate(func.params)}
    packed = {id(p.packed): j for j, p in enumerate(packs)}
    return tuple(("pack", packed[id(p)]) if id(p) in packed else ("param", position[id(p)])
                 for p in main.params)


def _fallback(func: PrimFunc, space: Any, posts: list[Postproc]) -> tuple[PrimFunc, str]:
    """The first expert prior of the auto space that passes the postprocessors; for a copy
    (a concat, a transpose: no reduction, no priors) the space's first design as it was
    sampled (parallel, vectorized: the serial copy ran at half its speed; a reduction's
    sampled design can be far slower than its serial loop: BERT's softmax and layer norm
    made the untuned layer 3x slower); else the unscheduled program (also when `space` is
    None)."""
    if space is None:
        return func, "unscheduled"
    priors = ranked_priors(space, func)
    if not priors and not any(iv.kind == REDUCE for b in blocks(func.body)
                              for iv in b.iter_vars):
        priors = [(design, design.decisions) for design in space.designs(func)[:1]]
    for design, decisions in priors:
        try:
            final = postprocess(design.apply(Schedule(func), decisions), posts)
        except ScheduleError:
            continue
        if final is not None:
            return final.func, "prior"
    return func, "unscheduled"


def _protocols(func: PrimFunc) -> Iterator[PrimFunc]:
    """`func`, then the same kernel as older tessels keyed and measured it, whose records
    (replayed on `func`: its partition and its packing) still beat a prior: split by the
    schedule's outer loops (before PARTITION), then from warm caches (before MEASURE), then
    with its weights' packing inside the timed call as well (before CONSTANT_PARAMS)."""
    yield func
    for dropped in ((PARTITION,), (PARTITION, MEASURE), (PARTITION, MEASURE, CONSTANT_PARAMS)):
        if dropped[-1] in func.attrs:
            yield PrimFunc(func.name, func.params, func.body,
                           {k: v for k, v in func.attrs.items() if k not in dropped})


class CompiledModel:
    """A model ready to run: `model(*inputs)` returns its outputs as a list of arrays."""

    def __init__(self, graph: Graph, groups: list[FusedGroup], kernels: list[GroupKernel],
                 built: dict[str, _Built], statuses: list[TaskStatus], target: Target,
                 layout: str = "plain") -> None:
        self.statuses = statuses
        self.layout = layout  # the graph's convolution layout (tessel.graph.layout)
        self.layout_times: dict[str, float] | None = None  # layout="auto": seconds per call
        self.input_names = list(graph.inputs)
        self._arrays = _plan_memory(graph, groups)
        self._kernels = kernels
        self._calls: list[BoundCall] = []
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
        for step, k in enumerate(kernels):
            b = built[k.key]
            packed = []
            for pack, module in b.packs:  # constants packed once, here
                packed.append(aligned_empty(pack.packed.shape, pack.packed.dtype))
                module(self._arrays[k.params[pack.source]], packed[-1])
            self._calls.append(b.main.bind(*(self._arrays[k.params[i]] if kind == "param"
                                             else packed[i] for kind, i in b.args)))
            for v in free_after.get(step, ()):
                del self._arrays[v], constants[v]
        self._sequence = kernel_sequence(self._calls, target)  # (emulated: another arch)
        self.prepacked = sum(len(built[k.key].packs) for k in kernels)
        for v in set(constants) - read:  # read by no kernel at all
            del self._arrays[v], constants[v]
        self.graph = graph

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
        lines = [f"{self.graph.name}: {len(self._kernels)} kernels, {len(self.statuses)} "
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
        rng = np.random.default_rng(seed)
        feeds = [rng.standard_normal(self.graph.types[v].shape).astype(self.graph.types[v].dtype)
                 for v in self.input_names]
        self(*feeds)
        times: list[float] = []
        start = time.perf_counter()
        while len(times) < 3 or time.perf_counter() - start < budget:
            t0 = time.perf_counter()
            self(*feeds)
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    def profile(self, repeat: int = 3, in_sequence: bool = False) -> list[tuple[str, float]]:
        """(kernel name, seconds) for each kernel in run order, on the inputs of the last call:
        the best of `repeat` calls of the kernel alone, or with `in_sequence` the median of
        its calls within `repeat` whole runs of the sequence (its caches as the kernels
        before it leave them: what a model run sees)."""
        check_timeable(self._sequence, f"model {self.graph.name}")
        names = [kernel.func.name for kernel in self._kernels]
        if not in_sequence:
            out = []
            for name, call in zip(names, self._calls):
                best = math.inf
                for _ in range(repeat):
                    start = time.perf_counter()
                    call()
                    best = min(best, time.perf_counter() - start)
                out.append((name, best))
            return out
        times = np.empty((repeat, len(self._calls)))
        for r in range(repeat):
            for k, call in enumerate(self._calls):
                start = time.perf_counter()
                call()
                times[r, k] = time.perf_counter() - start
        return list(zip(names, np.median(times, axis=0).tolist()))

    @property
    def kernel_funcs(self) -> list[PrimFunc]:
        """The PrimFunc of each kernel, in run order (as `profile` lists them)."""
        return [kernel.func for kernel in self._kernels]


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


__all__ = ["CompiledModel", "TaskStatus", "compile_model", "load_model", "model_tasks",
           "tune_model"]
