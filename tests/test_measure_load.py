"""Timings others got in the way of: the load meter's arithmetic, a CPU hog flagged while a
kernel is timed (re-timed, then not trusted), and flagged records never reported as a best."""
import subprocess
import sys
import time

import pytest

from tessel import Target, ops
from tessel.database import Database
from tessel.measure import LocalBuilder, LocalRunner, MeasureCandidate, MeasureResult
from tessel.measure import load
from tessel.measure.session import RunConfig
from tessel.tuning.progress import TuneProgress

HOST = Target("host")


def test_the_meter_counts_what_others_used_beyond_two_stray_ticks(monkeypatch):
    ticks = iter([1000, 1150, 500, 550])  # busy: +150 ticks; the measured process: +50
    monkeypatch.setattr(load, "_busy_ticks", lambda: next(ticks))
    own = iter([200, 250, 300, 349])
    monkeypatch.setattr(load, "_process_ticks", lambda pid: next(own))
    clock = iter([10.0, 11.0, 20.0, 21.0])
    monkeypatch.setattr(load.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(load, "_TICKS", 100)
    meter = load.LoadMeter(1234)
    meter.start()
    assert meter.stop() == pytest.approx((150 - 50 - 2) / 100)  # 0.98 cores: busy
    meter.start()
    assert meter.stop() == 0.0  # 50 busy, 49 own: one stray tick is no load


def test_the_meter_cannot_tell_without_proc(monkeypatch):
    monkeypatch.setattr(load, "_busy_ticks", lambda: None)
    meter = load.LoadMeter(None)
    meter.start()
    assert meter.stop() is None


@pytest.fixture
def hogs():
    """A busy loop on every core."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
             for _ in range(HOST.cores)]
    time.sleep(0.3)
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def test_a_kernel_timed_beside_a_cpu_hog_is_retimed_then_flagged(hogs, tmp_path):
    assert load.others_load(0.5) >= 0.8 * HOST.cores - 0.3  # the hogs are seen
    func = ops.matmul(64, 64, 64)
    cand = MeasureCandidate(func, func)
    config = RunConfig(busy_cores=0.25, busy_retries=1, quiet_wait_s=0.3, min_repeat_ms=20)
    with LocalBuilder(HOST, max_workers=1, cache_dir=tmp_path) as b, \
            LocalRunner(HOST, config=config, cache_dir=tmp_path) as r:
        (result,) = r.run([cand], b.build([cand]))
    assert result.ok and result.flags == ("disturbed", "remeasured")
    with Database(tmp_path / "r.db") as db:
        db.commit_results(HOST, [cand], [result])
        assert db.count(func, HOST) == 1 and db.top_k(func, HOST) == []  # never a best
        assert db.records(func, HOST)[0].result().disturbed


def test_the_progress_line_says_the_machine_was_busy():
    bar = TuneProgress("GMM", 8, enabled=False, flops=1e9)
    bar.update([MeasureResult((1e-3,), flags=("remeasured",)),
                MeasureResult((2e-3,), flags=("disturbed", "remeasured")),
                MeasureResult((1e-3,))], 1e-3)
    assert bar.status().endswith("| machine busy: 2 re-timed, 1 not trusted")
    with pytest.raises(ValueError, match="busy_retries"):
        RunConfig(busy_retries=-1)
