"""Buffer regions: which part of a buffer a loop nest touches, as a function of outer vars.

This is what compute_at and cache_read/cache_write need:

    touched_region(loop_body, B, dom={})   # B[i*4 : i*4 + 4, 0:16] under an outer loop i

Regions are conservative (they contain every accessed element) and exact for affine indices
in distinct variables. They are not clamped to the buffer; use clamp_region for that.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from tessel.arith import intset, rewrite
from tessel.arith.analyzer import Analyzer, ArithError, RangeLike, as_range
from tessel.arith.canonical import Sum
from tessel.arith.linear import const_offset
from tessel.ir import (Block, BlockRealize, Buffer, BufferLoad, BufferRegion, BufferStore, Expr,
                       For, IfThenElse, Range, SeqStmt, Stmt, Var, collect, substitute)

Region = tuple  # tuple[Range, ...]


def _ends(ana: Analyzer, rng: Range) -> tuple[Sum, Sum]:
    lo = ana.sum_of(rng.min)
    return lo, lo.add(ana.sum_of(rng.extent)).plus(-1)


def _range(lo: Sum, hi: Sum) -> Range:
    return Range(lo.to_expr(), hi.add(lo, -1).plus(1).to_expr())


def relax_region(indices: Sequence[Expr], dom: Mapping[Var, RangeLike],
                 shape: Sequence[int] | None = None, analyzer: Analyzer | None = None) -> Region:
    """One Range per index covering it while the vars of `dom` range over their domains.
    A dimension that cannot be bounded covers the whole of `shape` (ArithError without it)."""
    ana = analyzer or Analyzer()
    dom = {v: as_range(r) for v, r in dom.items()}
    out = []
    for d, idx in enumerate(indices):
        lo, hi = intset.sum_set(ana, ana.sum_of(idx), dom)
        if lo is None or hi is None:
            out.append(_full_dim(shape, d))
        else:
            out.append(_range(lo, hi))
    return tuple(out)


def _full_dim(shape: Sequence[int] | None, d: int) -> Range:
    if shape is None:
        raise ArithError(f"dimension {d} of the region is unbounded; pass the buffer shape")
    return Range.of(0, shape[d])


def union_regions(regions: Iterable[Region | BufferRegion], shape: Sequence[int] | None = None,
                  analyzer: Analyzer | None = None) -> Region:
    """The covering hull of regions of one buffer, dimension by dimension.

    Where the ends cannot be ordered the hull keeps min/max expressions, or, given `shape`,
    covers the whole dimension (so extents stay affine)."""
    ana = analyzer or Analyzer()
    regions = [r.region if isinstance(r, BufferRegion) else tuple(r) for r in regions]
    if not regions:
        raise ArithError("union_regions needs at least one region")
    out = []
    for d in range(len(regions[0])):
        ends = [_ends(ana, r[d]) for r in regions]
        lo = rewrite.minmax(ana, "min", [e[0] for e in ends])
        hi = rewrite.minmax(ana, "max", [e[1] for e in ends])
        exact = (any(lo.key == e[0].key for e in ends) and any(hi.key == e[1].key for e in ends))
        if not exact and shape is not None:
            out.append(_full_dim(shape, d))
        else:
            out.append(_range(lo, hi))
    return tuple(out)


def clamp_region(region: Region | BufferRegion, shape: Sequence[int] | None = None,
                 analyzer: Analyzer | None = None) -> Region | BufferRegion:
    """Intersect a region with [0, shape): min becomes max(min, 0), the end min(end, n - 1).
    A BufferRegion is clamped to its buffer's shape and stays a BufferRegion."""
    ana = analyzer or Analyzer()
    if isinstance(region, BufferRegion):
        return BufferRegion(region.buffer, clamp_region(region.region, region.buffer.shape, ana))
    if shape is None:
        raise ArithError("clamp_region needs a shape for a bare tuple of ranges")
    out = []
    for rng, n in zip(region, shape):
        lo, hi = _ends(ana, rng)
        lo = rewrite.minmax(ana, "max", [lo, Sum(lo.dtype, const=0)])
        hi = rewrite.minmax(ana, "min", [hi, Sum(hi.dtype, const=n - 1)])
        out.append(_range(lo, hi))
    return tuple(out)


def touched_region(stmt: Stmt, buffer: Buffer, dom: Mapping[Var, RangeLike] | None = None,
                   reads: bool = True, writes: bool = False,
                   analyzer: Analyzer | None = None) -> BufferRegion | None:
    """The region of `buffer` that `stmt` reads (and/or writes), with the loop vars of loops
    inside `stmt` and the vars of `dom` relaxed; block iter vars are replaced by their
    bindings. None when `stmt` does not touch `buffer` that way."""
    ana = analyzer or Analyzer()
    outer = {v: as_range(r) for v, r in (dom or {}).items()}
    found = _Accesses(buffer, reads, writes)
    found.stmt(stmt, {}, {})
    if not found.accesses:
        return None
    regions = [relax_region(idx, {**outer, **loops}, buffer.shape, ana)
               for idx, loops in found.accesses]
    if len(regions) == 1:
        return BufferRegion(buffer, regions[0])
    return BufferRegion(buffer, union_regions(regions, buffer.shape, ana))


class _Accesses:
    """Collects (indices, loop domain) of every access to one buffer in a statement tree."""

    def __init__(self, buffer: Buffer, reads: bool, writes: bool) -> None:
        self.buffer, self.reads, self.writes = buffer, reads, writes
        self.accesses: list[tuple[tuple[Expr, ...], dict]] = []
        self.seen: set[tuple] = set()

    def record(self, indices: tuple[Expr, ...], vmap: dict, loops: dict) -> None:
        idx = tuple(substitute(i, vmap) for i in indices)
        key = (tuple(id(i) for i in indices), tuple(id(v) for v in vmap.values()),
               tuple(loops))
        if key not in self.seen:
            self.seen.add(key)
            self.accesses.append((idx, loops))

    def expr(self, e: Expr, vmap: dict, loops: dict) -> None:
        if self.reads:
            for load in collect(e, BufferLoad, distinct=True):  # a shared load once
                if load.buffer is self.buffer:
                    self.record(load.indices, vmap, loops)

    def stmt(self, s: Stmt, vmap: dict, loops: dict) -> None:
        if isinstance(s, For):
            self.stmt(s.body, vmap, {**loops, s.loop_var: Range.of(0, s.extent)})
        elif isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, vmap, loops)
        elif isinstance(s, BlockRealize):
            values = [substitute(v, vmap) for v in s.iter_values]
            for v in s.iter_values:
                self.expr(v, vmap, loops)
            self.expr(s.predicate, vmap, loops)
            inner = {**vmap, **{iv.var: v for iv, v in zip(s.block.iter_vars, values)}}
            self.block(s.block, inner, loops)
        elif isinstance(s, Block):
            self.block(s, vmap, loops)
        elif isinstance(s, BufferStore):
            if self.writes and s.buffer is self.buffer:
                self.record(s.indices, vmap, loops)
            self.expr(s.value, vmap, loops)
            for i in s.indices:
                self.expr(i, vmap, loops)
        elif isinstance(s, IfThenElse):
            self.expr(s.condition, vmap, loops)
            self.stmt(s.then_case, vmap, loops)
            if s.else_case is not None:
                self.stmt(s.else_case, vmap, loops)

    def block(self, b: Block, vmap: dict, loops: dict) -> None:
        if b.init is not None:
            self.stmt(b.init, vmap, loops)
        self.stmt(b.body, vmap, loops)


def detect_regions(buffers: list[tuple[Buffer, tuple[Expr, ...]]]) -> tuple[BufferRegion, ...]:
    """Regions covering a list of (buffer, indices) accesses, one region per buffer.

    Identical accesses give a point region; accesses that differ in a dimension by constant
    offsets give the covering interval; anything else covers the whole dimension.
    """
    grouped: dict[Buffer, list[tuple[Expr, ...]]] = {}
    for buf, idx in buffers:
        grouped.setdefault(buf, []).append(idx)
    regions = []
    for buf, accesses in grouped.items():
        dims = []
        for d, n in enumerate(buf.shape):
            first = accesses[0][d]
            offsets = [const_offset(a[d], first) for a in accesses]
            if all(o is not None for o in offsets):
                lo, hi = min(offsets), max(offsets)
                dims.append(Range.of(first + lo, hi - lo + 1))
            else:
                dims.append(Range.of(0, n))
        regions.append(BufferRegion(buf, tuple(dims)))
    return tuple(regions)


def block_regions(body: Stmt, init: Stmt | None = None
                  ) -> tuple[tuple[BufferRegion, ...], tuple[BufferRegion, ...]]:
    """(reads, writes) of a block body. A buffer that is stored is not listed as read
    because of the reduction's own accumulator load (TensorIR's convention)."""
    stmts = [body] + ([init] if init is not None else [])
    stores = [(s.buffer, s.indices) for x in stmts for s in collect(x, BufferStore)]
    written = {b for b, _ in stores}
    loads = [(e.buffer, e.indices) for x in stmts for e in collect(x, BufferLoad, distinct=True)
             if e.buffer not in written]  # (a load shared by several terms counted once)
    return detect_regions(loads), detect_regions(stores)
