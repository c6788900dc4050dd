"""The live progress line of a tuning run (tqdm, to stderr):

    R18-C6  48/256 trials [01:10<05:03] best 96.2 GFLOP/s | 41.1 trials/min | errors: 2 runtime_error

and, tuning by the clock (tune_tasks' time_budget), the time left instead of the trials':

    53 tasks 412 trials [04:10], 05:50 left | total latency 9.312 ms | 98.9 trials/min | ...
"""
from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence

from tqdm import tqdm

from tessel.measure import MeasureResult


class TuneProgress:
    def __init__(self, label: str, total: int, done: int = 0, flops: float = 0.0, *,
                 enabled: bool = True, latency: Callable[[], float] | None = None,
                 deadline: float | None = None) -> None:
        """`latency`, for many tasks: a function giving the weighted total of their bests,
        shown instead of one task's best GFLOP/s; `deadline` (time.monotonic()'s clock): the
        run stops there, and the line shows the time left."""
        self.deadline = deadline
        self.flops, self.best_secs, self.errors = flops, float("inf"), Counter()
        self.busy = Counter()  # "remeasured" / "disturbed": timings others got in the way of
        self.stopped = 0  # candidates timed once: far slower than the best (RunConfig.stop_ratio)
        self.latency = latency
        self.start, self.new = time.perf_counter(), 0
        self.bar = tqdm(total=total, initial=min(done, total), desc=label, unit="trial",
                        file=sys.stderr, disable=not enabled, dynamic_ncols=True,
                        bar_format=("{desc} {n_fmt} trials [{elapsed}]" if deadline else
                                    "{desc} {n_fmt}/{total_fmt} trials [{elapsed}<{remaining}]")
                        + "{postfix}")

    def update(self, results: Sequence[MeasureResult], best_secs: float) -> None:
        self.best_secs = min(self.best_secs, best_secs)
        self.errors.update(r.error_kind for r in results if not r.ok)
        self.busy.update(f for r in results for f in r.flags if f in ("remeasured", "disturbed"))
        self.stopped += sum("stopped_early" in r.flags for r in results)
        self.new += len(results)
        self.bar.set_postfix_str(self.status(), refresh=False)
        self._advance(len(results))

    def others(self, count: int, best_secs: float) -> None:
        """Trials other runs sharing the database committed: they count, but not toward this
        run's rate."""
        if count:
            self.best_secs = min(self.best_secs, best_secs)
            self.bar.set_postfix_str(self.status(), refresh=False)
            self._advance(count)

    def _advance(self, count: int) -> None:
        """Count trials; past the total (another run sharing the database had a larger budget)
        the total grows with them: tqdm would show it as "?"."""
        if self.bar.total is not None and self.bar.n + count > self.bar.total:
            self.bar.total = self.bar.n + count
        self.bar.update(count)

    def refresh(self) -> None:
        """Show the status again (the task scheduler's total changed after an update)."""
        self.bar.set_postfix_str(self.status())

    def status(self) -> str:
        minutes = (time.perf_counter() - self.start) / 60
        rate = self.new / minutes if minutes > 0 else 0.0
        if self.latency is not None:
            total = self.latency()
            best = (f"total latency {total * 1e3:.3f} ms" if total < float("inf")
                    else "some task has no valid result yet")
        elif self.best_secs < float("inf"):
            best = f"best {self.flops / self.best_secs / 1e9:.1f} GFLOP/s"
        else:
            best = "no valid result yet"
        errors = ", ".join(f"{n} {kind}" for kind, n in sorted(self.errors.items())) or "none"
        busy = ""
        if self.busy:
            busy = (f" | machine busy: {self.busy['remeasured']} re-timed, "
                    f"{self.busy['disturbed']} not trusted")
        slow = f" | {self.stopped} far slower, timed once" if self.stopped else ""
        clock = ""
        if self.deadline is not None:
            left = max(0, int(self.deadline - time.monotonic()))
            clock = f"{left // 60:02d}:{left % 60:02d} left | "
        return f"{clock}{best} | {rate:.1f} trials/min | errors: {errors}{slow}{busy}"

    def close(self) -> None:
        self.bar.close()
