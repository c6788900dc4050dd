"""One device's measuring session: an isolated worker process, one measurement at a time.

    session = DeviceSession("cpu")
    result = session.measure(job)       # a MeasureResult, never an exception

The session runs `python -m tessel.measure.worker` (a tessel.measure.process.WorkerProcess) and
talks to it over pipes. When a kernel crashes the process (segfault, abort) the request answers
"runtime_error" with the signal and the process's last stderr; when it overruns its time limit
the process is killed and the request answers "timeout". Either way the next request starts a
fresh process. `DeviceLock`
(an flock on a per-device file) keeps measurements from other processes on this machine from
running at the same time, since parallel measurements on one CPU corrupt the ranking.
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import re
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tessel.measure.builder import ParamSpec
from tessel.measure.load import BUSY_CORES, LoadMeter, wait_until_quiet
from tessel.measure.process import WorkerProcess
from tessel.measure.result import MeasureResult
from tessel.measure.worker import REFERENCE_MISSING

_START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class RunConfig:
    """How to time a kernel. Each of `repeat` batches runs the kernel `number` times (grown until
    a batch lasts `min_repeat_ms`) after `warmup` calls; every batch's mean is one cost. With
    `flush_cache`, the target's last-level cache is flushed before each batch. With `check`, the
    output is first compared with the unscheduled program's on the same seeded inputs.

    When other processes used `busy_cores` or more cores' worth of CPU while a candidate was
    timed (tessel.measure.load), the timing is taken again after waiting up to `quiet_wait_s`
    for quiet, `busy_retries` times; one still disturbed is flagged ("disturbed") and never
    reported as a best. `busy_cores` defaults to $TESSEL_BUSY_CORES (read when the config is
    made) or 0.25; 0 turns the check off (a test suite that runs in parallel does).

    A candidate whose first timed call takes more than `stop_ratio` times the best mean the
    runner has measured for its workload is not timed further: its one timing is its cost and
    the result is flagged "stopped_early" (0 turns this off). Slow candidates then cost two
    calls instead of a dozen, and one whose checked (first) call alone took more than three
    times that limit (and 20 ms) costs that one call. One whose first call is still running
    after 30 times that limit (and 0.25 s: tessel.measure.worker.CUT_RATIO, CUT_MIN_S) is cut
    off there, a "timeout" error, and the measuring process is restarted: random programs of
    a convolution run 1-5 s a call where the best runs in a fraction of a millisecond. Once a
    best is known, the whole job's time limit (loading, inputs, check, timing) is also
    bounded by it: SLOW_LIMIT_RATIO times stop_ratio x best, at least MIN_LIMIT_S (never more
    than `timeout_s`)."""
    number: int = 3
    repeat: int = 3
    min_repeat_ms: float = 10.0
    warmup: int = 1
    flush_cache: bool = False
    check: bool = True
    seed: int = 0
    timeout_s: float = 10.0
    reference_timeout_s: float = 120.0
    busy_cores: float = field(default_factory=lambda: _env_float("TESSEL_BUSY_CORES",
                                                                 BUSY_CORES))
    busy_retries: int = 2
    quiet_wait_s: float = 10.0
    stop_ratio: float = 3.0

    def __post_init__(self) -> None:
        for key in ("number", "repeat"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"RunConfig.{key} must be a positive int, got {value!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"RunConfig.warmup must be an int >= 0, got {self.warmup!r}")
        for key in ("timeout_s", "reference_timeout_s"):
            if not getattr(self, key) > 0:
                raise ValueError(f"RunConfig.{key} must be positive, got {getattr(self, key)!r}")
        if self.min_repeat_ms < 0:
            raise ValueError(f"RunConfig.min_repeat_ms must be >= 0, got {self.min_repeat_ms!r}")
        for key in ("busy_cores", "quiet_wait_s", "stop_ratio"):
            if not getattr(self, key) >= 0:
                raise ValueError(f"RunConfig.{key} must be >= 0, got {getattr(self, key)!r}")
        if not isinstance(self.busy_retries, int) or self.busy_retries < 0:
            raise ValueError(f"RunConfig.busy_retries must be an int >= 0, got "
                             f"{self.busy_retries!r}")


def _env_float(name: str, default: float) -> float:
    text = os.environ.get(name, "")
    try:
        return float(text) if text else default
    except ValueError:
        raise ValueError(f"${name} must be a number, got {text!r}") from None


@dataclass(frozen=True)
class ReferenceJob:
    """Where the unscheduled program's library is, and how closely outputs must match it."""
    key: str
    lib_path: str
    rtol: float
    atol: float


@dataclass(frozen=True)
class MeasureJob:
    """Everything a device needs to measure one compiled candidate (paths are local to it)."""
    lib_path: str
    params: tuple[ParamSpec, ...]
    config: RunConfig
    reference: ReferenceJob | None = None
    flush_bytes: int = 0
    build_secs: float = 0.0
    stop_above_s: float = 0.0  # stop after one timed call slower than this (0: never)
    in_model_sweep: int = 0  # > 0: each call timed in_model (its workload's MEASURE), the
    # cache sweep before it this many bytes (the last-level cache's)

    @property
    def timeout_s(self) -> float:
        """The time limit of this job (RunConfig: bounded by the best when one is known)."""
        return job_timeout(self.config.timeout_s, self.stop_above_s)


def _timeout_message(job: MeasureJob) -> str:
    why = ""
    if job.timeout_s < job.config.timeout_s:
        best = job.stop_above_s / job.config.stop_ratio
        why = f" (limit set by the best so far, {best * 1e3:.3g} ms a call)"
    return (f"kernel did not finish within {job.timeout_s:g} s{why}; its measuring process "
            "was killed")


SLOW_LIMIT_RATIO = 100.0  # a job's time limit: this many times its stop_above_s...
MIN_LIMIT_S = 5.0  # ...but at least this (loading, inputs, the checked call, a busy CPU)


def job_timeout(timeout_s: float, stop_above_s: float) -> float:
    if stop_above_s <= 0:
        return timeout_s
    return min(timeout_s, max(MIN_LIMIT_S, SLOW_LIMIT_RATIO * stop_above_s))


class DeviceLock:
    """An exclusive lock on a device, shared by every process of this machine (flock)."""

    def __init__(self, device: str) -> None:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", device)
        self.path = Path(tempfile.gettempdir()) / f"tessel-device-{safe}.lock"
        self._fd: int | None = None

    def __enter__(self) -> "DeviceLock":
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class DeviceSession:
    """Measures jobs on one device, one at a time, in an isolated worker process."""

    def __init__(self, device: str = "cpu", *, lock: bool = True, recycle_after: int = 1000):
        self.device = device
        self.process = WorkerProcess("tessel.measure.worker", recycle_after, label="measuring")
        self._thread_lock = threading.Lock()
        self._device_lock = DeviceLock(device) if lock else None
        self._loaded: set[str] = set()
        self._failed: set[str] = set()
        self._generation = 0

    def measure(self, job: MeasureJob) -> MeasureResult:
        with self._thread_lock, self._device_lock or contextlib.nullcontext():
            return self._measure(job)

    def _measure(self, job: MeasureJob) -> MeasureResult:
        """Time the job; when others used the CPU meanwhile, wait for quiet and time it again
        (twice at most), and flag a result that stayed disturbed."""
        start, flags, retries = time.perf_counter(), (), job.config.busy_retries
        for attempt in range(1 + retries):
            result = self._measure_once(job, start)
            if not result.disturbed or not result.ok:
                break
            flags = ("remeasured",)
            if attempt < retries:
                wait_until_quiet(job.config.quiet_wait_s, job.config.busy_cores)
        return dataclasses.replace(result, flags=result.flags + flags) if flags else result

    def _measure_once(self, job: MeasureJob, start: float) -> MeasureResult:
        failure = self._ensure()
        if failure is not None:
            return MeasureResult.error(failure["error"], failure["msg"], build_secs=job.build_secs)
        config = {**asdict(job.config), "flush_bytes": job.flush_bytes,
                  "stop_above_s": job.stop_above_s, "in_model_sweep": job.in_model_sweep}
        params = [(p.name, p.shape, p.dtype, p.is_output) for p in job.params]
        meter = LoadMeter(self.process.pid)
        for _ in range(2):  # the worker keeps a few references: an evicted one is sent again
            check = self._reference(job)
            meter.start()
            reply = self.process.request({"op": "measure", "lib": job.lib_path,
                                          "params": params, "config": config, "check": check},
                                         job.timeout_s)
            others = meter.stop()
            if reply.get("error") == "timeout" and not reply.get("cut"):
                reply["msg"] = _timeout_message(job)
            if reply.get("error") != REFERENCE_MISSING:
                break
            self._loaded.discard(check["key"])
        else:
            reply = {"error": "runtime_error", "msg": reply["msg"]}
        if reply.get("cut"):  # its first call is still running there: end the process
            self.process.close()
        secs = time.perf_counter() - start
        if "error" in reply:
            return MeasureResult.error(reply["error"], reply["msg"], build_secs=job.build_secs,
                                       run_secs=secs)
        limit = job.config.busy_cores
        busy = others is not None and limit > 0 and others >= limit
        flags = ("disturbed",) if busy else ()
        flags += ("stopped_early",) if reply.get("stopped") else ()
        return MeasureResult(tuple(reply["costs"]), build_secs=job.build_secs, run_secs=secs,
                             flags=flags)

    def _ensure(self) -> dict | None:
        """Start the worker if it is not running (or is due for recycling) and wait for it to
        answer; an error reply if it cannot start."""
        generation = self.process.generation
        if self.process.recycle_due:
            self.process.close()
        self.process.start()
        if self.process.generation == generation:
            return None
        reply = self.process.request({"op": "ping"}, _START_TIMEOUT_S)
        if "error" in reply:
            self.process.close()
            return {"error": "runtime_error",
                    "msg": f"the measuring process failed to start: {reply['msg']}"}
        return None

    def _reference(self, job: MeasureJob) -> dict | None:
        """The check to send with the job; loads the reference output into the worker first.
        A reference that cannot run leaves its workload unchecked (with a warning)."""
        ref = job.reference
        if ref is None or not job.config.check:
            return None
        key = f"{ref.key}/seed={job.config.seed}"
        if self.process.generation != self._generation:
            self._loaded.clear()
        if key in self._failed:
            return None
        if key not in self._loaded:
            params = [(p.name, p.shape, p.dtype, p.is_output) for p in job.params]
            reply = self.process.request({"op": "reference", "key": key, "lib": ref.lib_path,
                                          "params": params, "seed": job.config.seed},
                                         job.config.reference_timeout_s)
            self._generation = self.process.generation
            if "error" in reply:
                self._failed.add(key)
                warnings.warn(f"the unscheduled program {ref.key[:12]} failed as a reference "
                              f"({reply['error']}: {reply['msg']}); its candidates are measured "
                              "unchecked", RuntimeWarning, stacklevel=4)
                return None
            self._loaded.add(key)
        return {"key": key, "rtol": ref.rtol, "atol": ref.atol}

    def close(self) -> None:
        self.process.close()
        if self._device_lock is not None:
            self._device_lock.close()


__all__ = ["DeviceLock", "DeviceSession", "MeasureJob", "ReferenceJob", "RunConfig"]
