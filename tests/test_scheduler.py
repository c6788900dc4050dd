import math

import pytest

from conftest import make_matmul
from tessel import Target, ops
from tessel.tuning.scheduler import TaskScheduler
from tessel.tuning.task import Task, TaskError

TARGET = Target("x86_64-avx2")


def tasks(*weights):
    return [Task(ops.matmul(16 + k, 16, 16), TARGET, f"t{k}", w) for k, w in enumerate(weights)]


def test_task_key_ignores_names_and_flops_are_exact():
    a = Task(ops.matmul(32, 16, 8), TARGET)
    b = Task(make_matmul(32, 16, 8, names=("X", "Y", "Z", "r")), TARGET)
    assert a.key == b.key
    assert a.flops == b.flops == 2 * 32 * 16 * 8
    assert a.gflops(1e-6) == pytest.approx(8.192)
    assert a.gflops(math.inf) == 0.0


@pytest.mark.parametrize("bad, match", [(dict(weight=0), "weight must be positive"),
                                        (dict(workload="GMM"), "needs a PrimFunc")])
def test_task_errors(bad, match):
    kwargs = dict(workload=ops.matmul(4, 4, 4), target=TARGET) | bad
    with pytest.raises(TaskError, match=match):
        Task(**kwargs)


def test_scheduler_errors():
    with pytest.raises(TaskError, match="unknown task scheduler 'fifo'"):
        TaskScheduler(tasks(1), "fifo")
    with pytest.raises(TaskError, match="at least one task"):
        TaskScheduler([])


def test_round_robin_cycles_and_skips_finished_tasks():
    sched = TaskScheduler(tasks(1, 1, 1), "round-robin")
    assert [sched.next_task() for _ in range(4)] == [0, 1, 2, 0]
    sched.finish(1)
    assert [sched.next_task() for _ in range(3)] == [2, 0, 2]
    sched.finish(0)
    sched.finish(2)
    assert sched.next_task() is None


def test_gradient_warms_up_every_task_then_follows_the_steepest_curve():
    sched = TaskScheduler(tasks(1, 1), "gradient", epsilon=0.0)
    assert sched.next_task() == 1  # 17 x 16 x 16 before 16 x 16 x 16
    sched.record(1, 16, 1e-3)
    assert sched.next_task() == 0
    sched.record(0, 16, 1e-3)
    # task 0 keeps improving, task 1 is flat at the same speed: task 0 gets the next round
    for r, best in enumerate([8e-4, 6e-4, 4e-4, 3e-4], start=2):
        sched.record(0, 16 * r, best)
        sched.record(1, 16 * r, 3e-4)
    assert sched.gradient(0) < sched.gradient(1) < 0
    assert sched.next_task() == 0


def test_gradient_favours_a_task_far_below_a_similar_tasks_throughput():
    sched = TaskScheduler(tasks(1, 1), "gradient", epsilon=0.0)
    for r in range(1, 6):
        sched.record(0, 16 * r, 1e-4)  # flat, fast
        sched.record(1, 16 * r, 1e-3)  # flat, ten times slower for about the same flops
    assert sched.next_task() == 1


def test_a_task_that_stays_far_below_its_peers_loses_the_optimistic_pull():
    """Ansor's guess says the slow task could reach its peer's throughput; after 30 rounds
    without improving it no longer outbids a peer that had a single round."""
    sched = TaskScheduler(tasks(1, 1), "gradient", epsilon=0.0)
    sched.record(0, 8, 3e-3)
    sched.record(1, 8, 1e-3)
    assert sched.next_task() == 0  # three times slower than its peer: worth a look
    for r in range(2, 32):
        sched.record(0, 8 * r, 3e-3)
    assert sched.next_task() == 1


def test_gradient_weights_tasks_by_how_often_they_occur():
    sched = TaskScheduler(tasks(1, 10), "gradient", epsilon=0.0)
    for i in (0, 1):
        sched.record(i, 32, 1e-3)
    assert sched.next_task() == 1
    assert sched.total_latency() == pytest.approx(11e-3)


def test_gradient_handles_tasks_that_do_no_flops():
    """A model's transposes are copies: zero flops, no throughput to compare with."""
    copy = ops.pad((5, 7), 0)  # a copy stage: no arithmetic
    both = [Task(copy, TARGET, "copy"), Task(ops.pad((6, 7), 0), TARGET, "copy2")]
    assert all(t.flops == 0 for t in both)
    sched = TaskScheduler(both, "gradient", epsilon=0.0)
    for r in range(1, 6):
        sched.record(0, 8 * r, 2e-6)
        sched.record(1, 8 * r, 1e-6)
    assert math.isfinite(sched.gradient(0)) and sched.next_task() in (0, 1)


def test_gradient_gives_a_task_without_valid_results_priority():
    sched = TaskScheduler(tasks(5, 1), "gradient", epsilon=0.0)
    sched.record(0, 16, 1e-3)
    sched.record(1, 16, math.inf)
    assert sched.next_task() == 1
    assert sched.total_latency() == math.inf


def test_epsilon_greedy_explores_with_a_seeded_rng():
    def picks(seed):
        sched = TaskScheduler(tasks(1, 1, 1), "gradient", epsilon=0.5, seed=seed)
        for i in range(3):
            sched.record(i, 16, 1e-3 * (i + 1))
        return [sched.next_task() for _ in range(40)]
    assert picks(3) == picks(3)
    assert len(set(picks(3))) >= 2


def test_the_optimistic_guess_compares_tasks_of_like_arithmetic_only():
    """A depthwise convolution (9 multiply-adds an output) cannot reach a dense one's
    throughput (here 144 an output): the dense one does not pull the depthwise one forward,
    while a dense task of about the same reduction does."""
    def conv(channels, groups, size=14):
        return ops.conv2d(1, channels, size, size, channels, 3, 3, padding=1, groups=groups)
    depthwise, dense, dense2 = conv(16, 16), conv(16, 1), conv(16, 1, 12)
    sched = TaskScheduler([Task(depthwise, TARGET, "dw"), Task(dense, TARGET, "dense"),
                           Task(dense2, TARGET, "dense2")], "gradient", epsilon=0.0)
    speed = 50e9  # the dense task's throughput: flops / seconds
    for r in range(1, 4):
        sched.record(0, 16 * r, 1e-4)  # depthwise: far below in flops/s, flat
        sched.record(1, 16 * r, Task(dense, TARGET).flops / speed)
        sched.record(2, 16 * r, Task(dense2, TARGET).flops / speed * 4)  # 4x below its peer
    # the depthwise task's only peer is itself: no hope beyond its own (Ansor's beta) speed
    assert sched._optimistic(0) == pytest.approx(2 * sched._best(0))
    assert sched._optimistic(2) < sched._best(2) / 1.9  # its peer says it can go faster
    assert sched.next_task() == 2


def test_the_warm_up_takes_the_heaviest_tasks_first_by_a_roofline_guess():
    """Weight times flops, or times bytes moved where that weighs more: a big copy (no flops)
    before a small product, a product occurring 3 times before a larger one occurring once."""
    big_copy = Task(ops.pad((512, 512), 0), TARGET, "copy")  # 2 MB moved, no arithmetic
    small = Task(ops.matmul(8, 8, 8), TARGET, "small")
    thrice = Task(ops.matmul(64, 64, 64), TARGET, "thrice", 3)
    once = Task(ops.matmul(96, 64, 64), TARGET, "once")
    sched = TaskScheduler([small, once, big_copy, thrice], "gradient", epsilon=0.0)
    order = []
    while (i := sched.next_task()) is not None and len(order) < 4:
        order.append(sched.tasks[i].label)
        sched.record(i, 16, 1e-3)
    assert order == ["copy", "thrice", "once", "small"]
