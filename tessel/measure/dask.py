"""A distributed device pool on Dask: many tuning jobs share devices, one measurement per device
at a time.

    $ dask scheduler                                    # somewhere: tcp://10.0.0.1:8786
    $ tessel worker --scheduler tcp://10.0.0.1:8786 --device epyc-7763     # on each device

    runner = DaskRunner("tcp://10.0.0.1:8786", device="epyc-7763", target=target)
    results = runner.run(candidates, builder.build(candidates))   # the Runner interface

A worker runs one task thread and advertises the resource `tessel-device-KEY: 1`; a measurement
asks for one unit of it, so each device runs one measurement at a time, whichever tuner sent it,
and several workers with the same KEY form a pool of identical devices. On the worker the task
measures exactly as LocalRunner does: in an isolated process (`DeviceSession`) that survives
crashing and hanging kernels.

Artifacts travel: the tuner builds (in its own process pool, with a `target` describing the
device, e.g. a preset rather than `-march=native` of a different build host) and ships the
shared library's bytes (tens of KB) with each task. Devices then need no compiler or build
cores, and devices stay busy measuring. A worker that dies mid-batch loses its in-flight tasks,
which the scheduler reruns on another worker of the pool; a task that kills workers repeatedly,
or a batch that no device finishes in `batch_timeout_s`, comes back as an error result.

A scheduler that does not answer within `connect_timeout_s` (CONNECT_TIMEOUT_S; a worker:
`wait_s`) is a `DaskError`, one line naming the address.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from tessel.errors import TesselError
from tessel.extras import require
from tessel.measure.builder import BuildResult
from tessel.measure.result import MeasureCandidate, MeasureResult
from tessel.measure.runner import BestSoFar, References, check_batch, make_config, plan_job
from tessel.measure.session import DeviceSession, MeasureJob, RunConfig
from tessel.target import Target

_SESSIONS: dict[str, DeviceSession] = {}
_SESSIONS_LOCK = threading.Lock()
CONNECT_TIMEOUT_S = 10.0  # a scheduler answers in milliseconds (Dask waits 30 s by default)
WORKER_WAIT_S = 60.0  # a worker may be started before its scheduler


class DaskError(TesselError, ConnectionError):
    """A Dask scheduler that does not answer, or an address that is not one."""


def _unreachable(address: Any, seconds: float, err: Exception) -> DaskError:
    if isinstance(err, ValueError):
        return DaskError(f"{address!r} is not a Dask scheduler address ({err}); give "
                         "tcp://HOST:PORT")
    return DaskError(f"no Dask scheduler answered at {address} within {seconds:g} s; start "
                     "one (`dask scheduler`) or check the address")


def resource_name(device: str) -> str:
    """The Dask worker resource that stands for device `device`."""
    return f"tessel-device-{device}"


@dataclass(frozen=True)
class Shipped:
    """A shared library travelling to a worker: its bytes and their sha256."""
    data: bytes
    digest: str

    @classmethod
    def read(cls, path: str) -> "Shipped":
        data = Path(path).read_bytes()
        return cls(data, hashlib.sha256(data).hexdigest())

    def local_path(self) -> str:
        """Where the library lies on this machine (written once, atomically)."""
        directory = Path(tempfile.gettempdir()) / "tessel-remote" / self.digest[:2]
        path = directory / f"{self.digest}.so"
        if not path.exists():
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, suffix=".so.tmp")
            with os.fdopen(fd, "wb") as file:
                file.write(self.data)
            os.replace(tmp, path)
        return str(path)


@dataclass(frozen=True)
class RemoteJob:
    """A MeasureJob planned on the tuner (its paths are the tuner's) with its libraries'
    bytes: the candidate's and, when it is checked, the reference's."""
    device: str
    job: MeasureJob
    lib: Shipped
    reference_lib: Shipped | None = None

    def local(self) -> MeasureJob:
        """The job with the paths of the libraries written on this machine."""
        ref = self.job.reference
        if ref is not None:
            ref = dataclasses.replace(ref, lib_path=self.reference_lib.local_path())
        return dataclasses.replace(self.job, lib_path=self.lib.local_path(), reference=ref)


def measure_on_device(job: RemoteJob) -> MeasureResult:
    """The task a device worker runs: measure in this machine's isolated measuring process."""
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(job.device)
        if session is None:
            session = _SESSIONS[job.device] = DeviceSession(job.device)
    return session.measure(job.local())


def serve(scheduler: str, device: str, *, name: str | None = None,
          wait_s: float = WORKER_WAIT_S) -> None:
    """Join the Dask scheduler at `scheduler` as the owner of device `device`; run until the
    scheduler is gone for `wait_s` or the process is stopped (the `tessel worker` command).
    DaskError when no scheduler answers within `wait_s`."""
    import asyncio

    Worker = require("distributed", "tessel worker").Worker

    async def main() -> None:
        async with Worker(scheduler, nthreads=1, name=name, death_timeout=wait_s,
                          resources={resource_name(device): 1}) as worker:
            await worker.finished()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    except (RuntimeError, TimeoutError) as err:
        # "Worker start timed out after 60s"; "Worker failed to start." from a bad address
        cause = err.__cause__ if isinstance(err, RuntimeError) else err
        if not isinstance(cause, (TimeoutError, ValueError)):
            raise
        raise _unreachable(scheduler, wait_s, cause) from None


def _connect(Client: Any, address: Any, seconds: float) -> Any:
    """A distributed.Client of the scheduler at `address`, or DaskError."""
    try:
        return Client(address, timeout=f"{seconds}s")
    except (OSError, ValueError) as err:  # OSError: "Timed out trying to connect to ..."
        raise _unreachable(address, seconds, err) from None


class DaskRunner(contextlib.AbstractContextManager):
    """Measures on the Dask device pool behind `scheduler` (an address or a distributed.Client),
    on devices advertised as `device`. Other keywords as LocalRunner (RunConfig fields).

    `batch_timeout_s` bounds the wait for a whole batch (default: 60 s plus each candidate's
    timeout_s and each workload's reference_timeout_s); what is not done then is a timeout.
    A scheduler that does not answer within `connect_timeout_s` (default CONNECT_TIMEOUT_S)
    is a DaskError."""

    def __init__(self, scheduler: Any, *, device: str, target: Target | None = None,
                 config: RunConfig | None = None, batch_timeout_s: float | None = None,
                 cache_dir: str | Path | None = None, connect_timeout_s: float | None = None,
                 **overrides: object) -> None:
        Client = require("distributed", "DaskRunner").Client
        self._own_client = not isinstance(scheduler, Client)
        wait = CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
        self.client = _connect(Client, scheduler, wait) if self._own_client else scheduler
        self.device = device
        self.target = target if target is not None else Target("host")
        self.config = make_config(config, overrides)
        self.batch_timeout_s = batch_timeout_s
        self.references = References(self.target, cache_dir)
        self.best = BestSoFar(self.config.stop_ratio)
        self._shipped: dict[str, Shipped] = {}

    def run(self, candidates: Sequence[MeasureCandidate],
            builds: Sequence[BuildResult]) -> list[MeasureResult]:
        check_batch(candidates, builds)
        results: list[MeasureResult | None] = [None] * len(candidates)
        jobs: dict[int, RemoteJob] = {}
        for index, (candidate, build) in enumerate(zip(candidates, builds)):
            planned = self._plan(candidate, build)
            if isinstance(planned, MeasureResult):
                results[index] = planned
            else:
                jobs[index] = planned
        if jobs:
            results_of_jobs = self._submit_and_wait(jobs)
            for index, result in results_of_jobs.items():
                results[index] = result
                self.best.note(self.references.key(candidates[index].workload), result)
        return results

    def _plan(self, candidate: MeasureCandidate, build: BuildResult) -> RemoteJob | MeasureResult:
        job = plan_job(candidate, build, self.config, self.target, self.references, self.best)
        if isinstance(job, MeasureResult):
            return job
        ref = job.reference
        return RemoteJob(self.device, job, Shipped.read(job.lib_path),
                         None if ref is None else self._ship(ref.lib_path))

    def _ship(self, path: str) -> Shipped:
        if path not in self._shipped:
            self._shipped[path] = Shipped.read(path)
        return self._shipped[path]

    def _submit_and_wait(self, jobs: dict[int, RemoteJob]) -> dict[int, MeasureResult]:
        from distributed import wait
        if not self._pool_has_device():
            msg = f"no worker in the Dask pool advertises device {self.device!r}"
            return {i: MeasureResult.error("runtime_error", msg) for i in jobs}
        resources = {resource_name(self.device): 1}
        futures = {i: self.client.submit(measure_on_device, job, resources=resources,
                                         pure=False, key=f"tessel-measure-{uuid.uuid4().hex}")
                   for i, job in jobs.items()}
        timeout = self._batch_timeout(jobs)
        with contextlib.suppress(TimeoutError):
            wait(list(futures.values()), timeout=timeout)
        return {i: self._collect(future, timeout) for i, future in futures.items()}

    def _batch_timeout(self, jobs: dict[int, RemoteJob]) -> float:
        if self.batch_timeout_s is not None:
            return self.batch_timeout_s
        workloads = {r.job.reference.key for r in jobs.values() if r.job.reference is not None}
        return (60.0 + len(jobs) * (self.config.timeout_s + 2.0)
                + len(workloads) * self.config.reference_timeout_s)

    def _collect(self, future: Any, timeout: float) -> MeasureResult:
        if future.status == "finished":
            return future.result()
        if future.status == "error":
            err = future.exception()
            return MeasureResult.error("runtime_error", f"device task failed: "
                                       f"{type(err).__name__}: {err}")
        future.cancel()
        return MeasureResult.error("timeout", f"no {self.device!r} device finished this "
                                   f"measurement within the batch's {timeout:g} s")

    def _pool_has_device(self) -> bool:
        name = resource_name(self.device)
        workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        return any(w.get("resources", {}).get(name, 0) >= 1 for w in workers.values())

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CONNECT_TIMEOUT_S", "DaskError", "DaskRunner", "RemoteJob", "measure_on_device",
           "resource_name", "serve"]
