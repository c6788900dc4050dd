"""Integer index arithmetic: simplification, bounds, and interval/region analysis.

The `Analyzer` holds variable ranges and answers the questions schedule primitives ask:
`simplify` (canonical sums with floor division/modulo rules, predicates, min/max),
`const_int_bound`, `can_prove`, `modular_set`, `int_set`. Region helpers (`relax_region`,
`union_regions`, `clamp_region`, `touched_region`) tell which part of a buffer a loop nest
touches; `simplify_stmt` cleans every index of a statement tree; `evaluate` is the reference
semantics used by the tests.
"""
from tessel.arith.analyzer import Analyzer, ArithError, as_range
from tessel.arith.bound import INF
from tessel.arith.canonical import Atom, Sum
from tessel.arith.evaluate import evaluate
from tessel.arith.linear import const_offset, linear_form
from tessel.arith.region import (block_regions, clamp_region, detect_regions, relax_region,
                                 touched_region, union_regions)
from tessel.arith.stmt import analyzer_at, simplify_stmt


def simplify(expr, analyzer: Analyzer | None = None):
    """Analyzer.simplify with a fresh analyzer (no variable ranges) unless one is given."""
    return (analyzer or Analyzer()).simplify(expr)


def const_int_bound(expr, analyzer: Analyzer | None = None) -> tuple:
    return (analyzer or Analyzer()).const_int_bound(expr)


def can_prove(cond, analyzer: Analyzer | None = None) -> bool:
    return (analyzer or Analyzer()).can_prove(cond)


def int_set(expr, dom, analyzer: Analyzer | None = None) -> tuple:
    """(min_expr, max_expr) of expr while the vars of `dom` range over their domains."""
    return (analyzer or Analyzer()).int_set(expr, dom)


__all__ = [
    "Analyzer", "ArithError", "Atom", "INF", "Sum", "analyzer_at", "as_range", "block_regions",
    "can_prove", "clamp_region", "detect_regions",
    "const_int_bound", "const_offset", "evaluate", "int_set", "linear_form", "relax_region",
    "simplify", "simplify_stmt", "touched_region", "union_regions",
]
