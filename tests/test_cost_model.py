"""Cost models: targets, every model learns a synthetic ranking, save/load round trips,
the ensemble's uncertainty, registry errors."""
import math
import random

import numpy as np
import pytest

from tessel import cost_model, ops
from tessel.cost_model import (CostModelError, kendall_tau, normalize, spearman_rho,
                               top_k_recall)
from tessel.measure import MeasureCandidate, MeasureResult
from tessel.schedule import Schedule

LEARNERS = {
    "xgb": {},
    "xgb-reg": {},
    "treegru": {"epochs": 30},
    "ensemble": {"k": 3, "num_rounds": 60},
    "transfer": {},
}


def synthetic(func, seed):
    """A random tiled matmul schedule and its synthetic cost in seconds: a known function of
    the loop nest (vectorized innermost loop, its length, the inner reduction length and a
    parallel outer loop)."""
    rnd = random.Random(seed)
    sch = Schedule(func, seed=seed)
    b = sch.get_block("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = sch.split(i, sch.sample_perfect_tile(i, 2, 16))
    j0, j1 = sch.split(j, sch.sample_perfect_tile(j, 2, 16))
    k0, k1 = sch.split(k, sch.sample_perfect_tile(k, 2, 16))
    sch.reorder(i0, j0, k0, i1, k1, j1)
    vec, par = rnd.random() < 0.5, rnd.random() < 0.5
    if vec:
        sch.vectorize(j1)
    if par:
        sch.parallel(i0)
    jn, kn = (sch.get(x).extent for x in (j1, k1))
    secs = 1e-3 * (1.0 if vec else 2.5) * (1.0 if par else 1.6)
    secs *= (1 + 0.5 * abs(math.log2(jn) - 3)) * (1 + 0.3 * abs(math.log2(kn) - 2))
    return MeasureCandidate(func, sch.func, sch.trace), MeasureResult(costs=(secs,))


@pytest.fixture(scope="module")
def data():
    func = ops.matmul(64, 48, 40)
    pairs = [synthetic(func, s) for s in range(260)]
    failed = [(c, MeasureResult.error("runtime_error", "crash")) for c, _ in pairs[:10]]
    train = pairs[:180] + failed
    test = pairs[180:]
    return train, test


def fit(name, train, **kw):
    model = cost_model.make(name, **{**LEARNERS.get(name, {}), **kw})
    half = len(train) // 2  # two updates: the model must keep the first half
    model.update([c for c, _ in train[:half]], [r for _, r in train[:half]])
    model.update([c for c, _ in train[half:]], [r for _, r in train[half:]])
    return model


def true_speed(pairs):
    return np.array([1.0 / r.mean_secs for _, r in pairs])


@pytest.mark.parametrize("name", list(LEARNERS))
def test_model_learns_a_synthetic_ranking(name, data):
    train, test = data
    model = fit(name, train)
    assert len(model.inputs) == len(train)
    pred = model.predict([c for c, _ in test])
    assert pred.shape == (len(test),) and np.all(np.isfinite(pred))
    tau = kendall_tau(pred, true_speed(test))
    assert tau > 0.6, f"{name}: tau {tau:.3f}"
    assert top_k_recall(pred, true_speed(test), 10) >= 0.3


@pytest.mark.parametrize("name", list(LEARNERS) + ["random"])
def test_save_load_round_trips_predictions(name, data, tmp_path):
    train, test = data
    model = fit(name, train[:60])
    path = tmp_path / f"{name}.pkl"
    model.save(path)
    loaded = cost_model.CostModel.load(path)
    assert type(loaded) is type(model)
    cands = [c for c, _ in test]
    assert np.array_equal(model.predict(cands), loaded.predict(cands))


def test_random_model_is_seeded(data):
    cands = [c for c, _ in data[1]]
    a, b = cost_model.make("random", seed=3), cost_model.make("random", seed=3)
    assert np.array_equal(a.predict(cands), b.predict(cands))
    assert not np.array_equal(a.predict(cands), cost_model.make("random", seed=4).predict(cands))


def test_ensemble_gives_mean_and_spread(data):
    train, test = data
    model = fit("ensemble", train[:80])
    mean, std = model.predict_with_std([c for c, _ in test])
    assert np.allclose(mean, model.predict([c for c, _ in test]))
    assert std.shape == mean.shape and np.all(std >= 0) and np.any(std > 0)


def test_targets_are_normalized_per_workload_with_failures_zero():
    keys = ["a", "b", "a", "b", "a"]
    thr = np.array([2.0, 10.0, 4.0, 5.0, 0.0])
    assert normalize(keys, thr).tolist() == [0.5, 1.0, 1.0, 0.5, 0.0]
    assert cost_model.throughput(MeasureResult(costs=(0.5, 0.25, 0.75))) == 2.0
    assert cost_model.throughput(MeasureResult.error("timeout", "slow")) == 0.0


def test_metrics():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert kendall_tau([1, 2, 3], [5, 5, 5]) == 0.0
    assert top_k_recall([0.9, 0.1, 0.8, 0.2], [1.0, 0.0, 0.5, 0.7], 2) == 0.5
    assert spearman_rho([1, 2, 3, 4], [1, 20, 300, 4000]) == 1.0  # ranks, not values
    assert spearman_rho([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert spearman_rho([1, 2, 3], [5, 5, 5]) == 0.0
    # ties take their average rank: ranks (0, 1.5, 1.5, 3) against (0, 1, 2, 3)
    assert spearman_rho([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)
    with pytest.raises(ValueError, match="3 vs 2 values"):
        spearman_rho([1, 2, 3], [1, 2])


def test_errors(data, tmp_path):
    train, _ = data
    with pytest.raises(CostModelError, match="unknown cost model 'nope'"):
        cost_model.make("nope")
    with pytest.raises(CostModelError, match="unknown objective"):
        cost_model.make("xgb", objective="lambdamart")
    model = cost_model.make("xgb")
    with pytest.raises(CostModelError, match="2 candidates but 1 results"):
        model.update([c for c, _ in train[:2]], [r for _, r in train[:1]])
    assert np.array_equal(model.predict([c for c, _ in train[:3]]), np.zeros(3))  # untrained
    bad = tmp_path / "bad.pkl"
    bad.write_bytes(b"\x80\x04N.")  # a pickled None
    with pytest.raises(CostModelError, match="not a tessel cost model file"):
        cost_model.CostModel.load(bad)
