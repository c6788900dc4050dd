"""Task: one workload to tune on one target, with its flop count and its weight in a model.

    task = Task(ops.SUITE["R18-C6"], Target("host"), weight=2)   # occurs twice in the model
    task.key, task.flops, task.gflops(seconds)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from tessel import ops
from tessel.errors import TesselError
from tessel.ir import PrimFunc, structural_hash
from tessel.target import Target


class TaskError(TesselError, ValueError):
    """A task that cannot be tuned: not a PrimFunc, a non-positive weight, no name."""


@dataclass(frozen=True, eq=False)
class Task:
    workload: PrimFunc
    target: Target
    name: str = ""
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.workload, PrimFunc):
            raise TaskError(f"a task needs a PrimFunc workload, got {type(self.workload).__name__}")
        if not self.weight > 0:
            raise TaskError(f"task {self.label}: weight must be positive, got {self.weight!r}")

    @property
    def label(self) -> str:
        return self.name or self.workload.name

    @functools.cached_property
    def key(self) -> str:
        """The workload's identity: its structural hash (names ignored)."""
        return structural_hash(self.workload)

    @functools.cached_property
    def flops(self) -> int:
        return ops.flops(self.workload)

    def gflops(self, seconds: float) -> float:
        return self.flops / seconds / 1e9 if 0 < seconds < float("inf") else 0.0
