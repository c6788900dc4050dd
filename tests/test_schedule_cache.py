"""cache_read / cache_write: expected IR, trace round trip, errors, numerical equivalence."""
import numpy as np
import pytest

import tessel
from tessel import ir, ops, te
from tessel.schedule import Schedule, ScheduleError, Trace


def run(func, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func)(*inputs, *outs)
    return outs


def check_equivalent(original, scheduled):
    expected, got = run(original), run(scheduled)
    assert len(expected) == len(got) >= 1
    for a, b in zip(expected, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def check_round_trip(original, sch):
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(original))
    assert ir.structural_equal(replayed.func, sch.func)
    assert replayed.trace.script() == sch.trace.script()


def matmul_sch(M=13, N=20, K=7):
    f = ops.matmul(M, N, K)
    sch = Schedule(f)
    return f, sch, sch.get_block("C")


def two_stage(n=11):
    """B = A * 2 (intermediate), C = B + 1."""
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((n,), lambda i: B[i] + 1.0, name="C")
    return te.create_func([A, C], name="two_stage")


def test_cache_read_of_a_parameter_copies_it_first():
    f, sch, c = matmul_sch()
    copy = sch.cache_read(c, 1, "shared")
    text = sch.func.script()
    assert 'B_shared = T.alloc_buffer((7, 20), "float32", scope="shared")' in text
    assert text.index('T.block("B_shared")') < text.index('T.block("C")')
    assert "B_shared[v0, v1] = B[v0, v1]" in text
    assert "A[vi, vk] * B_shared[vk, vj]" in text
    assert "T.reads(A[vi, vk], B_shared[vk, vj])" in text
    assert sch.get(copy).name == "B_shared"
    assert [iv.extent for iv in sch.get(copy).iter_vars] == [7, 20]
    check_round_trip(f, sch)


def test_cache_read_of_an_intermediate_goes_after_its_producer():
    f = two_stage()
    sch = Schedule(f)
    copy = sch.cache_read(sch.get_block("C"), 0, "local")
    names = [b.name for b in ir.blocks(sch.func.body)]
    assert names == ["root", "B", "B_local", "C"]
    assert "C[vi_1] = B_local[vi_1] + 1.0" in sch.func.script()
    assert sch.get(copy).writes[0].buffer.scope == "local"
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_cache_read_twice_gets_unique_names():
    f, sch, c = matmul_sch()
    sch.cache_read(c, 0, "global")
    second = sch.cache_read(c, 0, "global")  # now of A_global
    assert sch.get(second).name == "A_global_global"
    check_round_trip(f, sch)


def test_cache_write_local_tiled_matmul():
    f, sch, c = matmul_sch()
    out = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(i0, j0, k, i1, j1)
    text = sch.func.script()
    assert 'C_local = T.alloc_buffer((13, 20), "float32", scope="local")' in text
    assert "C_local[vi, vj] = C_local[vi, vj] + A[vi, vk] * B[vk, vj]" in text
    assert "C[v0, v1] = C_local[v0, v1]" in text
    assert sch.get(out).name == "C_local" and sch.get(c).name == "C"
    names = [b.name for b in ir.blocks(sch.func.body)]
    assert names == ["root", "C", "C_local"]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_cache_write_copies_back_only_the_written_region():
    f, sch, c = matmul_sch(5, 6, 3)
    sch.cache_write(c, 0, "global")
    copy = [l.extent for l in ir.collect(sch.func.body, ir.For)][-2:]
    assert copy == [5, 6]
    check_equivalent(f, sch.func)


def test_cache_read_and_write_then_compute_at():
    f, sch, c = matmul_sch(13, 19, 11)
    a = sch.cache_read(c, 0, "local")
    b = sch.cache_read(c, 1, "global")
    out = sch.cache_write(c, 0, "local")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, factors=[None, 4])
    j0, j1 = sch.split(j, factors=[None, 8])
    k0, k1 = sch.split(k, factors=[None, 4])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    sch.compute_at(a, k0)
    sch.compute_at(b, k0)
    sch.reverse_compute_at(out, j0)
    sch.parallel(i0)
    loops_of_a = sch.get_loops(a)
    assert [sch.get(l).loop_var.name for l in loops_of_a[:3]] == ["i_0", "j_0", "k_0"]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_cache_stages_on_conv2d_with_padding():
    f = ops.conv2d(1, 3, 7, 7, 5, 3, 3, stride=2, padding=1)
    sch = Schedule(f)
    conv = sch.get_block("conv2d")
    sch.cache_read(conv, 1, "global")  # the weight
    sch.cache_write(conv, 0, "local")
    names = [b.name for b in ir.blocks(sch.func.body)]
    assert names == ["root", "pad", "weight_global", "conv2d", "conv2d_local"]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


@pytest.mark.parametrize("action, match", [
    (lambda s, c: s.cache_read(c, 2, "local"), "block C reads 2 buffer"),
    (lambda s, c: s.cache_read(c, -1, "local"), "index -1 is out of range"),
    (lambda s, c: s.cache_write(c, 1, "local"), "block C writes 1 buffer"),
    (lambda s, c: s.cache_read(c, 0, "register"), "unknown storage scope 'register'"),
    (lambda s, c: s.cache_write(c, 0, "wmma"), "unknown storage scope 'wmma'"),
])
def test_errors(action, match):
    f, sch, c = matmul_sch()
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        action(sch, c)
    assert sch.func is before and len(sch.trace) == 1


def test_cache_write_of_a_buffer_with_two_writers_is_rejected():
    f = ops.softmax(3, 5)
    sch = Schedule(f)
    b = sch.get_block("expsum")
    init = sch.decompose_reduction(b, sch.get_loops(b)[1])
    with pytest.raises(ScheduleError, match="also written by block expsum"):
        sch.cache_write(init, 0, "local")


def test_cache_read_inside_a_fused_nest_is_rejected():
    f = two_stage()
    sch = Schedule(f)
    c = sch.get_block("C")
    (i,) = sch.get_loops(c)
    sch.compute_at(sch.get_block("B"), i)
    with pytest.raises(ScheduleError, match="written in the same loop nest as block C"):
        sch.cache_read(c, 0, "local")
    with pytest.raises(ScheduleError, match="block C accesses buffer B in the same loop nest"):
        sch.cache_write(sch.get_block("B"), 0, "local")
