"""The tuning commands of `tessel`: tune, best, report.

    tessel tune GMM --trials 64                          a suite workload
    tessel tune --op matmul --shape 512,256,384 --trials 128 --strategy annealing
    tessel tune --op conv2d --shape 1,64,56,56,64,3,3 --attrs stride=1,padding=1
    tessel best GMM                                      best record, its program and trace
    tessel report GMM --out gmm.png                      tuning curves per run (PNG + table)
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import math
import os
import re
import sys
from typing import Any, Callable

import tessel
from tessel import cost_model as cost_models
from tessel import ops
from tessel.database import Database
from tessel.database.record import IN_SEQUENCE, RETIMED
from tessel.database.files import status
from tessel.errors import TesselError
from tessel.ir import DTYPE_BITS
from tessel.measure import DaskRunner
from tessel.search import STRATEGIES
from tessel.space import make_space
from tessel.tuning import best_record, report
from tessel.tuning.retime import DRIFT

DEFAULT_DB = "tessel.db"


class CliError(TesselError, ValueError):
    """A command line that names no workload, an unknown op, a malformed shape or attribute."""


def workload_from_args(args: argparse.Namespace):
    """The PrimFunc a command line names: a suite workload or --op with --shape/--attrs."""
    if args.workload and args.op:
        raise CliError("name a suite workload or --op, not both")
    if args.workload:
        if args.workload not in ops.SUITE:
            raise CliError(f"unknown workload {args.workload!r}; see `tessel ops`, or use --op")
        return ops.SUITE[args.workload], args.workload
    if not args.op:
        raise CliError("name a suite workload (see `tessel ops`) or an operator with --op")
    if args.op not in ops.OPS:
        raise CliError(f"unknown operator {args.op!r}; known: {', '.join(sorted(ops.OPS))}")
    factory = ops.OPS[args.op].factory
    sizes, attrs = _sizes(args.op, factory, args.shape), _attrs(args.attrs)
    try:
        inspect.signature(factory).bind(*sizes, **attrs)
    except TypeError as err:
        raise CliError(f"{args.op}{_signature(factory)}: {err} (--shape gives the positional "
                       "sizes, --attrs the keywords)") from None
    return factory(*sizes, **attrs), f"{args.op}[{args.shape or ''}]"


def _sizes(op: str, factory: Callable, text: str | None) -> tuple:
    """The positional arguments --shape gives `factory`: its sizes, or the one shape tuple of
    an elementwise operator (relu(shape)). More sizes than the operator takes is an error of
    its own (the fourth of matmul's would land on its dtype)."""
    sizes = _ints(text, "--shape") if text else []
    required = [p.name for p in inspect.signature(factory).parameters.values()
                if p.default is p.empty]
    if required[:1] == ["shape"]:
        return (tuple(sizes),) if sizes else ()
    if len(sizes) > len(required):
        raise CliError(f"{op} takes {len(required)} sizes ({', '.join(required)}), got "
                       f"{len(sizes)} in --shape {text}")
    return tuple(sizes)


def _check_fits(func, label: str) -> None:
    """Refuse a workload whose buffers this machine cannot hold (tuning allocates them all)."""
    limit = _memory_limit()
    nbytes = sum(math.prod(b.shape) * DTYPE_BITS[b.dtype] // 8 for b in func.params)
    if limit is not None and nbytes > limit[0]:
        names = ", ".join(b.name for b in func.params)
        raise CliError(f"{label}: its buffers ({names}) take {_size(nbytes)}, more than "
                       f"{limit[1]}")


def _memory_limit() -> tuple[int, str] | None:
    """(bytes, description) of the memory a command may use: the machine's, or less under
    `ulimit -v`; None where the system does not say."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None
    found = (limit, f"the {_size(limit)} of memory this machine has")
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    except (ImportError, OSError, ValueError):
        return found
    if soft != resource.RLIM_INFINITY and soft < limit:
        found = (soft, f"the {_size(soft)} this process may use (ulimit -v)")
    return found


def _size(nbytes: float) -> str:
    """1.2 GiB, 3.5 EiB: bytes for a message."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
    power = min(max(int(nbytes).bit_length() - 1, 0) // 10, len(units) - 1)
    return f"{nbytes / 1024 ** power:.3g} {units[power]}"


def _signature(factory) -> str:
    """'(M, N, K, dtype=float32, out_dtype=None)' for a message."""
    params = inspect.signature(factory).parameters.values()
    return "(" + ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default}"
                           for p in params) + ")"


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"{flag} takes comma-separated integers, got {text!r}") from None


def count(low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int from `low` (to `high`); else argparse's one-line error,
    `argument --trials: must be an int >= 1, got '0'`."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"from {low} to {high}"
            raise argparse.ArgumentTypeError(f"must be an int {bound}, got {text!r}")
        return value
    return parse


UNITS = {"s": 1, "m": 60, "h": 3600}


def duration(text: str) -> float:
    """An argparse type: a span of time, `90s`, `10m`, `1h30m` or plain seconds (`45`), more
    than 0; else argparse's one-line error."""
    parts = re.fullmatch(r"(?:\d+(?:\.\d+)?[hms])+", text.strip())
    if parts:
        value = sum(float(n) * UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)([hms])", text))
    else:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a time such as 90s, 10m or 1h30m, "
                                         f"got {text!r}")
    return value


def seconds(high: float) -> Callable[[str], float]:
    """An argparse type: a number of seconds, more than 0 and at most `high` (nan is none)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not 0 < value <= high:
            raise argparse.ArgumentTypeError(f"must be seconds > 0 and <= {high:g}, got "
                                             f"{text!r}")
        return value
    return parse


def check_parts(target, strategy: str, cost_model: str, space: str = "auto") -> None:
    """Refuse an unknown search strategy, cost model or space before anything opens a file
    (the database a refused command would otherwise leave behind)."""
    if strategy not in STRATEGIES:
        raise CliError(f"unknown search strategy {strategy!r}; use one of {sorted(STRATEGIES)}")
    if cost_model not in cost_models.MODELS:
        raise CliError(f"unknown cost model {cost_model!r}; known: "
                       f"{sorted(cost_models.MODELS)}")
    make_space(space, target)  # SpaceError names the known spaces


def _attrs(text: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in filter(None, (text or "").split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--attrs takes key=value pairs, got {item!r}")
        out[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return out


def _check_runner(args: argparse.Namespace) -> None:
    if args.runner == "local" and (args.scheduler or args.device):
        raise CliError("--scheduler and --device go with --runner dask")
    if args.runner == "dask" and not (args.scheduler and args.device):
        raise CliError("--runner dask needs --scheduler ADDRESS and --device KEY")


def cmd_tune(args: argparse.Namespace) -> int:
    func, label = workload_from_args(args)
    _check_fits(func, label)
    target = tessel.Target("host")
    check_parts(target, args.strategy, args.cost_model, args.space)
    _check_runner(args)
    dask = args.runner == "dask"  # DaskRunner: DaskError, one line, when no scheduler answers
    runner = DaskRunner(args.scheduler, device=args.device, target=target) if dask else None
    with runner or contextlib.nullcontext():
        result = tessel.tune(func, target, args.trials, space=args.space,
                             strategy=args.strategy, cost_model=args.cost_model,
                             database=args.db, runner=runner, batch_size=args.batch_size,
                             seed=args.seed, early_stopping=args.early_stopping, name=label,
                             transfer_from=args.transfer_from)
    return _reported(result, label, target, args)


def _reported(result, label: str, target, args: argparse.Namespace) -> int:
    """Print what `tessel tune` found; its exit status."""
    if result.best_trace is None:
        print(f"{label}: no valid program found in {args.trials} trials", file=sys.stderr)
        return 130 if result.interrupted else 1
    new = len(result.history)
    print(f"{label}: best {result.best_gflops:.1f} GFLOP/s ({_timing(result)}) after "
          f"{result.trials_before + new} trials ({new} new) on {target}; records in {args.db}")
    if result.interrupted:
        print(f"tessel tune: interrupted; every measured trial is stored in {args.db}, and "
              "the same command resumes", file=sys.stderr)
        return 130
    return 0


def _timing(result) -> str:
    """How the best's time was taken: re-timed as a user's process times it, beside its time
    in search, and a note when the two differ by more than retime.DRIFT."""
    searched = f"{result.search_seconds * 1e3:.4f} ms in search"
    again = result.remeasured_seconds
    if again != again:  # nan: not re-timed
        return f"{searched}; not re-timed"
    text = f"{again * 1e3:.4f} ms re-timed as a user's process times it; {searched}"
    drift = again / result.search_seconds - 1
    if abs(drift) > DRIFT:
        text += (f": {abs(drift):.0%} {'slower' if drift > 0 else 'faster'} now, the "
                 "machine's speed moved (other work, or a slow phase)")
    return text


def cmd_best(args: argparse.Namespace) -> int:
    func, label = workload_from_args(args)
    _existing(args.db)
    target = tessel.Target("host")
    with Database(args.db, create=False) as db:
        found = best_record(func, target, db)
    if found is None:
        print(f"{label}: {args.db} holds no valid record for {target}; run `tessel tune` first",
              file=sys.stderr)
        return 1
    (record, program), task = found, tessel.Task(func, target)
    print(f"{label}: {task.gflops(record.mean_secs):.1f} GFLOP/s "
          f"({record.mean_secs * 1e3:.4f} ms, {_how_timed(record)}, run {record.run!r})")
    print("\n# trace\n" + record.trace().script())
    print("\n# program\n" + program.script())
    return 0


def _how_timed(record) -> str:
    flags = record.flags.split(",")
    if RETIMED in flags:
        return (f"re-timed in {len(record.costs)} batches at the end of its run, as a user's "
                "process times it")
    if IN_SEQUENCE in flags:
        return "timed in its model's sequence"
    return f"{len(record.costs)} repeats in search"


def cmd_report(args: argparse.Namespace) -> int:
    func, label = workload_from_args(args)
    out = report.image_path(args.out) if args.out else None  # a bad --out before any work
    _existing(args.db)
    target = tessel.Target("host")
    with Database(args.db) as db:
        records = db.records(func, target)
    if not records:
        print(f"{label}: {args.db} holds no records for {target}", file=sys.stderr)
        return 1
    curves = report.curves_from_records(records, tessel.Task(func, target).flops)
    print(report.table(curves))
    if out is not None:
        print(f"saved {report.plot(curves, out, title=f'{label} on {target}')}")
    return 0


def _existing(db: str) -> None:
    """Reading commands never create a database (a typo would leave an empty file)."""
    from pathlib import Path
    if status(Path(db)) is None:  # DatabaseError for a name the system refuses (too long)
        raise CliError(f"no database {db}; run `tessel tune` first, or name one with --db")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("workload", nargs="?", help="a suite workload (see `tessel ops`)")
    p.add_argument("--op", help="an operator of tessel.ops (matmul, conv2d, softmax, ...)")
    p.add_argument("--shape", help="the operator's positional sizes, e.g. 512,512,512")
    p.add_argument("--attrs", help="keyword arguments, e.g. stride=2,padding=1")
    p.add_argument("--db", default=DEFAULT_DB, help=f"record database (default {DEFAULT_DB})")


def add_commands(sub) -> None:
    p = sub.add_parser("tune", help="search for a fast program of a workload")
    add_workload_args(p)
    p.add_argument("--trials", type=count(1), default=64,
                   help="measurements in all (default 64)")
    p.add_argument("--strategy", default="evolutionary",
                   help="evolutionary, annealing, random, genetic or grid")
    p.add_argument("--space", default="auto", help="auto, or a template name (matmul, ...)")
    p.add_argument("--cost-model", default="pretrained",
                   help="pretrained (default), xgb, xgb-reg, treegru, ensemble, random")
    p.add_argument("--batch-size", type=count(1), default=16)
    p.add_argument("--early-stopping", type=count(1), default=None,
                   help="stop after this many trials without improvement")
    p.add_argument("--seed", type=count(0), default=0)
    p.add_argument("--transfer-from", action="append", default=[], metavar="DB",
                   help="another record database to learn from (repeatable): the best programs "
                        "of the nearest shapes tuned there, fitted to this one, join the first "
                        "batch, as those of --db do")
    p.add_argument("--runner", choices=("local", "dask"), default="local")
    p.add_argument("--scheduler", help="Dask scheduler address (with --runner dask)")
    p.add_argument("--device", help="device key of the Dask pool (with --runner dask)")
    p.set_defaults(fn=cmd_tune)
    p = sub.add_parser("best", help="the best record of a workload, its trace and program")
    add_workload_args(p)
    p.set_defaults(fn=cmd_best)
    p = sub.add_parser("report", help="tuning curves of a workload: table and PNG")
    add_workload_args(p)
    p.add_argument("--out", help="save the curves to this PNG file")
    p.set_defaults(fn=cmd_report)
