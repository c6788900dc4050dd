"""Helpers shared by the benchmark scripts: timing against a reference and GFLOP/s (the hot
loop of a kernel's assembly: tessel.codegen.asm)."""
from __future__ import annotations

import ctypes
import ctypes.util
import sys
import time

# glibc serves a large malloc with a fresh mmap (zeroed pages faulted in on every call) until a
# large enough block has been freed, which raises its threshold. torch conv2d allocates its
# output per call: R18-C1's 3.2 MB output made oneDNN time at 101 GFLOP/s in a fresh process
# and at 350 after any larger tensor had come and gone (2026-11-25): every comparison before
# then measured the stem against a cold allocator. Fix the thresholds (64 MB mmap, 128 MB
# trim) so both sides of a comparison run with the allocator of a process in steady state.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def steady_allocator() -> bool:
    """Set glibc's mmap and trim thresholds high (see above); False where there is no glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(M_MMAP_THRESHOLD, 64 << 20)
                    and libc.mallopt(M_TRIM_THRESHOLD, 128 << 20))
    except (OSError, AttributeError):
        return False


steady_allocator()


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
