"""(being written)"""
from __future__ import annotations


class LayoutPrimitives:
    """Mixed into Schedule."""
