"""Compile a whole model into a callable: the best known kernel per fused group.

    model = tessel.compile_model("resnet18.onnx", Target("host"), database="tessel.db")
    (logits,) = model(image)               # numpy in, numpy out

Each task gets its program from the database (tessel.database.first_program: the one replay
path, through tessel.tuning.best_func), else a fallback; each is built (tessel.codegen.build)
with the constant packing stages split out (tessel.prepack), and the runtime
(tessel.graph.runtime) plans the memory and binds the kernels.
"""
from __future__ import annotations

import copy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

from tessel.codegen import build
from tessel.codegen.build import has_source
from tessel.codegen.compiler import COMPILE_TIMEOUT_S
from tessel.codegen.emulate import is_foreign
from tessel.database import Database, first_program
from tessel.graph.compiler.load import load_model
from tessel.graph.compiler.tasks import extract_tasks, lower_groups
from tessel.graph.fuse import fuse
from tessel.graph.ir import Graph, check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS, apply_layout
from tessel.graph.runtime import FALLBACKS, BuiltKernel, CompiledModel, TaskStatus
from tessel.ir import CONSTANT_PARAMS, MEASURE, PARTITION, REDUCE, PrimFunc
from tessel.ir.visitor import blocks
from tessel.measure import LocalBuilder
from tessel.prepack import Prepack, split_prepacks
from tessel.schedule import Schedule, ScheduleError
from tessel.space import Postproc, default_postprocs, make_space, postprocess
from tessel.space.priors import ranked_priors
from tessel.target import Target, as_target
from tessel.tuning import best_func


def compile_model(model: Any, target: Target | str | None = None,
                  database: str | Path | Database | None = None, *,
                  input_shapes: dict[str, Sequence[int]] | None = None,
                  example_inputs: tuple | None = None,
                  fallback: str = "prior", prepack: bool = True,
                  layout: str = DEFAULT_LAYOUT) -> CompiledModel:
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
    if layout != "auto":
        graph = apply_layout(graph, layout, target)  # (the graph before it is let go)
        return compile_graph(graph, target, db, fallback=fallback, prepack=prepack,
                             layout=layout)
    best, times = None, {}
    for candidate in LAYOUTS:
        own = copy.copy(apply_layout(graph, candidate, target))  # (its constants let go
        own.constants = dict(own.constants)                      # as packed, not the shared ones)
        compiled = compile_graph(own, target, db, fallback=fallback, prepack=prepack,
                                 layout=candidate)
        times[candidate] = compiled.latency()
        if best is None or times[candidate] < times[best.layout]:
            best = compiled
        del compiled
    best.layout_times = times
    return best


def compile_graph(graph: Graph, target: Target, db: Database | None, *,
                  fallback: str = "prior", prepack: bool = True, layout: str = "plain",
                  rank: int | None = None,
                  fallbacks: dict[str, tuple[PrimFunc, str]] | None = None) -> CompiledModel:
    """The compiled model of a simplified `graph` already in its `layout` (the graph is the
    model's own from here: its constants are aligned in place and let go once packed). Each
    task runs the database's best program (best_func: its in-sequence choice, else its
    fastest record), or with a `rank` its rank-th fastest record (the slowest it has if
    fewer: tessel.graph.compiler.select's candidates). `fallbacks` keeps the fallback
    program of each task without a record by task key, for compiles of the same model."""
    groups = fuse(graph)
    kernels = lower_groups(graph, groups, target.cores)
    tasks = extract_tasks(kernels, target)
    programs: dict[str, tuple[PrimFunc, PrimFunc, list[Prepack]]] = {}
    statuses = []
    space = make_space("auto", target) if fallback == "prior" else None
    fallbacks = {} if fallbacks is None else fallbacks
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
                                     for w in protocols(task.workload)) if f is not None), None)
        how = "tuned"
        if func is None:
            if task.key not in fallbacks:
                fallbacks[task.key] = fallback_program(task.workload, space, posts, target)
            func, how = fallbacks[task.key]
        statuses.append(TaskStatus(task, how, record))
        main, packs = split_prepacks(func, constant, drop_unread=True)
        programs[task.key] = (func, main, packs)
    modules = iter(build_all([f for _, main, packs in programs.values()
                              for f in (main, *(p.func for p in packs))], target))
    built = {key: BuiltKernel(next(modules), [(p, next(modules)) for p in packs],
                              _arg_sources(main, func, packs))
             for key, (func, main, packs) in programs.items()}
    model = CompiledModel(graph, groups, kernels, built, statuses, target, layout)
    if db is not None:
        model.provenance = {"database": str(db.path), "trials": sum(
            db.trials(s.task.workload, target) for s in statuses)}
    return model


# kernels without C in the cache from which build processes generate it (starting them takes
# a fraction of a second each: below, threads do)
PREBUILD_AT = 4


def build_all(funcs: list[PrimFunc], target: Target) -> list[Any]:
    """Each of `funcs` built for `target` (tessel.codegen.build), in order, on the target's
    cores: kernels whose C is not in the cache yet (PREBUILD_AT of them or more) are first
    generated and compiled by build processes side by side (generating C is Python: threads
    take turns), then every kernel loads from the caches, its compiler run by a thread if
    it still has to be."""
    if len(funcs) < 2 or target.cores < 2:
        return [build(f, target) for f in funcs]
    new = [f for f in funcs if not has_source(f, target)]
    if len(new) >= PREBUILD_AT and not is_foreign(target):
        with LocalBuilder(target, max_workers=target.cores,
                          timeout_s=COMPILE_TIMEOUT_S) as builder:
            builder.prebuild(new)  # (a failure is raised by its build below, as it was)
    with ThreadPoolExecutor(max_workers=target.cores) as pool:
        return list(pool.map(lambda f: build(f, target), funcs))


def _arg_sources(main: PrimFunc, func: PrimFunc, packs: list[Prepack]) -> tuple:
    """Where each argument of the split kernel comes from (BuiltKernel.args)."""
    position = {id(p): k for k, p in enumerate(func.params)}
    packed = {id(p.packed): j for j, p in enumerate(packs)}
    return tuple(("pack", packed[id(p)]) if id(p) in packed else ("param", position[id(p)])
                 for p in main.params)


def fallback_program(func: PrimFunc, space: Any, posts: list[Postproc],
                     target: Target | None = None) -> tuple[PrimFunc, str]:
    """The first expert prior of the auto space that passes the postprocessors; for a copy
    (a concat, a transpose: no reduction, no priors) the space's first design as it was
    sampled (parallel, vectorized: the serial copy ran at half its speed; a reduction's
    sampled design can be far slower than its serial loop: BERT's softmax and layer norm
    made the untuned layer 3x slower); for a reduction to one value, split_reduction; else
    the unscheduled program (also when `space` is None)."""
    if space is None:
        return func, "unscheduled"
    split = split_reduction(func, target) if target is not None else None
    if split is not None:
        return split, "prior"
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


def split_reduction(func: PrimFunc, target: Target) -> PrimFunc | None:
    """A reduction of a whole tensor to one value (a dynamic quantization's min and max of
    an activation), which has no spatial loop to run in parallel, as `cores x lanes`
    partial results (rfactor of its innermost reduction loop) computed in parallel and in
    vectors, then combined: BERT's 128 x 3072 reduce_max 0.42 -> 0.06 ms on a 2-core Xeon.
    None when `func` is not one such block or its innermost reduction does not split."""
    found = blocks(func.body.block.body)
    if len(found) != 1 or not any(iv.kind == REDUCE for iv in found[0].iter_vars) or \
            any(iv.extent > 1 for iv in found[0].iter_vars if iv.kind != REDUCE):
        return None
    lanes = target.vector_lanes(found[0].body.buffer.dtype)
    parts = target.cores * lanes
    sch = Schedule(func)
    try:
        block = sch.get_block(found[0].name)
        loops = sch.get_loops(block)
        if sch.get(loops[-1]).extent % parts or sch.get(loops[-1]).extent == parts:
            return None
        _, inner = sch.split(loops[-1], [None, parts])
        partial = sch.rfactor(inner, factor_axis=0)
        *outer, last = sch.get_loops(partial)  # rfactor puts the partials' loop innermost
        if sch.get(last).extent != parts:
            return None
        threads, vector = sch.split(last, [target.cores, lanes])
        sch.reorder(threads, *outer, vector)
        sch.parallel(threads)
        sch.vectorize(vector)
    except ScheduleError:
        return None
    return sch.func


def protocols(func: PrimFunc) -> Iterator[PrimFunc]:
    """`func`, then the same kernel as older tessels keyed and measured it, whose records
    (replayed on `func`: its partition and its packing) still beat a prior: split by the
    schedule's outer loops (before PARTITION), then from warm caches (before MEASURE), then
    with its weights' packing inside the timed call as well (before CONSTANT_PARAMS)."""
    yield func
    for dropped in ((PARTITION,), (PARTITION, MEASURE), (PARTITION, MEASURE, CONSTANT_PARAMS)):
        if dropped[-1] in func.attrs:
            yield PrimFunc(func.name, func.params, func.body,
                           {k: v for k, v in func.attrs.items() if k not in dropped})


__all__ = ["compile_graph", "compile_model", "fallback_program", "protocols"]
