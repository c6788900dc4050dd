"""The whole-model commands of `tessel`: tasks, tune-model, run-model, export.

    tessel tasks model.onnx                       the fused kernels and tuning tasks of a model
    tessel tune-model model.onnx --trials 512     tune all tasks into the database
    tessel tune-model model.onnx --time 10m       ... by the clock
    tessel run-model model.onnx                   compile with the database, check, time
    tessel export model.onnx -o model.so          one library that runs without tessel
    tessel tune-model resnet18 --image 224        a model of tessel's zoo (needs torch)

A model is an ONNX file, or the name of a model built in code (tessel.graph.frontend.models:
resnet18, mobilenet_v2, bert_layer, dqn, dcgan_generator) with random weights, imported through
torch.export (`--frontend torch`, the default for zoo models) or ONNX (`--frontend onnx`).
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import tessel
from tessel import runtime as tessel_runtime
from tessel.cli.tune import DEFAULT_DB, CliError, _ints, check_parts, count, duration
from tessel.graph import GraphError
from tessel.graph.compiler import load_model, model_tasks, select_in_sequence
from tessel.graph.compiler.select import MAX_CANDIDATES
from tessel.graph.compiler import tune as model_tuning
from tessel.graph.frontend import models
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS
from tessel.graph.reference import run_graph
from tessel.target import VALID_TARGETS

MAX_IMAGE = 4096  # a zoo CNN's activations grow with its square: 4096 is GiBs already


def load_graph(args: argparse.Namespace):
    """The simplified graph a command line names: an ONNX file (with --input shapes) or a zoo
    model (with --image and --frontend)."""
    if _is_file(args):
        if not Path(args.model).exists():
            raise CliError(f"no such model file: {args.model}")
        shapes = _input_shapes(args.input)
        try:
            return load_model(args.model, input_shapes=shapes)
        except GraphError as err:
            raise GraphError(_in_flags(str(err))) from None
    kwargs = {"image": args.image} if args.image is not None else {}
    if args.frontend == "onnx":
        return load_model(models.onnx_model(args.model, **kwargs))
    module, example = models.build(args.model, **kwargs)
    return load_model(module, example_inputs=example)


def check_model_args(args: argparse.Namespace) -> None:
    """Refuse a model that is neither a file nor in the zoo, and flags that do not apply to
    it (they would be ignored), before any work."""
    if _is_file(args):
        given = [f for f, v in (("--image", args.image), ("--frontend", args.frontend)) if v]
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            raise CliError(f"{' and '.join(given)} {verb} to zoo models; {args.model} is an "
                           "ONNX file (--input sets the sizes it leaves open)")
        _input_shapes(args.input)
        return
    if args.model not in models.MODELS:
        raise CliError(f"{args.model!r} is neither an ONNX file nor a zoo model "
                       f"({', '.join(models.MODELS)})")
    if args.input:
        raise CliError(f"--input applies to ONNX files; zoo model {args.model}'s inputs are "
                       "fixed (its image size: --image)")


def _is_file(args: argparse.Namespace) -> bool:
    return Path(args.model).suffix == ".onnx" or Path(args.model).exists()


def _input_shapes(items: list[str] | None) -> dict[str, tuple[int, ...]] | None:
    if not items:
        return None
    out = {}
    for item in items:
        name, sep, dims = item.partition("=")
        sizes = tuple(_ints(dims, "--input")) if sep else ()
        if not name or not sizes or min(sizes) < 1:
            raise CliError(f"--input takes NAME=d0,d1,... with positive sizes, got {item!r}")
        if name in out:
            raise CliError(f"--input gives input {name!r} twice")
        out[name] = sizes
    return out


def _in_flags(message: str) -> str:
    """An importer's message in the command line's words: `pass input_shapes={'x': (...)}`
    is `pass --input x=d0,d1,...`."""
    message = re.sub(r"input_shapes=\{(['\"])(.*?)\1: \(\.\.\.\)\}", r"--input \2=d0,d1,...",
                     message)
    return message.replace("pass input_shapes", "pass --input NAME=d0,d1,...") \
        .replace("input_shapes", "--input")


DEFAULT_TRIALS = 256
UNBOUNDED = 10 ** 9  # trials, when only the clock bounds a run


def cmd_tasks(args: argparse.Namespace) -> int:
    check_model_args(args)
    graph = load_graph(args)
    kernels, tasks = model_tasks(graph, tessel.Target("host"), args.layout)
    print(f"{graph.name}: {len(graph.nodes)} nodes -> {len(kernels)} kernels -> "
          f"{len(tasks)} tasks")
    for t in tasks:
        print(f"  {t.label:<48} x{int(t.weight):<3} {t.flops / 1e6:10.1f} MFLOP")
    return 0


def cmd_tune_model(args: argparse.Namespace) -> int:
    start = model_tuning.clock()
    check_model_args(args)
    target = tessel.Target("host")
    check_parts(target, args.strategy, args.cost_model)
    graph = load_graph(args)
    trials = args.trials or (UNBOUNDED if args.time else DEFAULT_TRIALS)
    budget, deadline = model_tuning.split_budget(start, args.time, bool(args.select))
    results = tessel.tune_model(graph, target, trials, database=args.db, time_budget=budget,
                                scheduler=args.scheduler, strategy=args.strategy,
                                cost_model=args.cost_model, batch_size=args.batch_size,
                                seed=args.seed, layout=args.layout, select=0,
                                transfer_from=args.transfer_from)
    print(f"{graph.name}: {len(results)} tasks, records in {args.db}")
    for r in results:
        trials = r.trials_before + len(r.history)
        print(f"  {r.task.label:<48} x{int(r.task.weight):<3} {trials:4d} trials  "
              f"{r.best_seconds * 1e3:9.4f} ms {r.best_gflops:8.1f} GFLOP/s")
    if any(r.interrupted for r in results):
        print(f"tessel tune-model: interrupted; every measured trial is stored in {args.db}, "
              "and the same command resumes", file=sys.stderr)
        return 130
    if args.select:
        chosen = select_in_sequence(graph, target, args.db, candidates=args.select,
                                    layout=args.layout, deadline=deadline)
        print(f"{graph.name}: {chosen.line()}")
    return 0


def cmd_run_model(args: argparse.Namespace) -> int:
    check_model_args(args)
    graph = load_graph(args)
    model = tessel.compile_model(graph, tessel.Target("host"),
                                 args.db if Path(args.db).exists() else None,
                                 layout=args.layout)
    print(model.report())
    rng = np.random.default_rng(args.seed)
    feeds = [rng.standard_normal(graph.types[v].shape).astype(np.float32) for v in graph.inputs]
    outs = model(*feeds)
    expected = run_graph(graph, feeds)
    err = max(float(np.max(np.abs(o - e))) for o, e in zip(outs, expected))
    print(f"max |error| vs the numpy reference: {err:.2e}")
    print(f"latency: {_latency(model, feeds, args.repeat) * 1e3:.3f} ms (median of "
          f"{args.repeat})")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    if args.header:
        if args.model is not None or args.output is not None:
            raise CliError("--header prints the C header alone: drop the model and -o")
        sys.stdout.write(tessel_runtime.header_path().read_text())
        return 0
    if args.model is None or args.output is None:
        raise CliError("export needs a model and -o FILE.so (or --header)")
    out = Path(args.output)
    if not out.parent.is_dir():
        raise CliError(f"no such directory for -o: {out.parent}")
    if args.db != DEFAULT_DB and not Path(args.db).exists():
        raise CliError(f"no such database: {args.db}")
    check_model_args(args)
    graph = load_graph(args)
    model = tessel.compile_model(graph, tessel.Target(args.target),
                                 args.db if Path(args.db).exists() else None,
                                 layout=args.layout)
    print(model.report().splitlines()[0])
    start = time.perf_counter()
    summary = model.export(out)
    print(f"{summary.line()} ({time.perf_counter() - start:.1f} s)")
    print(f"load it with tessel.runtime.load({str(out)!r}) (numpy alone), or from C with "
          "tessel_runtime.h (tessel export --header)")
    return 0


def _latency(model: Any, feeds: list[np.ndarray], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        model(*feeds)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _model_args(p: argparse.ArgumentParser, layouts: tuple[str, ...] = LAYOUTS,
                optional: bool = False) -> None:
    p.add_argument("model", nargs="?" if optional else None,
                   help="an .onnx file or a zoo model name (resnet18, bert_layer, ...)")
    p.add_argument("--input", action="append", metavar="NAME=d0,d1,...",
                   help="static shape of an ONNX input with dynamic dims (repeatable)")
    p.add_argument("--frontend", choices=("torch", "onnx"), default=None,
                   help="importer for zoo models (default torch)")
    p.add_argument("--image", type=count(1, MAX_IMAGE), default=None,
                   help="image size of zoo CNNs")
    p.add_argument("--db", default=DEFAULT_DB, help=f"record database (default {DEFAULT_DB})")
    p.add_argument("--layout", choices=layouts, default=DEFAULT_LAYOUT,
                   help="convolutions in blocked channel layouts (NCHW[b]c: blocked; winograd, "
                        "the default, also runs 3x3 convolutions over many tiles as Winograd "
                        "F(4x4, 3x3)) or as the model states them (plain); tune and run in the "
                        "same one (run-model also takes auto: each compiled and timed, the "
                        "fastest kept)")
    p.add_argument("--seed", type=count(0), default=0)


def add_commands(sub) -> None:
    p = sub.add_parser("tasks", help="the fused kernels and tuning tasks of a model")
    _model_args(p)
    p.set_defaults(fn=cmd_tasks)
    p = sub.add_parser("tune-model", help="tune every task of a model into the database")
    _model_args(p)
    p.add_argument("--trials", type=count(1), default=None,
                   help=f"measurements in all (default {DEFAULT_TRIALS}; with --time, as many as "
                        "it allows)")
    p.add_argument("--time", type=duration, default=None, metavar="T",
                   help="end about T (90s, 10m, 1h30m) after the start, loading the model "
                        "included: tuning stops where "
                        f"{model_tuning.SELECT_SHARE:.0%}% of T is left, for the selection "
                        "(--select) to time as many ranks as fit")
    p.add_argument("--scheduler", choices=("gradient", "round-robin"), default="gradient")
    p.add_argument("--strategy", default="evolutionary")
    p.add_argument("--cost-model", default="pretrained")
    p.add_argument("--batch-size", type=count(1), default=16)
    p.add_argument("--transfer-from", action="append", default=[], metavar="DB",
                   help="another record database to learn from (repeatable): a new task starts "
                        "from the best programs of its nearest relatives tuned there, fitted to "
                        "its shape, as from those of --db")
    p.add_argument("--select", type=count(0, MAX_CANDIDATES), default=8, metavar="N",
                   help="then time each task's N best records in the model's sequence and "
                        f"store the fastest there as its choice (default 8, at most "
                        f"{MAX_CANDIDATES}: each is a copy of the model in memory; 0: off)")
    p.set_defaults(fn=cmd_tune_model)
    p = sub.add_parser("run-model", help="compile a model with the database, check and time it")
    _model_args(p, layouts=(*LAYOUTS, "auto"))
    p.add_argument("--repeat", type=count(1), default=10, help="timed calls (default 10)")
    p.set_defaults(fn=cmd_run_model)
    p = sub.add_parser("export", help="write a compiled model as one shared library that runs "
                                      "without tessel (or print the C header: --header)")
    _model_args(p, optional=True)
    p.add_argument("-o", "--output", default=None, metavar="FILE.so",
                   help="the library to write")
    p.add_argument("--target", default="host", choices=VALID_TARGETS,
                   help="the ISA it is built for (default: this machine's features; a preset "
                        "runs on more CPUs, with the records tuned for it; another "
                        "architecture's with its cross compiler)")
    p.add_argument("--header", action="store_true",
                   help="print tessel_runtime.h, the C API of exported models, and exit")
    p.set_defaults(fn=cmd_export)


__all__ = ["add_commands", "load_graph"]
