"""Bootstrapped ensemble: k models trained on resamples of the data, for uncertainty.

The mean of the members' scores is the prediction; their standard deviation is the
uncertainty that expected-improvement and upper-confidence-bound acquisition use
(AutoTVM section 3.3). Members are made by the registry (`tessel.cost_model.make`) with
seeds seed, seed+1, ...; each update retrains every member on its own resample (drawn with
replacement, the size of the data) from a seeded generator.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tessel.cost_model.base import CostModel, check, no_margin
from tessel.measure import MeasureCandidate


class EnsembleModel(CostModel):
    def __init__(self, base: str = "xgb", k: int = 5, seed: int = 0, **base_kwargs: Any) -> None:
        super().__init__()
        from tessel.cost_model import make
        check(base not in ("ensemble", "transfer"), f"an ensemble of {base!r} models is not "
                                                    "supported; use a plain model as the base")
        check(k >= 2, f"an ensemble needs k >= 2 members, got {k}")
        self.members = [make(base, seed=seed + i, **base_kwargs) for i in range(k)]
        self.rng = np.random.default_rng(seed)

    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        return self.members[0].encode(candidates)  # members share their configuration

    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        no_margin(self, base_margin)
        n = len(inputs)
        for member in self.members:
            idx = self.rng.integers(0, n, size=n)
            member.fit([inputs[i] for i in idx], [keys[i] for i in idx], throughputs[idx])

    def score_all(self, inputs: list[Any]) -> np.ndarray:
        """[members, inputs] scores."""
        return np.stack([m.score(inputs) for m in self.members])

    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        no_margin(self, base_margin)
        return self.score_all(inputs).mean(axis=0)

    def predict_with_std(self, candidates: Sequence[MeasureCandidate]
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(mean, standard deviation) of the members' scores, per candidate."""
        if not candidates:
            return np.zeros(0), np.zeros(0)
        scores = self.score_all(self.encode(candidates))
        return scores.mean(axis=0), scores.std(axis=0)
