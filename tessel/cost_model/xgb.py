"""Gradient-boosted trees (XGBoost) over program features: AutoTVM's default cost model.

The objective is "rank" (XGBoost's rank:pairwise, rows grouped per workload: only the order
of programs of one workload matters, the paper's rank loss), "lambdarank" (rank:ndcg, grouped
the same way: pairs weighted by how much swapping them changes NDCG, so the order among the
fastest programs counts most, with the normalized throughput as the relevance) or "reg"
(squared error on normalized throughput). xgboost (the xgboost-cpu wheel) is a core
dependency, imported when a model is made.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tessel import features
from tessel.cost_model.base import CostModel, check, group_order, normalize
from tessel.extras import require
from tessel.measure import MeasureCandidate

OBJECTIVES = {"rank": "rank:pairwise", "lambdarank": "rank:ndcg", "reg": "reg:squarederror"}
GROUPED = ("rank", "lambdarank")  # objectives that rank within a workload


def import_xgboost():
    return require("xgboost", "the xgb cost models")


class XGBModel(CostModel):
    """XGBoost on `feature` vectors. Extra keyword arguments override XGBoost parameters
    (defaults: depth 6, eta 0.2, `num_rounds` boosting rounds, seeded, one thread: the data
    is small and the other core is measuring)."""

    def __init__(self, feature: str = features.DEFAULT, objective: str = "rank",
                 num_rounds: int = 150, seed: int = 0, **params: Any) -> None:
        super().__init__()
        check(objective in OBJECTIVES, f"unknown objective {objective!r}; use one of "
                                       f"{list(OBJECTIVES)}")
        check(feature in features.NAMES, f"unknown feature set {feature!r}; known: "
                                         f"{list(features.NAMES)}")
        import_xgboost()
        self.feature, self.objective, self.num_rounds = feature, objective, num_rounds
        self.params = {"objective": OBJECTIVES[objective], "max_depth": 6, "eta": 0.2,
                       "min_child_weight": 1.0, "gamma": 1e-4, "seed": seed,
                       "tree_method": "hist", "nthread": 1, "verbosity": 0, **params}
        if objective == "rank":
            self.params.setdefault("lambdarank_pair_method", "mean")
            self.params.setdefault("lambdarank_num_pair_per_sample", 8)
        elif objective == "lambdarank":  # graded relevance in [0, 1], pairs from the top
            self.params.setdefault("ndcg_exp_gain", False)
            self.params.setdefault("lambdarank_pair_method", "topk")
            self.params.setdefault("lambdarank_num_pair_per_sample", 32)
        self.booster = None

    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        return list(features.extract(self.feature, candidates))

    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        xgb = import_xgboost()
        order, sizes = group_order(keys)
        X = np.stack(inputs)[order]
        y = normalize(keys, throughputs)[order]
        dtrain = xgb.DMatrix(X, label=y)
        if base_margin is not None:
            dtrain.set_base_margin(np.asarray(base_margin)[order])
        if self.objective in GROUPED:
            dtrain.set_group(sizes)
        self.booster = xgb.train(self.params, dtrain, num_boost_round=self.num_rounds)

    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        """Margins of the trees; before any training, the base margin (or zeros)."""
        if self.booster is None:
            return np.zeros(len(inputs)) if base_margin is None else np.asarray(base_margin)
        xgb = import_xgboost()
        dtest = xgb.DMatrix(np.stack(inputs))
        if base_margin is not None:
            dtest.set_base_margin(np.asarray(base_margin))
        return self.booster.predict(dtest, output_margin=True)
