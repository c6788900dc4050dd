"""Tuning on a machine that something else uses for part of the run: is the reported best
still what a quiet machine measures?

Three runs of the same search (same seed, empty databases), one after another:
  quiet      nothing else running;
  busy       a CPU hog (a busy loop on `--hogs` cores) for the first `--busy-secs` seconds;
  unchecked  the same hog, with the load check off (TESSEL_BUSY_CORES=0): what tessel did
             before it noticed a busy machine.
For each: the reported best (the database's, as `tessel tune` prints it), its ratio to the
quiet run's, the re-measure beside it, and how many timings were re-taken / not trusted.

    python benchmarks/busy_machine.py R18-C6 --trials 32
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import tessel
from tessel import ops
from tessel.database import Database


def hog(cores: int, seconds: float) -> threading.Thread:
    """Busy loops on `cores` cores for `seconds`, in the background."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]

    def stop() -> None:
        time.sleep(seconds)
        for p in procs:
            p.kill()
            p.wait()
    thread = threading.Thread(target=stop, daemon=True)
    thread.start()
    return thread


def run(name: str, func, trials: int, db: Path, busy: tuple[int, float] | None,
        check: bool) -> dict:
    os.environ["TESSEL_BUSY_CORES"] = "0.25" if check else "0"
    stopper = hog(*busy) if busy else None
    start = time.perf_counter()
    result = tessel.tune(func, tessel.Target("host"), trials, database=db, seed=0,
                         progress=False)
    wall = time.perf_counter() - start
    if stopper is not None:
        stopper.join()
    with Database(db) as database:
        records = database.records(func, tessel.Target("host"))
    flags = [r.flags for r in records]
    return dict(name=name, best=result.best_seconds, again=result.remeasured_seconds,
                wall=wall, retimed=sum("remeasured" in f for f in flags),
                untrusted=sum("disturbed" in f for f in flags), trials=len(records))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workload")
    parser.add_argument("--trials", type=int, default=32)
    parser.add_argument("--hogs", type=int, default=1, help="cores the hog keeps busy")
    parser.add_argument("--busy-secs", type=float, default=None,
                        help="how long the hog runs (default: half the quiet run)")
    args = parser.parse_args()
    func = ops.SUITE[args.workload]
    task = tessel.Task(func, tessel.Target("host"))
    folder = Path(tempfile.mkdtemp(prefix="tessel-busy-"))
    quiet = run("quiet", func, args.trials, folder / "quiet.db", None, True)
    busy_secs = args.busy_secs or quiet["wall"] / 2
    rows = [quiet,
            run("busy", func, args.trials, folder / "busy.db", (args.hogs, busy_secs), True),
            run("unchecked", func, args.trials, folder / "unchecked.db",
                (args.hogs, busy_secs), False)]
    print(f"{args.workload}, {args.trials} trials each; a hog on {args.hogs} core(s) for the "
          f"first {busy_secs:.0f} s of the busy runs; {tessel.Target('host')}")
    print(f"{'run':<10} {'best GFLOP/s':>12} {'vs quiet':>9} {'re-measured':>12} "
          f"{'re-timed':>9} {'untrusted':>9} {'wall s':>7}")
    for r in rows:
        again = task.gflops(r["again"]) if r["again"] == r["again"] else float("nan")
        print(f"{r['name']:<10} {task.gflops(r['best']):>12.1f} "
              f"{quiet['best'] / r['best']:>8.2f}x {again:>12.1f} {r['retimed']:>9} "
              f"{r['untrusted']:>9} {r['wall']:>7.0f}")


if __name__ == "__main__":
    main()
