"""Vector accumulators for innermost reduction loops (run by generate_c before writing C).

An innermost serial loop that folds values into one element,

    for k in range(n):                        # block: acc[i] = max(acc[i], x[i, k])
        acc[i] = max(acc[i], f(k))

runs one scalar operation per iteration: C compilers do not reassociate floating-point
additions, so they cannot vectorize it (TVM's CPU code has the same limit unless the
schedule rfactors the loop). Where every load of f(k) is contiguous or constant in k, the
loop becomes

    racc[0:L] = identity                      # L lanes of the target's vector width
    for ko in range(n // L):
        for l in vectorized(L): racc[l] = max(racc[l], f(ko * L + l))
    for l in unrolled(L): acc[i] = max(acc[i], racc[l])   # a tree: passes/lanes.py
    for kt in range(n % L): acc[i] = max(acc[i], f(n // L * L + kt))

with `racc` a local buffer the writer keeps in a vector register. Sums are reassociated (as
in every BLAS), max and min are exact (a NaN in any lane is the result's). Softmax's and layer
norm's row reductions, pooling over long windows and unscheduled dot products are what this
serves.
"""
from __future__ import annotations

from dataclasses import replace

from tessel.arith.linear import steps_by_one
from tessel.ir import (REDUCE, BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferStore,
                       Expr, For, PrimFunc, Stmt, Var, collect, const, is_true, realize, seq,
                       structural_equal, substitute, transform, uses_var)
from tessel.te import identity_of
from tessel.target import Target

_COMBINERS = {"+": "sum", "max": "max", "min": "min"}  # BinOp op -> te combiner
_DTYPES = ("float32", "float64")


def vectorize_reductions(func: PrimFunc, target: Target) -> PrimFunc:
    """`func` with its vectorizable innermost reduction loops rewritten (see the module
    docstring); `func` itself when there is none."""
    inside = {id(n) for s in collect(func.body, For) if s.kind == "vectorized"
              for n in collect(s.body, For)}

    def rewrite(node):
        if isinstance(node, For) and id(node) not in inside:
            return _rewrite_loop(node, target)
        return None
    body = transform(func.body, rewrite)
    return func if body is func.body else replace(func, body=body)


def _rewrite_loop(s: For, target: Target) -> Stmt | None:
    if s.kind != "serial" or s.annotations or not isinstance(s.body, BlockRealize):
        return None
    r = s.body
    block = r.block
    pred = r.predicate
    if not is_true(pred) or block.alloc_buffers:
        return None
    store = block.body
    if not isinstance(store, BufferStore) or store.buffer.dtype not in _DTYPES:
        return None
    lanes = target.vector_bits // int(store.buffer.dtype[-2:])
    if lanes < 2 or s.extent < 2 * lanes:
        return None
    bind = r.binding()
    reduce = [iv for iv in block.iter_vars if iv.kind == REDUCE]
    k = s.loop_var
    users = [iv for iv in block.iter_vars if uses_var(bind[iv.var], k)]
    if len(users) != 1 or users[0].kind != REDUCE:
        return None
    if block.init is not None and len(reduce) != 1:
        return None  # the init runs when every reduction variable is 0: not only this one
    parts = _fold(store)
    if parts is None:
        return None
    op, value = parts
    acc, idx = store.buffer, tuple(substitute(i, bind) for i in store.indices)
    value = substitute(value, bind)
    if any(uses_var(i, k) for i in idx) or not _contiguous_or_uniform(value, k):
        return None
    if any(load.buffer is acc for load in collect(value, BufferLoad)):
        return None

    dtype = acc.dtype
    rf = Buffer(f"{acc.name}_lanes", (lanes,), dtype, scope="local")
    identity = identity_of(_COMBINERS[op], dtype)
    full = s.extent // lanes
    l0, ko, l1, l2, kt = (Var(f"{k.name}_{t}") for t in ("l0", "o", "l", "h", "t"))
    stmts: list[Stmt] = []
    if block.init is not None:
        stmts.append(substitute(block.init, bind))
    stmts.append(For(l0, lanes, BufferStore(rf, identity, (l0,)), kind="vectorized"))
    at_lane = substitute(value, {k: ko * lanes + l1})
    stmts.append(For(ko, full, For(l1, lanes, BufferStore(
        rf, _combine(op, BufferLoad(rf, (l1,), dtype), at_lane), (l1,)), kind="vectorized")))
    stmts.append(For(l2, lanes, BufferStore(  # unrolled: its lanes fold as a tree (lanes.py)
        acc, _combine(op, BufferLoad(acc, idx, dtype), BufferLoad(rf, (l2,), dtype)), idx),
        kind="unrolled"))
    if s.extent % lanes:
        tail = substitute(value, {k: kt + full * lanes})
        stmts.append(For(kt, s.extent % lanes, BufferStore(
            acc, _combine(op, BufferLoad(acc, idx, dtype), tail), idx)))
    wrapper = Block(f"{block.name}_lanes", (), (), (), seq(*stmts), alloc_buffers=(rf,))
    return realize(wrapper)


def _fold(store: BufferStore) -> tuple[str, Expr] | None:
    """(op, f) when the store is acc[i] = op(acc[i], f) or op(f, acc[i])."""
    v = store.value
    if not isinstance(v, BinOp) or v.op not in _COMBINERS:
        return None
    for mine, other in ((v.a, v.b), (v.b, v.a)):
        if isinstance(mine, BufferLoad) and mine.buffer is store.buffer and \
                len(mine.indices) == len(store.indices) and \
                all(a is b or structural_equal(a, b) for a, b in zip(mine.indices, store.indices)):
            return v.op, other
    return None


def _contiguous_or_uniform(value: Expr, k: Var) -> bool:
    """Every load of `value` reads one element for all k or consecutive elements as k counts."""
    flats = (sum((i * st for i, st in zip(load.indices, load.buffer.strides)), const(0))
             for load in collect(value, BufferLoad))
    return all(steps_by_one(flat, k) for flat in flats)


def _combine(op: str, a: Expr, b: Expr) -> Expr:
    return BinOp(op, a, b, a.dtype)
