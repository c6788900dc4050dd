"""Configuration ("knob") features: the values of a candidate's knobs, as numbers.

This is the Bayesian-optimization representation AutoTVM compares against (Figure 9): it
works within one search space and does not transfer. A candidate's `knobs` (template
spaces) are used when given, else its trace's sampling decisions in instruction order.
Numbers stay numbers, nested sequences are flattened, strings and other values become a
stable hash in [0, 1); the vector is padded or truncated to `width`.
"""
from __future__ import annotations

import zlib
from typing import Any, Iterator

import numpy as np

from tessel.features.analysis import check

WIDTH = 32


def knob_values(candidate: Any) -> tuple[Any, ...]:
    """The knob values of a MeasureCandidate: its knobs, else its trace's decisions."""
    if getattr(candidate, "knobs", None) is not None:
        return tuple(candidate.knobs)
    trace = getattr(candidate, "trace", None)
    check(trace is not None, "knob features need a candidate with knobs or a trace; got "
                             f"{type(candidate).__name__} without either")
    return tuple(trace.decisions[i] for i in sorted(trace.decisions))


def _numbers(value: Any) -> Iterator[float]:
    if isinstance(value, (bool, int, float, np.integer, np.floating)):
        yield float(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _numbers(v)
    elif value is None:
        yield -1.0
    else:
        yield (zlib.crc32(repr(value).encode()) % 1_000_003) / 1_000_003


def knob(candidate: Any, width: int = WIDTH) -> np.ndarray:
    """The knob feature vector of one candidate (length `width`)."""
    values = list(_numbers(knob_values(candidate)))[:width]
    out = np.zeros(width)
    out[:len(values)] = values
    return out
