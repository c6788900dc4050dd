"""Helpers shared by the benchmark scripts: timing against a reference and GFLOP/s (the hot
loop of a kernel's assembly: tessel.codegen.asm)."""
from __future__ import annotations

import time


def gflops(n_flops: float, secs: float) -> float:
    return n_flops / secs / 1e9


SETTLE_S = 0.3


def settle() -> None:
    """Wait until the thread pools of what ran before sleep: OpenBLAS's and OpenMP's workers
    spin for a while after a call, and a kernel timed right after numpy's matmul ran at
    half speed (GMM-1024, 2026-11-23). Call before timing a different runner."""
    time.sleep(SETTLE_S)


def best_secs(fn, rounds: int) -> float:
    """The fastest of `rounds` calls, after settling and one untimed call."""
    settle()
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
