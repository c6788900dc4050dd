"""Matching a block against a tensor intrinsic's description.

The block is an *outer* block (blockize's result): a perfect nest of loops around one inner
block. It matches the intrinsic when

1. the inner block has no init and no predicate (decompose_reduction first; a tile the loops
   do not divide cannot be one instruction),
2. its loops of extent > 1 pair one to one with the description's iteration variables, of
   equal extents (a multiple, for a variable the intrinsic names in `free_extents`; at most
   the description's, for one in `partial_extents`) and kinds (spatial / reduction), in some
   order; a free extent of description extent 1 or a partial one may have no loop,
3. its update has the description's form, node for node (+ and * in either operand order),
   each description buffer standing for one program buffer of the same dtype, and
4. every access moves through memory with each loop as the description's access moves with
   the paired variable: the same element step (so an operand the instruction loads as
   consecutive elements is consecutive in the program, e.g. a weight packed by
   transform_layout); a dimension the intrinsic names in `free_strides` may move by any
   positive step with its variable (a row stride the intrinsic takes as an argument).

The result gives, for each description buffer, the program buffer and the indices of its first
element (in the outer block's iteration variables): what code generation loads and stores.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from tessel import arith, ir
from tessel.intrin.base import IntrinError, TensorIntrin

Access = tuple[ir.Buffer, tuple[ir.Expr, ...], ir.Buffer, tuple[ir.Expr, ...]]


class MatchError(IntrinError):
    """A block does not match an intrinsic's description; the message says what differs."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise MatchError(msg)


@dataclass(frozen=True)
class Operand:
    """Description buffer `param` is program buffer `buffer` from element `indices` on."""

    param: ir.Buffer
    buffer: ir.Buffer
    indices: tuple[ir.Expr, ...]


@dataclass(frozen=True)
class Binding:
    """A match: the operands (description parameter order), the program's step of each
    free stride (`free_strides` order; 0 for a variable without a loop), for each free
    extent how many times the description's extent fits the program's loop, and for each
    partial extent the program loop's extent (1 without a loop)."""

    operands: tuple[Operand, ...]
    strides: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    extents: tuple[int, ...] = ()  # the program's extent of each partial extent


def match(outer: ir.Block, intrin: TensorIntrin) -> tuple[Operand, ...]:
    """The operands of `intrin` in block `outer`, in the description's parameter order, or
    MatchError naming the first difference."""
    return bind(outer, intrin).operands


def bind(outer: ir.Block, intrin: TensorIntrin) -> Binding:
    """As match, with the free strides and extents of a memory intrinsic."""
    where = f"tensorize {intrin.name}: block {outer.name}"
    loops, inner = _nest(outer.body, where)
    block = inner.block
    _check(block.init is None, f"{where}: inner block {block.name} has an init; "
                               "decompose_reduction it first")
    _check(ir.is_true(inner.predicate), f"{where}: inner block {block.name} runs under a "
                                        f"predicate ({inner.predicate!r}): its loops do not "
                                        "tile it exactly")
    loops = [l for l in loops if l.extent > 1]
    desc = intrin.block
    extents = [iv.extent for iv in desc.iter_vars]
    perms = _pairings(loops, inner, intrin, where)
    _check(bool(perms), f"{where}: loop extents {[l.extent for l in loops]} do not pair with "
                        f"the intrinsic's {extents}")
    accesses = _pairs(desc, block, where)
    errors = []
    for perm in perms:
        try:
            return _operands(outer, inner, loops, perm, accesses, intrin, where)
        except MatchError as err:
            errors.append(str(err))
    raise MatchError(errors[0])


def _pairings(loops: list[ir.For], inner: ir.BlockRealize, intrin: TensorIntrin, where: str
              ) -> list[tuple[int, ...]]:
    """Each way to give every loop its own description variable of a fitting extent and the
    same kind, leaving only optional variables (intrin.optional_vars) without a loop;
    MatchError naming a loop whose extent fits only variables of the other kind."""
    ivs = intrin.block.iter_vars
    options = []
    for loop in loops:
        kind = _kind_of(loop.loop_var, inner)
        sized = [p for p, iv in enumerate(ivs) if _fits(loop.extent, iv, intrin)]
        options.append([p for p in sized if ivs[p].kind == kind])
        if sized and not options[-1]:
            iv = ivs[sized[0]]
            raise MatchError(f"{where}: loop {loop.loop_var.name} ({kind}) cannot stand for the "
                             f"intrinsic's {iv.kind} variable {iv.var.name} of extent "
                             f"{iv.extent}")
    needed = {p for p, iv in enumerate(ivs) if iv.var not in intrin.optional_vars}
    return [perm for perm in itertools.product(*options)
            if len(set(perm)) == len(perm) and needed <= set(perm)]


def _fits(extent: int, iv: ir.IterVar, intrin: TensorIntrin) -> bool:
    if iv.var in intrin.free_vars:
        return extent % iv.extent == 0
    if iv.var in intrin.partial_vars:
        return extent <= iv.extent
    return extent == iv.extent


def _nest(body: ir.Stmt, where: str) -> tuple[list[ir.For], ir.BlockRealize]:
    loops = []
    while isinstance(body, ir.For):
        loops.append(body)
        body = body.body
    _check(isinstance(body, ir.BlockRealize), f"{where}: its body is not a perfect loop nest "
                                              "around one block")
    return loops, body


def _pairs(desc: ir.Block, block: ir.Block, where: str) -> list[Access]:
    """(description buffer, indices, program buffer, indices) of every access, the store's
    first; MatchError when the updates differ in form or a buffer maps two ways."""
    d, r = desc.body, block.body
    _check(isinstance(r, ir.BufferStore), f"{where}: its inner block's body is not one store")
    out = [(d.buffer, d.indices, r.buffer, r.indices)]
    _check(_same(d.value, r.value, out), f"{where}: computes {r.value!r}, where the intrinsic "
                                         f"computes {d.value!r}")
    bmap: dict[ir.Buffer, ir.Buffer] = {}
    for dbuf, _, rbuf, _ in out:
        _check(dbuf.dtype == rbuf.dtype, f"{where}: {rbuf.name} is {rbuf.dtype}, where the "
                                         f"intrinsic's {dbuf.name} is {dbuf.dtype}")
        _check(bmap.setdefault(dbuf, rbuf) is rbuf,
               f"{where}: the intrinsic's {dbuf.name} stands for both {bmap[dbuf].name} and "
               f"{rbuf.name}")
    return out


def _same(d: ir.Expr, r: ir.Expr, out: list[Access]) -> bool:
    """Whether `r` has the form of `d` (appending the load pairs to `out`; undone on False)."""
    if type(d) is not type(r):
        return False
    if isinstance(d, ir.BufferLoad):  # a dtype that differs is named by _pairs
        out.append((d.buffer, d.indices, r.buffer, r.indices))
        return True
    if d.dtype != r.dtype:
        return False
    if isinstance(d, ir.Cast):
        return _same(d.value, r.value, out)
    if isinstance(d, ir.BinOp):
        if d.op != r.op:
            return False
        orders = [(r.a, r.b), (r.b, r.a)] if d.op in ("+", "*") else [(r.a, r.b)]
        for ra, rb in orders:
            mark = len(out)
            if _same(d.a, ra, out) and _same(d.b, rb, out):
                return True
            del out[mark:]
        return False
    if isinstance(d, (ir.IntImm, ir.FloatImm)):
        return d.value == r.value
    return False


def _operands(outer: ir.Block, inner: ir.BlockRealize, loops: list[ir.For], perm: tuple,
              accesses: list[Access], intrin: TensorIntrin, where: str) -> Binding:
    desc = intrin.block
    pair = {loops[i].loop_var: desc.iter_vars[p] for i, p in enumerate(perm)}
    ana = arith.Analyzer({**{iv.var: iv.extent for iv in outer.iter_vars},
                          **{l.loop_var: l.extent for l in loops}})
    zero = {l.loop_var: ir.const(0) for l in loops}
    binding = inner.binding()
    found: dict[ir.Buffer, Operand] = {}
    free: dict[tuple[str, int], int] = {}
    for dbuf, didx, rbuf, ridx in accesses:
        ridx = tuple(ana.simplify(ir.substitute(i, binding)) for i in ridx)
        steps = _steps(_flat(rbuf, ridx), [l.loop_var for l in loops], ana, where, rbuf)
        loose = {didx[d]: (dbuf.name, d) for b, d in intrin.free_strides if b == dbuf.name}
        want = arith.linear_form(_flat(dbuf, didx, skip={d for _, d in loose.values()})) or {}
        for loop, step in steps.items():
            var = pair[loop].var
            if var in loose:
                _check(step > 0 and free.setdefault(loose[var], step) == step,
                       f"{where}: {rbuf.name}'s rows move by {step} elements with loop "
                       f"{loop.name}; the intrinsic's {dbuf.name} takes one positive stride")
                continue
            expect = want.get(var, 0)
            _check(step == expect, f"{where}: {rbuf.name}'s element offset moves by {step} "
                                   f"with loop {loop.name}, where the intrinsic's {dbuf.name} "
                                   f"moves by {expect}")
        first = tuple(ana.simplify(ir.substitute(i, zero)) for i in ridx)
        found.setdefault(dbuf, Operand(dbuf, rbuf, first))
    paired = {iv.var: loop for loop, iv in pair.items()}
    for b, d in intrin.free_strides:  # a dimension of a variable without a loop: not moved
        dbuf = next(p for p in intrin.desc.params if p.name == b)
        index = _desc_index(accesses, dbuf)[d]
        _check((b, d) in free or (isinstance(index, ir.Var) and index not in paired
                                  and index in intrin.optional_vars),
               f"{where}: a free stride of the intrinsic has no loop of the program")
        free.setdefault((b, d), 0)
    extent = {l.loop_var: l.extent for l in loops}
    counts = tuple(extent[paired[v]] // next(iv.extent for iv in desc.iter_vars if iv.var is v)
                   if v in paired else 1 for v in _vars(intrin.free_vars, intrin.free_extents))
    sizes = tuple(extent[paired[v]] if v in paired else 1
                  for v in _vars(intrin.partial_vars, intrin.partial_extents))
    return Binding(tuple(found[p] for p in intrin.desc.params),
                   tuple(free[f] for f in intrin.free_strides), counts, sizes)


def _vars(named: dict[ir.Var, str], names: tuple[str, ...]) -> list[ir.Var]:
    """The description variables of `names`, in that order."""
    by_name = {name: var for var, name in named.items()}
    return [by_name[n] for n in names]


def _desc_index(accesses: list[Access], dbuf: ir.Buffer) -> tuple[ir.Expr, ...]:
    return next(didx for d, didx, _, _ in accesses if d is dbuf)


def _kind_of(loop: ir.Var, inner: ir.BlockRealize) -> str:
    """REDUCE when `loop` binds a reduction variable of the inner block, else SPATIAL."""
    for iv, value in zip(inner.block.iter_vars, inner.iter_values):
        if iv.kind == ir.REDUCE and ir.uses_var(value, loop):
            return ir.REDUCE
    return ir.SPATIAL


def _flat(buf: ir.Buffer, indices: tuple[ir.Expr, ...], skip: set[int] = frozenset()) -> ir.Expr:
    out: ir.Expr = ir.const(0)
    for d, (index, stride) in enumerate(zip(indices, buf.strides)):
        if d not in skip:
            out = out + index * stride
    return out


def _steps(offset: ir.Expr, loops: list[ir.Var], ana: arith.Analyzer, where: str,
           buf: ir.Buffer) -> dict[ir.Var, int]:
    """How far `offset` moves with each loop variable; MatchError when it is not affine in
    them (the rest may be any expression of the other variables)."""
    zero = {v: ir.const(0) for v in loops}
    base = ir.substitute(offset, zero)
    steps = {}
    for v in loops:
        step = arith.const_offset(ir.substitute(offset, {**zero, v: ir.const(1)}), base, ana)
        _check(step is not None, f"{where}: {buf.name}'s element offset is not affine in loop "
                                 f"{v.name}")
        steps[v] = step
    affine = base + sum((v * s for v, s in steps.items() if s), ir.const(0))
    _check(arith.const_offset(offset, affine, ana) == 0,
           f"{where}: {buf.name}'s element offset is not affine in its loops")
    return steps


__all__ = ["match", "bind", "Binding", "Operand", "MatchError"]
