"""Measurement: build candidates, time them in isolation, report results (never raise)."""
from tessel.measure.result import ERROR_KINDS, MeasureCandidate, MeasureResult

__all__ = ["ERROR_KINDS", "MeasureCandidate", "MeasureResult"]
