"""Blockize and tensorize: a loop nest becomes one block, and a block one instruction.

    k0, k1 = sch.split(k, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(j0, k0, j1, k1)
    outer = sch.blockize(j1)                       # block C_o: one step of 16 x 4
    sch.tensorize(outer, "dot_u8s8_16x4_vnni")     # ... done by one vpdpbusd

`blockize(loop)` (TensorIR's): the loops from `loop` down to the one block under it, and that
block, become the body of a new outer block `<name>_o`. Each iteration variable v of the
block, bound to `outer + inner` where `inner` is an affine form of the blockized loops that
covers [0, R) exactly, gets an outer variable v_o (extent / R, bound to outer / R); the inner
block is bound to v_o * R + inner. The outer block reads and writes what the loops under it
touch; a predicate of the loops outside (a tile that does not divide) moves to it. An init
moves to the outer block (over the blockized spatial loops) when the blockized loops reduce,
so the inner block is the bare update an intrinsic describes.

`tensorize(block_or_loop, intrin)` checks that the outer block (a loop is blockized first)
matches the registered intrinsic (tessel.intrin.match: the form of the update, the loops'
extents, every access's steps through memory) and marks it; code generation then emits the
intrinsic's C for it (tessel.codegen.passes.blocks). The block's loops stay in the IR, so
everything that reads programs (features, the reference evaluator) still sees the
computation.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from tessel import arith, ir
from tessel import intrin as intrinsics
from tessel.ir import REDUCE, BlockRealize, Expr, For, IterVar, Var
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.cache import unique_name
from tessel.schedule.trace import BlockRV, LoopRV, ScheduleError, check


class BlockizePrimitives:
    @instruction("blockize", ("loop",))
    def blockize(self, loop: LoopRV) -> BlockRV:
        """The loops from `loop` down and the one block under them become a new outer block
        (returned, named `<block>_o`); the block keeps its name inside it."""
        path = tree.loop_path(self.func, self._value(loop, LoopRV))
        outer = _blockized(self.func, path)
        self.func = tree.replace(self.func, path[-1], outer)
        return self._new(BlockRV, outer.block.name)

    @instruction("tensorize", ("block_or_loop", "intrin"))
    def tensorize(self, block_or_loop: BlockRV | LoopRV, intrin: str) -> None:
        """Have the tensor intrinsic `intrin` (a name of tessel.intrin.REGISTRY) compute the
        outer block `block_or_loop` (a loop: blockized first); ScheduleError naming what
        differs when the block does not match its description."""
        try:
            spec = intrinsics.get(intrin)
        except intrinsics.IntrinError as err:
            raise ScheduleError(str(err)) from None
        if isinstance(block_or_loop, LoopRV):
            path = tree.loop_path(self.func, self._value(block_or_loop, LoopRV))
            realize = _blockized(self.func, path)
            func = tree.replace(self.func, path[-1], realize)
        else:
            realize = tree.find_realize(self.func, self._block_name(block_or_loop))
            func = self.func
        try:
            intrinsics.match(realize.block, spec)
        except intrinsics.IntrinError as err:
            raise ScheduleError(str(err)) from None
        block = realize.block
        marked = ir.Block(block.name, block.iter_vars, block.reads, block.writes, block.body,
                          block.init, block.alloc_buffers,
                          {**block.annotations, intrinsics.ANNOTATION: spec.name})
        self.func = tree.replace(func, realize, BlockRealize(realize.iter_values,
                                                             realize.predicate, marked))


# 1. subspace division ------------------------------------------------------------------
def _blockized(func: ir.PrimFunc, path: list[Any]) -> BlockRealize:
    """The BlockRealize of the outer block that replaces loop path[-1]."""
    top: For = path[-1]
    loops, inner = _chain(top)
    block = inner.block
    check(not ir.free_vars(inner.predicate) & {l.loop_var for l in loops},
          f"blockize: block {block.name} runs under a predicate ({inner.predicate!r}) of the "
          f"loops under {top.loop_var.name}: they do not tile it exactly")
    extents = {l.loop_var: l.extent for l in loops}
    ana = arith.Analyzer({**{n.loop_var: n.extent for n in path[:-1] if isinstance(n, For)},
                          **extents})
    outer_ivs, outer_values, inner_values = [], [], []
    for iv, value in zip(block.iter_vars, inner.iter_values):
        out, rest, radix = _divide(value, ana, extents, iv, block.name)
        vo = Var(f"{iv.var.name}_o")
        outer_ivs.append(IterVar(vo, iv.extent // radix, iv.kind))
        outer_values.append(out)
        inner_values.append(vo * radix + rest if radix > 1 else vo)
    moved = block.init is not None and any(_reduces(l.loop_var, inner) for l in loops)
    new_inner = BlockRealize(tuple(inner_values), ir.const(True),
                             dataclasses.replace(block, init=None) if moved else block)
    body = tree.wrap_loops(loops, new_inner)
    init = _outer_init(loops, new_inner, block) if moved else None
    name = unique_name(func, f"{block.name}_o")
    reads, writes = _regions(body, block)
    outer = ir.Block(name, tuple(outer_ivs), reads, writes, body, init)
    return BlockRealize(tuple(outer_values), inner.predicate, outer)


def _chain(top: For) -> tuple[list[For], BlockRealize]:
    loops, node = [], top
    while isinstance(node, For):
        loops.append(node)
        node = node.body
    check(isinstance(node, BlockRealize),
          f"blockize: loop {top.loop_var.name} is not a perfect nest around one block "
          f"({len(tree.loop_nest_blocks(top))} block(s) under it)")
    return loops, node


def _divide(value: Expr, ana: arith.Analyzer, extents: dict[Var, int], iv: IterVar,
            block: str) -> tuple[Expr, Expr, int]:
    """(outer / R, inner, R) for `value` = outer + inner, `inner` an affine form of the
    blockized loops covering [0, R) exactly and `outer` a multiple of R. A binding of the
    loops outside alone stays as it is (a loop of extent 1 too, so the outer block's loops
    still bind its variables one to one)."""
    where = f"blockize: block {block}'s variable {iv.var.name} = {value!r}"
    if not ir.free_vars(value) & set(extents):
        return value, ir.const(0), 1
    value = ana.simplify(value)
    used = ir.free_vars(value) & set(extents)
    form = arith.linear_form(value)
    check(form is not None, f"{where} is not affine in the blockized loops")
    radix, rest = 1, ir.const(0)
    for var, coef in sorted(((v, c) for v, c in form.items() if v in used), key=lambda t: t[1]):
        check(coef == radix, f"{where}: the blockized loops do not cover a dense range")
        rest = rest + var * coef
        radix *= extents[var]
    outer_terms = {v: c for v, c in form.items() if v not in used}
    check(all(c % radix == 0 for c in outer_terms.values()) and iv.extent % radix == 0,
          f"{where}: the loops outside do not step by whole blocks of {radix}")
    out: Expr = ir.const(outer_terms.pop(1, 0) // radix)
    for var, coef in outer_terms.items():
        out = out + var * (coef // radix)
    return arith.simplify(out), arith.simplify(rest), radix


def _reduces(var: Var, realize: BlockRealize) -> bool:
    return any(iv.kind == REDUCE and ir.uses_var(v, var)
               for iv, v in zip(realize.block.iter_vars, realize.iter_values))


def _outer_init(loops: list[For], inner: BlockRealize, block: ir.Block) -> ir.Stmt:
    """The block's init over the blockized loops that bind only spatial variables (fresh
    copies of them), its iter vars replaced by their new bindings."""
    spatial = [l for l in loops if not _reduces(l.loop_var, inner)]
    fresh = {l.loop_var: Var(f"{l.loop_var.name}_init") for l in spatial}
    vmap = {iv.var: ir.substitute(v, fresh) for iv, v in zip(block.iter_vars, inner.iter_values)
            if iv.kind != REDUCE}
    init = ir.substitute(block.init, vmap)
    for loop in reversed(spatial):
        init = For(fresh[loop.loop_var], loop.extent, init)
    return init


def _regions(body: ir.Stmt, block: ir.Block) -> tuple[tuple, tuple]:
    """The outer block's reads and writes: the inner block's, over the blockized loops."""
    reads = [arith.touched_region(body, r.buffer) for r in block.reads]
    writes = [arith.touched_region(body, w.buffer, reads=False, writes=True)
              for w in block.writes]
    return tuple(r for r in reads if r is not None), tuple(w for w in writes if w is not None)


__all__ = ["BlockizePrimitives"]
