"""Feature vectors of scheduled programs for the cost models.

    from tessel import features
    X = features.extract("itervar", candidates)   # [n, features.width("itervar")] float64

Registry (name -> function of one PrimFunc, or of one candidate for "knob"):

- "itervar": loop-context features of every loop (AutoTVM's default; `loop_context`)
- "flat": loop-context features along the longest loop chain, innermost first
- "curve": context-relation features, the transferable ones (`relation`)
- "per_store": MetaSchedule/Ansor-style per-store features, pooled (`store`)
- "knob": a candidate's knob values or trace decisions (`knobs`)
- "relative": per_store beside its difference from the workload's unscheduled program
  (`relative`: what the schedule changed, which carries across shapes)

All program features come from one cached walk of the loop nest (`walker.analyze`).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from tessel.features.analysis import FeatureError, Nest
from tessel.features import knobs, loop_context, relation, relative, store
from tessel.features.knobs import knob
from tessel.features.loop_context import flat, itervar, loop_tree
from tessel.features.relation import curve
from tessel.features.store import per_store
from tessel.features.walker import analyze, vector
from tessel.ir import PrimFunc

FEATURES: dict[str, Callable[[PrimFunc], np.ndarray]] = {
    "itervar": itervar, "flat": flat, "curve": curve, "per_store": per_store,
}
CANDIDATE_FEATURES: dict[str, Callable[[Any], np.ndarray]] = {
    "knob": knob, "relative": relative.relative}
NAMES = tuple(FEATURES) + tuple(CANDIDATE_FEATURES)
DEFAULT = "itervar"
WIDTHS = {
    "itervar": loop_context.MAX_LOOPS * loop_context.row_width(),
    "flat": loop_context.FLAT_LOOPS * loop_context.row_width(),
    "curve": relation.width(),
    "per_store": store.WIDTH,
    "knob": knobs.WIDTH,
    "relative": relative.WIDTH,
}


def width(name: str) -> int:
    """Length of the vectors of feature set `name` (with default arguments)."""
    if name not in WIDTHS:
        raise FeatureError(f"unknown feature set {name!r}; known: {list(NAMES)}")
    return WIDTHS[name]


def _func(x: Any) -> PrimFunc:
    if isinstance(x, PrimFunc):
        return x
    func = getattr(x, "func", None)
    if not isinstance(func, PrimFunc):
        raise FeatureError(f"cannot featurize a {type(x).__name__}: pass PrimFuncs or "
                           "MeasureCandidates")
    return func


def featurize(name: str, item: Any) -> np.ndarray:
    """The `name` feature vector of one PrimFunc or MeasureCandidate."""
    if name in CANDIDATE_FEATURES:
        if isinstance(item, PrimFunc):
            raise FeatureError(f"feature set {name!r} needs candidates (knobs or traces), "
                               "not bare PrimFuncs")
        return CANDIDATE_FEATURES[name](item)
    if name not in FEATURES:
        raise FeatureError(f"unknown feature set {name!r}; known: {list(NAMES)}")
    return vector(_func(item), name, FEATURES[name])


def extract(name: str, items: Sequence[Any]) -> np.ndarray:
    """Feature matrix [len(items), width] of PrimFuncs or MeasureCandidates."""
    n = width(name)
    if not items:
        return np.zeros((0, n))
    return np.stack([featurize(name, x) for x in items])


__all__ = ["FEATURES", "CANDIDATE_FEATURES", "NAMES", "DEFAULT", "FeatureError", "Nest",
           "WIDTHS", "analyze", "curve", "extract", "featurize", "flat", "itervar", "knob",
           "loop_tree", "per_store", "width"]
