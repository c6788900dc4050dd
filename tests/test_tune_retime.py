"""The end of a run (tessel.tuning.retime): the best few re-timed in interleaved rounds, the
fastest re-timed one reported and stored as the workload's choice, which `tessel best`,
apply_best and the next compile use; a time in search that luck made fast does not win."""
import math
import re

import numpy as np

from tessel import cli, ops
from tessel.database import Database
from tessel.database.record import RETIMED
from tessel.ir import structural_hash
from tessel.measure import MeasureResult
from tessel.tuning import apply_best
from tessel.tuning.retime import DRIFTED, RETIME_ROUNDS

from test_tune import TARGET, FakeRunner, fake_tune


class LuckyRunner(FakeRunner):
    """Each program's seeded cost, except that the slowest of the first batch is timed 1000x
    too fast the first time it is measured (a lucky phase of the machine), at its real cost
    after."""

    def __init__(self):
        super().__init__()
        self.lucky, self.lucky_secs = None, math.inf

    def run(self, cands, builds):
        results = super().run(cands, builds)
        keys = self.keys[-len(cands):]
        if self.lucky is None:
            self.lucky = max(zip(keys, results), key=lambda kr: kr[1].mean_secs)[0]
        out = []
        for key, result in zip(keys, results):
            if key == self.lucky:
                self.lucky_secs = result.mean_secs
            luck = 1e-3 if key == self.lucky and self.keys.count(key) == 1 else 1.0
            out.append(MeasureResult(costs=tuple(c * luck for c in result.costs)))
        return out


def test_the_best_few_are_retimed_in_interleaved_rounds(tmp_path):
    runner = FakeRunner()
    result = fake_tune(ops.matmul(32, 24, 16), 8, tmp_path / "r.db", runner, rerun_top=3)
    retimed = runner.keys[8:]  # after the 8 trials of the search
    first = retimed[:3]
    assert len(set(first)) == 3 and retimed == first * RETIME_ROUNDS  # A B C A B C A B C
    assert math.isclose(result.best_seconds, result.remeasured_seconds)
    assert result.search_seconds == min(t.seconds for t in result.history)


def test_a_lucky_time_in_search_does_not_win(tmp_path):
    """The program timed 1000x too fast in search is the database's fastest record, but
    re-timed it is slower than another: the run reports and stores that other, re-timed,
    and apply_best and the database's choice give it, with that time."""
    func, db, runner = ops.matmul(32, 24, 16), tmp_path / "r.db", LuckyRunner()
    result = fake_tune(func, 8, db, runner, rerun_top=4)
    with Database(db) as database:
        (fastest,) = database.top_k(func, TARGET, k=1)
        choice = database.selection(func, TARGET)
        trials = database.count(func, TARGET)
    assert math.isclose(fastest.mean_secs, runner.lucky_secs * 1e-3)  # the lucky one...
    assert result.best_trace.to_json() != fastest.trace_json  # ...is not the result
    assert result.best_seconds < runner.lucky_secs
    assert trials == 8  # the choice is not a trial
    assert RETIMED in choice.flags and choice.trace_json == result.best_trace.to_json()
    assert math.isclose(choice.mean_secs, result.best_seconds)
    assert structural_hash(apply_best(func, TARGET, db, strict=True).func) == \
        structural_hash(result.best_func)


def test_a_best_that_moved_is_flagged_and_said(tmp_path, capsys):
    """Every program runs 30% slower when re-timed (a slow phase): the choice is flagged
    drifted."""
    class SlowerLater(FakeRunner):
        def run(self, cands, builds):
            slow = 1.3 if len(self.keys) >= 8 else 1.0
            return [MeasureResult(costs=tuple(c * slow for c in r.costs))
                    for r in super().run(cands, builds)]
    func, db = ops.matmul(32, 24, 16), tmp_path / "r.db"
    result = fake_tune(func, 8, db, SlowerLater(), rerun_top=2)
    assert math.isclose(result.best_seconds, 1.3 * result.search_seconds)
    with Database(db) as database:
        assert DRIFTED in database.selection(func, TARGET).flags
    from tessel.cli.tune import _timing
    assert re.search(r"re-timed as a user's process times it; [\d.]+ ms in search: 30% slower "
                     r"now, the machine's speed moved", _timing(result))


def test_rerun_top_zero_and_an_interrupted_run_report_the_time_in_search(tmp_path):
    runner = FakeRunner()
    result = fake_tune(ops.matmul(32, 24, 16), 8, tmp_path / "r.db", runner, rerun_top=0)
    assert len(runner.keys) == 8 and math.isnan(result.remeasured_seconds)
    assert result.best_seconds == result.search_seconds
    with Database(tmp_path / "r.db") as database:
        assert database.selection(ops.matmul(32, 24, 16), TARGET) is None


def test_tune_and_best_print_the_same_retimed_time(tmp_path, capsys):
    """For real: the time `tessel tune` reports is the one `tessel best` shows, re-timed."""
    db = tmp_path / "r.db"
    argv = ["--op", "matmul", "--shape", "16,12,8", "--db", str(db)]
    assert cli.main(["tune", *argv, "--trials", "4", "--batch-size", "4"]) == 0
    tuned = capsys.readouterr().out
    assert cli.main(["best", *argv]) == 0
    best = capsys.readouterr().out
    reported = re.search(r"\(([\d.]+) ms re-timed as a user's process times it; [\d.]+ ms in "
                         r"search", tuned)
    shown = re.search(r"\(([\d.]+) ms, re-timed in \d+ batches at the end of its run", best)
    assert reported and shown and reported.group(1) == shown.group(1), (tuned, best)
    mod = apply_best(ops.matmul(16, 12, 8), None, db, strict=True)
    a, b = ops.reference_inputs(mod.func, seed=0)
    c = np.zeros((16, 12), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
