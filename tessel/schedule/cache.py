"""Cache primitives: cache_read and cache_write stage a buffer through a copy in another scope.

    A_local = sch.cache_read(C, 0, "local")    # C reads A_local; block A_local copies A
    C_out = sch.cache_write(C, 0, "local")     # C writes C_local; block C_local copies it to C

As in TensorIR, the copy is a new block under its own loops (one spatial iter var per buffer
dimension) in the scope of the block, and the new buffer is allocated in the root block with
the full shape. Moving the copy (compute_at / reverse_compute_at) and shrinking the buffer to
what one loop iteration touches (tessel.codegen.passes.compact_buffers) come later.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tessel import arith, ir
from tessel.ir import (SCOPES, Block, BlockRealize, Buffer, BufferRegion, Expr, For, IntImm,
                       IterVar, PrimFunc, Stmt, Var)
from tessel.arith import block_regions
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.trace import BlockRV, check


# helpers shared by the cache and reduction primitives --------------------------------------
def top_level(scope: Block) -> tuple[Stmt, ...]:
    """The statements of a scope block's body, in order."""
    return scope.body.seq if isinstance(scope.body, ir.SeqStmt) else (scope.body,)


def position_in(stmts: tuple[Stmt, ...], path: list[Any]) -> int:
    """Index of the statement of `stmts` that lies on `path`."""
    on_path = {id(p) for p in path}
    return next(k for k, s in enumerate(stmts) if id(s) in on_path)


def unique_name(func: PrimFunc, base: str) -> str:
    """`base`, or `base_1`, `base_2`, ...: a name no block or buffer of func uses yet."""
    used = {b.name for b in ir.blocks(func.body)} | {b.name for b in func.params}
    used |= {buf.name for b in ir.blocks(func.body) for buf in b.alloc_buffers}
    return ir.fresh_name(base, used)


def with_root_alloc(func: PrimFunc, buf: Buffer) -> PrimFunc:
    """func with `buf` added to the root block's allocations."""
    root = dataclasses.replace(func.root, alloc_buffers=func.root.alloc_buffers + (buf,))
    return func.with_body(BlockRealize(func.body.iter_values, func.body.predicate, root))


def replace_scope_body(func: PrimFunc, scope: Block, stmts: list[Stmt]) -> PrimFunc:
    return tree.replace(func, scope, dataclasses.replace(scope, body=ir.seq(*stmts)))


def own_accesses(block: Block) -> tuple[set[Buffer], set[Buffer]]:
    """(read, written) buffers of a block's own body and init, not counting nested blocks."""
    reads: set[Buffer] = set()
    writes: set[Buffer] = set()

    def visit(node: Any) -> bool | None:
        if isinstance(node, BlockRealize):
            for e in node.iter_values + (node.predicate,):
                reads.update(ir.read_buffers(e))
            return False
        if isinstance(node, ir.BufferStore):
            writes.add(node.buffer)
        elif isinstance(node, ir.BufferLoad):
            reads.add(node.buffer)
        return None
    for part in (block.body, block.init):
        if part is not None:
            ir.walk(part, visit)
    return reads, writes


def blocks_touching(stmt: Stmt, buf: Buffer) -> list[Block]:
    """Blocks under stmt whose own body or init reads or writes buf."""
    return [b for b in ir.blocks(stmt) if buf in set.union(*own_accesses(b))]


def copy_nest(name: str, src: Buffer, dst: Buffer, region: list[tuple[Expr, int]]) -> Stmt:
    """Loops ax0, ax1, ... over `region` ((min, extent) per dimension) around a block `name`
    that does dst[v] = src[v], with v0 = min0 + ax0, ..."""
    loops = [Var(f"ax{d}") for d in range(len(region))]
    ivs = [IterVar(Var(f"v{d}"), n) for d, n in enumerate(src.shape)]
    idx = tuple(iv.var for iv in ivs)
    store = ir.BufferStore(dst, src.load(idx), idx)
    reads, writes = block_regions(store)
    block = Block(name, tuple(ivs), reads, writes, store)
    stmt: Stmt = ir.realize(block, [lo + ax for (lo, _), ax in zip(region, loops)])
    for ax, (_, extent) in reversed(list(zip(loops, region))):
        stmt = For(ax, extent, stmt)
    return stmt


def _with_block(stmt: Stmt, realize: BlockRealize, block: Block) -> Stmt:
    """stmt with realize's block replaced."""
    return tree.rebuild(stmt, {id(realize): dataclasses.replace(realize, block=block)})


def _check_scope(primitive: str, scope: str) -> None:
    check(scope in SCOPES, f"{primitive}: unknown storage scope {scope!r}; use one of {SCOPES}")


def _buffer_at(primitive: str, block: Block, regions: tuple[BufferRegion, ...], index: int,
               what: str) -> Buffer:
    check(isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(regions),
          f"{primitive}: block {block.name} {what} {len(regions)} buffer(s); "
          f"index {index!r} is out of range")
    return regions[index].buffer


# cache_read -----------------------------------------------------------------------------------
def _read_position(stmts: tuple[Stmt, ...], buf: Buffer, at: int, block: str) -> int:
    """Where the copy of `buf` goes: before the first statement that reads buf, after the
    last one that writes it, and no later than statement `at` (which holds the consumer)."""
    check(buf not in ir.written_buffers(stmts[at]),
          f"cache_read: buffer {buf.name} is written in the same loop nest as block {block}; "
          "a whole-buffer copy cannot be placed between its producer and its reader")
    writers = [k for k in range(at) if buf in ir.written_buffers(stmts[k])]
    start = writers[-1] + 1 if writers else 0
    return next((k for k in range(start, at) if buf in ir.read_buffers(stmts[k])), at)


# cache_write ----------------------------------------------------------------------------------
def _written_region(stmt: Stmt, buf: Buffer) -> list[tuple[Expr, int]]:
    """(min, constant extent) per dimension of what stmt writes of buf, clamped to the buffer;
    a dimension without a constant extent is copied whole."""
    ana = arith.Analyzer()
    touched = arith.touched_region(stmt, buf, reads=False, writes=True, analyzer=ana)
    if touched is None:
        return [(ir.const(0), n) for n in buf.shape]
    region = arith.clamp_region(touched, analyzer=ana)
    out = []
    for rng, n in zip(region.region, buf.shape):
        lo, extent = ana.simplify(rng.min), ana.simplify(rng.extent)
        if isinstance(extent, IntImm) and 0 < extent.value <= n:
            out.append((lo, extent.value))
        else:
            out.append((ir.const(0), n))
    return out


def _check_sole_writer(func: PrimFunc, block: Block, buf: Buffer, stmt: Stmt) -> None:
    inside = {id(b) for b in ir.blocks(block.body)}  # a blockized block's inner block
    for other in ir.blocks(func.body):
        check(other is block or id(other) in inside or buf not in own_accesses(other)[1],
              f"cache_write: buffer {buf.name} is also written by block {other.name}; "
              f"block {block.name} must be its only writer")
    for other in blocks_touching(stmt, buf):
        check(other is block or id(other) in inside,
              f"cache_write: block {other.name} accesses buffer {buf.name} in "
                              f"the same loop nest as block {block.name}; the copy back could "
                              "not come between them")


class CachePrimitives:
    """Mixed into Schedule."""

    @instruction("cache_read", ("block", "read_buffer_index", "storage_scope"))
    def cache_read(self, block: BlockRV, read_buffer_index: int, storage_scope: str) -> BlockRV:
        """`block` reads a copy of its read_buffer_index-th read buffer, made in scope
        storage_scope by a new block (returned) placed before the first reader."""
        _check_scope("cache_read", storage_scope)
        path = tree.block_path(self.func, self._block_name(block))
        realize: BlockRealize = path[-1]
        blk = realize.block
        buf = _buffer_at("cache_read", blk, blk.reads, read_buffer_index, "reads")
        check(all(w.buffer is not buf for w in blk.writes),
              f"cache_read: block {blk.name} also writes buffer {buf.name}")
        scope = tree.scope_block(path)
        stmts = list(top_level(scope))
        at = position_in(tuple(stmts), path)
        pos = _read_position(tuple(stmts), buf, at, blk.name)
        name = unique_name(self.func, f"{buf.name}_{storage_scope}")
        cache = Buffer(name, buf.shape, buf.dtype, storage_scope)
        new_block = ir.replace_buffers(blk, {buf: cache})
        stmts[at] = _with_block(stmts[at], realize, new_block)
        stmts.insert(pos, copy_nest(name, buf, cache, [(ir.const(0), n) for n in buf.shape]))
        self.func = with_root_alloc(replace_scope_body(self.func, scope, stmts), cache)
        return self._new(BlockRV, name)

    @instruction("cache_write", ("block", "write_buffer_index", "storage_scope"))
    def cache_write(self, block: BlockRV, write_buffer_index: int, storage_scope: str) -> BlockRV:
        """`block` writes a new buffer in scope storage_scope instead of its
        write_buffer_index-th write buffer; a new block (returned) right after block's loop
        nest copies what it wrote back to the original buffer."""
        _check_scope("cache_write", storage_scope)
        path = tree.block_path(self.func, self._block_name(block))
        realize: BlockRealize = path[-1]
        blk = realize.block
        buf = _buffer_at("cache_write", blk, blk.writes, write_buffer_index, "writes")
        scope = tree.scope_block(path)
        stmts = list(top_level(scope))
        at = position_in(tuple(stmts), path)
        _check_sole_writer(self.func, blk, buf, stmts[at])
        region = _written_region(stmts[at], buf)
        name = unique_name(self.func, f"{buf.name}_{storage_scope}")
        cache = Buffer(name, buf.shape, buf.dtype, storage_scope)
        new_block = ir.replace_buffers(blk, {buf: cache})
        stmts[at] = _with_block(stmts[at], realize, new_block)
        stmts.insert(at + 1, copy_nest(name, cache, buf, region))
        self.func = with_root_alloc(replace_scope_body(self.func, scope, stmts), cache)
        return self._new(BlockRV, name)


__all__ = ["CachePrimitives", "top_level", "position_in", "unique_name", "with_root_alloc",
           "replace_scope_body", "own_accesses", "blocks_touching", "copy_nest"]
