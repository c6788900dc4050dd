"""Compute-location primitives: where a block runs relative to the others.

    sch.compute_inline(pad)               # substitute pad's expression into its readers
    sch.reverse_compute_inline(relu)      # fold relu into the store of its producer
    sch.compute_at(pad, y)                # pad's rows needed by one y iteration, inside y
    sch.reverse_compute_at(bn_relu, x0)   # bn_relu of the tile conv2d wrote, inside x0
    loc = sch.sample_compute_location(b); sch.compute_at(b, loc)

As in TensorIR, a block never changes when it moves: only the loops around it are rebuilt,
with bindings `region min + loop var` that cover the region it must compute in one iteration
of the target loop, plus a predicate where that region can leave the block's domain.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from tessel import arith, ir
from tessel.ir import (REDUCE, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Expr, For,
                       IntImm, PrimFunc, Range, Var)
from tessel.arith import block_regions
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.trace import BlockRV, LoopRV, ScheduleError, check

ROOT, INLINE = "root", "inline"  # the special locations sample_compute_location may return


# 1. inlining ------------------------------------------------------------------------------
def single_store(block: Block, primitive: str) -> BufferStore:
    check(block.init is None and isinstance(block.body, BufferStore),
          f"{primitive}: block {block.name} is not a single BufferStore (it has "
          f"{'an init and ' if block.init is not None else ''}{_describe(block.body)})")
    return block.body


def _describe(body: Any) -> str:
    if isinstance(body, ir.SeqStmt):
        return f"{len(body.seq)} statements"
    return f"a {type(body).__name__} body"


def _check_spatial(block: Block, primitive: str, role: str = "block") -> None:
    reduce = [iv.var.name for iv in block.iter_vars if iv.kind == REDUCE]
    check(not reduce, f"{primitive}: {role} {block.name} is a reduction (reduce iter vars "
                      f"{', '.join(reduce)}); only spatial blocks qualify")


def _leaf_blocks(func: PrimFunc) -> list[Block]:
    """Blocks without blocks inside, in program order: the ones whose stores are their own."""
    return [b for b in ir.blocks(func.body) if not ir.collect_stmts(b.body, BlockRealize)]


def _writers(func: PrimFunc, buffer: Buffer) -> list[Block]:
    return [b for b in _leaf_blocks(func) if buffer in ir.written_buffers(b)]


def _check_inlinable(func: PrimFunc, block: Block) -> BufferStore:
    _check_spatial(block, "compute_inline")
    store = single_store(block, "compute_inline")
    buf, name = store.buffer, block.name
    ivars = [iv.var for iv in block.iter_vars]
    check(all(isinstance(i, Var) for i in store.indices) and len(set(store.indices)) ==
          len(store.indices) == len(ivars) and set(store.indices) == set(ivars),
          f"compute_inline: block {name} stores {ir.expr_str(buf.load(store.indices))}; its "
          "indices must be exactly its iter vars, each once")
    check(buf not in func.params, f"compute_inline: block {name} writes {buf.name}, an output "
                                  "of the function; an output block cannot be inlined")
    check(buf not in ir.read_buffers(store.value),
          f"compute_inline: block {name} reads {buf.name}, the buffer it writes")
    others = [b.name for b in _writers(func, buf) if b is not block]
    check(not others, f"compute_inline: {buf.name} is also written by {', '.join(others)}")
    return store


def _inline_loads(func: PrimFunc, store: BufferStore) -> ir.BlockRealize:
    """The function body with every load of store.buffer replaced by the stored value, its
    allocation dropped and the read regions of the changed blocks recomputed."""
    buf = store.buffer

    def rewrite(node: Any) -> Any:
        if isinstance(node, BufferLoad) and node.buffer is buf:
            return ir.substitute(store.value, dict(zip(store.indices, node.indices)))
        if isinstance(node, Block):
            return _refresh_block(node, buf)
        return None
    return ir.transform(func.body, rewrite)


def _refresh_block(block: Block, gone: Buffer) -> Block | None:
    changes: dict[str, Any] = {}
    if gone in block.alloc_buffers:
        changes["alloc_buffers"] = tuple(b for b in block.alloc_buffers if b is not gone)
    leaf = not ir.collect_stmts(block.body, BlockRealize)
    if leaf and any(r.buffer is gone for r in block.reads):
        changes["reads"] = block_regions(block.body, block.init)[0]
        return arith.simplify_stmt(dataclasses.replace(block, **changes))
    return dataclasses.replace(block, **changes) if changes else None


def _check_reverse_inlinable(func: PrimFunc, path: list[Any]) -> tuple[BlockRealize, list[Var]]:
    """The producer's realize, and the consumer iter var at each index of its loads."""
    block = path[-1].block
    _check_spatial(block, "reverse_compute_inline")
    store = single_store(block, "reverse_compute_inline")
    producers = [b for b in tree.child_blocks(tree.scope_block(path)) if b is not block
                 and ir.written_buffers(b) & ir.read_buffers(block.body)]
    check(len(producers) == 1, f"reverse_compute_inline: block {block.name} has "
                               f"{len(producers)} producer blocks; it needs exactly one")
    producer = producers[0]
    _check_spatial(producer, "reverse_compute_inline", "producer")
    p_store = single_store(producer, "reverse_compute_inline")
    order = _load_map(block, p_store.buffer)
    check(store.buffer is not p_store.buffer and store.buffer not in
          ir.read_buffers(store.value), f"reverse_compute_inline: block {block.name} reads "
                                        f"{store.buffer.name}, the buffer it writes")
    _check_nothing_between(func, producer, block)
    return tree.find_realize(func, producer.name), order


def _load_map(block: Block, buf: Buffer) -> list[Var]:
    """The consumer iter var at each index of its loads of `buf`; an extent-1 dimension may be
    read at 0 (as simplification leaves a batch of 1), matched with an extent-1 iter var."""
    loads = [e for e in ir.collect(block.body, BufferLoad) if e.buffer is buf]
    ivars = {iv.var: iv.extent for iv in block.iter_vars}
    first = loads[0].indices
    unit = [v for v, n in ivars.items() if n == 1 and v not in first]
    order: list[Var] | None = []
    for index, n in zip(first, buf.shape):
        if isinstance(index, Var) and ivars.get(index) == n:
            order.append(index)
        elif isinstance(index, ir.IntImm) and index.value == 0 and n == 1 and unit:
            order.append(unit.pop(0))
        else:
            order = None
            break
    ok = order is not None and len(set(order)) == len(order) == len(ivars) == len(buf.shape)
    bad = next((e for e in loads if not ok or not all(_same_index(a, b) for a, b in
                                                       zip(e.indices, first))), None)
    check(bad is None, f"reverse_compute_inline: block {block.name} reads "
                       f"{ir.expr_str(bad) if bad is not None else ''}; it must read "
                       f"{buf.name} at its iter vars, one to one, covering the buffer")
    return list(order)


def _same_index(a: Expr, b: Expr) -> bool:
    return a is b or (isinstance(a, ir.IntImm) and isinstance(b, ir.IntImm)
                      and a.value == b.value)


def _check_nothing_between(func: PrimFunc, producer: Block, consumer: Block) -> None:
    order = _leaf_blocks(func)
    between = order[order.index(producer) + 1: order.index(consumer)]
    touched = ir.read_buffers(consumer.body) | ir.written_buffers(consumer.body)
    out = ir.written_buffers(consumer.body)
    for b in between:
        check(not (ir.written_buffers(b) & touched or ir.read_buffers(b) & out),
              f"reverse_compute_inline: block {b.name}, between {producer.name} and "
              f"{consumer.name}, uses a buffer that {consumer.name} reads or writes")


def _fold_consumer(producer: Block, consumer: Block, order: list[Var], keep: bool) -> Block:
    p_store = producer.body
    vmap = dict(zip(order, p_store.indices))
    c_store: BufferStore = consumer.body

    def rewrite(node: Any) -> Any:
        if isinstance(node, BufferLoad) and node.buffer is p_store.buffer:
            return p_store.value
        return None
    value = ir.transform(ir.substitute(c_store.value, vmap), rewrite)
    indices = tuple(ir.substitute(i, vmap) for i in c_store.indices)
    new_store = BufferStore(c_store.buffer, value, indices)
    body = ir.seq(p_store, new_store) if keep else new_store
    reads, writes = block_regions(body)
    return arith.simplify_stmt(dataclasses.replace(producer, body=body, reads=reads,
                                                   writes=writes))


# 2. moving a block under a loop: where it goes and what must hold --------------------------
@dataclass(frozen=True)
class Site:
    """A block to move and the loop it goes under, both in the scope block `scope`."""

    primitive: str
    realize: BlockRealize
    loop: For
    loop_path: tuple[Any, ...]
    scope: Block
    position: dict[int, int]  # id(realize or loop) -> pre-order position in the scope
    under: frozenset[str]     # names of the blocks under the loop

    @property
    def block(self) -> Block:
        return self.realize.block

    @property
    def reverse(self) -> bool:
        return self.primitive == "reverse_compute_at"

    def where(self, realize: BlockRealize) -> int:
        """-1: before the loop, 0: under it, 1: after it."""
        if realize.block.name in self.under:
            return 0
        return -1 if self.position[id(realize)] < self.position[id(self.loop)] else 1


def find_site(func: PrimFunc, name: str, var: Var, reverse: bool) -> Site:
    primitive = "reverse_compute_at" if reverse else "compute_at"
    b_path, l_path = tree.block_path(func, name), tree.loop_path(func, var)
    block, loop = b_path[-1].block, l_path[-1]
    check(not any(n is block for n in l_path),
          f"{primitive}: loop {var.name} is inside block {name}")
    scope, l_scope = tree.scope_block(b_path), tree.scope_block(l_path)
    check(scope is l_scope, f"{primitive}: block {name} (in block {scope.name}) and loop "
                            f"{var.name} (in block {l_scope.name}) are in different scopes; "
                            "a block cannot move across a block boundary")
    under = frozenset(b.name for b in tree.loop_nest_blocks(loop.body))
    check(bool(under - {name}), f"{primitive}: loop {var.name} holds no block but {name}")
    site = Site(primitive, b_path[-1], loop, tuple(l_path), scope, _positions(scope), under)
    side = site.where(site.realize)
    check(side != (-1 if reverse else 1),
          f"{primitive}: block {name} comes {'before' if reverse else 'after'} loop {var.name}; "
          f"use {'compute_at' if reverse else 'reverse_compute_at'} to move a "
          f"{'producer' if reverse else 'consumer'}")
    return site


def _positions(scope: Block) -> dict[int, int]:
    found: dict[int, int] = {}

    def visit(node: Any) -> bool | None:
        if isinstance(node, (For, BlockRealize)):
            found[id(node)] = len(found)
        return False if isinstance(node, BlockRealize) else None
    ir.walk(scope.body, visit)
    return found


def _depends(later: Block, earlier: Block) -> bool:
    """Whether `later` must stay after `earlier` (read-after-write, write-after-read or
    write-after-write on some buffer)."""
    w1, w2 = ir.written_buffers(earlier), ir.written_buffers(later)
    return bool(w1 & (ir.read_buffers(later) | w2) or w2 & ir.read_buffers(earlier))


def block_dependences(scope: Block, realize: BlockRealize
                      ) -> tuple[list[BlockRealize], list[BlockRealize]]:
    """The realizes of `scope` before `realize` that its block depends on, and those after it
    that depend on its block. They do not depend on where the block would go, so a search
    over target loops computes them once."""
    children = {b.name for b in tree.child_blocks(scope)}
    realizes = [r for r in ir.collect(scope.body, BlockRealize) if r.block.name in children]
    k = next(i for i, r in enumerate(realizes) if r is realize)
    block = realize.block
    return ([r for r in realizes[:k] if _depends(block, r.block)],
            [r for r in realizes[k + 1:] if _depends(r.block, block)])


def check_dependences(site: Site, deps: tuple[list[BlockRealize], list[BlockRealize]] | None
                      = None) -> tuple[set[str], set[str]]:
    """Check that moving the block keeps every dependence in the scope; return the names of
    the blocks under the loop that must stay before it and after it. `deps`: the block's
    dependences (block_dependences) when already known."""
    before, after = deps if deps is not None else block_dependences(site.scope, site.realize)
    for r in (before if site.reverse else after):
        _check_dependent(site, r)
    if site.reverse:
        _check_complete(site, [r for r in before if site.where(r) == 0])
    return ({r.block.name for r in before if site.where(r) == 0},
            {r.block.name for r in after if site.where(r) == 0})


def _check_dependent(site: Site, r: BlockRealize) -> None:
    """A block that must stay on its side of the moved one: under the loop, or out of the way
    (a producer before the loop; for compute_at, a non-reader after it)."""
    side = site.where(r)
    if side == 0:
        return
    name, other, loop = site.block.name, r.block.name, site.loop.loop_var.name
    if site.reverse:
        check(side == -1, f"reverse_compute_at: block {other}, which {name} depends on, lies "
                          f"between loop {loop} and {name}; it must be under the loop or before it")
        return
    reads = sorted(b.name for b in ir.read_buffers(r.block) & ir.written_buffers(site.block))
    check(not reads, f"compute_at: block {other} reads {reads[0] if reads else ''}, which {name} "
                     f"writes, but is not under loop {loop}; every consumer in the scope must be")
    check(side == 1, f"compute_at: block {other} depends on {name} and lies between it and "
                     f"loop {loop}")


def _check_complete(site: Site, producers: list[BlockRealize]) -> None:
    """reverse_compute_at: a producer under the loop must finish its reductions within one
    iteration, so no loop at or above the target may feed a reduce iter var."""
    outer = {n.loop_var for n in site.loop_path if isinstance(n, For)}
    for r in producers:
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            bad = ", ".join(sorted(v.name for v in ir.free_vars(value) & outer))
            check(iv.kind != REDUCE or not bad,
                  f"reverse_compute_at: producer {r.block.name} has not finished reducing over "
                  f"{iv.var.name} at the end of an iteration of loop "
                  f"{site.loop.loop_var.name} (driven by loop {bad})")


def insert(site: Site, loop: For, nest: ir.Stmt | None, first: set[str],
           last: set[str]) -> For:
    """`loop` with `nest` in its body: after the statements holding blocks of `first`, before
    those holding blocks of `last`; as early as possible for compute_at, as late for reverse.
    With `nest` None, only check that there is such a place and return `loop`."""
    body = list(loop.body.seq) if isinstance(loop.body, ir.SeqStmt) else [loop.body]

    def holds(stmt: ir.Stmt, names: set[str]) -> bool:
        return any(b.name in names for b in tree.loop_nest_blocks(stmt))
    lo = max((i + 1 for i, s in enumerate(body) if holds(s, first)), default=0)
    hi = min((i for i, s in enumerate(body) if holds(s, last)), default=len(body))
    check(lo <= hi, f"{site.primitive}: block {site.block.name} cannot go under loop "
                    f"{loop.loop_var.name}: one statement of its body holds both a block it "
                    "depends on and one that depends on it")
    if nest is None:
        return loop
    at = hi if site.reverse else lo
    return dataclasses.replace(loop, body=ir.seq(*body[:at], nest, *body[at:]))


# 3. moving a block under a loop: the region and the new loops -------------------------------
def _domains(site: Site, body: ir.Stmt, ana: arith.Analyzer, reverse: bool) -> list[Range | None]:
    """Per iter var of the block, the range it must cover in one iteration (None: all)."""
    block = site.block
    stmts = [block.body] + ([block.init] if block.init is not None else [])
    if reverse:
        accesses = [(e.buffer, e.indices) for s in stmts
                    for e in ir.collect(s, BufferLoad, distinct=True)]
    else:
        accesses = [(s.buffer, s.indices) for x in stmts for s in ir.collect(x, BufferStore)]
    regions = {buf: arith.touched_region(body, buf, reads=not reverse, writes=reverse,
                                         analyzer=ana) for buf, _ in accesses}
    regions = {b: r for b, r in regions.items() if r is not None}
    what = "writes nothing" if reverse else "reads nothing"
    check(regions, f"{site.primitive}: the code under loop {site.loop.loop_var.name} {what} "
                   f"that block {block.name} {'reads' if reverse else 'writes'}")
    found: dict[Var, list[Range]] = {}
    for buf, indices in accesses:
        for idx, rng in zip(indices, regions[buf].region if buf in regions else ()):
            if isinstance(idx, Var):
                found.setdefault(idx, []).append(rng)
    return [_merge(iv, found.get(iv.var, []), ana, reverse) for iv in block.iter_vars]


def _merge(iv: ir.IterVar, ranges: list[Range], ana: arith.Analyzer,
           reverse: bool) -> Range | None:
    if not ranges or iv.kind == REDUCE:
        return None
    if len(ranges) > 1 and not reverse:  # reverse: the first; _check_covered checks the rest
        return arith.union_regions([(r,) for r in ranges], (iv.extent,), ana)[0]
    return ranges[0]


def _loop_nest(site: Site, domains: list[Range | None], ana: arith.Analyzer,
               preserve_unit_loops: bool) -> ir.Stmt:
    """New loops around the (unchanged) block, covering `domains`, with a bound predicate."""
    loops: list[tuple[Var, int]] = []
    values: list[Expr] = []
    conds: list[Expr] = []
    for iv, rng in zip(site.block.iter_vars, domains):
        lo, extent = _constant_range(site, iv, rng, ana)
        var = Var(f"ax{len(loops)}")
        if extent > 1 or preserve_unit_loops:
            loops.append((var, extent))
            value = lo + var if lo is not None else var
        else:
            value = lo if lo is not None else ir.const(0)
        values.append(value)
        if lo is not None:
            if not ana.can_prove(lo >= 0):
                conds.append(value >= 0)
            if not ana.can_prove(lo + extent <= iv.extent):
                conds.append(value < iv.extent)
    with ana.scope(dict(loops)):
        values = [ana.simplify(v) for v in values]
        pred = ana.simplify(ir.logical_and(*conds)) if conds else ir.TRUE
    stmt: ir.Stmt = BlockRealize(tuple(values), pred, site.block)
    for var, extent in reversed(loops):
        stmt = For(var, extent, stmt)
    return stmt


def _constant_range(site: Site, iv: ir.IterVar, rng: Range | None,
                    ana: arith.Analyzer) -> tuple[Expr | None, int]:
    """(min, extent) of the loop for `iv`; min None means the whole domain [0, extent)."""
    if rng is None:
        return None, iv.extent
    extent = ana.simplify(rng.extent)
    check(isinstance(extent, IntImm),
          f"{site.primitive}: the region of block {site.block.name}'s iter var {iv.var.name} "
          f"depends on the loops around {site.loop.loop_var.name}: its extent "
          f"{ir.expr_str(extent)} is not constant")
    if extent.value >= iv.extent:
        return None, iv.extent
    return ana.simplify(rng.min), extent.value


def _check_covered(site: Site, body: ir.Stmt, domains: list[Range | None],
                   ana: arith.Analyzer) -> None:
    """reverse_compute_at: every element the moved block reads of a buffer written under the
    loop must be written there in the same iteration."""
    dom = {iv.var: (rng if rng is not None else Range.of(0, iv.extent))
           for iv, rng in zip(site.block.iter_vars, domains)}
    for load in ir.collect(site.block.body, BufferLoad):
        written = arith.touched_region(body, load.buffer, reads=False, writes=True, analyzer=ana)
        if written is None:
            continue
        need = arith.relax_region(load.indices, dom, load.buffer.shape, ana)
        for have, want, n in zip(written.region, need, load.buffer.shape):
            lo_ok = ana.can_prove(want.min >= have.min) or ana.can_prove(have.min <= 0)
            hi_ok = (ana.can_prove(want.min + want.extent <= have.min + have.extent)
                     or ana.can_prove(have.min + have.extent >= n))
            check(lo_ok and hi_ok, f"reverse_compute_at: block {site.block.name} reads "
                                   f"{ir.expr_str(load)} beyond what one iteration of loop "
                                   f"{site.loop.loop_var.name} writes")


def move_block(func: PrimFunc, name: str, var: Var, preserve_unit_loops: bool,
               reverse: bool, *, check_only: bool = False,
               deps: tuple[list[BlockRealize], list[BlockRealize]] | None = None) -> PrimFunc:
    """compute_at (reverse=False) or reverse_compute_at: the new function, or ScheduleError.
    With `check_only`, every check runs but nothing is built: `func` comes back unchanged
    (what sample_compute_location needs to try each loop). `deps`: block_dependences."""
    site = find_site(func, name, var, reverse)
    if not reverse:
        check(not ir.written_buffers(site.block) & set(func.params),
              f"compute_at: block {name} writes an output of the function; computed at a loop "
              "it would write only the part its consumers read")
    first, last = check_dependences(site, deps)
    if site.where(site.realize) == 0:  # the block is under the loop: regions without it
        removed = tree.replace(func, site.realize, None)
        path = tree.loop_path(removed, var)
    else:  # the loop's body, and the loops around it, are the same without the block
        removed, path = func, list(site.loop_path)
    loop = path[-1]
    ana = arith.analyzer_at(path)
    domains = _domains(site, loop.body, ana, reverse)
    if reverse:
        _check_covered(site, loop.body, domains, ana)
    if check_only:
        for iv, rng in zip(site.block.iter_vars, domains):
            _constant_range(site, iv, rng, ana)
        insert(site, loop, None, first, last)
        return func
    if removed is func:
        removed = tree.replace(func, site.realize, None)
        loop = tree.loop_path(removed, var)[-1]
    nest = _loop_nest(site, domains, ana, preserve_unit_loops)
    return tree.replace(removed, loop, insert(site, loop, nest, first, last))


class ComputeLocationPrimitives:
    """Mixed into Schedule."""

    def _value(self, rv: Any, cls: type, special_ok: bool = False) -> Any:
        """As ScheduleBase._value, refusing the special locations of sample_compute_location
        everywhere but compute_at."""
        value = super()._value(rv, cls)  # type: ignore[misc]
        check(special_ok or not (cls is LoopRV and isinstance(value, str)),
              f"{rv!r} is the special compute location {value!r} from sample_compute_location; "
              "only compute_at accepts it")
        return value

    @instruction("compute_inline", ("block",))
    def compute_inline(self, block: BlockRV) -> None:
        """Substitute a spatial single-store block's expression into every load of the buffer
        it writes, then remove it and its buffer."""
        path = tree.block_path(self.func, self._block_name(block))
        store = _check_inlinable(self.func, path[-1].block)
        func = self.func.with_body(_inline_loads(self.func, store))
        self.func = tree.replace(func, tree.find_realize(func, path[-1].block.name), None)

    @instruction("reverse_compute_inline", ("block",))
    def reverse_compute_inline(self, block: BlockRV) -> None:
        """Fold a spatial consumer, which reads its single producer element-wise, into that
        producer's store; remove the consumer and, if nothing else reads it, the buffer."""
        path = tree.block_path(self.func, self._block_name(block))
        consumer = path[-1].block
        p_realize, order = _check_reverse_inlinable(self.func, path)
        mid = p_realize.block.body.buffer
        readers = [b for b in _leaf_blocks(self.func)
                   if b is not consumer and mid in ir.read_buffers(b)]
        keep = bool(readers) or mid in self.func.params
        new_p = _fold_consumer(p_realize.block, consumer, order, keep)
        func = tree.replace_many(self.func, {id(p_realize): dataclasses.replace(
            p_realize, block=new_p), id(path[-1]): None})
        if not keep:
            func = func.with_body(ir.transform(func.body, lambda n: _refresh_block(n, mid)
                                               if isinstance(n, Block) else None))
        self.func = func

    @instruction("compute_at", ("block", "loop", "preserve_unit_loops"))
    def compute_at(self, block: BlockRV, loop: LoopRV, preserve_unit_loops: bool = False) -> None:
        """Move producer `block` to the start of `loop`'s body, computing there the region
        that the consumers under `loop` read in one iteration. `loop` may be a special
        location from sample_compute_location: "root" (no change) or "inline"."""
        name = self._block_name(block)
        where = self._value(loop, LoopRV, special_ok=True)
        if isinstance(where, str) and where == ROOT:
            return
        if isinstance(where, str) and where == INLINE:
            self.compute_inline(block)
            return
        self.func = move_block(self.func, name, where, preserve_unit_loops, reverse=False)

    @instruction("reverse_compute_at", ("block", "loop", "preserve_unit_loops"))
    def reverse_compute_at(self, block: BlockRV, loop: LoopRV,
                           preserve_unit_loops: bool = False) -> None:
        """Move consumer `block` to the end of `loop`'s body, computing there the region that
        its producers under `loop` write in one iteration."""
        name = self._block_name(block)
        var = self._value(loop, LoopRV)
        self.func = move_block(self.func, name, var, preserve_unit_loops, reverse=True)

    @instruction("sample_compute_location", ("block",), sampling=True)
    def sample_compute_location(self, block: BlockRV, decision: int | None = None) -> LoopRV:
        """A loop where compute_at(block, loop) is legal, or "root" (decision -1) or "inline"
        (decision -2, when compute_inline is legal), drawn uniformly. The decision is the
        index into the legal loops in program order, or -1 / -2."""
        name = self._block_name(block)
        value = self._location(block, decision) if decision is not None else None
        if value is None:  # draw one, or say why the given one does not fit
            loops = self._legal_locations(block)
            choices = list(range(len(loops))) + [-1] + ([-2] if self._can_inline(block) else [])
            if decision is None:
                decision = self.rng.choice(choices)
            check(isinstance(decision, int) and not isinstance(decision, bool)
                  and decision in choices,
                  f"sample_compute_location: decision {decision!r} for block {name} is not one "
                  f"of {choices} ({len(loops)} legal loops, -1 root"
                  f"{', -2 inline' if -2 in choices else '; block cannot be inlined'})")
            value = loops[decision] if decision >= 0 else (ROOT if decision == -1 else INLINE)
        self._decision = decision
        return self._new(LoopRV, value)

    def _location(self, block: BlockRV, decision: Any) -> Var | str | None:
        """The location a given decision names, None if it names none. Replay checks only
        the loops up to the chosen one (and none for root), not every loop of the scope."""
        if not isinstance(decision, int) or isinstance(decision, bool) or decision < -2:
            return None
        if decision < 0:
            return ROOT if decision == -1 else (INLINE if self._can_inline(block) else None)
        loops = self._legal_locations(block, limit=decision + 1)
        return loops[decision] if len(loops) > decision else None

    def _legal_locations(self, block: BlockRV, limit: int | None = None) -> list[Var]:
        """The loops where compute_at(block, loop) is legal, in program order (the first
        `limit` of them). Each loop is checked, not moved to: nothing is built."""
        name = self._block_name(block)
        path = tree.block_path(self.func, name)
        scope = tree.scope_block(path)
        deps = block_dependences(scope, path[-1])
        legal: list[Var] = []
        for loop in _scope_loops(scope):
            if limit is not None and len(legal) >= limit:
                break
            try:
                move_block(self.func, name, loop.loop_var, False, reverse=False,
                           check_only=True, deps=deps)
            except ScheduleError:
                continue
            legal.append(loop.loop_var)
        return legal

    def _can_inline(self, block: BlockRV) -> bool:
        try:
            self.copy().compute_inline(block)
        except ScheduleError:
            return False
        return True


def _scope_loops(scope: Block) -> list[For]:
    """The loops of a block's body, in program order, not looking inside nested blocks."""
    found: list[For] = []

    def visit(node: Any) -> bool | None:
        if isinstance(node, For):
            found.append(node)
        return False if isinstance(node, BlockRealize) else None
    ir.walk(scope.body, visit)
    return found
