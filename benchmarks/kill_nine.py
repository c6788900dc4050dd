"""SIGKILL a tuning run at random moments, again and again, resuming each time: are records
lost, measured twice, or processes left behind?

Each round starts `tessel tune WORKLOAD` on one database (resuming what is there), kills the
whole run with SIGKILL at a random moment, and checks, after 5 s:
  - every record stored before the round is still there (none lost);
  - no program was measured twice (the structural hashes of the stored programs differ);
  - no process the run started is alive (found by a marker in their environment: build
    workers, compilers, cc1, as, the measuring process);
and at the end that SQLite's integrity check passes.

    python benchmarks/kill_nine.py --rounds 20 [--workload GMM] [--max-secs 12]
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import tessel
from tessel import ops
from tessel.database import Database
from tessel.database.recover import check_file
from tessel.ir import structural_hash
from tessel.space import default_postprocs, final_func


def marked(mark: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if mark.encode() in Path(f"/proc/{entry}/environ").read_bytes():
                stat = Path(f"/proc/{entry}/stat").read_text()
                if stat.rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(Path(f"/proc/{entry}/comm").read_text().strip())
        except (OSError, IndexError):
            continue
    return found


def stored(db: Path, func, target) -> tuple[set[str], list[str]]:
    """(record digests, program hashes) of the database."""
    if not db.exists():
        return set(), []
    with Database(db) as database:
        records = database.records(func, target)
    posts = default_postprocs(target)
    digests = {f"{r.trace_json}|{r.costs}|{r.timestamp}" for r in records}
    programs = [structural_hash(final_func(r.trace().apply(tessel.Schedule(func)), posts))
                for r in records if r.trace_json]
    return digests, programs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--workload", default="GMM")
    parser.add_argument("--max-secs", type=float, default=12.0,
                        help="kill within this many seconds of the start")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    func, target = ops.SUITE[args.workload], tessel.Target("host")
    folder = Path(tempfile.mkdtemp(prefix="tessel-kill9-"))
    db = folder / "records.db"
    lost = duplicates = left = 0
    for round_ in range(1, args.rounds + 1):
        before, _ = stored(db, func, target)
        mark = uuid.uuid4().hex
        env = dict(os.environ, TESSEL_KILL9_MARK=mark)
        proc = subprocess.Popen([sys.executable, "-m", "tessel.cli", "tune", args.workload,
                                 "--trials", "100000", "--batch-size", "4", "--db", str(db),
                                 "--seed", str(round_)], env=env, cwd=folder,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        at = rng.uniform(0.2, args.max_secs)
        time.sleep(at)
        os.killpg(proc.pid, signal.SIGKILL)  # the run and everything in its process group
        proc.wait()
        time.sleep(5.0)
        alive = marked(mark)
        after, programs = stored(db, func, target)
        missing = len(before - after)
        twice = len(programs) - len(set(programs))
        lost, duplicates, left = lost + missing, max(duplicates, twice), left + len(alive)
        print(f"round {round_:2d}: killed at {at:5.2f} s; {len(after):4d} records "
              f"(+{len(after) - len(before)}), lost {missing}, measured twice {twice}, "
              f"alive after 5 s: {alive or 'none'}", flush=True)
    problems = check_file(db)
    print(f"\n{args.rounds} kills: {lost} records lost, {duplicates} programs measured twice, "
          f"{left} processes left after 5 s; integrity check: {problems or 'ok'}")
    sys.exit(1 if lost or duplicates or left or problems else 0)


if __name__ == "__main__":
    main()
