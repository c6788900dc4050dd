"""Task schedulers: which task of a model gets the next round of trials.

    sched = TaskScheduler(tasks, "gradient")
    while (i := sched.next_task()) is not None and budget_left:
        best = tune_round(tasks[i])                 # e.g. 16 more trials of task i
        sched.record(i, trials_so_far_of_i, best)   # best seconds so far (inf: none yet)

"round-robin" cycles through the tasks. "gradient" (Ansor's scheduler, used by MetaSchedule)
minimizes the model's total latency sum_i weight_i * best_i: after one warm-up round per task
(heaviest first, by a roofline guess of each task's share of the model's time: a run stopped
by its budget, trials or clock, before every task had a round has tuned those that matter;
EfficientNet-B0's 80 tasks need 1,280 trials to warm up, 20 minutes on 2 cores)
it gives the next round to the task whose latency is predicted to fall fastest per trial,
estimated from the recent slope of its tuning curve (backward window) and an optimistic
forward guess (the latency if similar tasks' best throughput were reached, discounted by the
rounds the task has gone without improving), with epsilon-greedy exploration. Similar tasks
are those of one operator doing about as much arithmetic per output element.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from tessel.ir import DTYPE_BITS
from tessel.tuning.task import Task, TaskError

SCHEDULERS = ("round-robin", "gradient")
BALANCE = 8.0  # flops per byte moved where a CPU's roofline turns: the order of warm-up only


@dataclass
class _Curve:
    trials: list[int] = field(default_factory=list)
    best_secs: list[float] = field(default_factory=list)
    done: bool = False


class TaskScheduler:
    def __init__(self, tasks: Sequence[Task], strategy: str = "gradient", *, alpha: float = 0.2,
                 beta: float = 2.0, backward_window: int = 3, epsilon: float = 0.05,
                 seed: int = 0) -> None:
        if strategy not in SCHEDULERS:
            raise TaskError(f"unknown task scheduler {strategy!r}; use one of {SCHEDULERS}")
        if not tasks:
            raise TaskError("the task scheduler needs at least one task")
        self.tasks, self.strategy = list(tasks), strategy
        self.alpha, self.beta, self.window, self.epsilon = alpha, beta, backward_window, epsilon
        self.rng = random.Random(seed)
        self.curves = [_Curve() for _ in self.tasks]
        self._intensity: list[float | None] = [None] * len(self.tasks)  # flops per output
        self._turn = 0

    def record(self, index: int, trials: int, best_secs: float) -> None:
        """Task `index` has had `trials` trials in all; its best is `best_secs` (inf: none)."""
        curve = self.curves[index]
        curve.trials.append(trials)
        curve.best_secs.append(best_secs)

    def finish(self, index: int) -> None:
        """Task `index` has nothing left to try (its space is exhausted)."""
        self.curves[index].done = True

    def total_latency(self) -> float:
        """sum of weight * best seconds over tasks; inf while some task has no valid result."""
        return sum(t.weight * self._best(i) for i, t in enumerate(self.tasks))

    def next_task(self) -> int | None:
        """The task to tune next, or None when every task is finished."""
        live = [i for i, c in enumerate(self.curves) if not c.done]
        if not live:
            return None
        if self.strategy == "round-robin":
            return self._round_robin(live)
        unseen = [i for i in live if not self.curves[i].trials]
        if unseen:
            return max(unseen, key=lambda i: (self.guess(i), -i))
        if self.rng.random() < self.epsilon:
            return self.rng.choice(live)
        return min(live, key=lambda i: (self.gradient(i), i))

    def _round_robin(self, live: list[int]) -> int:
        n = len(self.tasks)
        for step in range(n):
            i = (self._turn + step) % n
            if i in live:
                self._turn = i + 1
                return i
        raise AssertionError("unreachable: live is not empty")

    def guess(self, i: int) -> float:
        """Task i's weighted share of the model's time before any measurement, in flops: its
        arithmetic, or BALANCE times the bytes it reads and writes when moving them takes
        longer (a depthwise convolution, an elementwise kernel)."""
        task = self.tasks[i]
        moved = sum(b.size * DTYPE_BITS[b.dtype] // 8 for b in task.workload.params)
        return task.weight * max(task.flops, BALANCE * moved)

    # ---- gradient estimate ----

    def _best(self, i: int) -> float:
        secs = self.curves[i].best_secs
        return secs[-1] if secs else math.inf

    def gradient(self, i: int) -> float:
        """Estimated change of weight_i * best_i per extra trial (negative: improving).
        A task with no valid result yet comes first (-inf)."""
        best, trials = self._best(i), self.curves[i].trials[-1]
        if not math.isfinite(best):
            return -math.inf
        # the optimistic guess loses credit with every round that failed to move towards it:
        # a task that cannot reach its peers' throughput (ResNet's 3-channel stem conv next
        # to its 3x3 convs) would otherwise take every round, as in Ansor's formula
        hope = (self._optimistic(i) - best) / (1 + self._stale(i))
        forward = min(-best / max(trials, 1), hope)
        return self.tasks[i].weight * (self.alpha * self._backward(i)
                                       + (1 - self.alpha) * forward)

    def _stale(self, i: int) -> int:
        """Rounds since task i's best last improved."""
        secs = self.curves[i].best_secs
        n = 0
        while n + 1 < len(secs) and secs[-2 - n] == secs[-1]:
            n += 1
        return n

    def _backward(self, i: int) -> float:
        curve = self.curves[i]
        if len(curve.trials) <= self.window:
            return 0.0
        old_best, old_trials = curve.best_secs[-1 - self.window], curve.trials[-1 - self.window]
        if not math.isfinite(old_best) or curve.trials[-1] == old_trials:
            return 0.0
        return (curve.best_secs[-1] - old_best) / (curve.trials[-1] - old_trials)

    def _optimistic(self, i: int) -> float:
        """Ansor's optimistic guess: beta * flops_i / (best throughput of a similar task),
        the latency task i might reach."""
        speeds = [t.flops / self._best(k) for k, t in enumerate(self.tasks)
                  if self._similar(i, k) and math.isfinite(self._best(k))]
        return self.beta * self.tasks[i].flops / max(speeds) if speeds else 0.0

    def _similar(self, i: int, k: int) -> bool:
        """Tasks of the same operator that do about as much arithmetic per output element
        (within 2x). Ansor's tasks of one operator class can all reach one throughput; in a
        model's fused kernels one name covers a depthwise convolution (18 flops an output,
        bound by memory) and a 1x1 one (2 x 960 flops, bound by the FMA units), and the
        depthwise task chasing its 1x1 peer took 296 of MobileNet-v2's 1,000 trials."""
        a, b = self.tasks[i], self.tasks[k]
        if a.workload.attrs.get("op", a.workload.name) != \
                b.workload.attrs.get("op", b.workload.name):
            return False
        x, y = self._per_output(i), self._per_output(k)
        return x > 0 and y > 0 and max(x, y) <= 2 * min(x, y)  # a copy does no flops

    def _per_output(self, i: int) -> float:
        if self._intensity[i] is None:
            outputs = sum(math.prod(b.shape) for b in self.tasks[i].workload.outputs)
            self._intensity[i] = self.tasks[i].flops / max(outputs, 1)
        return self._intensity[i]
