"""Property test: random sequences of primitives and samples either raise ScheduleError or
give a program that builds, computes what the unscheduled program computes, and whose trace
round-trips through JSON to the same program."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import tessel
from tessel import ir, ops
from tessel.schedule import Schedule, ScheduleError, Trace

WORKLOADS = {
    "matmul": lambda: ops.matmul(7, 13, 5),
    "conv2d": lambda: ops.conv2d(1, 3, 9, 7, 5, 3, 3, stride=2, padding=1),
    "softmax": lambda: ops.softmax(5, 11),
    "layer_norm": lambda: ops.layer_norm(3, 17),
    "dense": lambda: ops.dense(5, 6, 7, bias=True),
    "depthwise": lambda: ops.depthwise_conv2d(1, 3, 7, 6, 3, 3, stride=1, padding=1),
}
_REFERENCE: dict[str, list[np.ndarray]] = {}


def _run(func, inputs):
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func)(*inputs, *outs)
    return outs


def _inputs(func):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]


def _blocks(sch):
    return [b.name for b in ir.blocks(sch.func.body) if b.name != "root"]


def _pick_loop(sch, data):
    block = sch.get_block(data.draw(st.sampled_from(_blocks(sch))))
    loops = sch.get_loops(block)
    return block, (data.draw(st.sampled_from(loops)) if loops else None), loops


def _split(sch, data):
    _, loop, _ = _pick_loop(sch, data)
    if loop is None:
        return
    if data.draw(st.booleans()):
        factors = sch.sample_perfect_tile(loop, n=data.draw(st.integers(2, 3)),
                                          max_innermost_factor=data.draw(st.integers(1, 8)))
    else:
        factors = [None, data.draw(st.integers(1, 6))]
    sch.split(loop, factors=factors)


def _fuse(sch, data):
    _, _, loops = _pick_loop(sch, data)
    if len(loops) >= 2:
        start = data.draw(st.integers(0, len(loops) - 2))
        sch.fuse(*loops[start:start + data.draw(st.integers(2, len(loops) - start))])


def _reorder(sch, data):
    _, _, loops = _pick_loop(sch, data)
    if len(loops) >= 2:
        sch.reorder(*data.draw(st.permutations(loops)))


def _kind(sch, data):
    _, loop, _ = _pick_loop(sch, data)
    if loop is not None:
        getattr(sch, data.draw(st.sampled_from(["parallel", "vectorize", "unroll"])))(loop)


def _optional(name, make):
    return [make] if hasattr(Schedule, name) else []


def _compute_at(sch, data):
    block, _, _ = _pick_loop(sch, data)
    loc = sch.sample_compute_location(block)
    sch.compute_at(block, loc)


def _inline(sch, data):
    block, _, _ = _pick_loop(sch, data)
    getattr(sch, data.draw(st.sampled_from(["compute_inline", "reverse_compute_inline"])))(block)


def _cache(sch, data):
    block, _, _ = _pick_loop(sch, data)
    scope = data.draw(st.sampled_from(["global", "local"]))
    if data.draw(st.booleans()):
        sch.cache_read(block, data.draw(st.integers(0, 2)), scope)
    else:
        sch.cache_write(block, 0, scope)


ACTIONS = ([_split, _fuse, _reorder, _kind]
           + _optional("sample_compute_location", _compute_at)
           + _optional("compute_inline", _inline)
           + _optional("cache_write", _cache))


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(WORKLOADS)), seed=st.integers(0, 1000), data=st.data())
def test_random_schedules_are_rejected_or_correct(name, seed, data):
    func = WORKLOADS[name]()
    sch = Schedule(func, seed=seed)
    for _ in range(data.draw(st.integers(1, 6))):
        try:
            data.draw(st.sampled_from(ACTIONS))(sch, data)
        except ScheduleError:
            pass
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(func))
    assert ir.structural_equal(replayed.func, sch.func)
    inputs = _inputs(func)
    if name not in _REFERENCE:
        _REFERENCE[name] = _run(func, inputs)
    for got, want in zip(_run(sch.func, inputs), _REFERENCE[name]):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
