"""transform_layout: expected IR, trace round trip, index-map parsing, errors, equivalence."""
import numpy as np
import pytest

import tessel
from tessel import ir, ops, te
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.schedule.layout import parse_index_map


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


def packed_matmul(index_map, M=13, N=20, K=7):
    f = ops.matmul(M, N, K)
    sch = Schedule(f)
    c = sch.get_block("C")
    copy = sch.cache_read(c, 1, "global")
    sch.transform_layout(copy, 0, "write", index_map)
    return f, sch, c, copy


@pytest.mark.parametrize("index_map", [lambda k, n: (n // 8, k, n % 8),
                                       "lambda k, n: (n // 8, k, n % 8)",
                                       "lambda k,n:(n//8,k,n%8)"])
def test_pack_a_cache_read_copy_of_b(index_map):
    f, sch, c, copy = packed_matmul(index_map)
    text = sch.func.script()
    assert 'B_global = T.alloc_buffer((3, 7, 8), "float32")' in text
    assert "B_global[v1 // 8, v0, v1 % 8] = B[v0, v1]" in text
    assert "A[vi, vk] * B_global[vj // 8, vk, vj % 8]" in text
    assert "T.reads(A[vi, vk], B_global[vj // 8, vk, vj % 8])" in text
    inst = sch.trace.instructions[-1]
    assert inst.kind == "transform_layout"
    assert dict(inst.args)["index_map"] == "lambda k, n: (n // 8, k, n % 8)"
    assert "index_map='lambda k, n: (n // 8, k, n % 8)'" in sch.trace.script()
    check_round_trip(f, sch)


def test_packed_matmul_is_equivalent_after_tiling():
    f, sch, c, copy = packed_matmul("lambda k, n: (n // 8, k, n % 8)", 11, 29, 6)
    i, j, k = sch.get_loops(c)
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(j0, i, k, j1)
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_transform_of_a_region_read():
    """C[i] = B[i] + B[i + 1] reads a 2-element region of B, which maps to a covering one."""
    A = te.placeholder((10,), name="A")
    B = te.compute((11,), lambda i: A[i % 10] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i] + B[i + 1], name="C")
    f = te.create_func([A, C], name="stencil")
    sch = Schedule(f)
    c = sch.get_block("C")
    assert "T.reads(B[vi_1:vi_1 + 2])" in f.script()
    sch.transform_layout(c, 0, "read", "lambda i: (i % 4, i // 4)")
    text = sch.func.script()
    assert 'B = T.alloc_buffer((4, 3), "float32")' in text
    assert "B[vi_1 % 4, vi_1 // 4] + B[(vi_1 + 1) % 4, (vi_1 + 1) // 4]" in text
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_index_map_text_is_canonical():
    assert parse_index_map("lambda i: i").text == "lambda i: (i,)"
    assert parse_index_map("lambda i, j: (j, -i + 3, (i + j) * 2)").text == \
        "lambda i, j: (j, 0 - i + 3, (i + j) * 2)"
    assert parse_index_map(lambda a, b: [b, a]).text == "lambda a, b: (b, a)"
    assert parse_index_map(lambda a: (a - (a - 1),)).text == "lambda a: (a - (a - 1),)"


@pytest.mark.parametrize("index_map, match", [
    ("lambda k, n: (k % 2, n)", "not injective"),
    ("lambda k, n: (k, k)", "not injective"),  # n is dropped: a group with no outputs
    ("lambda k, n: (k + n,)", "fewer elements"),
    ("lambda k: (k,)", "takes 1 argument.* has 2 dimension"),
    ("lambda k, n: (n - 1, k)", "can be negative"),
    ("lambda k, n: (__import__('os'), k)", "only its arguments"),
    ("lambda k, n: (k.real, n)", "only its arguments"),
    ("lambda k, n: (k // n, n)", "only positive constant divisors"),
    ("lambda k, n: (k / 2, n)", "only its arguments"),
    ("lambda k, n=1: (k, n)", "plain positional arguments"),
    ("k + n", "is not a lambda"),
    ("lambda k, n: (k, n", "not valid Python"),
    (lambda k, n: (k, n if n else 0), "cannot be applied"),
    (3, "must be a lambda string or a callable"),
])
def test_bad_index_maps(index_map, match):
    f = ops.matmul(5, 6, 7)
    sch = Schedule(f)
    copy = sch.cache_read(sch.get_block("C"), 1, "global")
    before, n = sch.func, len(sch.trace)
    with pytest.raises(ScheduleError, match=match):
        sch.transform_layout(copy, 0, "write", index_map)
    assert sch.func is before and len(sch.trace) == n


@pytest.mark.parametrize("args, match", [
    ((1, "read", "lambda k, n: (n, k)"), "buffer B is a parameter of matmul.*cache_read"),
    ((0, "write", "lambda i, j: (j, i)"), "buffer C is a parameter"),
    ((2, "read", "lambda i, j: (j, i)"), "block C reads 2 buffer.*buffer_index 2 is out of range"),
    ((0, "update", "lambda i, j: (j, i)"), "buffer_type must be 'read' or 'write'"),
])
def test_errors(args, match):
    f = ops.matmul(5, 6, 7)
    sch = Schedule(f)
    c = sch.get_block("C")
    with pytest.raises(ScheduleError, match=match):
        sch.transform_layout(c, *args)
    assert len(sch.trace) == 1


@pytest.mark.parametrize("index_map, ok", [
    ("lambda k, j: (j // 16, k, j % 16)", True),
    ("lambda k, j: (j // 16, k, j % 8)", False),
])
def test_injectivity_is_checked_group_by_group_on_big_buffers(index_map, ok):
    """4M elements: k and j are checked on their own (2048 points each), not all at once."""
    sch = Schedule(ops.matmul(64, 2048, 2048))
    copy = sch.cache_read(sch.get_block("C"), 1, "global")
    if ok:
        sch.transform_layout(copy, 0, "write", index_map)
        assert sch.get(copy).writes[0].buffer.shape == (128, 2048, 16)
    else:
        with pytest.raises(ScheduleError, match="not injective"):
            sch.transform_layout(copy, 0, "write", index_map)
