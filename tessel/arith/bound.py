"""Constant integer intervals: `(lo, hi)` pairs, inclusive, with `-inf`/`inf` for open ends.

Finite ends are Python ints; open ends are `math.inf` floats. Every operation here is exact
for integers and conservative (never narrower than the truth) for open ends.
"""
from __future__ import annotations

import math

INF = math.inf
Interval = tuple  # (lo, hi): int | float

EVERYTHING: Interval = (-INF, INF)
DTYPE_RANGES = {
    "bool": (0, 1), "int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767),
    "uint16": (0, 65535), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}


def dtype_range(dtype: str) -> Interval:
    """Values a variable of `dtype` can take (32/64-bit signed ints count as unbounded)."""
    if dtype in DTYPE_RANGES:
        return DTYPE_RANGES[dtype]
    return (0, INF) if dtype.startswith("uint") else EVERYTHING


def point(c: int) -> Interval:
    return (c, c)


def is_finite(x) -> bool:
    return not isinstance(x, float)


def add(a: Interval, b: Interval) -> Interval:
    return (a[0] + b[0], a[1] + b[1])


def neg(a: Interval) -> Interval:
    return (-a[1], -a[0])


def _mul1(x, y):
    return 0 if x == 0 or y == 0 else x * y


def mul(a: Interval, b: Interval) -> Interval:
    corners = [_mul1(x, y) for x in a for y in b]
    return (min(corners), max(corners))


def scale(a: Interval, k: int) -> Interval:
    if k > 0:
        return (a[0] * k, a[1] * k)
    return (-a[1] * -k, -a[0] * -k) if k < 0 else (0, 0)


def _fdiv(x, c: int):
    """floor(x / c) for an int or infinite x and a nonzero int c."""
    if not is_finite(x):
        return x if c > 0 else -x
    return x // c


def floordiv(a: Interval, c: int) -> Interval:
    """{x // c : x in a} for a nonzero constant c."""
    lo, hi = _fdiv(a[0], c), _fdiv(a[1], c)
    return (lo, hi) if c > 0 else (hi, lo)


def floormod(a: Interval, c: int) -> Interval:
    """{x % c : x in a} for a nonzero constant c (floor modulo: the sign of c)."""
    if is_finite(a[0]) and is_finite(a[1]) and a[0] // c == a[1] // c:
        lo, hi = a[0] % c, a[1] % c
        return (lo, hi) if lo <= hi else (hi, lo)
    return (0, c - 1) if c > 0 else (c + 1, 0)


def floordiv_interval(a: Interval, b: Interval) -> Interval:
    """{x // y : x in a, y in b}; unbounded when b may contain 0."""
    if b[1] < 0:
        return floordiv_interval(neg(a), neg(b))
    if b[0] <= 0:
        return EVERYTHING
    if is_finite(b[1]):
        corners = [_fdiv(x, y) for x in a for y in b]
        return (min(corners), max(corners))
    # y in [b0, inf): x // y tends to 0 (x >= 0) or -1 (x < 0) as y grows
    lo = _fdiv(a[0], b[0]) if a[0] < 0 else 0
    hi = _fdiv(a[1], b[0]) if a[1] >= 0 else -1
    return (lo, hi)


def floormod_interval(a: Interval, b: Interval) -> Interval:
    """{x % y : x in a, y in b}; bounded only for a strictly positive divisor."""
    if b[0] > 0:
        top = b[1] - 1
        return (0, min(a[1], top)) if a[0] >= 0 else (0, top)
    if b[1] < 0:
        return (b[0] + 1, 0)
    return EVERYTHING


def min_(a: Interval, b: Interval) -> Interval:
    return (min(a[0], b[0]), min(a[1], b[1]))


def max_(a: Interval, b: Interval) -> Interval:
    return (max(a[0], b[0]), max(a[1], b[1]))


def union(a: Interval, b: Interval) -> Interval:
    return (min(a[0], b[0]), max(a[1], b[1]))


def intersect(a: Interval, b: Interval) -> Interval:
    return (max(a[0], b[0]), min(a[1], b[1]))
