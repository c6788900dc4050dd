"""Ranking metrics for cost models: Kendall's tau and top-k recall."""
from __future__ import annotations

import numpy as np


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall's tau-b between two score vectors (ties handled; 0 if either is constant)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) != len(b):
        raise ValueError(f"kendall_tau: {len(a)} vs {len(b)} values")
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), k=1)
    da, db = da[iu], db[iu]
    denom = np.sqrt(np.count_nonzero(da) * np.count_nonzero(db))
    return float((da * db).sum() / denom) if denom > 0 else 0.0


def top_k_recall(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    """Fraction of the k truly best (highest `true`) found among the k best predicted."""
    k = min(k, len(pred))
    if k == 0:
        return 0.0
    best_true = set(np.argsort(-np.asarray(true), kind="stable")[:k].tolist())
    best_pred = set(np.argsort(-np.asarray(pred), kind="stable")[:k].tolist())
    return len(best_true & best_pred) / k
