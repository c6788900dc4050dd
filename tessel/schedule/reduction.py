"""(being written)"""
from __future__ import annotations


class ReductionPrimitives:
    """Mixed into Schedule."""
