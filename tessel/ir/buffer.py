"""Buffers: named, typed, row-major multi-dimensional arrays."""
from __future__ import annotations

import math
from dataclasses import dataclass

from tessel.ir.expr import BufferLoad, Expr, ExprLike, IRError, check_dtype, convert

SCOPES = ("global", "local", "shared")


@dataclass(frozen=True, eq=False)
class Buffer:
    """A dense row-major array. Identity matters: two buffers with one name are distinct.

    `scope` is where it lives: "global" (function parameters and heap intermediates),
    "local" (per-thread scratch, e.g. a write cache) or "shared" (GPU shared memory).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    scope: str = "global"

    def __post_init__(self) -> None:
        check_dtype(self.dtype)
        if self.scope not in SCOPES:
            raise IRError(f"buffer {self.name}: unknown scope {self.scope!r}; use one of {SCOPES}")
        for n in self.shape:
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise IRError(f"buffer {self.name}: shape {self.shape} must be positive ints")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides in elements."""
        out, acc = [], 1
        for n in reversed(self.shape):
            out.append(acc)
            acc *= n
        return tuple(reversed(out))

    def load(self, indices: tuple[ExprLike, ...] | list[ExprLike]) -> BufferLoad:
        idx = tuple(convert(i) for i in indices)
        if len(idx) != self.ndim:
            raise IRError(f"buffer {self.name} has {self.ndim} dims, indexed with {len(idx)}")
        return BufferLoad(self, idx, self.dtype)

    def __getitem__(self, indices) -> BufferLoad:
        return self.load(indices if isinstance(indices, tuple) else (indices,))

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.dtype}{'' if self.scope == 'global' else ', ' + self.scope})"


@dataclass(frozen=True, eq=False)
class Range:
    """The half-open interval [min, min + extent)."""

    min: Expr
    extent: Expr

    @staticmethod
    def of(min: ExprLike, extent: ExprLike) -> "Range":
        return Range(convert(min), convert(extent))


@dataclass(frozen=True, eq=False)
class BufferRegion:
    """A rectangular region of a buffer: one Range per dimension."""

    buffer: Buffer
    region: tuple[Range, ...]

    @staticmethod
    def full(buffer: Buffer) -> "BufferRegion":
        return BufferRegion(buffer, tuple(Range.of(0, n) for n in buffer.shape))

    @staticmethod
    def point(buffer: Buffer, indices: tuple[Expr, ...]) -> "BufferRegion":
        return BufferRegion(buffer, tuple(Range.of(i, 1) for i in indices))
