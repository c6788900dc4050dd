"""Search workers: processes that make a strategy's programs side by side.

    workers = SearchWorkers()                  # one process per core (started when first used)
    strategy.workers = workers                 # its sample_many / mutate_many use them now
    ...
    workers.close()

Making programs is most of a tuning round: an evolutionary search replays and postprocesses
about 200 programs (Python) to propose a batch of 16, while the build processes sit idle and
one core does all of it. A strategy's jobs (tessel.search.base.Job: a sample, a mutant of a
trace, a trace replayed; with a seed) go out in chunks to ``python -m tessel.search.worker``
processes (tessel.measure.child: they never import the user's ``__main__`` and die with the
tuner); each keeps the Proposers of the strategies it served last, and sends the programs back
hashed. A program depends on its job alone, so the workers change how fast a batch is made,
never which programs it holds: a chunk whose process fails (died, past its deadline, raised)
is made here instead, and after MAX_FAILURES such chunks the run makes everything here.

`tune()` and `tune_tasks()` give their strategies workers when the process may run on two
cores or more (tessel.target.count_cores): on one core they would only add the pickling.
"""
from __future__ import annotations

import itertools
import math
import pickle
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Sequence

from tessel.measure.process import WorkerProcess, next_replies
from tessel.target import count_cores

if TYPE_CHECKING:
    from tessel.search.base import Job, Proposal, SearchStrategy

CHUNKS_PER_WORKER = 4  # a batch's jobs in this many chunks a worker: uneven jobs even out
CHUNK_TIMEOUT_S = 600.0  # a chunk is made here instead after this (a worker that hangs)
MAX_FAILURES = 3  # failed chunks before a run stops using its workers


class SearchWorkers:
    """`workers` search processes (default one per core), shared by any number of
    strategies; `make` never raises for a failing worker."""

    def __init__(self, workers: int | None = None) -> None:
        count = count_cores() if workers is None else workers
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"search workers: need a count >= 1, got {workers!r}")
        self._procs = [WorkerProcess("tessel.search.worker", label="search")
                       for _ in range(count)]
        self._proposers: dict[int, tuple[SearchStrategy, str, bytes]] = {}
        self._keys = itertools.count()
        self._here_only: set[str] = set()  # keys of strategies the workers cannot take
        self.failures = 0  # chunks a worker failed to make

    def __len__(self) -> int:
        return len(self._procs)

    @property
    def usable(self) -> bool:
        return self.failures < MAX_FAILURES

    def make(self, strategy: SearchStrategy, jobs: Sequence[Job]) -> list[Proposal | None]:
        """Each job's program, as strategy.proposer.make(job) makes it, in order."""
        key, blob = self._proposer(strategy)
        if not self.usable or blob is None:
            return strategy.make_here(jobs)
        order = _by_parent(jobs)
        size = max(1, math.ceil(len(jobs) / (CHUNKS_PER_WORKER * len(self._procs))))
        chunks = [[jobs[i] for i in order[k:k + size]] for k in range(0, len(jobs), size)]
        made: list[list | None] = [None] * len(chunks)
        todo, idle = deque(range(len(chunks))), list(self._procs)
        busy: dict[int, tuple[WorkerProcess, int, float]] = {}  # fd -> (process, chunk, deadline)
        try:
            while todo or busy:
                while todo and idle and self.usable and key not in self._here_only:
                    proc, k = idle.pop(), todo.popleft()
                    if proc.send({"key": key, "proposer": blob, "jobs": chunks[k]}) is None:
                        busy[proc.fileno()] = (proc, k, time.monotonic() + CHUNK_TIMEOUT_S)
                    else:
                        self._failed(None)
                        idle.append(proc)
                if not busy:
                    break  # the workers failed or cannot take this strategy: the rest is made here
                idle += self._collect(key, busy, made)
        except BaseException:
            self.close()  # interrupted: no worker goes on with a chunk nobody will read
            raise
        if not self.usable:
            self.close()
        out: list[Proposal | None] = [None] * len(jobs)
        done = iter(order)
        for chunk, programs in zip(chunks, made):
            for program in programs if programs is not None else strategy.make_here(chunk):
                out[next(done)] = program
        return out

    def _proposer(self, strategy: SearchStrategy) -> tuple[str, bytes | None]:
        """The strategy's key in the workers and its Proposer pickled (once a strategy);
        None for one the workers cannot take (a space made of a lambda, a class of the
        user's __main__)."""
        entry = self._proposers.get(id(strategy))
        if entry is None or entry[0] is not strategy:
            key = f"{next(self._keys)}"
            try:
                blob = pickle.dumps(strategy.proposer, protocol=pickle.HIGHEST_PROTOCOL)
            except (pickle.PicklingError, AttributeError, TypeError):
                self._here_only.add(key)
                blob = b""
            entry = self._proposers[id(strategy)] = (strategy, key, blob)
        return entry[1], (None if entry[1] in self._here_only else entry[2])

    def _collect(self, key: str, busy: dict, made: list) -> list[WorkerProcess]:
        """Wait for the next replies (or the first deadline); return the processes now free."""
        freed = []
        for proc, k, reply in next_replies(busy):
            if isinstance(reply, list):
                made[k] = reply
            elif reply.get("error") == "proposer":  # does not unpickle there
                self._here_only.add(key)
            else:
                self._failed(reply)
            freed.append(proc)
        return freed

    def _failed(self, reply: dict | None) -> None:
        self.failures += 1
        if self.failures == MAX_FAILURES:
            lines = str((reply or {}).get("msg", "it could not be started")).strip().splitlines()
            why = lines[-1] if lines else "no message"
            print(f"tessel: a search process failed {MAX_FAILURES} times (last: {why}); "
                  "programs are made in this process from now on", file=sys.stderr, flush=True)

    def close(self) -> None:
        for proc in self._procs:
            proc.close()


def _by_parent(jobs: Sequence[Job]) -> list[int]:
    """The jobs' indices with the mutants of one parent together (samples first): a
    process replays a parent's mutants from the schedules its first one left in its caches
    (tessel.schedule.replay), and meets the repeats its memo already holds."""
    first: dict[int, int] = {}
    for i, (_, trace, _) in enumerate(jobs):
        first.setdefault(id(trace), i)
    return sorted(range(len(jobs)), key=lambda i: (jobs[i][1] is not None,
                                                   first[id(jobs[i][1])], i))


__all__ = ["SearchWorkers", "CHUNK_TIMEOUT_S", "MAX_FAILURES"]
