"""LocalRunner: crashing, hanging, wrong and uncompilable kernels become error results, and the
runner goes on measuring; real scheduled programs are checked against the unscheduled one."""
import dataclasses
import fcntl
import os

import numpy as np
import pytest

from measure_kernels import BODIES, candidate_and_build
from tessel import Schedule, Target, ops
from tessel.measure import LocalBuilder, LocalRunner, MeasureCandidate, RunConfig, measure
from tessel.measure.builder import build_artifact
from tessel.measure.runner import reduction_length, tolerance
from tessel.measure.session import DeviceLock
from tessel.measure.worker import mismatch, random_input


@pytest.fixture(scope="module")
def target():
    return Target("host")


@pytest.fixture(scope="module")
def runner(target):  # every candidate timed in full (its tests count the repeats); 5 s: a
    # hang is found in that, and a loaded machine still times a right kernel well within it
    with LocalRunner(target, timeout_s=5.0, min_repeat_ms=1.0, stop_ratio=0) as r:
        yield r


def test_failures_become_error_kinds_and_the_runner_goes_on(runner, target, tmp_path):
    names = ["segfault", "right", "abort", "right", "hang", "right", "wrong", "nan", "partial",
             "status", "syntax", "right"]
    pairs = [candidate_and_build(name, target, tmp_path) for name in names]
    pids = []
    results = []
    for cand, build in pairs:  # one at a time, to watch the worker process being replaced
        results += runner.run([cand], [build])
        pids.append(runner.session.process.pid)
    kinds = dict(zip(names, [r.error_kind for r in results]))
    assert kinds == {"segfault": "runtime_error", "right": None, "abort": "runtime_error",
                     "hang": "timeout", "wrong": "wrong_result", "nan": "wrong_result",
                     "partial": "wrong_result", "status": "runtime_error",
                     "syntax": "compile_error"}
    assert "SIGSEGV" in results[0].error_msg
    assert "SIGABRT" in results[2].error_msg and "kernel gives up" in results[2].error_msg
    assert "within 5 s" in results[4].error_msg
    assert "(20,)" in results[6].error_msg and "(3,)" in results[7].error_msg
    assert "status 7" in results[9].error_msg
    for k in (1, 3, 5, 11):
        assert results[k].ok and len(results[k].costs) == 3
        assert all(0 < c < 1e-3 for c in results[k].costs)
    assert pids[0] is None and pids[2] is None and pids[4] is None  # died, replaced next time
    assert len({pids[1], pids[3], pids[5]}) == 3 and pids[6] == pids[11] == pids[5]


def test_scheduled_matmuls_are_checked_and_timed(runner, target, tmp_path):
    func = ops.matmul(19, 33, 11)
    cands = []
    for factor in (3, 8, 33):
        sch = Schedule(func)
        i, j, k = sch.get_loops(sch.get_block("C"))
        j0, j1 = sch.split(j, factors=[None, factor])
        sch.reorder(i, j0, k, j1)
        cands.append(MeasureCandidate(func, sch.func, sch.trace))
    with LocalBuilder(target, max_workers=2, cache_dir=tmp_path) as builder:
        results = measure(builder, runner, cands)
    for r in results:
        assert r.ok, r.error_msg
        assert len(r.costs) == 3 and all(np.isfinite(c) and c > 0 for c in r.costs)
        assert r.build_secs > 0 and r.run_secs > 0 and r.mean_secs < 1e-2


SLOW = "    { struct timespec t = {0, 20000000}; nanosleep(&t, NULL); }\n" + BODIES["right"]


def test_far_slower_candidates_are_timed_once(target, tmp_path):
    """Past stop_ratio times the best so far (3 by default), one timing is the cost; the
    record says so. Without a best yet, or under the ratio, every repeat is timed."""
    right, slow = (candidate_and_build(body, target, tmp_path) for body in ("right", SLOW))
    with LocalRunner(target, min_repeat_ms=1.0) as r:
        first, = r.run(*zip(slow))  # no best yet: timed in full
        results = r.run(*zip(right, slow, right))
    assert first.ok and len(first.costs) == 3 and "stopped_early" not in first.flags
    fast, cut, again = results
    assert fast.ok and len(fast.costs) == 3 and again.ok and len(again.costs) == 3
    assert cut.ok and "stopped_early" in cut.flags and len(cut.costs) == 1
    assert cut.costs[0] >= 0.02 and cut.run_secs < first.run_secs
    with LocalRunner(target, min_repeat_ms=1.0, stop_ratio=0) as r:
        results = r.run(*zip(right, slow))
    assert [len(x.costs) for x in results] == [3, 3] and not results[1].flags


def test_a_checked_call_far_past_the_limit_is_the_cost(target, tmp_path):
    """A candidate whose first (checked) call takes over 3x the limit (9x the best) and 20 ms
    is not called again: this one sleeps 60 ms on its first call only, and is recorded as that call,
    where timing it again would have found it fast."""
    first_only = ("    { static int calls = 0; if (calls++ == 0) { struct timespec t = "
                  "{0, 60000000}; nanosleep(&t, NULL); } }\n" + BODIES["right"])
    right, lazy = (candidate_and_build(body, target, tmp_path) for body in ("right", first_only))
    with LocalRunner(target, min_repeat_ms=1.0) as r:
        r.run(*zip(right))
        far, = r.run(*zip(lazy))
    assert far.ok and "stopped_early" in far.flags and len(far.costs) == 1
    assert far.costs[0] >= 0.06


def test_the_best_so_far_bounds_the_time_limit(target, tmp_path):
    """Once a best is known, a candidate that never finishes is cut off after MIN_LIMIT_S
    (the best is microseconds), not after timeout_s; the message says why. This one hangs from
    its second call on: the first, guarded by the cut-off, returns."""
    from tessel.measure.session import MIN_LIMIT_S, job_timeout
    later = ("    { static int calls = 0; if (calls++ > 0) { volatile int spin = 1; "
             "while (spin) {} } }\n" + BODIES["right"])
    right, hang = (candidate_and_build(body, target, tmp_path) for body in ("right", later))
    with LocalRunner(target, min_repeat_ms=1.0, timeout_s=30.0) as r:
        fast, stuck = r.run(*zip(right, hang))
    assert fast.ok and stuck.error_kind == "timeout"
    assert f"within {MIN_LIMIT_S:g} s (limit set by the best so far" in stuck.error_msg
    assert stuck.run_secs < 20.0
    assert job_timeout(30.0, 0.0) == 30.0  # no best: the configured limit
    assert job_timeout(30.0, 1.0) == 30.0 and job_timeout(30.0, 0.2) == 20.0
    assert job_timeout(30.0, 1e-6) == MIN_LIMIT_S


def test_a_first_call_far_past_the_best_is_cut_off(target, tmp_path):
    """With a best known, a first call still running after CUT_MIN_S (here: 30x the limit is
    less) is answered for by the worker's watchdog, a timeout naming the cut; the process is
    replaced and the next candidate is measured as usual. Without a best, it runs to its end."""
    from tessel.measure.worker import CUT_MIN_S
    slow = "    { struct timespec t = {2, 0}; nanosleep(&t, NULL); }\n" + BODIES["right"]
    right, crawl = (candidate_and_build(body, target, tmp_path) for body in ("right", slow))
    with LocalRunner(target, min_repeat_ms=1.0, timeout_s=30.0) as r:
        fast, = r.run(*zip(right))
        pid = r.session.process.pid
        cut, after = r.run(*zip(crawl, right))
        assert r.session.process.pid not in (None, pid)  # a fresh measuring process
    assert fast.ok and after.ok and len(after.costs) == 3
    assert cut.error_kind == "timeout" and "cut off" in cut.error_msg
    assert f"after {CUT_MIN_S:g} s" in cut.error_msg
    assert CUT_MIN_S <= cut.run_secs < 1.9  # not the 2 s the call takes
    longer = "    { struct timespec t = {0, 600000000}; nanosleep(&t, NULL); }\n" + BODIES["right"]
    with LocalRunner(target, config=RunConfig(repeat=1, number=1, min_repeat_ms=0,
                                              warmup=0)) as r:
        whole, = r.run(*zip(candidate_and_build(longer, target, tmp_path)))
    assert whole.ok and whole.costs[0] >= 0.6 > CUT_MIN_S


def test_a_slow_reference_is_saved_for_a_fresh_process(target, tmp_path, monkeypatch):
    """A reference run slower than 50 ms leaves its outputs beside its library; a new
    measuring process reads them back instead of running the reference again."""
    from tessel.measure import worker
    slow = "    { struct timespec t = {0, 80000000}; nanosleep(&t, NULL); }\n" + BODIES["right"]
    _, build = candidate_and_build(slow, target, tmp_path)
    params = [("A", (37,), "float32", False), ("B", (37,), "float32", True)]
    request = {"op": "reference", "key": "k", "lib": build.artifact.lib_path,
               "params": params, "seed": 3}
    first = worker.Worker()
    assert first.handle(request) == {"ok": True}
    saved = f"{build.artifact.lib_path}.seed3.npz"
    assert os.path.exists(saved)
    fresh = worker.Worker()
    monkeypatch.setattr(worker, "load_library", lambda path: pytest.fail("ran the reference again"))
    assert fresh.handle(request) == {"ok": True}
    np.testing.assert_array_equal(fresh.references["k"][0], first.references["k"][0])
    a = worker.random_input(np.random.default_rng(3), "A", (37,), "float32")
    np.testing.assert_allclose(fresh.references["k"][0], a * 2 + 1, rtol=1e-6)


def test_check_off_measures_a_wrong_kernel(target, tmp_path):
    cand, build = candidate_and_build("wrong", target, tmp_path)
    with LocalRunner(target, config=RunConfig(check=False, repeat=4, min_repeat_ms=0)) as r:
        (result,) = r.run([cand], [build])
    assert result.ok and len(result.costs) == 4


def test_cache_flush_and_calibration_time_real_work(target, tmp_path):
    func = ops.matmul(32, 32, 32)
    build = build_artifact(func, target, cache_dir=tmp_path)
    with LocalRunner(target, flush_cache=True, min_repeat_ms=2.0, repeat=2) as r:
        (result,) = r.run([MeasureCandidate(func, func)], [build])
    assert result.ok and len(result.costs) == 2 and all(c > 1e-7 for c in result.costs)
    assert result.run_secs > 2 * 2e-3  # each repeat lasted at least min_repeat_ms


def _in_model(func):
    from tessel.ir import MEASURE, PrimFunc
    return PrimFunc(func.name, func.params, func.body, {**func.attrs, MEASURE: "in_model"})


def test_a_model_workload_is_timed_call_by_call_in_the_caches_a_model_leaves(target, tmp_path):
    """A workload marked MEASURE="in_model" (a model's kernel) is its own key, its job sweeps
    the last-level cache, and before each timed call tessel_time_in_model sweeps, flushes the
    weight and the output and writes the activation input again (their whole bytes)."""
    from tessel.ir import CONSTANT_PARAMS, PrimFunc, structural_hash
    from tessel.measure.runner import References, plan_job
    func = ops.matmul(32, 24, 16)
    model = _in_model(PrimFunc(func.name, func.params, func.body, {CONSTANT_PARAMS: (1,)}))
    assert model.measure == "in_model" and func.measure == "warm"
    assert structural_hash(model) != structural_hash(_in_model(func)) != structural_hash(func)
    build = build_artifact(model, target, cache_dir=tmp_path)
    source = build.artifact.source
    timer = source[source.index("int32_t tessel_time_in_model("):]
    loop = timer[timer.index("for (int32_t n = 0"):]
    steps = [line.strip() for line in loop.splitlines() if "tessel_" in line][:4]
    # A 32x16 (an activation), B 16x24 (a weight), C 32x24 floats (the output)
    assert steps == ["tessel_sweep(sweep, sweep_bytes);", "tessel_produce(args[0], 2048, 1);",
                     "tessel_evict(args[1], 1536);", "tessel_evict(args[2], 3072);"]
    assert loop.index("tessel_produce(") < loop.index("clock_gettime") < loop.index(
        "tessel_entry(args)")
    config = RunConfig(repeat=2, min_repeat_ms=1.0)
    from tessel.codegen.module import sweep_bytes
    assert 0 < sweep_bytes(target) <= 32 << 20
    # a VM's or a large server's last-level cache is not swept whole; a small one is
    for l3, want in ((480 << 20, 32 << 20), (16 << 20, 16 << 20)):
        assert sweep_bytes(dataclasses.replace(target, l3_bytes=l3)) == want
    for workload, want in ((model, sweep_bytes(target)), (func, 0)):
        job = plan_job(MeasureCandidate(workload, workload), build, config, target,
                       References(target, tmp_path))
        assert job.in_model_sweep == want
    with LocalRunner(target, config=config) as r:
        (result,) = r.run([MeasureCandidate(model, model)], [build])
    assert result.ok and len(result.costs) == 2 and all(c > 0 for c in result.costs)


def test_a_model_workload_needs_a_library_that_can_time_it_so(runner, target, tmp_path):
    cand, build = candidate_and_build("right", target, tmp_path)  # hand-written C
    (result,) = runner.run([MeasureCandidate(_in_model(cand.workload), cand.func)], [build])
    assert result.error_kind == "runtime_error" and "tessel_time_in_model" in result.error_msg


def test_candidate_with_other_parameters_is_invalid(runner, target, tmp_path):
    func, other = ops.matmul(8, 8, 8), ops.matmul(8, 8, 9)
    build = build_artifact(other, target, cache_dir=tmp_path)
    (result,) = runner.run([MeasureCandidate(func, other)], [build])
    assert result.error_kind == "invalid_schedule" and "parameters differ" in result.error_msg


def test_recycled_worker_reloads_the_reference(target, tmp_path):
    func = ops.matmul(6, 7, 8)
    build = build_artifact(func, target, cache_dir=tmp_path)
    with LocalRunner(target, min_repeat_ms=0) as r:
        r.session.process.recycle_after = 2
        results = r.run([MeasureCandidate(func, func)] * 5, [build] * 5)
        assert r.session.process.generation >= 3
    assert all(x.ok for x in results), [x.error_msg for x in results]


def test_more_workloads_than_the_worker_keeps_references_for(target, tmp_path):
    """The worker keeps the last few reference outputs; a workload whose reference it evicted
    gets it sent again (tuning a model cycles through more tasks than that)."""
    from tessel.measure.worker import _KEPT_REFERENCES
    funcs = [ops.matmul(5 + k, 6, 7) for k in range(_KEPT_REFERENCES + 2)]
    builds = [build_artifact(f, target, cache_dir=tmp_path) for f in funcs]
    cands = [MeasureCandidate(f, f) for f in funcs]
    with LocalRunner(target, min_repeat_ms=0) as r:
        results = r.run(cands * 2, builds * 2)
    assert all(x.ok for x in results), [x.error_msg for x in results]


def test_batch_length_mismatch_is_an_error(runner):
    with pytest.raises(ValueError, match="one build per candidate"):
        runner.run([MeasureCandidate(ops.relu(3), ops.relu(3))], [])


def test_tolerances_depend_on_dtype_and_reduction_length():
    assert reduction_length(ops.matmul(4, 4, 9)) == 9
    assert reduction_length(ops.conv2d(1, 3, 8, 8, 4, 3, 3)) == 27
    assert tolerance(ops.matmul(4, 4, 9)) == (1e-4, 1e-4)
    assert tolerance(ops.matmul(4, 4, 4096)) == (1e-3, 1e-3)
    assert 1e-4 < tolerance(ops.matmul(4, 4, 900))[0] < 1e-3
    assert tolerance(ops.matmul(4, 4, 9, dtype="int32")) == (0.0, 0.0)
    assert tolerance(ops.matmul(4, 4, 9, dtype="float64"))[0] == 1e-9


def test_mismatch_is_exact_for_ints_and_nan_aware_for_floats():
    ref = np.array([1.0, np.nan, 100.0], np.float32)
    assert mismatch(ref.copy(), ref, 1e-4, 1e-4) is None
    assert mismatch(np.array([1.0, np.nan, 100.005], np.float32), ref, 1e-4, 1e-4) is None
    msg = mismatch(np.array([np.nan, np.nan, 100.0], np.float32), ref, 1e-4, 1e-4)
    assert msg.startswith("1 of 3 elements differ (first at (0,)")
    ints = np.array([[3, 4]], np.int32)
    assert mismatch(ints, ints.copy(), 0, 0) is None
    assert "(0, 1)" in mismatch(np.array([[3, 5]], np.int32), ints, 0, 0)


def test_worker_inputs_match_ops_reference_inputs():
    func = ops.SUITE["CBR"]
    rng = np.random.default_rng(5)
    mine = [random_input(rng, b.name, b.shape, b.dtype) for b in func.inputs]
    for a, b in zip(mine, ops.reference_inputs(func, seed=5)):
        np.testing.assert_array_equal(a, b)


def test_device_lock_excludes_other_holders():
    first, second = DeviceLock("lock-test"), DeviceLock("lock-test")
    with first:
        fd = os.open(second.path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    with second:
        pass
    first.close()
    second.close()


def test_run_config_rejects_bad_values():
    with pytest.raises(ValueError, match="repeat"):
        RunConfig(repeat=0)
    with pytest.raises(ValueError, match="timeout_s"):
        RunConfig(timeout_s=-1)
