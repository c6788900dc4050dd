"""Buffer compaction: the pass run on a scheduled PrimFunc before the lowering passes.

`compact_buffers` (TVM's PlanAndUpdateBufferAllocationLocation + CompactBufferAllocation)
allocates every intermediate buffer at the lowest loop or block that holds all its accesses
and shrinks it to the region one execution of that loop body or block touches:

    for j_0:                                      for j_0:
      ... C_local[vi, vj] (13 x 20, at root)  ->    with T.block("C_local_alloc"):
                                                      C_local = T.alloc_buffer((4, 8))
                                                      ... C_local[i_1 * 4 + i_2, j_1]

An allocation under a loop is an opaque block (no iter vars) wrapping the loop's body, which
the C code generator declares per iteration (per thread inside a parallel loop). Shrunk
dimensions are indexed by `index - region min`, with block iter vars replaced by their
bindings so the index uses the loop vars inside the allocation point.

Where a buffer may carry values from one iteration of a loop to the next, it stays above that
loop: above the loops that bind reduction iter vars of a block writing it, above vectorized
loops, and, for accesses outside any block with iter vars (hand-written loop nests), at a
block. As in TensorIR, a block is assumed to read only what earlier blocks wrote.

A "local" buffer (a write cache: the accumulators of a register tile) also gets its
dimensions reordered so that the one its reduction block's vectorized loop walks is last:
an NCHW convolution vectorized over output channels accumulates `C_local[o, y, x]` with o
in the vector lanes, which as laid out would be a gather and a scatter per multiply-add;
as `C_local[y, x, o]` it is one vector load and store, which register promotion keeps in
registers. The copy-out reads it back once per tile, lane by lane.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tessel import arith, ir
from tessel.ir import (REDUCE, Block, BlockRealize, Buffer, BufferLoad, BufferRegion,
                       BufferStore, Expr, For, IfThenElse, PrimFunc, Range, SeqStmt, Stmt,
                       StmtMutator, Var)


# 1. where each buffer is accessed -----------------------------------------------------------
@dataclass
class _Usage:
    """Everything the plan needs to know about one allocated buffer."""

    owner: Block  # the block that allocates it now
    paths: list[tuple[Any, ...]] = field(default_factory=list)  # For/Block scopes per access
    pinned: set[int] = field(default_factory=set)  # ids of loops it must stay above
    unstructured: bool = False  # accessed outside any block with iter vars
    # per access by a reduction block under a vectorized loop: the dims the lanes walk
    vector_dims: list[frozenset[int]] = field(default_factory=list)


class _Collector:
    """Walks the program once, recording the scope path of every buffer access."""

    def __init__(self) -> None:
        self.usage: dict[Buffer, _Usage] = {}
        self.path: list[Any] = []
        self.realizes: list[BlockRealize] = []

    def run(self, func: PrimFunc) -> dict[Buffer, _Usage]:
        self.realize(func.body)
        return self.usage

    def access(self, buf: Buffer, write: bool, indices: tuple[Expr, ...] = ()) -> None:
        use = self.usage.get(buf)
        if use is None:
            return  # a parameter
        use.paths.append(tuple(self.path))
        realize = self.realizes[-1]
        if not realize.block.iter_vars:
            use.unstructured = True
        elif write:
            reduce = ir.binding_vars(realize, REDUCE)
            use.pinned |= {id(n) for n in self.path if isinstance(n, For) and n.loop_var in reduce}
            if reduce:
                dims = _vector_dims(self.path, realize, indices)
                if dims is not None:
                    use.vector_dims.append(dims)

    def expr(self, e: Expr) -> None:
        for load in ir.collect(e, BufferLoad):
            self.access(load.buffer, write=False)

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, For):
            self.path.append(s)
            self.stmt(s.body)
            self.path.pop()
        elif isinstance(s, BlockRealize):
            self.realize(s)
        elif isinstance(s, BufferStore):
            self.expr(s.value)
            for i in s.indices:
                self.expr(i)
            self.access(s.buffer, write=True, indices=s.indices)
        elif isinstance(s, IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)

    def realize(self, r: BlockRealize) -> None:
        for e in r.iter_values + (r.predicate,):
            self.expr(e)
        block = r.block
        for buf in block.alloc_buffers:
            self.usage[buf] = _Usage(block)
        self.path.append(block)
        self.realizes.append(r)
        for part in (block.init, block.body):
            if part is not None:
                self.stmt(part)
        self.realizes.pop()
        self.path.pop()


def _vector_dims(path: list[Any], r: BlockRealize,
                 indices: tuple[Expr, ...]) -> frozenset[int] | None:
    """The index dimensions that the innermost vectorized loop around block `r` moves (None
    without such a loop inside the block's scope)."""
    loop = next((n for n in reversed(path) if isinstance(n, For) and n.kind == "vectorized"),
                None)
    if loop is None:
        return None
    moved = {iv.var for iv, value in zip(r.block.iter_vars, r.iter_values)
             if loop.loop_var in ir.free_vars(value)}
    return frozenset(d for d, i in enumerate(indices) if ir.free_vars(i) & moved)


# 2. the plan: allocation site and compacted region ------------------------------------------
@dataclass
class _Plan:
    buffer: Buffer
    new: Buffer
    site: Any  # a For or a Block
    mins: tuple[Expr | None, ...]  # per dimension: region min, None where not compacted
    order: tuple[int, ...] | None = None  # the new buffer's dims, as dims of the old one

    def permute(self, items: tuple[Any, ...]) -> tuple[Any, ...]:
        return items if self.order is None else tuple(items[d] for d in self.order)


def _common_prefix(paths: list[tuple[Any, ...]]) -> list[Any]:
    prefix = list(paths[0])
    for p in paths[1:]:
        n = 0
        while n < min(len(prefix), len(p)) and prefix[n] is p[n]:
            n += 1
        del prefix[n:]
    return prefix


def _site_index(use: _Usage, prefix: list[Any]) -> int | None:
    """Index in prefix of the allocation site, or None to leave the buffer alone."""
    owner = next((k for k, n in enumerate(prefix) if n is use.owner), None)
    if owner is None:
        return None
    site = len(prefix) - 1
    for k, node in enumerate(prefix):
        if isinstance(node, For) and (id(node) in use.pinned or node.kind == "vectorized"):
            site = min(site, k - 1)
            break
    while use.unstructured and not isinstance(prefix[site], Block):
        site -= 1
    return max(site, owner)


def _plan(buf: Buffer, use: _Usage) -> _Plan | None:
    prefix = _common_prefix(use.paths)
    index = _site_index(use, prefix)
    if index is None:
        return None
    site = prefix[index]
    ana = arith.analyzer_at(prefix[: index + 1])
    stmt = site.body if isinstance(site, For) else site
    region = arith.touched_region(stmt, buf, reads=True, writes=True, analyzer=ana)
    if region is None:
        return None
    mins, shape = [], []
    for rng, n in zip(region.region, buf.shape):
        extent = ana.const_int_bound(ana.simplify(rng.extent))[1]
        if extent < n:
            mins.append(ana.simplify(rng.min))
            shape.append(max(1, int(extent)))
        else:
            mins.append(None)
            shape.append(n)
    order = _vector_last(buf, use, shape)
    if site is use.owner and all(m is None for m in mins) and order is None:
        return None
    if order is not None:
        shape = [shape[d] for d in order]
    new = buf if tuple(shape) == buf.shape else Buffer(buf.name, tuple(shape), buf.dtype, buf.scope)
    return _Plan(buf, new, site, tuple(mins), order)


def _vector_last(buf: Buffer, use: _Usage, shape: list[int]) -> tuple[int, ...] | None:
    """For a local buffer whose reduction writes all move one dimension in their vector
    lanes: the dimension order that puts it last (None: keep the order)."""
    if buf.scope != "local" or not use.vector_dims or len(set(use.vector_dims)) != 1:
        return None
    dims = use.vector_dims[0]
    if len(dims) != 1:
        return None
    (d,) = dims
    if all(n == 1 for n in shape[d + 1:]):
        return None  # already the last dimension that is not 1 wide
    return tuple(k for k in range(len(shape)) if k != d) + (d,)


def plan_buffers(func: PrimFunc) -> dict[Buffer, _Plan]:
    """The buffers compact_buffers moves or shrinks, with where and how."""
    plans = {}
    for buf, use in _Collector().run(func).items():
        if use.paths:
            p = _plan(buf, use)
            if p is not None:
                plans[buf] = p
    return plans


# 3. rewriting -------------------------------------------------------------------------------
class _Rewriter(StmtMutator):
    """Rebuilds the program: new indices and regions, allocations at their sites."""

    def __init__(self, plans: dict[Buffer, _Plan], names: set[str]) -> None:
        self.plans = plans
        self.by_site: dict[int, list[_Plan]] = {}
        for p in plans.values():
            self.by_site.setdefault(id(p.site), []).append(p)
        self.chain: list[tuple[Any, dict[Var, Expr]]] = []  # (scope node, its iter var binding)
        self.ana = arith.Analyzer()
        self.names = names

    # -- indices --
    def _inner_map(self, plan: _Plan) -> dict[Var, Expr]:
        """Block iter vars inside plan's site -> expressions in loop vars."""
        k = next(i for i, (n, _) in enumerate(self.chain) if n is plan.site)
        vmap: dict[Var, Expr] = {}
        for _, binding in self.chain[k + 1:]:
            for v, value in binding.items():
                vmap[v] = ir.substitute(value, vmap)
        return vmap

    def _inside(self, plan: _Plan) -> bool:
        return any(n is plan.site for n, _ in self.chain)

    def indices(self, plan: _Plan, idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        vmap = self._inner_map(plan)
        return plan.permute(tuple(i if m is None else
                                  self.ana.simplify(ir.substitute(i, vmap) - m)
                                  for i, m in zip(idx, plan.mins)))

    def expr(self, e: Expr) -> Expr:
        def visit(node: Any) -> Any:
            if isinstance(node, BufferLoad) and node.buffer in self.plans:
                plan = self.plans[node.buffer]
                return BufferLoad(plan.new, self.indices(plan, node.indices), node.dtype)
            return None
        return ir.transform(e, visit)

    # -- statements --
    def leaf(self, s: Stmt) -> Stmt:
        if not isinstance(s, BufferStore):
            return s
        value = self.expr(s.value)
        idx = tuple(self.expr(i) for i in s.indices)
        plan = self.plans.get(s.buffer)
        if plan is None:
            return BufferStore(s.buffer, value, idx)
        return BufferStore(plan.new, value, self.indices(plan, idx))

    def loop(self, s: For) -> Stmt:
        self.chain.append((s, {}))
        with self.ana.scope({s.loop_var: s.extent}):
            body = self.stmt(s.body)
        self.chain.pop()
        here = self.by_site.get(id(s), [])
        if here:
            name = ir.fresh_name(f"{here[0].buffer.name}_alloc", self.names)
            alloc = Block(name, (), (), (), body, alloc_buffers=tuple(p.new for p in here))
            body = ir.realize(alloc)
        return dataclasses.replace(s, body=body)

    def realize(self, r: BlockRealize) -> Stmt:
        values = tuple(self.expr(v) for v in r.iter_values)
        predicate = self.expr(r.predicate)
        block = r.block
        own = {iv.var: v for iv, v in zip(block.iter_vars, values)}
        self.chain.append((block, own))
        with self.ana.scope({iv.var: iv.extent for iv in block.iter_vars}):
            new_block = dataclasses.replace(
                block, reads=self.regions(block.reads), writes=self.regions(block.writes),
                init=None if block.init is None else self.stmt(block.init),
                body=self.stmt(block.body), alloc_buffers=self.allocations(block))
        self.chain.pop()
        return BlockRealize(values, predicate, new_block)

    def regions(self, regions: tuple[BufferRegion, ...]) -> tuple[BufferRegion, ...]:
        out = []
        for r in regions:
            plan = self.plans.get(r.buffer)
            if plan is None:
                out.append(r)
            elif self._inside(plan):
                mins = self.indices(plan, tuple(rng.min for rng in r.region))
                extents = plan.permute(tuple(rng.extent for rng in r.region))
                out.append(BufferRegion(plan.new, tuple(
                    Range(m, e) for m, e in zip(mins, extents))))
        return tuple(out)

    def allocations(self, block: Block) -> tuple[Buffer, ...]:
        kept = tuple(self.plans[b].new if b in self.plans else b for b in block.alloc_buffers
                     if b not in self.plans or self.plans[b].site is block)
        moved_in = tuple(p.new for p in self.by_site.get(id(block), ())
                         if not any(b is p.buffer for b in block.alloc_buffers))
        return kept + moved_in

def compact_buffers(func: PrimFunc) -> PrimFunc:
    """func with each intermediate buffer allocated at the lowest common ancestor (loop or
    block) of its accesses and shrunk to the region touched there (constant extents only)."""
    plans = plan_buffers(func)
    if not plans:
        return func
    names = {b.name for b in ir.blocks(func.body)}
    body = _Rewriter(plans, names).realize(func.body)
    return func.with_body(body)


__all__ = ["compact_buffers", "plan_buffers"]
