"""Traces: recording, JSON, replay with decisions, printing, simplification."""
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tessel import ir, ops
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.schedule.trace import V1_ARGS


def tiled(seed=0, M=24, N=36, K=10):
    f = ops.matmul(M, N, K)
    sch = Schedule(f, seed=seed)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    ti = sch.sample_perfect_tile(i, n=3, max_innermost_factor=4)
    tj = sch.sample_perfect_tile(j, n=2, max_innermost_factor=8)
    i0, i1, i2 = sch.split(i, factors=ti)
    j0, j1 = sch.split(j, factors=tj)
    sch.reorder(i0, j0, i1, k, i2, j1)
    sch.sample_categorical([0, 16, 64], [0.5, 0.25, 0.25])
    sch.vectorize(j1)
    return f, sch


def test_every_call_is_recorded_once():
    f, sch = tiled()
    kinds = [inst.kind for inst in sch.trace.instructions]
    assert kinds == ["get_block", "get_loops", "sample_perfect_tile", "sample_perfect_tile",
                     "split", "split", "reorder", "sample_categorical", "vectorize"]
    assert sch.trace.sampling_sites() == [2, 3, 7]


def test_json_round_trip_replays_to_the_same_program():
    f, sch = tiled(seed=3)
    text = sch.trace.to_json()
    trace = Trace.from_json(text)
    assert trace == sch.trace and trace.to_json() == text
    again = trace.apply(Schedule(f, seed=99))
    assert ir.structural_equal(again.func, sch.func)


def test_replay_with_overridden_decision():
    f, sch = tiled()
    trace = sch.trace.with_decision(3, [9, 4])
    out = trace.apply(Schedule(f))
    loops = {l.loop_var.name: l.extent for l in ir.collect(out.func.body, ir.For)}
    assert loops["j_0"] == 9 and loops["j_1"] == 4
    out2 = sch.trace.apply(Schedule(f), decisions={3: [36, 1]})
    assert {l.loop_var.name: l.extent for l in ir.collect(out2.func.body, ir.For)}["j_1"] == 1


@pytest.mark.parametrize("index, decision, match", [
    (3, [5, 7], "multiplies to 35, not loop j's extent 36"),
    (3, [1, 36], "exceeds max_innermost_factor=8"),
    (3, [36], "is not 2 positive ints"),
    (7, 3, "not an index into 3 candidates"),
])
def test_decision_that_does_not_fit_raises(index, decision, match):
    f, sch = tiled()
    with pytest.raises(ScheduleError, match=match):
        sch.trace.apply(Schedule(f), decisions={index: decision})


def test_with_decision_needs_a_sampling_instruction():
    f, sch = tiled()
    with pytest.raises(ScheduleError, match="not a sampling instruction"):
        sch.trace.with_decision(4, [1, 2])


def test_script_is_runnable_python():
    f, sch = tiled(seed=5)
    fresh = Schedule(f)
    exec(sch.trace.script(), {"sch": fresh})
    assert ir.structural_equal(fresh.func, sch.func)
    assert "sch.split(loop=l1, factors=[v4, v5, v6])" in sch.trace.script()


def test_simplified_drops_unused_lookups_and_samples():
    f, sch = tiled()
    sch.get_block("C")  # unused lookup
    simple = sch.trace.simplified()
    kinds = [inst.kind for inst in simple.instructions]
    assert kinds.count("sample_categorical") == 0 and kinds.count("get_block") == 1
    assert simple.sampling_sites() == [2, 3]
    assert ir.structural_equal(simple.apply(Schedule(f)).func, sch.func)


@pytest.mark.parametrize("text, match", [
    ("nope", "not a trace"),
    ('{"format": "x"}', "format 'x', which this tessel does not read"),
    ('{"format": "tessel.trace/2", "insts": {}, "decisions": []}', "must be lists"),
    ('{"format": "tessel.trace/2", "insts": [["split", [{"rv": "l0"}], []]], "decisions": []}',
     r"split takes 2 arguments \(loop, factors\)"),
    ('{"format": "tessel.trace/1", "insts": [["split", {"loop": {"rv": "l0"}, "parts": [2]}, []]]'
     ', "decisions": []}', r"has arguments \('loop', 'parts'\), which that format never had"),
    ('{"format": "tessel.trace/1", "insts": [["explode", {}, []]], "decisions": []}',
     "unknown kind 'explode'"),
    ('{"format": "tessel.trace/1", "insts": [["get_loops", {"block": {"rv": "b7"}}, []]],'
     ' "decisions": []}', "uses b7 before any instruction defines it"),
])
def test_bad_traces(text, match):
    with pytest.raises(ScheduleError, match=match):
        Trace.from_json(text).apply(Schedule(ops.matmul(4, 4, 4)))


def test_trace_from_another_program_does_not_fit():
    f, sch = tiled()
    with pytest.raises(ScheduleError):
        sch.trace.apply(Schedule(ops.softmax(8, 8)))


@settings(max_examples=60, deadline=None)
@given(extent=st.integers(1, 3000), n=st.integers(1, 5), max_inner=st.integers(1, 64),
       seed=st.integers(0, 2**31))
def test_sample_perfect_tile_factors_multiply_to_extent(extent, n, max_inner, seed):
    f = ops.softmax(1, extent)
    sch = Schedule(f, seed=seed)
    loop = sch.get_loops(sch.get_block("softmax"))[1]
    factors = [sch.get(v) for v in sch.sample_perfect_tile(loop, n=n, max_innermost_factor=max_inner)]
    assert len(factors) == n and math.prod(factors) == extent
    assert n == 1 or factors[-1] <= max_inner


def test_sample_perfect_tile_is_diverse_and_seeded():
    f = ops.matmul(1024, 4, 4)
    seen = set()
    for seed in range(100):
        sch = Schedule(f, seed=seed)
        loop = sch.get_loops(sch.get_block("C"))[0]
        seen.add(tuple(sch.get(v) for v in sch.sample_perfect_tile(loop, n=4, max_innermost_factor=16)))
    assert len(seen) >= 50
    a, b = Schedule(f, seed=7), Schedule(f, seed=7)
    la, lb = (s.get_loops(s.get_block("C"))[0] for s in (a, b))
    assert ([a.get(v) for v in a.sample_perfect_tile(la, n=3)]
            == [b.get(v) for v in b.sample_perfect_tile(lb, n=3)])


def test_sample_categorical_follows_probabilities():
    f = ops.matmul(4, 4, 4)
    sch = Schedule(f, seed=0)
    draws = [sch.get(sch.sample_categorical([10, 20, 30], [0.8, 0.2, 0.0])) for _ in range(400)]
    assert draws.count(30) == 0 and 260 < draws.count(10) < 360
    with pytest.raises(ScheduleError, match="2 probabilities"):
        sch.sample_categorical([1, 2, 3], [0.5, 0.5])
    with pytest.raises(ScheduleError, match="non-negative"):
        sch.sample_categorical([1, 2], [0.0, 0.0])


# ---- the instruction registry and the stored format ----------------------------------------

FROZEN_V2 = Path(__file__).parent / "data" / "instructions_v2.json"


def test_the_registry_is_the_stored_format():
    """tessel.trace/2 stores each instruction's arguments as a list in the registry's order:
    changing a kind's argument list changes what old records mean. Such a change must come
    with a new format that reads the old one (as from_json reads tessel.trace/1), and then
    this frozen table may be extended with it."""
    from tessel.schedule import INSTRUCTIONS
    now = {name: [list(k.params), k.variadic, k.sampling, k.pure]
           for name, k in sorted(INSTRUCTIONS.items())}
    assert now == json.loads(FROZEN_V2.read_text())


def test_a_method_whose_parameters_leave_its_registry_entry_is_refused_at_import():
    from tessel.schedule.base import instruction
    with pytest.raises(TypeError, match=r"parameters \('loop', 'parts'\) differ from "
                                        r"instruction 'split'"):
        @instruction("split", ("loop", "factors"))
        def split(self, loop, parts):
            pass


def test_renaming_a_parameter_keeps_old_records_replaying():
    """What a v2 trace stores does not name the Python parameters; a v1 trace names them as
    they were, and is read through the frozen table."""
    f, sch = tiled(seed=5)
    doc = json.loads(sch.trace.to_json())
    assert doc["format"] == "tessel.trace/2"
    assert all(isinstance(args, list) for _, args, _ in doc["insts"])
    assert "factors" not in sch.trace.to_json()
    v1 = {"format": "tessel.trace/1", "decisions": doc["decisions"], "insts": [
        [kind, dict(zip(V1_ARGS[kind], args)), outs] for kind, args, outs in doc["insts"]]}
    old = Trace.from_json(json.dumps(v1))
    assert old == sch.trace
    assert ir.structural_equal(old.apply(Schedule(f)).func, sch.func)


def test_variadic_instructions_print_positionally():
    f, sch = tiled()
    assert "\nsch.reorder(l9, l12, l10, l3, l11, l13)\n" in sch.trace.script()
