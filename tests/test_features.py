"""Program features: determinism, name independence, hand-computed loop context (touch
count, reuse ratio, stride, top-down/bottom-up), relation features against a brute-force
definition, per-store counts, knob features, fixed widths."""
import math

import numpy as np
import pytest
from conftest import make_matmul

from tessel import features, ir, ops
from tessel.features import analysis, loop_context, relation
from tessel.features import store as per_store
from tessel.measure import MeasureCandidate
from tessel.schedule import Schedule, Trace

PROGRAM_SETS = ("itervar", "flat", "curve", "per_store")


def tiled(func, cache=False, vectorize=False):
    """matmul tiled i -> (i0, i1), j -> (j0, j1), order i0 j0 k i1 j1 (inner factors 4)."""
    sch = Schedule(func, seed=0)
    b = sch.get_block(main_block(func))
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, 2, 4, decision=[func.params[0].shape[0] // 4, 4]))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, 2, 4, decision=[func.params[1].shape[1] // 4, 4]))
    sch.reorder(i0, j0, k, i1, j1)
    if cache:
        c = sch.cache_write(b, 0, "local")
        sch.reverse_compute_at(c, j0)
    if vectorize:
        sch.vectorize(j1)
        sch.parallel(i0)
    return sch


def main_block(func):
    return next(b.name for b in ir.blocks(func.body) if b.iter_vars)


def conv_schedule(seed):
    func = ops.conv2d(1, 8, 10, 10, 12, 3, 3, 1, 1)
    sch = Schedule(func, seed=seed)
    sch.compute_inline(sch.get_block("pad"))
    b = sch.get_block("conv2d")
    loops = sch.get_loops(b)
    o0, o1 = sch.split(loops[1], sch.sample_perfect_tile(loops[1], 2, 4))
    x0, x1 = sch.split(loops[3], sch.sample_perfect_tile(loops[3], 2, 8))
    sch.reorder(o0, x0, loops[4], o1, x1)
    sch.vectorize(x1)
    return func, sch


# determinism and names ------------------------------------------------------------------
@pytest.mark.parametrize("name", PROGRAM_SETS + ("knob",))
def test_features_ignore_names_and_are_deterministic(name):
    f1 = make_matmul(16, 20, 9, names=("A", "B", "C", "k"))
    f2 = make_matmul(16, 20, 9, names=("lhs", "rhs", "out", "red"))
    s1 = tiled(f1, cache=True, vectorize=True)
    s2 = tiled(f2, cache=True, vectorize=True)
    c1, c2 = MeasureCandidate(f1, s1.func, s1.trace), MeasureCandidate(f2, s2.func, s2.trace)
    v1 = features.featurize(name, c1)
    assert np.array_equal(v1, features.featurize(name, c2))
    again = Trace.from_json(s1.trace.to_json()).apply(Schedule(f1)).func
    assert np.array_equal(v1, features.featurize(name, MeasureCandidate(f1, again, s1.trace)))
    assert np.all(np.isfinite(v1)) and np.any(v1 != 0)


@pytest.mark.parametrize("name", PROGRAM_SETS)
def test_a_programs_features_are_computed_once_and_read_only(name, monkeypatch):
    func = make_matmul(16, 20, 9)
    prog = tiled(func, cache=True, vectorize=True).func
    calls = []
    compute = features.FEATURES[name]
    monkeypatch.setitem(features.FEATURES, name, lambda f: calls.append(f) or compute(f))
    first = features.featurize(name, prog)
    assert features.featurize(name, MeasureCandidate(func, prog)) is first and len(calls) == 1
    assert np.array_equal(first, compute(prog)) and not first.flags.writeable
    features.featurize(name, tiled(func).func)  # another program object: computed
    assert len(calls) == 2


def test_different_schedules_give_different_features():
    func = make_matmul(16, 16, 16)
    plain, vec = tiled(func), tiled(func, vectorize=True)
    for name in PROGRAM_SETS:
        assert not np.array_equal(features.featurize(name, plain.func),
                                  features.featurize(name, vec.func)), name


@pytest.mark.parametrize("name", PROGRAM_SETS)
def test_width_is_fixed_across_programs(name):
    funcs = [make_matmul(5, 6, 7), tiled(make_matmul(16, 16, 16), cache=True).func,
             conv_schedule(1)[1].func, ops.softmax(7, 9), ops.layer_norm(5, 12)]
    X = features.extract(name, funcs)
    assert X.shape[0] == len(funcs) and np.all(np.isfinite(X))
    assert X.shape[1] == features.width(name) == features.featurize(name, funcs[0]).shape[0]
    assert features.extract(name, []).shape == (0, features.width(name))


# hand-computed loop context ------------------------------------------------------------
def test_touch_count_and_reuse_of_two_level_tiled_matmul():
    M, N, K = 8, 12, 6
    nest = features.analyze(tiled(make_matmul(M, N, K)).func)
    # loops i0(2) j0(3) k(6) i1(4) j1(4); slots: C (the init's store), A, B
    assert nest.extents.tolist() == [2, 3, 6, 4, 4]
    assert nest.top_down.tolist() == [2, 6, 36, 144, 576]
    assert nest.bottom_up.tolist() == [576, 288, 96, 16, 4]
    count, reuse, stride = nest.touch
    C, A, B = 0, 1, 2
    # at the outermost loop every buffer is touched whole; reuse = the loops it ignores
    assert count[0, [C, A, B]].tolist() == [M * N, M * K, K * N]
    assert reuse[0, [C, A, B]].tolist() == [K, N, M]
    # at k: A[i1*..., k] moves with k, i1; B[k, j1] with k, j1; C[i1, j1] with i1, j1
    assert count[2, [C, A, B]].tolist() == [16, 24, 24]
    assert reuse[2, [C, A, B]].tolist() == [6, 4, 4]
    assert stride[2, [C, A, B]].tolist() == [0, 1, N]
    # innermost j1: A is loop invariant, B and C walk contiguously
    assert count[4, [C, A, B]].tolist() == [4, 1, 4]
    assert reuse[4, [C, A, B]].tolist() == [1, 4, 1]
    assert stride[4, [C, A, B]].tolist() == [1, 0, 1]
    assert stride[3, [C, A, B]].tolist() == [N, K, 0]


def test_itervar_rows_encode_the_loop_context():
    sch = tiled(make_matmul(8, 12, 6), vectorize=True)
    rows = features.itervar(sch.func).reshape(loop_context.MAX_LOOPS, -1)
    width = loop_context.row_width()
    assert rows.shape[1] == width
    kinds = rows[:5, 1:1 + len(analysis.KINDS)]
    assert kinds.argmax(axis=1).tolist() == [1, 0, 0, 0, 2]  # parallel i0 ... vectorized j1
    assert rows[2, 0] == pytest.approx(math.log2(7))         # k: length 6
    base = loop_context.BASE_WIDTH
    assert rows[2, base + 3] == pytest.approx(math.log2(25))  # A's touch count at k: 24
    assert rows[2, base + 4] == pytest.approx(math.log2(5))   # A's reuse ratio at k: 4
    assert rows[2, base + 8] == pytest.approx(math.log2(13))  # B's stride at k: 12
    assert not rows[5:].any()                                 # padding


def test_flat_lists_the_longest_chain_innermost_first():
    sch = tiled(make_matmul(8, 12, 6), cache=True)
    nest = features.analyze(sch.func)
    rows = features.flat(sch.func).reshape(12, -1)
    assert len(nest.longest_chain) == 5
    assert rows[:5, 0].tolist() == pytest.approx(np.log2(1 + np.array([4, 4, 6, 3, 2])))


# relation features --------------------------------------------------------------------
def brute_relation(nest, chain, slot, i, j, t):
    count, reuse, _ = nest.touch
    z = {relation.COUNT: count[:, slot], relation.REUSE: reuse[:, slot],
         relation.TOP_DOWN: nest.top_down}
    vals = [math.log2(1 + z[i][k]) for k in chain if math.log2(1 + z[j][k]) < t]
    return max(vals, default=0.0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relation_features_match_their_definition(seed):
    _, sch = conv_schedule(seed)
    nest = features.analyze(sch.func)
    chain = nest.longest_chain
    slots = loop_context.chain_slots(nest, chain)
    vec = features.curve(sch.func)
    assert vec.shape == (relation.width(),)
    got = vec[:-relation.SUMMARY_WIDTH].reshape(loop_context.MAX_BUFFERS, len(relation.PAIRS), -1)
    assert len(slots) == 3  # output, data, weight
    for b, slot in enumerate(slots):
        for p, (i, j) in enumerate(relation.PAIRS):
            want = [brute_relation(nest, chain, slot, i, j, t) for t in relation.THRESHOLDS]
            assert got[b, p].tolist() == pytest.approx(want)
    assert not got[len(slots):].any()
    summary = vec[-relation.SUMMARY_WIDTH:]
    (x1,) = [k for k in chain if nest.kinds[k] == analysis.KIND_INDEX["vectorized"]]
    assert summary[2:4].tolist() == pytest.approx([math.log2(1 + nest.extents[x1]),
                                                   math.log2(1 + nest.bottom_up[x1])])
    assert summary[0] == 0 and summary[4] == 0  # no parallel or unrolled loop


# per-store features -------------------------------------------------------------------
def test_per_store_counts_and_bytes_of_tiled_matmul():
    M, N, K = 8, 12, 6
    sch = tiled(make_matmul(M, N, K), vectorize=True)
    nest = features.analyze(sch.func)
    main = max(nest.stores, key=lambda s: len(s.path))
    row = per_store.store_row(nest, main)
    ops_ = row[:len(analysis.OP_KINDS)]
    assert ops_[analysis.OP_INDEX["float_mad"]] == pytest.approx(math.log2(1 + M * N * K))
    assert ops_[analysis.OP_INDEX["float_mul"]] == 0
    ann = row[len(analysis.OP_KINDS):len(analysis.OP_KINDS) + 28].reshape(4, 7)
    assert ann[0, :3].tolist() == pytest.approx([1, math.log2(5), math.log2(5)])  # vectorized
    assert ann[0, 3] == 1                                                         # innermost
    assert ann[2, 0] == 1 and ann[2, 5] == 1                                      # parallel outer
    start = len(analysis.OP_KINDS) + 28
    bufs = row[start:start + 5 * per_store.BUFFER_WIDTH].reshape(5, -1)
    byts = {round(2 ** b[4] - 1): b for b in bufs}  # keyed by unique bytes
    a_row, b_row, c_row = byts[M * K * 4], byts[K * N * 4], byts[M * N * 4]
    assert a_row[3] == pytest.approx(math.log2(1 + M * N * K * 4))  # every iteration reads A
    assert a_row[0] == 1 and c_row[2] == 1                           # read; read-write
    assert a_row[7] == 1 and a_row[12] == pytest.approx(math.log2(5))  # loop reuse over j1 (4)
    assert b_row[17] == pytest.approx(1.0)                           # unit innermost stride


def test_per_store_sees_intermediate_allocation():
    func = make_matmul(16, 16, 16)
    plain = per_store.per_store(tiled(func).func)
    cached = per_store.per_store(tiled(func, cache=True).func)
    alloc = slice(per_store.STORE_WIDTH - 7, per_store.STORE_WIDTH - 3)
    assert not plain[alloc].any()
    assert cached[per_store.STORE_WIDTH:][alloc][0] == 1  # the max over stores: an intermediate


# knob features ------------------------------------------------------------------------
def test_knob_features_use_knobs_then_trace_decisions():
    func, sch = conv_schedule(3)
    cand = MeasureCandidate(func, sch.func, sch.trace)
    decisions = [sch.trace.decisions[i] for i in sorted(sch.trace.decisions)]
    flat_dec = [float(x) for d in decisions for x in d]
    v = features.featurize("knob", cand)
    assert v[:len(flat_dec)].tolist() == flat_dec and not v[len(flat_dec):].any()
    with_knobs = MeasureCandidate(func, sch.func, sch.trace, knobs=(4, (2, 8), "tile"))
    k = features.featurize("knob", with_knobs)
    assert k[:3].tolist() == [4.0, 2.0, 8.0] and 0 <= k[3] < 1
    with pytest.raises(features.FeatureError, match="needs candidates"):
        features.featurize("knob", sch.func)
    with pytest.raises(features.FeatureError, match="unknown feature set"):
        features.extract("nope", [sch.func])
