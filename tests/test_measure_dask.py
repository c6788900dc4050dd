"""DaskRunner on a loopback LocalCluster: a batch measured on a two-worker device pool, a worker
killed mid-batch, the `tessel worker` command, a device nobody serves."""
import os
import subprocess
import sys
import time

import pytest

from measure_kernels import candidate_and_build, kill_parent_once
from tessel import Schedule, Target, ops
from tessel.measure import DaskRunner, MeasureCandidate
from tessel.measure.builder import build_artifact
from tessel.measure.dask import resource_name

distributed = pytest.importorskip("distributed")

DEVICE = "test-pool"


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, resources={resource_name(DEVICE): 1})
    with cluster, distributed.Client(cluster) as client:
        yield client


@pytest.fixture(scope="module")
def target():
    return Target("host")


def matmul_candidates(target, cache_dir, factors=(2, 4, 8, 3)):
    func = ops.matmul(17, 24, 9)
    cands, builds = [], []
    for factor in factors:
        sch = Schedule(func)
        _, j, _ = sch.get_loops(sch.get_block("C"))
        sch.split(j, factors=[None, factor])
        cands.append(MeasureCandidate(func, sch.func, sch.trace))
        builds.append(build_artifact(sch.func, target, cache_dir=cache_dir))
    return cands, builds


def test_pool_measures_a_batch_with_failures(client, target, tmp_path):
    cands, builds = matmul_candidates(target, tmp_path)
    for body in ("wrong", "segfault", "right"):
        cand, build = candidate_and_build(body, target, tmp_path)
        cands.append(cand)
        builds.append(build)
    with DaskRunner(client, device=DEVICE, target=target, min_repeat_ms=1) as runner:
        results = runner.run(cands, builds)
    kinds = [r.error_kind for r in results]
    assert kinds == [None] * 4 + ["wrong_result", "runtime_error", None]
    assert "SIGSEGV" in results[5].error_msg
    for r in results[:4] + results[6:]:
        assert len(r.costs) == 3 and all(0 < c < 1 for c in r.costs) and r.run_secs > 0


def test_worker_killed_mid_batch_still_answers_every_candidate(client, target, tmp_path):
    pids_before = set(client.run(os.getpid).values())
    cands, builds = matmul_candidates(target, tmp_path, factors=(2, 4, 6))
    killer, killer_build = candidate_and_build(
        kill_parent_once(str(tmp_path / "killed-once")), target, tmp_path)
    cands.insert(1, killer)
    builds.insert(1, killer_build)
    with DaskRunner(client, device=DEVICE, target=target, min_repeat_ms=1) as runner:
        results = runner.run(cands, builds)
    assert (tmp_path / "killed-once").exists()
    assert len(results) == len(cands)
    # the killed worker's in-flight task was rerun elsewhere, where it computes the right answer
    assert all(r.ok and len(r.costs) == 3 for r in results), [r.error_msg for r in results]
    client.wait_for_workers(2, timeout=30)
    assert set(client.run(os.getpid).values()) != pids_before


def test_tessel_worker_command_joins_the_pool(client, target, tmp_path):
    address = client.scheduler.address
    cmd = [sys.executable, "-m", "tessel.cli", "worker", "--scheduler", address,
           "--device", "cli-device", "--name", "cli-worker"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not _advertised(client, "cli-device"):
            assert proc.poll() is None and time.monotonic() < deadline, "worker did not join"
            time.sleep(0.1)
        cand, build = candidate_and_build("right", target, tmp_path)
        with DaskRunner(address, device="cli-device", target=target, min_repeat_ms=1) as runner:
            (result,) = runner.run([cand], [build])
        assert result.ok and len(result.costs) == 3
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_device_nobody_serves_is_an_error_not_a_hang(client, target, tmp_path):
    cand, build = candidate_and_build("right", target, tmp_path)
    bad_cand, bad_build = candidate_and_build("syntax", target, tmp_path)
    with DaskRunner(client, device="no-such-device", target=target) as runner:
        results = runner.run([cand, bad_cand], [build, bad_build])
    assert results[0].error_kind == "runtime_error" and "no-such-device" in results[0].error_msg
    assert results[1].error_kind == "compile_error"


def _advertised(client, device):
    workers = client.scheduler_info(n_workers=-1)["workers"].values()
    return any(resource_name(device) in w.get("resources", {}) for w in workers)
