"""Module: build, call with argument checking, timing, compile cache, allocation failure."""
import math

import numpy as np
import pytest

from tessel import TesselError, ir, te
from tessel.codegen import Module, build, compiler
from tessel.codegen.module import IN_MODEL_MAX_NUMBER, KernelSequence, calibrate
from tessel.codegen.passes.blocks import STACK_LIMIT_BYTES
from tessel.ir import Buffer, BufferStore, For, IterVar, Var, const, realize
from tessel.arith import block_regions
from tessel.target import Target


def make_add(n=8):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    return te.create_func([A, B, C], name="add")


@pytest.fixture(scope="module")
def add_module(tmp_path_factory):
    return build(make_add(), cache_dir=tmp_path_factory.mktemp("kernels"))


def arrays(n=8):
    rng = np.random.default_rng(0)
    return (rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32),
            np.zeros(n, np.float32))


def test_call_writes_outputs_in_place(add_module):
    a, b, c = arrays()
    a_before = a.copy()
    assert add_module(a, b, c) is None
    np.testing.assert_array_equal(c, a + b)
    np.testing.assert_array_equal(a, a_before)


def test_module_attributes(add_module):
    mod = add_module
    assert isinstance(mod, Module) and mod.func.name == "add"
    assert isinstance(mod.target, Target) and mod.lib_path.exists()
    assert "int32_t tessel_entry(void** args)" in mod.source
    assert "tessel_entry" in mod.asm()


@pytest.mark.parametrize("case, error, pattern", [
    ("count", TypeError, r"add takes 3 arrays \(A, B, C\), got 2"),
    ("list", TypeError, r"input B \(argument 1\) must be a numpy.ndarray, got list"),
    ("dtype", TypeError, r"input A \(argument 0\) must have dtype float32, got float64"),
    ("shape", ValueError, r"output C \(argument 2\) must have shape \(8,\), got \(9,\)"),
    ("strided", ValueError, r"input A \(argument 0\) must be C-contiguous"),
    ("readonly", ValueError, r"output C \(argument 2\) is read-only"),
    ("alias", ValueError, r"output C \(argument 2\) shares memory with A \(argument 0\)"),
])
def test_bad_calls_name_the_parameter(add_module, case, error, pattern):
    a, b, c = arrays()
    if case == "count":
        args = (a, b)
    elif case == "list":
        args = (a, list(b), c)
    elif case == "dtype":
        args = (a.astype(np.float64), b, c)
    elif case == "shape":
        args = (a, b, np.zeros(9, np.float32))
    elif case == "strided":
        args = (np.zeros(16, np.float32)[::2], b, c)
    elif case == "readonly":
        c.flags.writeable = False
        args = (a, b, c)
    else:
        args = (a, b, a)
    with pytest.raises(error, match=pattern) as raised:
        add_module(*args)
    assert isinstance(raised.value, TesselError)  # tessel's own one-line message
    with pytest.raises(error, match=pattern):
        add_module.time(*args)


def test_outputs_may_not_overlap_each_other(tmp_path):
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((4,), lambda i: A[i] * 3.0, name="C")
    mod = build(te.create_func([A, B, C], name="two"), cache_dir=tmp_path)
    a, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(ValueError, match=r"output B \(argument 1\) shares memory with C"):
        mod(a, out, out)
    b, c = np.zeros(4, np.float32), np.zeros(4, np.float32)
    mod(a, b, c)
    np.testing.assert_array_equal(b, 2 * a)
    np.testing.assert_array_equal(c, 3 * a)


def test_inputs_may_alias_each_other(add_module):
    a, _, c = arrays()
    add_module(a, a, c)
    np.testing.assert_array_equal(c, 2 * a)


def test_time_returns_finite_positive_seconds(add_module):
    a, b, c = arrays()
    secs = add_module.time(a, b, c, number=5, repeat=3)
    assert math.isfinite(secs) and secs > 0
    all_secs = add_module.time_all(a, b, c, number=2, repeat=4)
    assert len(all_secs) == 4 and all(math.isfinite(s) and s > 0 for s in all_secs)
    np.testing.assert_array_equal(c, a + b)
    with pytest.raises(ValueError, match="number must be a positive int"):
        add_module.time(a, b, c, number=0)


def test_min_repeat_ms_grows_the_batch(add_module, monkeypatch):
    a, b, c = arrays()
    secs = add_module.time(a, b, c, number=1, repeat=2, min_repeat_ms=1)
    assert math.isfinite(secs) and secs > 0
    # timed alone, in the caches a model leaves (a sweep, the output flushed, inputs written)
    in_model = add_module.time_all(a, b, c, number=3, repeat=2, min_repeat_ms=0, in_model=True)
    assert len(in_model) == 2 and all(math.isfinite(t) and t > 0 for t in in_model)
    calls = []

    def fake_run_timed(self, args, number, repeat, in_model=False):  # every call takes 1 us
        assert not in_model
        calls.append((number, repeat))
        return [1e-6] * repeat

    monkeypatch.setattr(Module, "_run_timed", fake_run_timed)
    assert add_module.time(a, b, c, number=1, repeat=3, min_repeat_ms=2) == 1e-6
    assert calls[0] == (1, 1) and all(r == 1 for _, r in calls[:-1])
    final_number, final_repeat = calls[-1]
    assert final_repeat == 3 and final_number * 1e-6 >= 2e-3
    assert calls[-2][0] * 1e-6 >= 2e-3 > calls[-3][0] * 1e-6  # stops once a batch is long


def test_building_twice_compiles_once(tmp_path, monkeypatch):
    first = build(make_add(), cache_dir=tmp_path)

    def no_compiler(*args, **kwargs):
        raise AssertionError("the compiler must not run for a cached kernel")

    monkeypatch.setattr(compiler.subprocess, "Popen", no_compiler)
    second = build(make_add(), cache_dir=tmp_path)  # a fresh, equal PrimFunc
    assert second.lib_path == first.lib_path and second.source == first.source
    a, b, c = arrays()
    second(a, b, c)
    np.testing.assert_array_equal(c, a + b)


def _huge_alloc_func(where: str):
    """O[i] = i + 1 through a scratch buffer too large for any address space (2**48 bytes),
    allocated once in the root block ("root") or per iteration of a loop of kind `where`; the
    root also allocates a heap buffer (just over the stack's limit) that must be freed on
    failure."""
    O = Buffer("O", (4,))
    keep = Buffer("keep", (STACK_LIMIT_BYTES // 4 + 1,))
    scope = "global" if where == "root" else "local"
    scratch = Buffer("scratch", (2 ** 45,), "float64", scope=scope)
    i, vi = Var("i"), Var("vi")
    body = ir.seq(BufferStore(scratch, ir.cast("float64", vi), (const(0),)),
                  BufferStore(O, ir.cast("float32", scratch[0]) + keep[0], (vi,)))
    reads, writes = block_regions(body)
    block = ir.Block("O", (IterVar(vi, 4),), reads, writes, body,
                     alloc_buffers=() if where == "root" else (scratch,))
    loop = For(i, 4, realize(block, [i]), kind="serial" if where == "root" else where)
    body = ir.seq(BufferStore(keep, const(1.0), (const(0),)), loop)
    root = ir.Block("root", (), (), (), body,
                    alloc_buffers=(keep, scratch) if where == "root" else (keep,))
    return ir.PrimFunc("huge", (O,), realize(root))


@pytest.mark.parametrize("where", ["root", "serial", "parallel", "vectorized"])
def test_failed_allocation_raises(tmp_path, where):
    mod = build(_huge_alloc_func(where), cache_dir=tmp_path, compact=False)
    assert "aligned_alloc(64, 281474976710656)" in mod.source
    assert mod.source.count("free(keep);") == 2  # on failure and at the end
    out = np.zeros(4, np.float32)
    with pytest.raises(RuntimeError, match="allocation failed"):
        mod(out)
    with pytest.raises(RuntimeError, match="allocation failed"):
        mod.time(out)


def test_a_sequence_runs_bound_calls_in_order(tmp_path):
    """c = a + b, then d = c + c: the second kernel reads what the first wrote in the same
    C call; rebinding nothing, a second run sees new inputs."""
    add = build(make_add(5), cache_dir=tmp_path)
    a, b, c = arrays(5)
    d = np.zeros(5, np.float32)
    seq = KernelSequence([add.bind(a, b, c), add.bind(c, c, d)], Target("host"))
    seq()
    np.testing.assert_array_equal(d, (a + b) * 2)
    a += 1
    seq()
    np.testing.assert_array_equal(d, (a + b) * 2)


def test_a_failing_kernel_stops_the_sequence_and_is_named(tmp_path):
    add = build(make_add(4), cache_dir=tmp_path)
    huge = build(_huge_alloc_func("root"), cache_dir=tmp_path, compact=False)
    a, b, c = arrays(4)
    out, d = np.zeros(4, np.float32), np.zeros(4, np.float32)
    seq = KernelSequence([add.bind(a, b, c), huge.bind(out), add.bind(c, c, d)],
                         Target("host"))
    with pytest.raises(RuntimeError, match="kernel huge: memory allocation failed"):
        seq()
    np.testing.assert_array_equal(c, a + b)  # ran before the failure
    assert not d.any()  # never ran


def test_calibration_grows_a_batch_to_its_duration_or_to_the_cap():
    batches = []

    def per_call(n):  # a 30 us kernel
        batches.append(n)
        return 30e-6
    number = calibrate(per_call, 3, 10e-3)
    assert number * 30e-6 >= 10e-3 and batches[0] == 3 and batches[-1] == number
    batches.clear()  # timing in_model makes 8 calls a batch at most: no batch of 500 first
    assert calibrate(per_call, 3, 10e-3, cap=IN_MODEL_MAX_NUMBER) == IN_MODEL_MAX_NUMBER
    assert batches == [3]
    batches.clear()  # a slow kernel reaches the duration below the cap, as without one
    assert calibrate(lambda n: batches.append(n) or 4e-3, 1, 10e-3, cap=8) == \
        calibrate(lambda n: 4e-3, 1, 10e-3)
    assert max(batches) < 8
