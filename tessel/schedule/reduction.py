"""Reduction primitives: decompose_reduction and rfactor.

    init = sch.decompose_reduction(C, k)    # C's init becomes block C_init, before loop k
    k0, k1 = sch.split(k, [None, 8])
    rf = sch.rfactor(k1, factor_axis=0)     # C_rf: 8 partial results per row; C combines them

The combiner of a reduction is read off its update and init, TensorIR style: the update must
be `C[idx] = C[idx] + x` (or `x + C[idx]`), `max(C[idx], x)` or `min(C[idx], x)` and the init
`C[idx] = identity` (0, -inf or +inf; the extreme integers for integer dtypes).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tessel import arith, ir
from tessel.ir import (REDUCE, SPATIAL, BinOp, Block, BlockRealize, Buffer, BufferLoad,
                       BufferStore, Expr, FloatImm, For, IntImm, IterVar, Stmt, Var)
from tessel.arith import block_regions
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.cache import unique_name, with_root_alloc
from tessel.schedule.trace import BlockRV, LoopRV, check


# 1. shared analysis -------------------------------------------------------------------------
def conjuncts(cond: Expr) -> list[Expr]:
    if isinstance(cond, BinOp) and cond.op == "and":
        return conjuncts(cond.a) + conjuncts(cond.b)
    return [] if ir.is_true(cond) else [cond]


def _at_zero(cond: Expr, gone: set[Var], block: str, primitive: str) -> Expr:
    """A condition on the kept variables that holds iff `cond` holds for some values of the
    `gone` loop variables (each ranging from 0): cond at gone = 0, when cond is `a < b`-like
    and a - b does not decrease as any gone variable grows."""
    ok = isinstance(cond, BinOp) and cond.op in ("<", "<=", ">", ">=")
    if ok:
        diff = cond.a - cond.b if cond.op in ("<", "<=") else cond.b - cond.a
        form = arith.linear_form(diff)
        ok = form is not None and all(form.get(v, 0) >= 0 for v in gone)
    check(ok, f"{primitive}: cannot tell for which iterations block {block} runs from its "
              f"predicate {cond!r}, which depends on loop(s) "
              f"{sorted(v.name for v in gone)} in an unsupported way")
    return arith.simplify(ir.substitute(cond, {v: ir.const(0) for v in gone}))


def kept_predicate(realize: BlockRealize, gone: set[Var], vmap: dict, primitive: str,
                   loops: list[For]) -> Expr:
    """The predicate of a block copied to a loop nest without the loops of `gone` (`loops`
    are the original loops, for simplification)."""
    ana = arith.Analyzer({l.loop_var: l.extent for l in loops})
    out: Expr = ir.const(True)
    for cond in conjuncts(realize.predicate):
        if ir.free_vars(cond) & gone:
            cond = _at_zero(cond, ir.free_vars(cond) & gone, realize.block.name, primitive)
        out = ir.logical_and(out, ana.simplify(cond))
    return ir.substitute(out, vmap)


@dataclass(frozen=True)
class Combiner:
    """A recognized reduction update `buffer[indices] = op(buffer[indices], rhs)`."""

    op: str  # "+", "max" or "min"
    buffer: Buffer
    indices: tuple[Expr, ...]
    rhs: Expr
    identity: Expr

    def combine(self, lhs: Expr, rhs: Expr) -> Expr:
        return ir.binop(self.op, lhs, rhs)


def identity_of(op: str, dtype: str) -> Expr:
    if ir.is_float(dtype):
        return ir.const({"+": 0.0, "max": -math.inf, "min": math.inf}[op], dtype)
    bits = ir.DTYPE_BITS[dtype]
    lo, hi = (0, 2**bits - 1) if dtype.startswith("u") else (-2**(bits - 1), 2**(bits - 1) - 1)
    return ir.const({"+": 0, "max": lo, "min": hi}[op], dtype)


def _same_access(load: Expr, store: BufferStore) -> bool:
    return (isinstance(load, BufferLoad) and load.buffer is store.buffer
            and all(a is b or arith.const_offset(a, b) == 0
                    for a, b in zip(load.indices, store.indices)))


def _same_value(a: Expr, b: Expr) -> bool:
    return type(a) is type(b) and isinstance(a, (IntImm, FloatImm)) and a.value == b.value


def match_combiner(block: Block, primitive: str) -> Combiner:
    """The combiner of a reduction block, or ScheduleError naming what does not fit."""
    body, init = block.body, block.init
    check(block.is_reduction and init is not None,
          f"{primitive}: block {block.name} is not a reduction block with an init")
    check(isinstance(body, BufferStore) and isinstance(body.value, BinOp)
          and body.value.op in ("+", "max", "min"),
          f"{primitive}: the update of block {block.name} is not a sum, max or min reduction "
          "(expected C[i] = C[i] + x, max(C[i], x) or min(C[i], x))")
    value = body.value
    if _same_access(value.a, body):
        rhs = value.b
    else:
        check(_same_access(value.b, body), f"{primitive}: the update of block {block.name} "
                                           f"does not combine {body.buffer.name} with itself")
        rhs = value.a
    check(body.buffer not in ir.read_buffers(rhs),
          f"{primitive}: block {block.name} reads {body.buffer.name} outside its combiner")
    identity = identity_of(value.op, body.buffer.dtype)
    check(isinstance(init, BufferStore) and init.buffer is body.buffer
          and all(arith.const_offset(a, b) == 0 for a, b in zip(init.indices, body.indices))
          and _same_value(init.value, identity),
          f"{primitive}: the init of block {block.name} is not {body.buffer.name}[...] = "
          f"{identity!r}, the identity of its '{value.op}' reduction")
    return Combiner(value.op, body.buffer, body.indices, rhs, identity)


# 2. decompose_reduction ---------------------------------------------------------------------
def _loops_below(path: list, loop: For, block: str) -> list[For]:
    """The loops of `path` from `loop` down to the block (which must be in loop's scope)."""
    k = next((i for i, n in enumerate(path) if n is loop), None)
    check(k is not None, f"decompose_reduction: loop {loop.loop_var.name} is not an ancestor "
                         f"of block {block}")
    check(not any(isinstance(n, Block) for n in path[k:-1]),
          f"decompose_reduction: a block lies between loop {loop.loop_var.name} and block "
          f"{block}")
    return [n for n in path[k:] if isinstance(n, For)]


def _init_nest(realize: BlockRealize, below: list[For], name: str) -> Stmt:
    """The init of the block as its own block, under copies of the loops of `below` that
    its spatial bindings use."""
    block = realize.block
    spatial = ir.binding_vars(realize, SPATIAL)
    kept = [l for l in below if l.loop_var in spatial]
    vmap = {l.loop_var: Var(l.loop_var.name) for l in kept}
    gone = {l.loop_var for l in below} - set(vmap)
    ivs = [(iv, value) for iv, value in zip(block.iter_vars, realize.iter_values)
           if iv.kind == SPATIAL]
    ivmap = {iv.var: Var(iv.var.name) for iv, _ in ivs}
    body = ir.substitute(block.init, ivmap)
    reads, writes = block_regions(body)
    if ir.collect(body, For):  # a blockized block's init loops: its regions span them
        reads = tuple(arith.touched_region(body, r.buffer) for r in reads)
        writes = tuple(arith.touched_region(body, w.buffer, reads=False, writes=True)
                       for w in writes)
    init = Block(name, tuple(IterVar(ivmap[iv.var], iv.extent) for iv, _ in ivs), reads,
                 writes, body)
    pred = kept_predicate(realize, gone, vmap, "decompose_reduction", below)
    stmt: Stmt = ir.realize(init, [ir.substitute(v, vmap) for _, v in ivs], pred)
    for l in reversed(kept):
        stmt = For(vmap[l.loop_var], l.extent, stmt, l.kind, l.thread, dict(l.annotations))
    return stmt


# 3. rfactor ----------------------------------------------------------------------------------
def _rfactor_block(loop: For) -> BlockRealize:
    blocks = tree.loop_nest_blocks(loop.body)
    name = loop.loop_var.name
    check(len(blocks) == 1 and not ir.collect(blocks[0].body, Block),
          f"rfactor: loop {name} must hold exactly one block, found "
          f"{[b.name for b in ir.blocks(loop.body)]}")
    check(loop.kind == "serial", f"rfactor: loop {name} is {loop.kind}; it must be serial")
    return next(r for r in ir.collect(loop.body, BlockRealize) if r.block is blocks[0])


def _check_rfactor_loops(realize: BlockRealize, loops: list[For], loop: For) -> set[Var]:
    """TensorIR's conditions on the loops; returns the loop vars the reduce bindings use."""
    name, block = loop.loop_var.name, realize.block.name
    spatial, reduce = ir.binding_vars(realize, SPATIAL), ir.binding_vars(realize, REDUCE)
    check(loop.loop_var not in spatial and loop.loop_var in reduce,
          f"rfactor: loop {name} is not a reduction loop of block {block}")
    touching = [iv for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                if iv.kind == REDUCE and ir.uses_var(v, loop.loop_var)]
    check(len(touching) == 1, f"rfactor: loop {name} binds {len(touching)} reduction iter vars "
                              f"of block {block}; it must bind exactly one")
    for l in loops:
        check(not (l.loop_var in spatial and l.loop_var in reduce),
              f"rfactor: loop {l.loop_var.name} binds both spatial and reduction iter vars of "
              f"block {block}")
    first = tree.loop_nest_blocks(loops[0].body)
    check(first[0] is realize.block, f"rfactor: block {first[0].name} comes before block "
                                     f"{block} under loop {loops[0].loop_var.name}")
    outer_reduce = next(l for l in loops if l.loop_var in reduce)
    others = [b.name for b in tree.loop_nest_blocks(outer_reduce.body) if b is not realize.block]
    check(not others, f"rfactor: reduction loop {outer_reduce.loop_var.name} also holds "
                      f"block(s) {others}")
    return reduce


def _rf_realize(realize: BlockRealize, comb: Combiner, loop: For, loops: list[For],
                rf_buf: Buffer, axis: int, name: str) -> BlockRealize:
    """The rfactor block: partial results per value of `loop`, into rf_buf."""
    block, rf_var = realize.block, Var("v" + loop.loop_var.name)
    ivs, values = [IterVar(rf_var, loop.extent)], [loop.loop_var]
    by_loop = {l.loop_var: l for l in loops}
    loop_iv: dict[Var, Expr] = {loop.loop_var: rf_var}
    vmap: dict[Var, Expr] = {}
    for iv, value in zip(block.iter_vars, realize.iter_values):
        if iv.kind == SPATIAL or not ir.uses_var(value, loop.loop_var):
            ivs.append(iv)
            values.append(value)
            continue
        for v in sorted(ir.free_vars(value) - set(loop_iv), key=lambda v: v.name):
            check(v in by_loop, f"rfactor: binding of {iv.var.name} uses {v.name}, not a loop")
            loop_iv[v] = Var("v" + v.name)
            ivs.append(IterVar(loop_iv[v], by_loop[v].extent, REDUCE))
            values.append(v)
        vmap[iv.var] = ir.substitute(value, loop_iv)
    idx = tuple(ir.substitute(i, vmap) for i in comb.indices)
    idx = idx[:axis] + (rf_var,) + idx[axis:]
    rhs = ir.substitute(comb.rhs, vmap)
    update = BufferStore(rf_buf, comb.combine(rf_buf.load(idx), rhs), idx)
    init = BufferStore(rf_buf, comb.identity, idx)
    reads, writes = block_regions(update, init)
    rf = Block(name, tuple(ivs), reads, writes, update, init, annotations=dict(block.annotations))
    return BlockRealize(tuple(values), realize.predicate, rf)


def _wb_realize(realize: BlockRealize, comb: Combiner, loop: For, rf_buf: Buffer, axis: int,
                loops: list[For], gone: set[Var]) -> BlockRealize:
    """The write-back block (keeps the original name): combines the partial results."""
    block = realize.block
    pairs = [(iv, v) for iv, v in zip(block.iter_vars, realize.iter_values) if iv.kind == SPATIAL]
    fresh = {iv.var: Var(iv.var.name) for iv, _ in pairs}
    wb_var = Var("v" + loop.loop_var.name)
    out_idx = tuple(ir.substitute(i, fresh) for i in comb.indices)
    idx = out_idx[:axis] + (wb_var,) + out_idx[axis:]
    update = BufferStore(comb.buffer, comb.combine(comb.buffer.load(out_idx), rf_buf.load(idx)),
                         out_idx)
    init = BufferStore(comb.buffer, comb.identity, out_idx)
    reads, writes = block_regions(update, init)
    ivs = (IterVar(wb_var, loop.extent, REDUCE),) + tuple(
        IterVar(fresh[iv.var], iv.extent) for iv, _ in pairs)
    wb = Block(block.name, ivs, reads, writes, update, init, annotations=dict(block.annotations))
    pred = kept_predicate(realize, gone, {}, "rfactor", loops)
    return BlockRealize((loop.loop_var,) + tuple(v for _, v in pairs), pred, wb)


def _copy_loops(loops: list[For], body: Stmt) -> Stmt:
    """body (written in the old loop vars) under fresh copies of `loops`."""
    vmap = {l.loop_var: Var(l.loop_var.name) for l in loops}
    body = ir.substitute(body, vmap)
    for l in reversed(loops):
        body = For(vmap[l.loop_var], l.extent, body, l.kind, l.thread, dict(l.annotations))
    return body


def _strip_loops(stmt: Stmt, drop: set[Var]) -> Stmt:
    """stmt without the loops of `drop` (each of which holds only the reduction block)."""
    return ir.transform(stmt, lambda n: n.body if isinstance(n, For) and n.loop_var in drop
                        else None)


def _normalize_axis(axis: int, ndim: int) -> int:
    check(isinstance(axis, int) and not isinstance(axis, bool) and -ndim - 1 <= axis <= ndim,
          f"rfactor: factor_axis {axis!r} is out of range for a {ndim}-d buffer "
          f"(allowed: {-ndim - 1} .. {ndim})")
    return axis + ndim + 1 if axis < 0 else axis


class ReductionPrimitives:
    """Mixed into Schedule."""

    @instruction("decompose_reduction", ("block", "loop"))
    def decompose_reduction(self, block: BlockRV, loop: LoopRV) -> BlockRV:
        """Move the init of reduction `block` into a new block `<name>_init` (returned),
        placed right before `loop` under copies of the loops between them that its spatial
        iter vars use; `block` keeps only its update."""
        path = tree.block_path(self.func, self._block_name(block))
        realize: BlockRealize = path[-1]
        blk = realize.block
        check(blk.init is not None, f"decompose_reduction: block {blk.name} has no init")
        node = self._loop(loop)
        below = _loops_below(path, node, blk.name)
        reduce = ir.binding_vars(realize, REDUCE)
        for l in tree.enclosing_loops(path):
            if l is node:
                break
            check(l.loop_var not in reduce,
                  f"decompose_reduction: loop {l.loop_var.name} above loop "
                  f"{node.loop_var.name} carries a reduction iter var of block {blk.name}; "
                  "the init would run once per iteration of it")
        name = unique_name(self.func, f"{blk.name}_init")
        nest = _init_nest(realize, below, name)
        new_realize = dataclasses.replace(realize, block=dataclasses.replace(blk, init=None))
        new_loop = tree.rebuild(node, {id(realize): new_realize})
        self.func = tree.replace(self.func, node, ir.seq(nest, new_loop))
        return self._new(BlockRV, name)

    @instruction("rfactor", ("loop", "factor_axis"))
    def rfactor(self, loop: LoopRV, factor_axis: int = 0) -> BlockRV:
        """Factor the reduction under `loop` (a serial reduction loop of exactly one block):
        a new block `<name>_rf` (returned) computes partial results into `<buffer>_rf`, which
        has an extra dimension of loop's extent at factor_axis, under copies of the loops;
        the block itself then combines the partials, under the original spatial loops and
        `loop`."""
        node = self._loop(loop)
        realize = _rfactor_block(node)
        path = tree.block_path(self.func, realize.block.name)
        loops = tree.enclosing_loops(path)
        comb = match_combiner(realize.block, "rfactor")
        reduce = _check_rfactor_loops(realize, loops, node)
        axis = _normalize_axis(factor_axis, comb.buffer.ndim)
        shape = comb.buffer.shape[:axis] + (node.extent,) + comb.buffer.shape[axis:]
        rf_buf = Buffer(unique_name(self.func, f"{comb.buffer.name}_rf"), shape,
                        comb.buffer.dtype, comb.buffer.scope)
        name = unique_name(self.func, f"{realize.block.name}_rf")
        rf = _rf_realize(realize, comb, node, loops, rf_buf, axis, name)
        drop = {l.loop_var for l in loops if l.loop_var in reduce and l is not node}
        wb = _wb_realize(realize, comb, node, rf_buf, axis, loops, drop)
        rf_nest = _copy_loops(loops, rf)
        wb_nest = _strip_loops(tree.rebuild(loops[0], {id(realize): wb}), drop)
        self.func = tree.replace(self.func, loops[0], ir.seq(rf_nest, wb_nest))
        self.func = with_root_alloc(self.func, rf_buf)
        return self._new(BlockRV, name)


__all__ = ["ReductionPrimitives", "match_combiner", "Combiner", "conjuncts",
           "kept_predicate"]
