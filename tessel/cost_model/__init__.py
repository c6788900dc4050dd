"""Statistical cost models: predict which candidate programs run fast.

    from tessel import cost_model
    model = cost_model.make("xgb")                 # registry name -> model
    model.update(candidates, results)              # MeasureCandidates, MeasureResults
    scores = model.predict(candidates)             # higher = predicted faster

Registry: "random" (seeded uniform), "xgb" (XGBoost, pairwise rank objective), "xgb-reg"
(XGBoost, regression), "treegru" (PyTorch TreeGRU), "ensemble" (bootstrapped, mean and
std for EI/UCB), "transfer" (global + local; `pretrain_global`, `from_database`). Training
pairs from stored records: `records`. Metrics for evaluating models: `metrics`.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from tessel.cost_model.base import (CostModel, CostModelError, normalize, throughput,
                                    workload_key)
from tessel.cost_model.ensemble import EnsembleModel
from tessel.cost_model.metrics import kendall_tau, top_k_recall
from tessel.cost_model.random import RandomModel
from tessel.cost_model.records import pairs_from_database, pairs_from_fixture
from tessel.cost_model.transfer import TransferModel, from_database, pretrain_global
from tessel.cost_model.treegru import TreeGRUModel
from tessel.cost_model.xgb import XGBModel

MODELS: dict[str, Callable[..., CostModel]] = {
    "random": RandomModel,
    "xgb": XGBModel,
    "xgb-reg": partial(XGBModel, objective="reg"),
    "treegru": TreeGRUModel,
    "ensemble": EnsembleModel,
    "transfer": TransferModel,
}


def make(name: str, **kwargs: Any) -> CostModel:
    """A new model from its registry name; keyword arguments go to its constructor."""
    if name not in MODELS:
        raise CostModelError(f"unknown cost model {name!r}; known: {sorted(MODELS)}")
    return MODELS[name](**kwargs)


__all__ = ["MODELS", "CostModel", "CostModelError", "EnsembleModel", "RandomModel",
           "TransferModel", "TreeGRUModel", "XGBModel", "from_database", "kendall_tau", "make",
           "normalize", "pairs_from_database", "pairs_from_fixture", "pretrain_global",
           "throughput", "top_k_recall", "workload_key"]
