"""Statistical cost models: predict which candidate programs run fast.

    from tessel import cost_model
    model = cost_model.make("pretrained", target=target)   # registry name -> model
    model.update(candidates, results)              # MeasureCandidates, MeasureResults
    scores = model.predict(candidates)             # higher = predicted faster

Registry: "pretrained" (the default: the global model shipped for the target's ISA family,
fine-tuned on the workload's records; `pretrained`), "random" (seeded uniform), "xgb" (XGBoost
from scratch, pairwise rank objective), "xgb-reg" (XGBoost, regression), "treegru" (PyTorch
TreeGRU), "ensemble" (bootstrapped, mean and std for EI/UCB), "transfer" (global + local;
`pretrain_global`, `from_database`). Training pairs from stored records: `records`. Metrics
for evaluating models: `metrics`.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from tessel.cost_model.base import (CostModel, CostModelError, normalize, throughput,
                                    workload_key)
from tessel.cost_model.ensemble import EnsembleModel
from tessel.cost_model.metrics import kendall_tau, spearman_rho, top_k_recall
from tessel.cost_model.pretrained import PretrainedModel, load_global
from tessel.cost_model.random import RandomModel
from tessel.cost_model.records import pairs_from_database, pairs_from_fixture
from tessel.cost_model.transfer import TransferModel, from_database, pretrain_global
from tessel.cost_model.treegru import TreeGRUModel
from tessel.cost_model.xgb import XGBModel

DEFAULT = "pretrained"
MODELS: dict[str, Callable[..., CostModel]] = {
    "pretrained": PretrainedModel,
    "random": RandomModel,
    "xgb": XGBModel,
    "xgb-reg": partial(XGBModel, objective="reg"),
    "treegru": TreeGRUModel,
    "ensemble": EnsembleModel,
    "transfer": TransferModel,
}


TARGETED = {"pretrained"}  # models that depend on the target they rank programs for


def make(name: str, target: Any = None, **kwargs: Any) -> CostModel:
    """A new model from its registry name; keyword arguments go to its constructor, and
    `target` (a tessel.Target, the host's if None) to those that depend on it."""
    if name not in MODELS:
        raise CostModelError(f"unknown cost model {name!r}; known: {sorted(MODELS)}")
    if name in TARGETED:
        kwargs["target"] = target
    return MODELS[name](**kwargs)


__all__ = ["DEFAULT", "MODELS", "CostModel", "CostModelError", "EnsembleModel",
           "PretrainedModel", "RandomModel", "load_global",
           "TransferModel", "TreeGRUModel", "XGBModel", "from_database", "kendall_tau", "make",
           "normalize", "pairs_from_database", "pairs_from_fixture", "pretrain_global",
           "spearman_rho", "throughput", "top_k_recall", "workload_key"]
