"""(being written)"""
from __future__ import annotations


class ComputeLocationPrimitives:
    """Mixed into Schedule."""
