"""Replay sharing (tessel.schedule.replay.ReplayCache): a trace replayed from a snapshot of a
trace that shares its prefix builds the program plain replay builds, with the same trace, in
whatever order traces come; decisions that do not fit still raise ScheduleError; the cache
is bounded."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessel
from tessel import ops
from tessel.ir import structural_equal
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.schedule.replay import ReplayCache
from tessel.space import make_space
from tessel.space.mutators import MutateTileSize, MutateUnroll

from space_cases import SUITE_NAMES, small

AUTO = make_space("auto", tessel.Target("host"))
CONV = ops.conv2d(1, 8, 9, 9, 16, 3, 3, stride=1, padding=1)


def family(func, seed: int, n: int) -> list[Trace]:
    """n traces of func's auto space: samples and mutants of them (shared prefixes)."""
    rng = random.Random(seed)
    traces = []
    mutators = [MutateTileSize(), MutateUnroll()]
    while len(traces) < n:
        base = AUTO.sample(func, rng).trace
        traces.append(base)
        for _ in range(3):
            new = rng.choice(mutators).propose(func, base, rng)
            if new is not None:
                traces.append(new)
    return traces[:n]


def plain(func, trace):
    try:
        return trace.apply(Schedule(func))
    except ScheduleError:
        return None


@settings(max_examples=12)
@given(name=st.sampled_from([*SUITE_NAMES, "CONV"]), seed=st.integers(0, 2**16),
       order=st.randoms(use_true_random=False))
def test_shared_replay_builds_what_plain_replay_builds(name, seed, order):
    func = CONV if name == "CONV" else small(name)
    traces = family(func, seed, 10)
    order.shuffle(traces)
    cache = ReplayCache(func)
    for trace in traces + traces[:3]:  # some replayed twice
        want = plain(func, trace)
        if want is None:
            with pytest.raises(ScheduleError):
                cache.apply(trace)
            continue
        got = cache.apply(trace)
        assert structural_equal(got.func, want.func)
        assert got.trace == want.trace
    assert cache.shared > 0  # prefixes were shared, not all replayed from scratch


def test_a_returned_schedule_can_be_changed_without_touching_the_cache():
    trace = family(CONV, 0, 1)[0]
    cache = ReplayCache(CONV)
    first = cache.apply(trace)
    first.parallel(first.get_loops(first.get_block("conv2d"))[0])
    again = cache.apply(trace)
    assert structural_equal(again.func, plain(CONV, trace).func)


def test_the_cache_is_bounded():
    cache = ReplayCache(CONV, max_states=5)
    for trace in family(CONV, 1, 12):
        cache.apply(trace)
        assert cache.states <= 5
