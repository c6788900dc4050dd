"""(being written)"""
from __future__ import annotations


class CachePrimitives:
    """Mixed into Schedule."""
