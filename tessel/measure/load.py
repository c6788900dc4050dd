"""Is anything else using the CPU while a kernel is timed?

    meter = LoadMeter(worker_pid)
    meter.start(); ...time a kernel...; others = meter.stop()   # cores' worth used by others

A parallel kernel timed while another process runs on one of its cores measures that
process, not itself (tuning R18-C6 beside a CPU hog timed its best at 5.3 ms instead of
1.2). Linux counts every CPU's busy time in /proc/stat (steal time included: a noisy
neighbour on the host) and each process's own in /proc/PID/stat; what the machine did beyond
the measuring process, divided by the wall time, is the load of others, in cores. The tuner
itself is idle while a candidate is timed (builds come before, in their own phase), so it
counts as an other only by its small bookkeeping. Without /proc, `stop` returns None and
nothing is flagged.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

BUSY_CORES = 0.25  # others using a quarter of a core on average: the timing is disturbed
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_SLACK_TICKS = 2  # the counters tick at 100 Hz: two stray ticks in a short window are noise


def _busy_ticks() -> int | None:
    """Busy clock ticks of all CPUs since boot (user, nice, system, irq, softirq, steal)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return user + nice + system + irq + softirq + steal


def _process_ticks(pid: int) -> int | None:
    """CPU ticks (user + system) of a process and all its threads."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)


class LoadMeter:
    """The CPU used by everything but process `pid` between start() and stop(), in cores."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self._start: tuple[float, int, int] | None = None

    def start(self) -> None:
        busy = _busy_ticks()
        own = _process_ticks(self.pid) if self.pid is not None else 0
        self._start = None if busy is None or own is None else (time.monotonic(), busy, own)

    def stop(self) -> float | None:
        """Others' average load in cores over the window, or None when it cannot be told."""
        if self._start is None:
            return None
        wall0, busy0, own0 = self._start
        busy = _busy_ticks()
        own = _process_ticks(self.pid) if self.pid is not None else 0
        if busy is None or own is None:
            return None
        wall = time.monotonic() - wall0
        if wall <= 0:
            return 0.0
        others = max(0, (busy - busy0) - (own - own0) - _SLACK_TICKS)
        return others / _TICKS / wall


def others_load(seconds: float = 0.5) -> float | None:
    """The load of everything else (nothing of ours runs) over the next `seconds`, in cores."""
    meter = LoadMeter(None)
    meter.start()
    time.sleep(seconds)
    return meter.stop()


def wait_until_quiet(max_wait_s: float, busy_cores: float = BUSY_CORES,
                     window_s: float = 0.5) -> bool:
    """Sleep in windows until others use less than `busy_cores`; False if they still do after
    `max_wait_s`."""
    deadline = time.monotonic() + max_wait_s
    while True:
        load = others_load(window_s)
        if load is None or load < busy_cores:
            return True
        if time.monotonic() >= deadline:
            return False


__all__ = ["BUSY_CORES", "LoadMeter", "others_load", "wait_until_quiet"]
