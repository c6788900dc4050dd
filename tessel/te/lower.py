"""Tensor expressions -> the naive loop nest: one block per compute, under its own loops.

This is the *workload*: the unscheduled program that every schedule starts from and that
measured kernels are checked against.
"""
from __future__ import annotations

from typing import Any, Sequence

from tessel import ir
from tessel.ir import Buffer, Expr, Var
from tessel.arith import block_regions
from tessel.te.expr import Axis, Reduce, Tensor, check


def _topo_order(outputs: list[Tensor]) -> list[Tensor]:
    """Every tensor reachable from `outputs`, producers before consumers."""
    order: list[Tensor] = []
    state: dict[Tensor, str] = {}

    def visit(t: Tensor) -> None:
        if state.get(t) == "done":
            return
        check(state.get(t) != "active", f"tensor {t.name} depends on itself")
        state[t] = "active"
        if t.op is not None:
            for load in ir.collect(t.op.body, ir.BufferLoad):
                check(isinstance(load.buffer, Tensor),
                      f"compute {t.name} reads buffer {load.buffer.name}, which is not a tensor")
                visit(load.buffer)
        state[t] = "done"
        order.append(t)

    for t in outputs:
        visit(t)
    return order


def _check_args(args: list[Any], order: list[Tensor]) -> None:
    for a in args:
        check(isinstance(a, Tensor), f"create_func arguments must be tensors, got {a!r}")
    check(len(set(args)) == len(args), "create_func: a tensor is listed twice in args")
    for t in order:
        check(t.op is not None or t in args,
              f"placeholder {t.name} is used but not listed in create_func's args")


def _lower_compute(t: Tensor, buf: Buffer, bmap: dict[Buffer, Buffer], name: str) -> ir.Stmt:
    op = t.op
    body = op.body
    raxes: tuple[Axis, ...] = body.axes if isinstance(body, Reduce) else ()
    axes = list(op.axes) + list(raxes)
    loops = [Var(a.name) for a in axes]
    ivars = [ir.IterVar(Var("v" + a.name), a.extent, a.kind) for a in axes]
    vmap: dict[Var, Expr] = {a: iv.var + a.min for a, iv in zip(axes, ivars)}
    idx = tuple(iv.var for iv in ivars[: len(op.axes)])

    def rewrite(e: Expr) -> Expr:
        return ir.replace_buffers(ir.substitute(e, vmap), bmap)

    init = None
    if isinstance(body, Reduce):
        value = ir.select(rewrite(body.where), rewrite(body.source), body.identity())
        store = ir.BufferStore(buf, body.combine(buf.load(idx), value), idx)
        init = ir.BufferStore(buf, body.identity(), idx)
    else:
        store = ir.BufferStore(buf, rewrite(body), idx)
    reads, writes = block_regions(store, init)
    block = ir.Block(name, tuple(ivars), reads, writes, store, init, annotations=dict(op.attrs))
    nest: ir.Stmt = ir.realize(block, loops)
    for lv, a in zip(reversed(loops), reversed(axes)):
        nest = ir.For(lv, a.extent, nest)
    return nest


def lower(args: list[Tensor], name: str, attrs: dict[str, Any]) -> ir.PrimFunc:
    order = _topo_order([a for a in args if isinstance(a, Tensor)])
    _check_args(args, order)
    check(any(a.op is not None for a in args), "create_func: no computed tensor among args")
    bmap = {t: Buffer(t.name, t.shape, t.dtype) for t in order}
    used_names: set[str] = set()
    nests = [_lower_compute(t, bmap[t], bmap, ir.fresh_name(t.name, used_names))
             for t in order if t.op is not None]
    intermediates = tuple(bmap[t] for t in order if t.op is not None and t not in args)
    root = ir.Block("root", (), (), (), ir.seq(*nests), alloc_buffers=intermediates)
    params = tuple(bmap[a] for a in args)
    return ir.PrimFunc(name, params, ir.realize(root), attrs)


def create_func(args: Sequence[Tensor], name: str = "main",
                attrs: dict[str, Any] | None = None) -> ir.PrimFunc:
    """Lower the graph that computes the tensors in `args` into a PrimFunc whose parameters
    are `args` in order (inputs first, then outputs, by convention)."""
    return lower(list(args), name, dict(attrs or {}))


__all__ = ["lower", "create_func"]
