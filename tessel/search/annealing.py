"""AutoTVM's model-based search (Algorithm 1 of the paper): parallel simulated annealing with
the cost model as energy, then a diversity-aware, epsilon-greedy batch.

Each `ask(n)`:
  1. `n_chains` Markov chains walk the space (a step: one mutation of the chain's program),
     accepting a move with probability exp((score' - score) / T), T falling linearly over at
     most `max_steps` steps; the chains persist across asks (and so across model updates);
  2. the top `lam * n` programs seen on the walk, never proposed before, are kept;
  3. of those, (1 - epsilon) n are chosen greedily to maximize the submodular objective
        sum of normalized scores + alpha * |distinct (sampling site, decision) pairs covered|
     and epsilon n are fresh random samples.
Scores come from the model by `acquisition`: "mean", or with a model that gives an
uncertainty (`predict_with_std`), "ucb" (mean + kappa std) or "ei" (expected improvement).
"""
from __future__ import annotations

import math

import numpy as np

from tessel.ir import PrimFunc
from tessel.search.base import (
    Proposal,
    SearchError,
    SearchStrategy,
    decision_items,
    program_key,
)
from tessel.space import SearchSpace

ACQUISITIONS = ("mean", "ucb", "ei")


class AnnealingSearch(SearchStrategy):
    name = "annealing"

    def __init__(self, space: SearchSpace, workload: PrimFunc, *,
                 n_chains: int = 16, max_steps: int = 40,
                 early_stop: int = 8, temperature: tuple[float, float] = (1.0, 0.0),
                 lam: float = 2.0, alpha: float = 0.1, epsilon: float = 0.05,
                 acquisition: str = "mean", kappa: float = 1.0, **kw) -> None:
        super().__init__(space, workload, **kw)
        if acquisition not in ACQUISITIONS:
            raise SearchError(f"annealing: unknown acquisition {acquisition!r}; use one of "
                              f"{ACQUISITIONS}")
        if n_chains < 1 or max_steps < 0 or lam < 1:
            raise SearchError(f"annealing: need n_chains >= 1, max_steps >= 0, lam >= 1 (got "
                              f"{n_chains}, {max_steps}, {lam})")
        self.n_chains, self.max_steps, self.early_stop = n_chains, max_steps, early_stop
        self.temperature, self.lam, self.alpha, self.epsilon = temperature, lam, alpha, epsilon
        self.acquisition, self.kappa = acquisition, kappa
        self.chains: list[Proposal] = []

    def ask(self, n: int) -> list[Proposal]:
        n_random = int(round(n * self.epsilon)) if self.cost_model is not None else 0
        top = self._anneal(max(1, math.ceil(self.lam * n)))
        chosen = self.take_new(self._diverse(top, n - n_random), n - n_random)
        return chosen + self.sample_new(n - len(chosen))

    # 1-2. the walk
    def _anneal(self, keep: int) -> list[tuple[float, Proposal]]:
        self._refill_chains()
        scores = self.score(self.chains)
        top: dict[str, tuple[float, Proposal]] = {}
        self._offer(top, self.chains, scores, keep)
        t0, t1 = self.temperature
        scale = float(np.std(scores)) or 1.0
        unchanged = 0
        for step in range(self.max_steps):
            temp = (t0 - (t0 - t1) * step / max(1, self.max_steps)) * scale
            moves = self.mutate_many(self.chains)
            idx = [k for k, m in enumerate(moves) if m is not None]
            new_scores = self.score([moves[k] for k in idx])
            for k, s in zip(idx, new_scores):
                if s >= scores[k] or (temp > 0 and
                                      self.rng.random() < math.exp((s - scores[k]) / temp)):
                    self.chains[k], scores[k] = moves[k], s
            changed = self._offer(top, [moves[k] for k in idx], new_scores, keep)
            unchanged = 0 if changed else unchanged + 1
            if unchanged >= self.early_stop:
                break
        return sorted(top.values(), key=lambda p: -p[0])

    def _refill_chains(self) -> None:
        starts = self.best_measured(self.n_chains // 2) if not self.chains else []
        self.chains += starts[: self.n_chains - len(self.chains)]
        fresh = self.sample_many(self.n_chains - len(self.chains))
        self.chains += [p for p in fresh if p is not None]

    def _offer(self, top: dict, batch: list[Proposal], scores, keep: int) -> bool:
        """Add unproposed programs to the top-`keep` set; True if it changed."""
        changed = False
        for sch, score in zip(batch, scores):
            key = program_key(sch)
            if key in top or key in self.seen:
                continue
            if len(top) < keep or score > min(v[0] for v in top.values()):
                top[key] = (float(score), sch)
                if len(top) > keep:
                    del top[min(top, key=lambda k: top[k][0])]
                changed = True
        return changed

    # 3. the batch
    def _diverse(self, top: list[tuple[float, Proposal]], n: int) -> list[Proposal]:
        """Greedy maximization of sum(score) + alpha * |knob values covered| (submodular)."""
        if not top:
            return []
        scores = np.array([s for s, _ in top])
        spread = float(scores.max() - scores.min()) or 1.0
        norm = (scores - scores.min()) / spread
        items = [decision_items(sch.trace) for _, sch in top]
        covered: set = set()
        chosen: list[int] = []
        left = set(range(len(top)))
        while left and len(chosen) < n:
            best = max(left, key=lambda k: (norm[k] + self.alpha * len(items[k] - covered), -k))
            chosen.append(best)
            covered |= items[best]
            left.remove(best)
        return [top[k][1] for k in chosen]

    # acquisition
    def score(self, batch: list[Proposal]) -> np.ndarray:
        if not batch:
            return np.zeros(0)
        if self.acquisition == "mean" or self.cost_model is None:
            return self.predict(batch)
        pair = self.cost_model.predict_with_std([p.candidate(self.workload) for p in batch])
        if pair is None:  # a model without uncertainty: its mean
            return self.predict(batch)
        mean, std = (np.asarray(a, dtype=float) for a in pair)
        if self.acquisition == "ucb":
            return mean + self.kappa * std
        return _expected_improvement(mean, std, best=float(mean.max()))


def _expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    std = np.maximum(std, 1e-12)
    z = (mean - best) / std
    cdf = 0.5 * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    return (mean - best) * cdf + std * pdf
