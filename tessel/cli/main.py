"""The `tessel` command.

    tessel ops                  list the workloads of the public suite
    tessel suite [NAME ...]     build every (or the named) workload unscheduled, check it
                                against numpy and print time and GFLOP/s
    tessel show NAME            print a workload's program (and --c for its C source)
    tessel tune NAME | --op OP --shape ...  [--trials N --strategy S --space S --db FILE]
                                search for a fast program (resumes from the database)
    tessel best NAME            the best record of a workload: speed, trace, program
    tessel report NAME [--out curves.png]
                                tuning curves (best GFLOP/s against trials) per run
    tessel tasks MODEL          the fused kernels and tuning tasks of a model (.onnx or zoo)
    tessel tune-model MODEL --trials N
                                tune every task of a model (task scheduler) into the database
    tessel run-model MODEL      compile a model with the database, check it, time it
    tessel export MODEL -o FILE.so
                                one shared library that runs the model without tessel, from
                                Python (numpy alone) or C (--header prints its API)
    tessel db check|recover|export|import ...
                                check a record database, copy what is readable of a damaged
                                one, or move records as JSON lines
    tessel worker --scheduler ADDRESS --device KEY
                                join a Dask scheduler as the measuring worker of a device
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import faulthandler
import logging
import signal
import sys
import time
from dataclasses import dataclass
from typing import Iterator, NoReturn

import numpy as np
from tqdm.contrib.logging import logging_redirect_tqdm

from tessel import Target, build, ops
from tessel.cli import db, model, tune
from tessel.cli.tune import CliError, seconds
from tessel.codegen import generate_c
from tessel.errors import TesselError
from tessel.graph import frontend
from tessel.measure.dask import WORKER_WAIT_S, serve


@dataclass(frozen=True)
class SuiteRow:
    name: str
    seconds: float
    gflops: float
    max_error: float
    ok: bool


def _allclose(out: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
    scale = float(np.max(np.abs(ref), initial=0.0))
    tol = 1e-3 if out.dtype == np.float16 else 1e-4
    return bool(np.allclose(out, ref, rtol=tol, atol=tol * max(1.0, scale))), err


def _time_kernel(mod, arrays: list[np.ndarray], budget_s: float) -> float:
    """Median seconds per call; `number` is chosen so each repeat lasts about budget_s/3."""
    start = time.perf_counter()
    mod(*arrays)
    first = time.perf_counter() - start
    number = max(1, int(budget_s / 3 / max(first, 1e-9)))
    repeat = 3 if first < budget_s else 1
    return mod.time(*arrays, number=number, repeat=repeat)


def run_suite_workload(name: str, target, budget_s: float = 0.3, seed: int = 0) -> SuiteRow:
    func = ops.SUITE[name]
    inputs = ops.reference_inputs(func, seed=seed)
    (out,) = ops.empty_outputs(func)
    mod = build(func, target)
    mod(*inputs, out)
    ok, err = _allclose(out, ops.run_reference(func, *inputs))
    seconds = _time_kernel(mod, [*inputs, out], budget_s)
    return SuiteRow(name, seconds, ops.flops(func) / seconds / 1e9, err, ok)


def cmd_suite(args: argparse.Namespace) -> int:
    target = Target("host")
    names = args.names or list(ops.SUITE)
    unknown = [n for n in names if n not in ops.SUITE]
    if unknown:
        print(f"tessel suite: unknown workload(s) {', '.join(unknown)}; "
              f"see `tessel ops`", file=sys.stderr)
        return 2
    print(f"target: {target}")
    print("unscheduled programs (naive loop nests), checked against numpy\n")
    print(f"{'workload':<10} {'time (ms)':>12} {'GFLOP/s':>9} {'max |err|':>11}  check")
    failures = 0
    for name in names:
        row = run_suite_workload(name, target, args.budget)
        failures += not row.ok
        print(f"{row.name:<10} {row.seconds * 1e3:>12.3f} {row.gflops:>9.2f} "
              f"{row.max_error:>11.2e}  {'ok' if row.ok else 'MISMATCH'}", flush=True)
    print(f"\n{len(names) - failures}/{len(names)} workloads match numpy")
    return 1 if failures else 0


def cmd_ops(args: argparse.Namespace) -> int:
    if args.onnx:
        return _onnx_ops()
    for name in ops.SUITE:
        print(f"{name:<10} {ops.SUITE_DESCRIPTIONS.get(name, '')}")
    return 0


def _onnx_ops() -> int:
    """The ONNX operators the importer translates, and those it evaluates on constants only."""
    try:
        translated, folded = frontend.onnx_operators()
    except ImportError as e:
        print(f"tessel ops --onnx: needs the onnx extra (pip install 'tessel[onnx]'): {e}",
              file=sys.stderr)
        return 2
    print(f"translated ({len(translated)}): {' '.join(translated)}")
    print(f"on constant inputs only, evaluated at import ({len(folded)}): {' '.join(folded)}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    if args.name not in ops.SUITE:
        print(f"tessel show: unknown workload {args.name!r}; see `tessel ops`", file=sys.stderr)
        return 2
    func = ops.SUITE[args.name]
    if args.c:
        print(generate_c(func, Target("host")))
    else:
        print(func.script())
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    serve(args.scheduler, args.device, name=args.name, wait_s=args.wait)
    return 0


class UsageError(CliError):
    """A command line argparse refuses, as one line: `tessel tune: argument --trials: ...`."""


class Parser(argparse.ArgumentParser):
    """argparse, but a refused command line is one line (main prints it, exit status 2)
    rather than the usage text; `-h` still prints the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} -h`)")


def make_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tessel", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log each batch and each kind of error (-vv: cost model "
                             "updates too) on stderr")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("suite", help="build and check the workload suite")
    p.add_argument("names", nargs="*", help="workloads to run (default: all)")
    p.add_argument("--budget", type=seconds(3600), default=0.3,
                   help="seconds of timing per workload (default 0.3)")
    p.set_defaults(fn=cmd_suite)
    p = sub.add_parser("ops", help="list the workloads (or the ONNX operators translated)")
    p.add_argument("--onnx", action="store_true",
                   help="list the ONNX operators the importer translates instead")
    p.set_defaults(fn=cmd_ops)
    p = sub.add_parser("show", help="print a workload's program")
    p.add_argument("name")
    p.add_argument("--c", action="store_true", help="print the generated C instead")
    p.set_defaults(fn=cmd_show)
    p = sub.add_parser("worker", help="serve a device to a Dask measurement pool")
    p.add_argument("--scheduler", required=True, help="Dask scheduler address (tcp://host:port)")
    p.add_argument("--device", required=True,
                   help="device key; tuners use DaskRunner(address, device=KEY)")
    p.add_argument("--name", default=None, help="worker name shown by the scheduler")
    p.add_argument("--wait", type=seconds(7 * 24 * 3600), default=WORKER_WAIT_S,
                   help="seconds to wait for the scheduler, at start and when it is gone "
                        f"(default {WORKER_WAIT_S:g})")
    p.set_defaults(fn=cmd_worker)
    tune.add_commands(sub)
    model.add_commands(sub)
    db.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run a command. tessel's own errors (a refused command line, bad input, an unusable
    file, a missing optional package: every TesselError) and running out of memory or
    threads are one line on stderr and exit status 2; Ctrl-C is 130."""
    command = "tessel"
    try:
        args = make_parser().parse_args(argv)
        command = f"tessel {args.command}"
        _dump_stacks_on_sigusr1()
        with _logging(args.verbose):
            return args.fn(args)
    except UsageError as err:
        print(err, file=sys.stderr)
        return 2
    except TesselError as err:
        print(f"{command}: {_one_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        exhausted = _exhaustion(err)
        if exhausted is None:
            raise
        print(f"{command}: out of memory/threads: {exhausted} (free memory, or raise the "
              "process's limits: ulimit -v, ulimit -u)", file=sys.stderr)
        return 2


_EXHAUSTED_ERRNOS = {errno.ENOMEM, errno.EAGAIN, errno.EMFILE, errno.ENFILE}
_EXHAUSTED_TEXT = ("can't start new thread", "failed to map segment", "Cannot allocate memory")


def _exhaustion(err: BaseException | None) -> str | None:
    """The line of `err` (or of what it was raised from) that says the process ran out of
    memory, threads, processes or files; None when it does not say so (a bug keeps its
    traceback; an exhausted machine's is no help)."""
    while err is not None:
        if isinstance(err, MemoryError) or \
                isinstance(err, OSError) and err.errno in _EXHAUSTED_ERRNOS:
            return _one_line(err)
        lines = [line.strip() for line in str(err).splitlines()]
        found = [line for line in lines if any(text in line for text in _EXHAUSTED_TEXT)]
        if found:
            return found[0]
        err = err.__cause__
    return None


@contextlib.contextmanager
def _logging(verbose: int) -> Iterator[None]:
    """With -v, the `tessel` logger's INFO lines (-vv: DEBUG too) on stderr, above the
    progress line rather than inside it; without, it stays silent."""
    if not verbose:
        yield
        return
    log = logging.getLogger("tessel")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)
    try:
        with logging_redirect_tqdm(loggers=[log]):
            yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def _dump_stacks_on_sigusr1() -> None:
    """`kill -USR1 PID` prints where each thread of a running command is (to a real stderr;
    not where stderr is a captured stream)."""
    if not hasattr(signal, "SIGUSR1"):
        return
    with contextlib.suppress(AttributeError, OSError, ValueError):  # io.UnsupportedOperation
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)


def _one_line(err: Exception) -> str:
    """The message's first line, and how many more there are (a compiler's output, say)."""
    lines = str(err).strip().splitlines() or [type(err).__name__]
    return lines[0] + (f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else "")


if __name__ == "__main__":
    sys.exit(main())
