"""Measurement overhead per candidate: build + run wall time minus the kernel's own time.

A batch of distinct schedules of a small matmul is built by LocalBuilder (process pool, empty
compile cache, then again from the warm cache) and measured by LocalRunner (isolated worker,
correctness check on). With number=1, repeat=1, min_repeat_ms=0 the kernel runs a known number of
times (check, warm-up, tessel_time's own warm-up, the timed call), so

    overhead = run wall time - calls * mean kernel seconds

is what measuring costs beyond the kernel itself (IPC, loading the library, inputs, the check).
One-time costs (pool start, worker start, building the reference) are reported apart. A second
table shows the wall time per candidate under the default RunConfig, for scale.

    python benchmarks/measure_overhead.py [--size 64] [--candidates 12] [--workers N]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from tessel import Schedule, Target, ops
from tessel.measure import LocalBuilder, LocalRunner, MeasureCandidate, RunConfig


def candidates(size: int, count: int) -> list[MeasureCandidate]:
    """`count` distinct schedules: j split by a factor, k outside or inside the j tile."""
    func = ops.matmul(size, size, size)
    out = []
    factors = [f for f in range(2, size + 1) if size % f == 0] + list(range(3, size, 2))
    for factor in factors:
        for k_inside in (False, True):
            if len(out) == count:
                return out
            sch = Schedule(func)
            i, j, k = sch.get_loops(sch.get_block("C"))
            j0, j1 = sch.split(j, factors=[None, factor])
            sch.reorder(i, j0, j1, k) if k_inside else sch.reorder(i, j0, k, j1)
            out.append(MeasureCandidate(func, sch.func, sch.trace))
    return out


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--workers", type=int, default=None, help="build processes")
    args = parser.parse_args()
    target = Target("host")
    cands = candidates(args.size, args.candidates)
    n = len(cands)
    print(f"target: {target}\nworkload: matmul {args.size}^3, {n} candidates\n")
    with tempfile.TemporaryDirectory() as cache:
        builder = LocalBuilder(target, max_workers=args.workers, cache_dir=cache)
        # pool start-up, with one build of another program (the cache holds none of `cands`)
        _, pool_secs = timed(builder.build, candidates(args.size + 1, 1))
        builds, cold_secs = timed(builder.build, cands)
        _, warm_secs = timed(builder.build, cands)
        builder.close()
        print(f"{'build (per candidate)':<44} {'ms':>9}")
        print(f"{'pool start + first build (one time)':<44} {pool_secs * 1e3:>9.1f}")
        print(f"{f'cold compile, batch wall / n ({builder.max_workers} procs)':<44} "
              f"{cold_secs / n * 1e3:>9.1f}")
        print(f"{'cold compile, mean build_secs in a process':<44} "
              f"{statistics.fmean(b.artifact.build_secs for b in builds) * 1e3:>9.1f}")
        print(f"{'warm cache (codegen only), batch wall / n':<44} {warm_secs / n * 1e3:>9.1f}")
        print()
        run_table(target, cands, builds)


def run_table(target: Target, cands: list[MeasureCandidate], builds) -> None:
    n = len(cands)
    bare = RunConfig(number=1, repeat=1, min_repeat_ms=0, warmup=1)
    calls = 1 + bare.warmup + 1 + bare.number * bare.repeat
    with LocalRunner(target, config=bare) as runner:
        _, first_secs = timed(runner.run, cands[:1], builds[:1])  # worker start + reference
        results, wall = timed(runner.run, cands, builds)
    kernel = sum(calls * r.mean_secs for r in results)
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]
    with LocalRunner(target) as runner:
        runner.run(cands[:1], builds[:1])
        default_results, default_wall = timed(runner.run, cands, builds)
    print(f"{'run (per candidate)':<44} {'ms':>9}")
    print(f"{'worker start + reference build (one time)':<44} {first_secs * 1e3:>9.1f}")
    print(f"{'run wall, number=1 repeat=1':<44} {wall / n * 1e3:>9.3f}")
    print(f"{f'  kernel time ({calls} calls x mean)':<44} {kernel / n * 1e3:>9.3f}")
    print(f"{'  overhead (wall - kernel)':<44} {(wall - kernel) / n * 1e3:>9.3f}")
    print(f"{'run wall, default RunConfig':<44} {default_wall / n * 1e3:>9.3f}")
    best = min(default_results, key=lambda r: r.mean_secs)
    print(f"\nkernel times: best {best.mean_secs * 1e6:.1f} us, median "
          f"{statistics.median(r.mean_secs for r in default_results) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
