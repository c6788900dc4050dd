"""Helpers shared by the benchmark scripts: timing against a reference, GFLOP/s, and finding
the hot loop of a kernel's assembly."""
from __future__ import annotations

import re
import time


def hot_loop(asm: str) -> str:
    """The innermost loop (label .. backward jump to it, holding no other loop) with the most
    FMAs."""
    spans = []
    for label in re.finditer(r"^(\.L\w+):$", asm, re.M):
        jump = re.compile(rf"^\s+j\w+\s+{re.escape(label.group(1))}$", re.M)
        end = jump.search(asm, label.end())
        if end is not None:
            spans.append((label.start(), end.end()))
    innermost = [(a, b) for a, b in spans
                 if not any(a < c and d <= b for c, d in spans if (c, d) != (a, b))]
    loops = [asm[a:b] for a, b in innermost]
    return max(loops, key=lambda body: body.count("vfmadd"), default="")


def gflops(n_flops: float, secs: float) -> float:
    return n_flops / secs / 1e9


def best_secs(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
