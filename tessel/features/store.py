"""Per-store features (MetaSchedule's PerStoreFeature, after Ansor), pooled to one vector.

For every buffer store, with the loops around it:

1. compute: op counts by kind (`OP_KINDS`: float multiply-add, add/sub, mul, div/mod,
   compare, math calls, min/max; the same for ints; bool, select, cast) times executions;
2. loop annotations: for vectorized, unrolled, parallel and thread-bound loops, how many
   enclose the store, the product of their lengths, the innermost one's length and its
   position (innermost loop / inner half / outer half / none);
3. per buffer it accesses (up to 5, most cache lines first): access type (read / write /
   read-write), bytes, unique bytes, cache lines (64 B), unique lines, reuse type (loop
   carried / serial read-write / none), reuse distance in iterations and bytes, reuse
   count, the four sizes divided by the reuse count, and the innermost stride;
4. arithmetic intensity (flops / touched bytes) at each loop level, sampled at 10 points;
5. allocation: whether the stored buffer is an intermediate, its (compacted) size, and
   the products of the loops outside and inside the allocation point;
6. outer loops: executions, loop depth, auto-unroll step.

Magnitudes are log2(1 + x). A program's vector is [the store with most work, elementwise
max over stores, mean over stores].
"""
from __future__ import annotations

import numpy as np

from tessel.features.analysis import (KIND_INDEX, OP_KINDS, Access, Nest, StoreFacts,
                                      access_counts)
from tessel.features.loop_context import log2p
from tessel.features.walker import analyze
from tessel.ir import PrimFunc

LINE_BYTES = 64.0
MAX_BUFFERS = 5
ANNOTATED = ("vectorized", "unrolled", "parallel", "thread_binding")
BUFFER_WIDTH = 18
AI_POINTS = 10
STORE_WIDTH = len(OP_KINDS) + 7 * len(ANNOTATED) + BUFFER_WIDTH * MAX_BUFFERS + AI_POINTS + 4 + 3
WIDTH = 3 * STORE_WIDTH
_FLOAT_OPS = np.array([2.0 if k == "float_mad" else 1.0 if k.startswith("float") else 0.0
                       for k in OP_KINDS])


def per_store(func: PrimFunc) -> np.ndarray:
    """The pooled per-store feature vector of `func` (length WIDTH)."""
    nest = analyze(func)
    if not nest.stores:
        return np.zeros(WIDTH)
    rows = np.stack([store_row(nest, s) for s in nest.stores])
    work = [np.prod(nest.extents[list(s.path)]) * (1.0 + s.ops.sum()) for s in nest.stores]
    main = rows[int(np.argmax(work))]
    return np.concatenate([main, rows.max(axis=0), rows.mean(axis=0)])


def store_row(nest: Nest, s: StoreFacts) -> np.ndarray:
    lens = nest.extents[list(s.path)]
    execs = float(np.prod(lens))
    groups = _groups(nest, s, lens)
    parts = [log2p(s.ops * execs), _annotations(nest, s.path, lens),
             _buffers(groups), _intensity(nest, s, lens, groups),
             _allocation(nest, s, execs), _outer(nest, s.path, execs)]
    return np.concatenate(parts)


def _annotations(nest: Nest, path: tuple[int, ...], lens: np.ndarray) -> np.ndarray:
    out = np.zeros((len(ANNOTATED), 7))
    kinds = nest.kinds[list(path)]
    for a, kind in enumerate(ANNOTATED):
        where = np.flatnonzero(kinds == KIND_INDEX[kind])
        if len(where) == 0:
            out[a, 6] = 1.0
            continue
        inner = where[-1]
        out[a, :3] = [len(where), log2p(np.prod(lens[where])), log2p(lens[inner])]
        pos = 3 if inner == len(path) - 1 else 4 if 2 * inner >= len(path) else 5
        out[a, pos] = 1.0
    return out.ravel()


class _Group:
    """The accesses of one buffer in one store."""

    def __init__(self, nest: Nest, accesses: list[Access], lens: np.ndarray) -> None:
        first = accesses[0]
        self.lens = lens
        self.bytes_per = float(nest.buffer_bytes[first.slot])
        self.n = len(accesses)
        self.write = any(a.write for a in accesses)
        self.read = any(not a.write for a in accesses)
        self.strides = np.asarray(first.strides)
        self.count = access_counts(nest.extents, first)[0] if len(lens) else np.ones(1)
        self.lines, self.unique_lines = _lines(self.strides, lens, self.count, self.bytes_per)

    def elems_at(self, q: int) -> float:
        """Distinct elements touched by the loops from path position q inwards."""
        return float(self.count[q]) if q < len(self.lens) else 1.0

    def sizes(self) -> np.ndarray:
        """bytes, unique bytes, lines, unique lines over the whole nest."""
        total = float(np.prod(self.lens)) * self.n * self.bytes_per
        return np.array([total, self.elems_at(0) * self.bytes_per, self.lines * self.n,
                         self.unique_lines])


def _groups(nest: Nest, s: StoreFacts, lens: np.ndarray) -> list[_Group]:
    by_slot: dict[int, list[Access]] = {}
    for a in s.accesses:
        by_slot.setdefault(a.slot, []).append(a)
    groups = [_Group(nest, acc, lens) for acc in by_slot.values()]
    return sorted(groups, key=lambda g: -g.lines)


def _lines(strides: np.ndarray, lens: np.ndarray, count: np.ndarray,
           bytes_per: float) -> tuple[float, float]:
    """(cache lines accessed, unique cache lines) over the whole nest around a store: the
    innermost moving loop walks `run` elements per line; loops inside it re-touch the line."""
    moving = np.flatnonzero(strides != 0)
    if len(moving) == 0:
        return 1.0, 1.0
    r = moving[-1]
    step = abs(float(strides[r])) * bytes_per
    run = min(float(lens[r]), max(1.0, LINE_BYTES / step))
    lines = float(np.prod(lens[: r + 1])) / run
    return lines, max(1.0, float(count[0]) / run)


def _buffers(groups: list[_Group]) -> np.ndarray:
    out = np.zeros((MAX_BUFFERS, BUFFER_WIDTH))
    for k, g in enumerate(groups[:MAX_BUFFERS]):
        out[k, 0 if not g.write else 1 if not g.read else 2] = 1.0
        out[k, 3:7] = g.sizes()
        out[k, 7:17] = _reuse(g, groups)
        out[k, 17] = g.strides[-1] if len(g.strides) else 0.0
    return log2p(out).ravel()


def _reuse(g: _Group, groups: list[_Group]) -> np.ndarray:
    """Reuse type one-hot (loop carried, serial read-write, none), reuse distance in
    iterations and bytes, reuse count, and the four sizes divided by the reuse count."""
    out = np.zeros(10)
    still = np.flatnonzero(g.strides == 0)
    if len(still):
        q = int(still[-1])  # the innermost loop that revisits the same element
        out[0], ct = 1.0, float(g.lens[q])
        dis_iter = float(np.prod(g.lens[q + 1:]))
        dis_bytes = sum(h.elems_at(q + 1) * h.bytes_per for h in groups)
    elif g.read and g.write:
        out[1], ct, dis_iter, dis_bytes = 1.0, 1.0, 1.0, g.bytes_per
    else:
        out[2] = 1.0
        return out
    out[3:6] = [dis_iter, dis_bytes, ct]
    out[6:10] = g.sizes() / ct
    return out


def _intensity(nest: Nest, s: StoreFacts, lens: np.ndarray, groups: list[_Group]) -> np.ndarray:
    """Float ops per touched byte at each loop level, sampled at AI_POINTS points along
    log2(iterations below the level)."""
    flops = float(s.ops @ _FLOAT_OPS)
    if len(lens) == 0 or flops == 0:
        return np.zeros(AI_POINTS)
    iters = np.cumprod(lens[::-1])[::-1]                      # below and at each level
    touched = sum(g.count * g.bytes_per for g in groups)
    x = np.log2(iters[::-1])
    y = np.log2(1.0 + flops * iters / touched)[::-1]
    return np.interp(np.linspace(x[0], x[-1], AI_POINTS), x, y)


def _allocation(nest: Nest, s: StoreFacts, execs: float) -> np.ndarray:
    """[is intermediate, allocated bytes, loops outside / inside the allocation point]."""
    if nest.is_param[s.slot]:
        return np.zeros(4)
    prefix, elems = alloc_site(nest, s.slot)
    outer = float(np.prod(nest.extents[list(prefix)]))
    size = min(elems, float(nest.buffer_sizes[s.slot])) * nest.buffer_bytes[s.slot]
    return np.array([1.0, log2p(size), log2p(outer), log2p(execs / outer)])


def alloc_site(nest: Nest, slot: int) -> tuple[tuple[int, ...], float]:
    """The loops enclosing every access of buffer `slot` (where compaction would allocate
    it) and the elements one iteration of them touches."""
    accesses = [a for a in nest.accesses if a.slot == slot]
    prefix = accesses[0].path
    for a in accesses[1:]:
        k = 0
        while k < min(len(prefix), len(a.path)) and prefix[k] == a.path[k]:
            k += 1
        prefix = prefix[:k]
    c = len(prefix)
    elems = max((access_counts(nest.extents, a)[0][c] if c < len(a.path) else 1.0)
                for a in accesses)
    return prefix, float(elems)


def _outer(nest: Nest, path: tuple[int, ...], execs: float) -> np.ndarray:
    steps = nest.unroll_steps[list(path)]
    return np.array([log2p(execs), float(len(path)), log2p(steps.max(initial=0.0))])
