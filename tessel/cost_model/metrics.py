"""Ranking metrics for cost models: Kendall's tau, Spearman's rho and top-k recall."""
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


def spearman_rho(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties given their average rank; 0 if either is constant)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) != len(b):
        raise ValueError(f"spearman_rho: {len(a)} vs {len(b)} values")
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / denom) if denom > 0 else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of `x` from 0, ties given their average rank."""
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    return (first + (counts - 1) / 2.0)[inverse]


def top_k_recall(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    """Fraction of the k truly best (highest `true`) found among the k best predicted."""
    k = min(k, len(pred))
    if k == 0:
        return 0.0
    best_true = set(np.argsort(-np.asarray(true), kind="stable")[:k].tolist())
    best_pred = set(np.argsort(-np.asarray(pred), kind="stable")[:k].tolist())
    return len(best_true & best_pred) / k
