"""Transfer learning (AutoTVM section 4): f(x) = f_global(x) + f_local(x).

The global model is trained on records of other workloads (any operator, same target) over
an invariant representation (context-relation features by default) and stays fixed; the
local model is trained on the current workload's records starting from the global model's
scores (an XGBoost base margin), so it fits what the global model gets wrong. Before any
local record, predictions are the global model's.

    glob = pretrain_global(pairs)                  # [(MeasureCandidate, MeasureResult), ...]
    glob = from_database(db, target, exclude=[workload_key])   # or from a tessel.Database
    glob.save("global.pkl")
    model = TransferModel(glob)                    # or TransferModel("global.pkl")
    model.update(candidates, results); model.predict(candidates)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from tessel.cost_model.base import CostModel, check, no_margin
from tessel.cost_model.records import pairs_from_database
from tessel.cost_model.xgb import XGBModel
from tessel.measure import MeasureCandidate, MeasureResult

GLOBAL_FEATURE = "curve"


def pretrain_global(pairs: Iterable[tuple[MeasureCandidate, MeasureResult]],
                    feature: str = GLOBAL_FEATURE, **xgb_kwargs: Any) -> XGBModel:
    """An XGBModel (rank objective, grouped per workload) trained on measured pairs."""
    pairs = list(pairs)
    check(len(pairs) > 0, "pretrain_global: no records to train on")
    model = XGBModel(feature=feature, **xgb_kwargs)
    model.update([c for c, _ in pairs], [r for _, r in pairs])
    return model


def from_database(db: Any, target: Any, exclude: Iterable[str] = (),
                  feature: str = GLOBAL_FEATURE, **xgb_kwargs: Any) -> XGBModel:
    """A global model pretrained on a tessel.Database's records on `target`, leaving out the
    workloads whose keys are in `exclude` (typically the one about to be tuned)."""
    skip = set(exclude)
    by_workload = pairs_from_database(db, target)
    pairs = [p for key, ps in by_workload.items() if key not in skip for p in ps]
    return pretrain_global(pairs, feature=feature, **xgb_kwargs)


class TransferModel(CostModel):
    """A fixed global model (a CostModel, the path of a saved one, or None for none) plus a
    local XGBModel (by default on the global model's feature set, 30 rounds at eta 0.1: with
    a handful of local records, gentle corrections keep what the global model knows)."""

    def __init__(self, global_model: CostModel | str | Path | None = None,
                 local: XGBModel | None = None, seed: int = 0) -> None:
        super().__init__()
        if isinstance(global_model, (str, Path)):
            global_model = CostModel.load(global_model)
        self.global_model = global_model
        feature = getattr(global_model, "feature", GLOBAL_FEATURE)
        self.local = local or XGBModel(feature=feature, num_rounds=30, eta=0.1, seed=seed)

    @property
    def informed(self) -> bool:
        return self.global_model is not None or self.trained

    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        local = self.local.encode(candidates)
        if self.global_model is None:
            return [(None, x) for x in local]
        return list(zip(self.global_model.encode(candidates), local))

    def _margin(self, inputs: list[Any]) -> np.ndarray:
        if self.global_model is None:
            return np.zeros(len(inputs))
        return np.asarray(self.global_model.score([g for g, _ in inputs]), dtype=np.float64)

    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        no_margin(self, base_margin)
        self.local.fit([x for _, x in inputs], keys, throughputs, base_margin=self._margin(inputs))

    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        no_margin(self, base_margin)
        return self.local.score([x for _, x in inputs], base_margin=self._margin(inputs))
