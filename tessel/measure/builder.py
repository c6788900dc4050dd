"""Builder: candidate programs -> compiled shared libraries, in build processes, never raising.

    builder = LocalBuilder(Target("host"))            # one build process per core
    builds = builder.build(candidates)                # one BuildResult per candidate, in order
    builds[0].artifact.lib_path, builds[1].error      # an Artifact, or a MeasureResult error

A build is `compact_buffers` + `generate_c` + `compile_shared` (as `tessel.build` does, minus
loading); for a workload with constant parameters (a model's weights), the stages that pack
them are split out first and the library's tessel_time packs once, outside the timed calls
(tessel.prepack). An illegal program (CodegenError, IR errors) becomes "invalid_schedule", a
compiler failure "compile_error" with the compiler's message, and a build that overruns the
per-candidate timeout "timeout" (its process is then replaced, so a stuck build cannot block
the next one).
"""
from __future__ import annotations

import contextlib
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tessel.codegen.build import build_files
from tessel.codegen.c import SourceTooLarge, generate_c
from tessel.codegen.compiler import COMPILE_TIMEOUT_S, CompileError, compile_shared
from tessel.codegen.passes import compact_buffers
from tessel.ir import PrimFunc
from tessel.measure.process import WorkerProcess, next_replies
from tessel.measure.result import MeasureCandidate, MeasureResult
from tessel.prepack import split_prepacks
from tessel.target import Target, count_cores

_MAX_MSG_CHARS = 6000
# A candidate's C beyond this is not compiled: random samples of the auto space that unroll
# lane-by-lane code reached 4.8-14 MB, 8-45 s of code generation and a minute of gcc (a
# GMM-128 sample: 4.8 MB, 68 s to build). The expert priors' kernels are 50-150 KB; the best
# R18-C6 program of a 64-trial run was 2.4 MB (12.5 s to build), so the budget stays above
# it (2026-11-23, Zen 4).
MAX_SOURCE_CHARS = 4_000_000
_SLACK_S = 10.0  # process start-up and pickling on top of a build's own time limit


@dataclass(frozen=True)
class ParamSpec:
    """What a kernel parameter needs from its caller: a C-contiguous array of this shape/dtype."""
    name: str
    shape: tuple[int, ...]
    dtype: str
    is_output: bool


@dataclass(frozen=True)
class Artifact:
    """A compiled candidate: the shared library exporting tessel_entry/tessel_time, its C
    source, and the parameters it takes (in func.params order)."""
    lib_path: str
    source: str
    params: tuple[ParamSpec, ...]
    build_secs: float = 0.0


@dataclass(frozen=True)
class BuildResult:
    """Exactly one of `artifact` (success) and `error` (a failed MeasureResult) is set."""
    artifact: Artifact | None = None
    error: MeasureResult | None = None

    def __post_init__(self) -> None:
        if (self.artifact is None) == (self.error is None):
            raise ValueError("a BuildResult holds either an artifact or an error, not both/neither")

    @property
    def ok(self) -> bool:
        return self.artifact is not None


def param_specs(func: PrimFunc) -> tuple[ParamSpec, ...]:
    outputs = set(func.outputs)
    return tuple(ParamSpec(p.name, tuple(int(d) for d in p.shape), p.dtype, p in outputs)
                 for p in func.params)


def _failure(kind: str, msg: str, start: float) -> BuildResult:
    """A failed build that started at `start`; its message clipped to _MAX_MSG_CHARS."""
    if len(msg) > _MAX_MSG_CHARS:
        msg = msg[:_MAX_MSG_CHARS] + f"\n... ({len(msg) - _MAX_MSG_CHARS} more chars)"
    return BuildResult(error=MeasureResult.error(kind, msg, build_secs=time.perf_counter() - start))


def build_artifact(func: PrimFunc, target: Target, *, cache_dir: str | Path | None = None,
                   timeout_s: float = COMPILE_TIMEOUT_S,
                   max_source_chars: int | None = MAX_SOURCE_CHARS) -> BuildResult:
    """Build one program in this process; every failure becomes an error result. C longer
    than `max_source_chars` is a compile_error without running the compiler."""
    start = time.perf_counter()
    try:
        main, packs = split_prepacks(func, set(func.constant_params))
        source = generate_c(compact_buffers(main), target, max_chars=max_source_chars,
                            prepacks=[(compact_buffers(p.func), p.source) for p in packs],
                            constants=func.constant_params)
        params = param_specs(func)
    except SourceTooLarge as err:
        return _failure("compile_error", str(err), start)
    except Exception as err:  # noqa: BLE001 - any failure to lower is an illegal program
        detail = "".join(traceback.format_exception_only(type(err), err)).strip()
        return _failure("invalid_schedule", f"code generation failed: {detail}", start)
    return build_source(source, params, target, cache_dir=cache_dir, timeout_s=timeout_s,
                        started=start)


def build_source(source: str, params: tuple[ParamSpec, ...], target: Target, *,
                 cache_dir: str | Path | None = None, timeout_s: float = COMPILE_TIMEOUT_S,
                 started: float | None = None) -> BuildResult:
    """Compile C `source` exporting tessel_entry/tessel_time (e.g. hand-written) for `target`."""
    start = started if started is not None else time.perf_counter()
    try:
        lib_path = compile_shared(source, target, cache_dir=cache_dir, timeout_s=timeout_s)
    except CompileError as err:
        kind = "timeout" if "timed out" in str(err) else "compile_error"
        return _failure(kind, str(err), start)
    secs = time.perf_counter() - start
    return BuildResult(artifact=Artifact(str(lib_path), source, params, secs))


def prebuild_one(func: PrimFunc, target: Target, cache_dir: str | None) -> str:
    """`func`'s C and library as tessel.codegen.build makes them, left in the caches; "", or
    what failed (build says it again, with its own error, when the model is built). (Never
    None: a build process sends no reply for None.)"""
    try:
        build_files(func, target, cache_dir=cache_dir)
    except Exception as err:  # noqa: BLE001 - reported by the build that follows
        return f"{type(err).__name__}: {err}"
    return ""


class LocalBuilder(contextlib.AbstractContextManager):
    """Builds candidates in `max_workers` build processes (default: one per core).

    The processes (tessel.measure.build_worker) run ``python -m``, never the user's
    ``__main__``, in sessions of their own; they die with this process and kill their
    compilers when they stop. `timeout_s` bounds each candidate's build (code generation +
    compiler): the compiler is killed at that limit, and a build stuck in Python a few seconds
    later loses its process (a fresh one takes the next candidate). A candidate whose C
    passes `max_source_chars` (None: no budget) is a compile_error, never compiled."""

    def __init__(self, target: Target | None = None, *, max_workers: int | None = None,
                 timeout_s: float = 60.0, cache_dir: str | Path | None = None,
                 max_source_chars: int | None = MAX_SOURCE_CHARS) -> None:
        self.target = target if target is not None else Target("host")
        self.max_workers = max_workers or count_cores()
        if self.max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers!r}")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.cache_dir = str(cache_dir) if cache_dir is not None else None
        self.max_source_chars = max_source_chars
        self._workers: list[WorkerProcess] = []

    def build(self, candidates: Sequence[MeasureCandidate]) -> list[BuildResult]:
        """One BuildResult per candidate, in order; never raises for a bad candidate."""
        return self._serve([{"func": c.func, "target": self.target, "cache_dir": self.cache_dir,
                             "timeout_s": self.timeout_s,
                             "max_source_chars": self.max_source_chars}
                            for c in candidates])

    def prebuild(self, funcs: Sequence[PrimFunc]) -> list[str | None]:
        """Each of `funcs` generated and compiled as tessel.codegen.build does, in the build
        processes side by side, and left in the caches: a model's kernels then load from them
        (generating C is Python, which threads would run one at a time). Per function None,
        or the line of what failed."""
        replies = self._serve([{"prebuild": True, "func": f, "target": self.target,
                                "cache_dir": self.cache_dir} for f in funcs])
        return [(r or None) if isinstance(r, str) else r.error.error_msg for r in replies]

    def _serve(self, requests: list[dict]) -> list:
        """Each request's reply from the build processes, in order (a failed process: a
        BuildResult error)."""
        if not self._workers:
            self._workers = [WorkerProcess("tessel.measure.build_worker", label="build")
                             for _ in range(self.max_workers)]
        start = time.perf_counter()
        results: list = [None] * len(requests)
        todo = deque(range(len(requests)))
        idle = list(self._workers)
        busy: dict[int, tuple[WorkerProcess, int, float]] = {}  # fd -> (worker, index, deadline)
        try:
            while todo or busy:
                while todo and idle:
                    worker, index = idle.pop(), todo.popleft()
                    failure = worker.send(requests[index])
                    if failure is not None:
                        results[index] = self._failed(failure, start)
                        idle.append(worker)
                    else:
                        deadline = time.monotonic() + self.timeout_s + _SLACK_S
                        busy[worker.fileno()] = (worker, index, deadline)
                idle += self._collect(busy, results, start)
        except BaseException:
            self.close()  # interrupted mid-batch: no build process keeps compiling
            raise
        return results

    def _collect(self, busy: dict, results: list, start: float) -> list[WorkerProcess]:
        """Wait for the next replies (or the first deadline); return the workers now free."""
        freed = []
        for worker, index, reply in next_replies(busy):
            results[index] = reply if isinstance(reply, (BuildResult, str)) \
                else self._failed(reply, start)
            freed.append(worker)
        return freed

    def _failed(self, reply: dict, start: float) -> BuildResult:
        if reply.get("error") == "timeout":
            kind, msg = "timeout", f"build ran past its {self.timeout_s:g} s limit"
        else:
            kind, msg = "invalid_schedule", f"build failed: {reply.get('msg', reply)}"
        return _failure(kind, msg, start)

    def close(self) -> None:
        """Stop the build processes and their compilers (a later build() starts new ones)."""
        for worker in self._workers:
            worker.close()
        self._workers = []

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown, anything
            self.close()


__all__ = ["Artifact", "BuildResult", "LocalBuilder", "ParamSpec", "build_artifact",
           "build_source", "param_specs"]
