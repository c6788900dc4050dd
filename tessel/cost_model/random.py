"""The trivial cost model: seeded uniform random scores (the test default, and the baseline
that turns model-guided search into random search)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tessel.cost_model.base import CostModel, no_margin
from tessel.measure import MeasureCandidate


class RandomModel(CostModel):
    """Scores are uniform in [0, 1) from a generator seeded with `seed`; training is a no-op
    (the data is still kept, so a random model can seed a real one)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self.rng = np.random.default_rng(seed)

    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        return [None] * len(candidates)

    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        no_margin(self, base_margin)

    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        no_margin(self, base_margin)
        return self.rng.random(len(inputs))
