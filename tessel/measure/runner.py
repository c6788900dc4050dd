"""Runners: compiled candidates -> MeasureResults, timed in isolation, checked against a reference.

    builder, runner = LocalBuilder(target), LocalRunner(target, repeat=5)
    results = runner.run(candidates, builder.build(candidates))   # one result per candidate
    # or: results = measure(builder, runner, candidates)

Every runner has `run(candidates, builds)` and `close()` (the `Runner` protocol), so the tuning
loop does not care whether it measures here (LocalRunner) or on a device pool (DaskRunner).
A failed build passes through as its error result. The correctness check compares each output
with the unscheduled workload's, built once per workload (keyed by structural hash) and run in
the measuring process on the same seeded inputs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from tessel.codegen.module import sweep_bytes
from tessel.ir import REDUCE, PrimFunc, blocks, structural_hash
from tessel.measure.builder import Artifact, BuildResult, build_artifact, param_specs
from tessel.measure.result import MeasureCandidate, MeasureResult
from tessel.measure.session import DeviceSession, MeasureJob, ReferenceJob, RunConfig
from tessel.target import Target

# dtype -> (floor, ceiling, growth per sqrt(reduction length)) of the relative tolerance
_TOLERANCES = {"float16": (1e-2, 5e-2, 1e-3), "float32": (1e-4, 1e-3, 2e-5),
               "float64": (1e-9, 1e-8, 1e-10)}
_KEPT_REFERENCES = 64


class Runner(Protocol):
    def run(self, candidates: Sequence[MeasureCandidate],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """One result per candidate, in order; a failed build passes through as its error."""
        ...

    def close(self) -> None:
        ...


class Builder(Protocol):
    def build(self, candidates: Sequence[MeasureCandidate]) -> list[BuildResult]:
        """One build result per candidate, in order: an artifact or the error."""
        ...

    def close(self) -> None:
        ...


def measure(builder: Builder, runner: Runner,
            candidates: Sequence[MeasureCandidate]) -> list[MeasureResult]:
    """Build then run a batch: one MeasureResult per candidate, in order."""
    return runner.run(candidates, builder.build(candidates))


def reduction_length(func: PrimFunc) -> int:
    """The longest reduction in `func`: max over blocks of the product of reduce extents."""
    lengths = [math.prod(int(iv.extent) for iv in b.iter_vars if iv.kind == REDUCE)
               for b in blocks(func.body)]
    return max(lengths, default=1)


def tolerance(func: PrimFunc) -> tuple[float, float]:
    """(rtol, atol) for comparing `func`'s outputs with a reference: 0 (exact) for integer and
    bool outputs; for floats, growing with the square root of the reduction length."""
    dtypes = [b.dtype for b in func.outputs]
    floats = [d for d in dtypes if d in _TOLERANCES]
    if not floats:
        return 0.0, 0.0
    floor, ceiling, growth = max(_TOLERANCES[d] for d in floats)
    tol = min(ceiling, max(floor, growth * math.sqrt(reduction_length(func))))
    return tol, tol


@dataclass(frozen=True)
class Reference:
    key: str
    artifact: Artifact
    rtol: float
    atol: float


class References:
    """Builds each workload's unscheduled program once (keyed by its structural hash)."""

    def __init__(self, target: Target, cache_dir: str | Path | None = None) -> None:
        self.target, self.cache_dir = target, cache_dir
        self._by_key: dict[str, Reference | None] = {}
        self._keys: dict[int, tuple[PrimFunc, str]] = {}

    def key(self, workload: PrimFunc) -> str:
        cached = self._keys.get(id(workload))
        if cached is None or cached[0] is not workload:
            if len(self._keys) >= _KEPT_REFERENCES:
                self._keys.clear()
            cached = (workload, structural_hash(workload))
            self._keys[id(workload)] = cached
        return cached[1]

    def get(self, workload: PrimFunc) -> Reference | None:
        """The workload's reference, or None (with a warning) if it does not build."""
        key = self.key(workload)
        if key not in self._by_key:
            built = build_artifact(workload, self.target, cache_dir=self.cache_dir)
            if built.artifact is None:
                warnings.warn(f"workload {workload.name} ({key[:12]}) does not build as a "
                              f"reference; its candidates are measured unchecked: "
                              f"{built.error.error_msg}", RuntimeWarning, stacklevel=3)
                self._by_key[key] = None
            else:
                self._by_key[key] = Reference(key, built.artifact, *tolerance(workload))
        return self._by_key[key]


def make_config(config: RunConfig | None, overrides: dict) -> RunConfig:
    config = config if config is not None else RunConfig()
    return dataclasses.replace(config, **overrides) if overrides else config


class BestSoFar:
    """The best mean cost a runner has measured per workload (by reference key), to stop
    timing candidates that are clearly slower (RunConfig.stop_ratio)."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self._best: dict[str, float] = {}

    def limit(self, key: str) -> float:
        """Seconds per call past which a candidate of workload `key` stops (0: never)."""
        best = self._best.get(key)
        return self.ratio * best if best is not None and self.ratio > 0 else 0.0

    def note(self, key: str, result: MeasureResult) -> None:
        if result.ok and not result.disturbed and "stopped_early" not in result.flags:
            self._best[key] = min(self._best.get(key, math.inf), result.mean_secs)


def plan_job(candidate: MeasureCandidate, build: BuildResult, config: RunConfig,
             target: Target, references: References,
             best: BestSoFar | None = None) -> MeasureJob | MeasureResult:
    """The job that measures `build`'s artifact, or an error: the build's own, or that the
    artifact cannot be checked as asked."""
    if build.artifact is None:
        return build.error
    artifact, reference = build.artifact, None
    if config.check:
        if param_specs(candidate.workload) != artifact.params:
            return MeasureResult.error(
                "invalid_schedule", "the scheduled program's parameters differ from its "
                f"workload's: {artifact.params} vs {param_specs(candidate.workload)}",
                build_secs=artifact.build_secs)
        ref = references.get(candidate.workload)
        if ref is not None:
            reference = ReferenceJob(ref.key, ref.artifact.lib_path, ref.rtol, ref.atol)
    flush = target.l3_bytes if config.flush_cache else 0
    limit = best.limit(references.key(candidate.workload)) if best is not None else 0.0
    return MeasureJob(artifact.lib_path, artifact.params, config, reference, flush,
                      artifact.build_secs, limit,
                      in_model_sweep=(sweep_bytes(target)
                                      if candidate.workload.measure == "in_model" else 0))


def check_batch(candidates: Sequence[MeasureCandidate], builds: Sequence[BuildResult]) -> None:
    if len(candidates) != len(builds):
        raise ValueError(f"run() needs one build per candidate, got {len(builds)} builds for "
                         f"{len(candidates)} candidates")


class LocalRunner(contextlib.AbstractContextManager):
    """Measures on this machine, one candidate at a time, in one long-lived worker process.

    Keyword arguments beyond these override fields of `config` (a RunConfig): number, repeat,
    min_repeat_ms, warmup, flush_cache, check, seed, timeout_s, reference_timeout_s. `device`
    names the lock that serializes measurements across processes on this machine."""

    def __init__(self, target: Target | None = None, *, config: RunConfig | None = None,
                 device: str = "cpu", lock: bool = True, cache_dir: str | Path | None = None,
                 **overrides: object) -> None:
        self.target = target if target is not None else Target("host")
        self.target.check_runs_here("measuring kernels")  # a SIGILL in every candidate
        self.config = make_config(config, overrides)
        self.references = References(self.target, cache_dir)
        self.best = BestSoFar(self.config.stop_ratio)
        self.session = DeviceSession(device, lock=lock)

    def run(self, candidates: Sequence[MeasureCandidate],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        check_batch(candidates, builds)
        return [self._run_one(c, b) for c, b in zip(candidates, builds)]

    def _run_one(self, candidate: MeasureCandidate, build: BuildResult) -> MeasureResult:
        job = plan_job(candidate, build, self.config, self.target, self.references, self.best)
        if isinstance(job, MeasureResult):
            return job
        result = self.session.measure(job)
        self.best.note(self.references.key(candidate.workload), result)
        return result

    def close(self) -> None:
        self.session.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["BestSoFar", "Builder", "LocalRunner", "Reference", "References", "RunConfig", "Runner",
           "measure", "plan_job", "reduction_length", "tolerance"]
