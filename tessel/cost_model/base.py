"""The cost-model interface, training targets, and the pieces every model shares.

    model = cost_model.XGBModel()                 # or any registry entry
    model.update(candidates, results)             # accumulates: keeps all data, retrains
    scores = model.predict(candidates)            # higher = predicted faster
    model.save("model.pkl"); again = CostModel.load("model.pkl")

Targets are normalized throughput per workload: (1 / mean_secs) divided by the best
throughput among that workload's records, so 1.0 is the best program seen and failed
measurements count as 0. The workload key is the structural hash of the candidate's
unscheduled `workload` (names ignored), as in the database.

A model is defined by three methods: `encode` (candidate -> model input, e.g. a feature
vector), `fit` (all inputs so far, their workload keys and raw throughputs) and `score`
(inputs -> scores). `CostModel` keeps the data and implements `update`/`predict` on top.
Models that support it take a `base_margin` in `fit`/`score`: scores of another model to
start from (the transfer model's global part).
"""
from __future__ import annotations

import pickle
import weakref
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tessel.errors import TesselError
from tessel.ir import PrimFunc, structural_hash
from tessel.measure import MeasureCandidate, MeasureResult

FORMAT = "tessel.cost_model/1"
_keys: "weakref.WeakKeyDictionary[PrimFunc, str]" = weakref.WeakKeyDictionary()


class CostModelError(TesselError, ValueError):
    """A cost model was misused: mismatched inputs, no data, a missing optional package."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise CostModelError(msg)


def workload_key(candidate: MeasureCandidate) -> str:
    """The structural hash of the candidate's workload (cached per workload object)."""
    func = candidate.workload
    key = _keys.get(func)
    if key is None:
        key = _keys[func] = structural_hash(func)
    return key


def throughput(result: MeasureResult) -> float:
    """1 / mean seconds; 0 for a failed (or zero-time) measurement."""
    secs = result.mean_secs
    return 1.0 / secs if result.ok and 0 < secs < float("inf") else 0.0


def normalize(keys: Sequence[str], throughputs: np.ndarray) -> np.ndarray:
    """Throughput divided by the best throughput of the same workload (0 if none ran)."""
    keys_arr = np.asarray(keys)
    out = np.zeros(len(throughputs))
    for key in np.unique(keys_arr):
        idx = np.flatnonzero(keys_arr == key)
        best = throughputs[idx].max()
        if best > 0:
            out[idx] = throughputs[idx] / best
    return out


def group_order(keys: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """A stable order that puts each workload's rows together, and the group sizes."""
    order = np.argsort(np.asarray(keys), kind="stable")
    _, sizes = np.unique(np.asarray(keys)[order], return_counts=True)
    return order, [int(s) for s in sizes]


class CostModel(ABC):
    """Predicts which candidates are fast. Subclasses define encode, fit and score."""

    # whether the best programs shipped in the cost model file come with this model: a new
    # task's first batch holds those of its relatives (tessel.tuning.knowledge). Only the
    # shipped model's own (PretrainedModel, the default): a model from scratch starts from
    # nothing shipped.
    ships_programs: bool = False

    def __init__(self) -> None:
        self.inputs: list[Any] = []
        self.keys: list[str] = []
        self.throughputs = np.zeros(0)

    @abstractmethod
    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        """Model inputs (one per candidate)."""

    @abstractmethod
    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        """(Re)train on all data: inputs, workload keys, raw throughputs."""

    @abstractmethod
    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        """Scores of encoded inputs, higher = faster."""

    @property
    def trained(self) -> bool:
        return len(self.inputs) > 0

    @property
    def informed(self) -> bool:
        """Whether scores mean anything yet: trained on records (or, for a transfer model,
        starting from a pretrained global model). A search ranks its first batch by an
        informed model and falls back to expert priors and random samples otherwise."""
        return self.trained

    def update(self, candidates: Sequence[MeasureCandidate],
               results: Sequence[MeasureResult]) -> None:
        """Add measured candidates to the model's data and retrain on all of it."""
        check(len(candidates) == len(results),
              f"update: {len(candidates)} candidates but {len(results)} results")
        if not candidates:
            return
        self.inputs += self.encode(candidates)
        self.keys += [workload_key(c) for c in candidates]
        self.throughputs = np.concatenate([self.throughputs,
                                           [throughput(r) for r in results]])
        self.fit(self.inputs, self.keys, self.throughputs)

    def predict(self, candidates: Sequence[MeasureCandidate]) -> np.ndarray:
        """Scores (higher = predicted faster), one per candidate."""
        if not candidates:
            return np.zeros(0)
        return np.asarray(self.score(self.encode(candidates)), dtype=np.float64)

    def predict_with_std(self, candidates: Sequence[MeasureCandidate]
                         ) -> tuple[np.ndarray, np.ndarray] | None:
        """Mean scores and their uncertainty (for the EI and UCB acquisitions); None: this
        model gives no uncertainty (the bootstrapped ensemble does)."""
        return None

    def save(self, path: str | Path) -> None:
        """Write the model (its data and trained state) to `path`."""
        with open(path, "wb") as f:
            pickle.dump({"format": FORMAT, "model": self}, f)

    @classmethod
    def load(cls, path: str | Path) -> "CostModel":
        """Read a model written by `save`; it predicts exactly as the saved one did."""
        with open(path, "rb") as f:
            data = pickle.load(f)
        check(isinstance(data, dict) and data.get("format") == FORMAT,
              f"{path}: not a tessel cost model file (expected format {FORMAT!r})")
        model = data["model"]
        check(isinstance(model, cls), f"{path}: holds a {type(model).__name__}, not a "
                                      f"{cls.__name__}")
        return model


def no_margin(model: CostModel, base_margin: np.ndarray | None) -> None:
    check(base_margin is None, f"{type(model).__name__} cannot start from a base margin; "
                               "use an XGBModel as the local part of a transfer model")
