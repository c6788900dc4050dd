"""The parent side of tessel's worker processes: start one, talk to it, end it.

    worker = WorkerProcess("tessel.measure.worker")
    reply = worker.request({"op": "ping"}, timeout_s=10)     # a dict, never an exception

A worker runs ``python -m MODULE <parent pid>`` (tessel.measure.child), in a session of its
own: it never imports the user's ``__main__``, a Ctrl-C in the terminal does not reach it,
and it dies with this process. `close` sends SIGTERM to its process group (a build worker
kills its compilers then), and SIGKILL if it is still there a moment later. A request that
finds the process dead answers {"error": "runtime_error", "msg": ...} with the signal or
exit status and the end of its stderr; one past its deadline kills it and answers
{"error": "timeout", ...}. The next request starts a fresh process.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from tessel.measure.child import write_message

_STDERR_TAIL = 2000
_TERM_GRACE_S = 2.0  # after SIGTERM, before SIGKILL


class WorkerProcess:
    """A ``python -m module`` child; `request` never raises."""

    def __init__(self, module: str, recycle_after: int | None = None, label: str = "") -> None:
        self.module = module
        self.label = label or module.rsplit(".", 1)[-1]
        self.recycle_after = recycle_after  # fresh process now and then (loaded libs pile up)
        self.generation = 0  # bumped at every (re)start: the child's caches are gone then
        self._proc: subprocess.Popen | None = None
        self._stderr: Any = None
        self._served = 0
        self._stderr_mark = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.alive else None

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def fileno(self) -> int:
        """The file descriptor replies arrive on (for select)."""
        return self._proc.stdout.fileno()

    @property
    def recycle_due(self) -> bool:
        """Whether the process has served `recycle_after` requests (its owner restarts it
        between jobs: close, then start)."""
        return self.recycle_after is not None and self._served >= self.recycle_after

    def start(self) -> None:
        """Start the process if it is not running."""
        if self.alive:
            return
        self.close()
        self._stderr = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", self.module, str(os.getpid())]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, start_new_session=True)
        self.generation += 1
        self._served = 0

    def send(self, message: Any) -> dict | None:
        """Send a request (starting the process if needed); an error reply if it is dead."""
        self.start()
        self._served += 1
        self._stderr_mark = self._stderr.seek(0, os.SEEK_END)
        try:
            write_message(self._proc.stdin, message)
        except (BrokenPipeError, OSError):
            return self._died()
        return None

    def receive(self, deadline: float) -> dict:
        """The reply to the last request sent; a timeout reply (and the process killed) at
        `deadline` (time.monotonic()), a runtime_error reply if the process died."""
        try:
            reply = self._read_reply(deadline)
        except EOFError:
            return self._died()
        if reply is None:
            self.close()
            return {"error": "timeout", "msg": f"the {self.label} process did not answer in "
                                               "time; it was killed"}
        return reply

    def request(self, message: Any, timeout_s: float) -> dict:
        """send + receive: the reply, or an error reply."""
        failure = self.send(message)
        return failure if failure is not None else self.receive(time.monotonic() + timeout_s)

    def _read_reply(self, deadline: float) -> Any | None:
        """The next reply, or None at the deadline; EOFError if the process died."""
        header = self._read_exact(8, deadline)
        if header is None:
            return None
        body = self._read_exact(int.from_bytes(header, "little"), deadline + 10.0)
        return None if body is None else pickle.loads(body)

    def _read_exact(self, size: int, deadline: float) -> bytes | None:
        fd, chunks, got = self.fileno(), [], 0
        while got < size:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, size - got)
            if not chunk:
                raise EOFError(f"the {self.label} process closed its output")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _died(self) -> dict:
        try:
            code = self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # closed its output but lives on: end it
            self._kill(signal.SIGKILL)
            code = self._proc.wait()
        how = f"signal {signal_name(-code)}" if code < 0 else f"exit status {code}"
        self._stderr.seek(self._stderr_mark)
        tail = self._stderr.read().decode(errors="replace")[-_STDERR_TAIL:].strip()
        self.close()
        detail = f"; its stderr ended with:\n{tail}" if tail else ""
        return {"error": "runtime_error", "msg": f"the {self.label} process died ({how}){detail}"}

    def _kill(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, sig)

    def close(self) -> None:
        """End the process and its process group: SIGTERM, then SIGKILL after a grace."""
        if self._proc is not None:
            if self._proc.poll() is None:
                self._kill(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=_TERM_GRACE_S)
            self._kill(signal.SIGKILL)  # whatever else is left in its group
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    stream.close()
            self._proc = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


def next_replies(busy: dict[int, tuple[WorkerProcess, int, float]]
                 ) -> list[tuple[WorkerProcess, int, Any]]:
    """Wait for the next replies of the busy workers (reply fd -> (worker, its job's index,
    deadline)), or until the first deadline; take those that answered or ran past their
    deadline out of `busy`, and return (worker, index, reply) for each (a timeout reply, the
    worker killed, for one past its deadline)."""
    if not busy:
        return []
    first = min(deadline for _, _, deadline in busy.values())
    ready, _, _ = select.select(list(busy), [], [], max(0.0, first - time.monotonic()))
    now, done = time.monotonic(), []
    for fd in list(busy):
        worker, index, deadline = busy[fd]
        if fd not in ready and now < deadline:
            continue
        del busy[fd]
        done.append((worker, index, worker.receive(deadline if fd in ready else now)))
    return done


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


__all__ = ["WorkerProcess", "next_replies", "signal_name"]
