"""Loop primitives: expected IR, trace round trip, errors, and numerical equivalence."""
import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.schedule import Schedule, ScheduleError, Trace


def run(func, seed=0):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(b.shape).astype(b.dtype) for b in func.inputs]
    outs = [np.zeros(b.shape, b.dtype) for b in func.outputs]
    tessel.build(func)(*inputs, *outs)
    return outs




def check_equivalent(original, scheduled):
    for a, b in zip(run(original), run(scheduled)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def check_round_trip(original, sch):
    replayed = Trace.from_json(sch.trace.to_json()).apply(Schedule(original))
    assert ir.structural_equal(replayed.func, sch.func)
    assert replayed.trace.script() == sch.trace.script()


def matmul_sch(M=13, N=20, K=7):
    f = ops.matmul(M, N, K)
    sch = Schedule(f)
    return f, sch, sch.get_loops(sch.get_block("C"))


def test_split_dividing_has_no_predicate():
    f, sch, (i, j, k) = matmul_sch(16, 8, 4)
    i0, i1 = sch.split(i, factors=[4, 4])
    text = sch.func.script()
    assert "for i_0 in T.serial(4):" in text and "for i_1 in T.serial(4):" in text
    assert "vi = T.axis.spatial(16, i_0 * 4 + i_1)" in text
    assert "T.where" not in text
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_split_non_dividing_adds_predicate_and_stays_correct():
    f, sch, (i, j, k) = matmul_sch()
    sch.split(i, factors=[None, 4])
    assert "T.where(i_0 * 4 + i_1 < 13)" in sch.func.script()
    check_equivalent(f, sch.func)


def test_split_three_ways_then_fuse_back_simplifies():
    f, sch, (i, j, k) = matmul_sch(24, 8, 4)
    a, b, c = sch.split(i, factors=[2, 3, 4])
    fused = sch.fuse(a, b, c)
    assert "vi = T.axis.spatial(24, i_0_i_1_i_2_fused)" in sch.func.script()
    assert sch.get(fused).extent == 24
    check_round_trip(f, sch)


def test_fuse_then_split_simplifies():
    f, sch, (i, j, k) = matmul_sch(6, 8, 4)
    ij = sch.fuse(i, j)
    sch.split(ij, factors=[None, 8])
    text = sch.func.script()
    assert "vi = T.axis.spatial(6, i_j_fused_0)" in text
    assert "vj = T.axis.spatial(8, i_j_fused_1)" in text
    check_equivalent(f, sch.func)


def test_reorder_and_kinds():
    f, sch, (i, j, k) = matmul_sch()
    j0, j1 = sch.split(j, factors=[None, 8])
    sch.reorder(k, j1)
    loops = [l.loop_var.name for l in ir.collect(sch.func.body, ir.For)]
    assert loops == ["i", "j_0", "k", "j_1"]
    sch.parallel(i)
    sch.vectorize(j1)
    sch.unroll(k)
    kinds = [l.kind for l in ir.collect(sch.func.body, ir.For)]
    assert kinds == ["parallel", "serial", "unrolled", "vectorized"]
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_annotations_and_unit_loop():
    f, sch, (i, j, k) = matmul_sch()
    b = sch.get_block("C")
    sch.annotate(i, "pragma_auto_unroll_max_step", 64)
    sch.annotate(b, "meta_schedule.tiling_structure", "SSRSRS")
    assert sch.get(i).annotations == {"pragma_auto_unroll_max_step": 64}
    assert sch.get(b).annotations["meta_schedule.tiling_structure"] == "SSRSRS"
    sch.unannotate(i, "pragma_auto_unroll_max_step")
    assert sch.get(i).annotations == {}
    u = sch.add_unit_loop(b)
    assert sch.get(u).extent == 1
    check_round_trip(f, sch)
    check_equivalent(f, sch.func)


def test_annotate_with_a_sampled_value_replays_with_other_decisions():
    f, sch, (i, j, k) = matmul_sch()
    v = sch.sample_categorical([0, 16, 64], [1.0, 1.0, 1.0], decision=2)
    sch.annotate(i, "pragma_auto_unroll_max_step", v)
    assert sch.get(i).annotations == {"pragma_auto_unroll_max_step": 64}
    check_round_trip(f, sch)
    site = sch.trace.sampling_sites()[0]
    other = sch.trace.apply(tessel.Schedule(f), decisions={site: 1})
    loop = other.get_loops(other.get_block("C"))[0]
    assert other.get(loop).annotations == {"pragma_auto_unroll_max_step": 16}


@pytest.mark.parametrize("action, match", [
    (lambda s, i, j, k: s.split(i, factors=[2, 2]), "multiply to 4, less than its extent 13"),
    (lambda s, i, j, k: s.split(i, factors=[None, None]), "at most one factor may be None"),
    (lambda s, i, j, k: s.split(i, factors=[0, 20]), "factors must be positive"),
    (lambda s, i, j, k: s.split(i, factors=[13]), "at least 2 factors"),
    (lambda s, i, j, k: s.fuse(i, k), "not perfectly nested"),
    (lambda s, i, j, k: s.fuse(i, i), "listed twice"),
    (lambda s, i, j, k: s.parallel(k), "carries reduction iter var vk"),
    (lambda s, i, j, k: s.vectorize(k), "carries reduction iter var vk"),
    (lambda s, i, j, k: s.bind(i, "warpIdx"), "unknown thread axis"),
    (lambda s, i, j, k: s.unannotate(i, "nope"), "no annotation 'nope'"),
    (lambda s, i, j, k: s.annotate(i, "", 1), "non-empty string"),
    (lambda s, i, j, k: s.get_block("D"), "no block named 'D'"),
])
def test_errors(action, match):
    f, sch, (i, j, k) = matmul_sch()
    before = sch.func
    with pytest.raises(ScheduleError, match=match):
        action(sch, i, j, k)
    assert sch.func is before  # nothing half-applied


def test_nested_parallel_is_rejected():
    f, sch, (i, j, k) = matmul_sch()
    sch.parallel(i)
    with pytest.raises(ScheduleError, match="parallel loop j would be nested in parallel loop i"):
        sch.parallel(j)


def test_parallel_inside_vectorized_is_rejected_however_it_arises():
    f, sch, (i, j, k) = matmul_sch()
    sch.vectorize(i)
    with pytest.raises(ScheduleError, match="parallel loop j would be inside vectorized loop i"):
        sch.parallel(j)
    f, sch, (i, j, k) = matmul_sch()
    sch.parallel(j)
    with pytest.raises(ScheduleError, match="vectorize: parallel loop j would be inside"):
        sch.vectorize(i)
    f, sch, (i, j, k) = matmul_sch()
    sch.parallel(i)
    sch.vectorize(j)
    before = sch.func
    with pytest.raises(ScheduleError, match="reorder: parallel loop i would be inside"):
        sch.reorder(j, i)
    assert sch.func is before


def test_split_of_a_parallel_loop_is_rejected():
    f, sch, (i, j, k) = matmul_sch()
    sch.parallel(i)
    with pytest.raises(ScheduleError, match="serial loops only"):
        sch.split(i, factors=[None, 2])


def test_reorder_across_branches_is_rejected():
    f = ops.softmax(4, 6)
    sch = Schedule(f)
    (i1, _) = sch.get_loops(sch.get_block("maxelem"))
    (i2, _) = sch.get_loops(sch.get_block("softmax"))
    with pytest.raises(ScheduleError, match="one line of nesting"):
        sch.reorder(i1, i2)


def test_stale_loop_handle_is_reported():
    f, sch, (i, j, k) = matmul_sch()
    sch.split(i, factors=[None, 4])
    with pytest.raises(ScheduleError, match="loop i no longer exists"):
        sch.split(i, factors=[None, 2])
