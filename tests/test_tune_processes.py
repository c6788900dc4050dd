"""The tuner's processes behave: a script without a main guard tunes to the end, Ctrl-C stops a
run after committing its batch, and SIGKILL of the tuner leaves no build worker, compiler or
measuring process behind. Every process a run starts inherits a marker in its environment,
so the tests find them all (compilers' cc1 and as included) by reading /proc."""
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from tessel.database.record import NOT_A_CHOICE
from tessel.measure import LocalBuilder

pytestmark = pytest.mark.skipif(not Path("/proc/self/environ").exists(),
                                reason="finds processes through /proc (Linux)")


def marked(mark: str) -> list[tuple[int, str]]:
    """(pid, command name) of every live process whose environment holds `mark`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            if mark.encode() in environ:
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":  # a zombie is already dead (its parent reaps it)
                    found.append((int(entry), Path(f"/proc/{entry}/comm").read_text().strip()))
        except (OSError, IndexError):
            continue
    return found


def wait_until(predicate, timeout_s: float, step_s: float = 0.1):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    return predicate()


def start(args: list[str], mark: str, cwd: Path) -> subprocess.Popen:
    """`args` in a session of its own, Ctrl-C deliverable (a suite started in the background
    of a non-interactive shell inherits SIGINT ignored, and Python then never raises it)."""
    env = dict(os.environ, TESSEL_TEST_MARK=mark, TESSEL_CACHE_DIR=str(cwd / "kernels"))
    return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=interruptible)


def interruptible() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def records(db: Path) -> int:
    """Trials stored (not the choice a run stores at its end), read without tessel."""
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        try:
            query = f"SELECT COUNT(*) FROM records WHERE {NOT_A_CHOICE}"
            return conn.execute(query).fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            return 0


def test_a_script_without_a_main_guard_tunes_to_the_end(tmp_path):
    """The workers run `python -m`, so the user's module is imported once: by the user."""
    script = tmp_path / "tune_here.py"
    script.write_text(textwrap.dedent("""\
        import tessel
        from tessel import ops
        with open("imports.log", "a") as log:
            log.write("imported\\n")
        result = tessel.tune(ops.matmul(16, 16, 16), trials=8, batch_size=4, strategy="random",
                             database="records.db", progress=False)
        print("tuned", result.best_trace is not None, len(result.history))
        """))
    mark = uuid.uuid4().hex
    proc = start([sys.executable, str(script)], mark, tmp_path)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert out.strip() == "tuned True 8"
    assert (tmp_path / "imports.log").read_text() == "imported\n"
    assert records(tmp_path / "records.db") == 8
    assert wait_until(lambda: not marked(mark), 5.0), marked(mark)


def test_sigkill_of_the_tuner_leaves_no_process_behind(tmp_path):
    """Killed while its build workers compile: workers, cc, cc1 and as all go within 5 s."""
    mark = uuid.uuid4().hex
    proc = start([sys.executable, "-m", "tessel.cli", "tune", "R18-C6", "--trials", "64",
                  "--strategy", "random", "--db", "records.db"], mark, tmp_path)
    compiling = wait_until(lambda: [p for p in marked(mark) if p[1] in ("cc1", "as")], 120, 0.05)
    assert compiling, f"no compiler seen; tessel printed: {proc.stderr.read()[-2000:]}"
    workers = [p for p in marked(mark) if p[0] != proc.pid]
    assert len(workers) >= 2  # build workers and their compilers
    proc.kill()
    proc.wait()
    assert wait_until(lambda: not marked(mark), 5.0), marked(mark)


def test_ctrl_c_stops_after_the_batch_in_flight_and_keeps_it(tmp_path):
    mark = uuid.uuid4().hex
    db = tmp_path / "records.db"
    proc = start([sys.executable, "-m", "tessel.cli", "tune", "GMM", "--trials", "400",
                  "--batch-size", "4", "--strategy", "random", "--db", str(db)], mark, tmp_path)
    assert wait_until(lambda: records(db) >= 4, 120), proc.stderr.read()[-2000:]
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the foreground process group
    # the batch in flight may hold a build that runs to its 60 s limit on a loaded machine
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:  # say where it is stuck (tessel dumps on SIGUSR1)
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 300 s after Ctrl-C; processes {marked(mark)}; "
                    f"stderr ends: {err[-6000:]}")
    assert proc.returncode == 130, err
    assert "stopping after the batch in flight" in err and "same command resumes" in err
    assert "Traceback" not in err
    stored = records(db)
    assert stored % 4 == 0 and 4 <= stored < 400
    assert f"after {stored} trials" in out
    assert wait_until(lambda: not marked(mark), 5.0), marked(mark)


def test_closing_a_builder_kills_the_compiler_it_waits_for(tmp_path):
    """A compiler (and its children) that hangs is killed with its build worker."""
    from test_measure_builder import split_candidate
    from tessel import Target, ops
    mark = uuid.uuid4().hex
    compiler = tmp_path / "slowcc"
    compiler.write_text(f"#!/bin/sh\nexport TESSEL_TEST_MARK={mark}\nsleep 60 & sleep 60\n")
    compiler.chmod(0o755)
    slow = Target("x86_64-avx2", compiler=str(compiler), compiler_version="slowcc 1.0")
    with LocalBuilder(slow, max_workers=1, timeout_s=2.0, cache_dir=tmp_path) as builder:
        (build,) = builder.build([split_candidate(ops.matmul(4, 4, 4), 2)])
        assert build.error.error_kind == "timeout"
    assert wait_until(lambda: not marked(mark), 5.0), marked(mark)
    assert not list(tmp_path.rglob("*.tmp"))  # the killed build's output file is gone


def test_temporary_files_of_killed_builds_are_swept(tmp_path):
    from tessel.codegen.compiler import _STALE_TMP_S, _sweep_stale
    old, fresh, kept = (tmp_path / n for n in ("a.so.tmp", "b.so.tmp", "c.so"))
    for path in (old, fresh, kept):
        path.write_bytes(b"x")
    stamp = time.time() - _STALE_TMP_S - 60
    os.utime(old, (stamp, stamp))
    os.utime(kept, (stamp, stamp))
    _sweep_stale(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.so.tmp", "c.so"]


def test_two_runs_on_one_database_measure_no_program_twice(tmp_path):
    """Both draw the same random programs (same seed): claims give each program to one run,
    each takes in what the other committed, the budget is shared, labels differ, and each
    reports a time the database holds."""
    import re

    from tessel import Schedule, Target, ops
    from tessel.database import Database
    from tessel.ir import structural_hash
    from tessel.space import default_postprocs, final_func
    db = tmp_path / "shared.db"
    argv = [sys.executable, "-m", "tessel.cli", "tune", "GMM", "--trials", "24", "--batch-size",
            "4", "--strategy", "random", "--seed", "0", "--db", str(db)]
    procs = [start(argv, uuid.uuid4().hex, tmp_path) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err[-2000:]
    host, func = Target("host"), ops.SUITE["GMM"]
    with Database(db) as database:
        stored = database.records(func, host)
        top = database.top_k(func, host, k=len(stored))
    posts = default_postprocs(host)
    programs = [structural_hash(final_func(r.trace().apply(Schedule(func)), posts))
                for r in stored]
    assert len(programs) == len(set(programs)), "a program was measured twice"
    assert len(stored) == 24  # the budget is shared
    labels = {r.run for r in stored}
    assert len(labels) == 2 and all(len([r for r in stored if r.run == label]) >= 4
                                    for label in labels)
    with sqlite3.connect(db) as conn:  # each run's choice, re-timed at its end
        choices = [json.loads(costs) for (costs,) in conn.execute(
            "SELECT costs_json FROM records WHERE instr(flags, 'retimed') > 0")]
    conn.close()
    chosen_ms = {f"{statistics.fmean(costs) * 1e3:.4f}" for costs in choices}
    assert len(choices) == 2 and len(top) == 24
    for out, _ in outputs:
        reported = re.search(r"best [\d.]+ GFLOP/s \(([\d.]+) ms re-timed", out).group(1)
        assert reported in chosen_ms, (reported, chosen_ms)
