"""The shipped cost model (tessel.cost_model.pretrained): the file format round-trips and
refuses what it cannot read, every shipped file loads, a target without a model of its ISA
family starts cold, the default of tune() is the pretrained model, and an informed model
chooses the evolutionary search's first batch after the expert priors."""
import gzip
import json
from pathlib import Path

import numpy as np
import pytest

import tessel
from tessel import cost_model, ops
from tessel.cost_model import CostModel, CostModelError
from tessel.cost_model.pretrained import (DIRECTORY, FORMAT, PretrainedModel, read_global,
                                          save_global)
from tessel.search import make_strategy
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.priors import prior_schedules

FIXTURE = Path(__file__).parent / "data" / "transfer_conv2d.json.gz"
TARGET = tessel.Target("host")


@pytest.fixture(scope="module")
def pairs():
    return cost_model.pairs_from_fixture(FIXTURE, limit=60)


@pytest.fixture(scope="module")
def trained(pairs):
    return cost_model.pretrain_global(pairs["conv-a"], feature="per_store", num_rounds=20)


def test_a_saved_global_model_predicts_as_before(tmp_path, trained, pairs):
    path = save_global(trained, tmp_path / "x.json.gz", "x86_64-avx512", {"records": 60})
    again, about = read_global(path)
    cands = [c for c, _ in pairs["conv-b"]]
    assert about == {"records": 60}
    assert again.feature == "per_store"
    np.testing.assert_allclose(again.predict(cands), trained.predict(cands), rtol=1e-6)


def _write(path, data):
    with gzip.open(path, "wt") as f:
        json.dump(data, f)


def test_unreadable_model_files_are_named(tmp_path, trained):
    garbage = tmp_path / "garbage.json.gz"
    garbage.write_bytes(b"not gzip at all")
    with pytest.raises(CostModelError, match="garbage.json.gz: not a readable"):
        read_global(garbage)
    other = tmp_path / "other.json.gz"
    _write(other, {"format": "something/9"})
    with pytest.raises(CostModelError, match="expected format"):
        read_global(other)
    drifted = tmp_path / "drifted.json.gz"
    _write(drifted, {"format": FORMAT, "feature": "per_store", "width": 3, "booster": {}})
    with pytest.raises(CostModelError, match="width 3.*retrain"):
        read_global(drifted)


def test_every_shipped_model_loads_with_this_feature_code():
    files = sorted(DIRECTORY.glob("*.json.gz"))
    assert files, f"no pretrained model in {DIRECTORY}"
    for path in files:
        model, about = read_global(path)
        assert about["records"] > 0 and about["workloads"]
        assert path.stat().st_size < 8e6  # the package stays small


def test_a_family_without_a_model_starts_from_the_nearest_and_says_so(caplog, monkeypatch):
    from tessel.cost_model import pretrained
    assert pretrained.nearest_family("x86_64-avx", ["x86_64-avx2", "x86_64-avx512"]) == \
        "x86_64-avx2"  # the same width
    assert pretrained.nearest_family("x86_64-sse4.2", ["x86_64-avx512", "x86_64-avx2"]) == \
        "x86_64-avx2"  # the nearer width
    assert pretrained.nearest_family("aarch64-neon", ["x86_64-avx512", "x86_64-avx2"]) == \
        "x86_64-avx2"  # another architecture only when its own has none
    assert pretrained.nearest_family("aarch64-neon", ["aarch64-sve", "x86_64-sse2"]) == \
        "aarch64-sve"
    assert pretrained.nearest_family("x86_64-avx2", []) is None
    monkeypatch.setattr(pretrained, "_SAID", set())
    with caplog.at_level("INFO", logger="tessel"):
        model = cost_model.make("pretrained", target=tessel.Target("aarch64-neon"))
        cost_model.make("pretrained", target=tessel.Target("aarch64-neon"))
    nearest = pretrained.nearest_family("aarch64-neon", pretrained.shipped_families())
    assert model.global_model is pretrained.load_global(tessel.Target(
        "x86_64-avx2" if nearest == "x86_64-avx2" else "x86_64-avx512")) and model.informed
    said = [r.getMessage() for r in caplog.records if "nearest" in r.getMessage()]
    assert said == [f"no pretrained cost model for aarch64-neon: the cost model starts from "
                    f"the nearest family's, {nearest}"]  # once


def test_with_no_model_shipped_at_all_the_model_starts_cold(pairs, monkeypatch, tmp_path):
    from tessel.cost_model import pretrained
    monkeypatch.setattr(pretrained, "shipped_families", lambda: [])
    monkeypatch.setattr(pretrained, "path_for", lambda family: tmp_path / "none.json.gz")
    model = cost_model.make("pretrained", target=tessel.Target("aarch64-neon"))
    assert model.global_model is None and not model.informed
    cands, results = [c for c, _ in pairs["conv-b"]], [r for _, r in pairs["conv-b"]]
    assert not model.predict(cands[:5]).any()
    model.update(cands[:20], results[:20])
    assert model.informed and model.predict(cands[20:]).std() > 0


def test_the_default_model_is_the_shipped_one_when_the_host_has_one():
    model = cost_model.make(cost_model.DEFAULT)
    assert isinstance(model, PretrainedModel)
    shipped = (DIRECTORY / f"{TARGET.isa_family}.json.gz").exists()
    assert model.informed == shipped and (model.global_model is not None) == shipped


class ScoresNonPriors(CostModel):
    """An informed model that ranks every program above the expert priors."""

    def __init__(self, prior_keys):
        super().__init__()
        self.prior_keys = prior_keys

    informed = True

    def encode(self, candidates):
        return [tessel.ir.structural_hash(c.func) for c in candidates]

    def fit(self, inputs, keys, throughputs, base_margin=None):
        pass

    def score(self, inputs, base_margin=None):
        return np.array([0.0 if key in self.prior_keys else 1.0 for key in inputs])


def test_an_informed_model_chooses_the_first_batch_after_the_priors():
    func, auto, posts = ops.matmul(48, 64, 40), make_space("auto", TARGET), \
        default_postprocs(TARGET)
    priors = {tessel.ir.structural_hash(p.func) for p in
              (postprocess(s, posts) for s in prior_schedules(auto, func)) if p is not None}
    assert priors
    strategy = make_strategy("evolutionary", auto, func, seed=0, postprocs=posts,
                             cost_model=ScoresNonPriors(priors), population=16, generations=1)
    batch = strategy.ask(6)
    assert len(batch) == 6
    hashes = [tessel.ir.structural_hash(p.func) for p in batch]
    # the priors open the batch even though this model ranks them last...
    assert hashes[:len(priors)] and set(hashes[:len(priors)]) == priors
    # ...and the model chooses the rest (it ranks every other program above them)
    assert len(set(hashes)) == 6 and not set(hashes[len(priors):]) & priors
    # with a batch no larger than the priors, only priors are measured
    small = make_strategy("evolutionary", auto, func, seed=0, postprocs=posts,
                          cost_model=ScoresNonPriors(priors), population=16, generations=1)
    assert {tessel.ir.structural_hash(p.func) for p in small.ask(1)} <= priors
