"""Pack constant operands once, at compile time, instead of on every call.

A tuned conv or dense kernel often copies its weight into a panel layout first (the
RewriteLayout postprocessor: `weight_global[j // 8, k, j % 8] = weight[j, k]`), so that its
register tile reads whole vectors. In a model the weight is a constant, so that copy gives
the same result on every call: TVM folds it with the graph's constants (the layout rewrite
of its MetaSchedule, AutoTVM's alter-op-layout). Here the runtime splits such stages out of
the scheduled kernel,

    main, packs = split_prepacks(func, constant={1})

runs each `Prepack.func` once on the constant (its params: the constant, the packed buffer),
and binds the packed array to `main`, whose params are the kernel's params followed by one
packed buffer per pack; with `drop_unread=True` (the runtime's), a constant that only the
split-out stages read is no longer a param of `main`, so the model need not keep it once it
is packed: a weight is stored in the layout its kernel reads, not in both. The tuner
measures a workload with constant parameters (PrimFunc.constant_params) the same way: the
builder splits the stages and the generated C packs once, outside the timed calls
(tessel.codegen.generate_c's `prepacks`), so the search ranks programs by what a compiled
model runs.

A stage qualifies when it is a loop nest at the top of the kernel holding one block, which
reads nothing but constant parameters and writes one buffer the kernel allocates and no other
stage writes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tessel.ir import (CONSTANT_PARAMS, Block, Buffer, BufferLoad, BufferStore, PrimFunc,
                       SeqStmt, Stmt, collect)


@dataclass(frozen=True)
class Prepack:
    """A stage computing `packed` from the kernel's constant parameter number `source`; `func`
    takes (that constant, packed)."""
    func: PrimFunc
    source: int
    packed: Buffer


def split_prepacks(func: PrimFunc, constant: set[int], *,
                   drop_unread: bool = False) -> tuple[PrimFunc, list[Prepack]]:
    """`func` without its stages that only rearrange constant parameters (positions in
    `constant`), and those stages as functions of their own; (func, []) when there is none.
    With `drop_unread`, the constants that no stage left in `main` reads leave its params."""
    if not constant:  # every build of a tuning run asks: nothing to look for
        return func, []
    realize = func.body
    root = realize.block
    stmts = list(root.body.seq) if isinstance(root.body, SeqStmt) else [root.body]
    packs: list[Prepack] = []
    keep: list[Stmt] = []
    for k, stmt in enumerate(stmts):
        pack = _as_prepack(func, stmt, constant, stmts[:k] + stmts[k + 1:])
        if pack is None:
            keep.append(stmt)
        else:
            packs.append(pack)
    if not packs:
        return func, []
    done = {p.packed for p in packs}
    body = keep[0] if len(keep) == 1 else SeqStmt(tuple(keep))
    main_root = replace(root, body=body,
                        alloc_buffers=tuple(b for b in root.alloc_buffers if b not in done))
    params = func.params
    if drop_unread:
        read = {load.buffer for stmt in keep for load in collect(stmt, BufferLoad)}
        params = tuple(p for k, p in enumerate(params) if k not in constant or p in read)
    attrs = {k: v for k, v in func.attrs.items() if k != CONSTANT_PARAMS}  # positions moved
    main = PrimFunc(func.name, (*params, *(p.packed for p in packs)),
                    replace(realize, block=main_root), attrs)
    return main, packs


def _as_prepack(func: PrimFunc, stmt: Stmt, constant: set[int],
                others: list[Stmt]) -> Prepack | None:
    blocks = collect(stmt, Block)
    if len(blocks) != 1 or blocks[0].init is not None:
        return None
    block = blocks[0]
    reads = {r.buffer for r in block.reads}
    writes = {w.buffer for w in block.writes}
    root = func.body.block
    if len(reads) != 1 or len(writes) != 1:
        return None
    (source,), (packed,) = reads, writes
    if source not in func.params or func.params.index(source) not in constant or \
            packed not in root.alloc_buffers or packed.scope != "global":
        return None
    if any(s.buffer is packed for other in others for s in collect(other, BufferStore)):
        return None
    pack_root = replace(root, body=stmt, alloc_buffers=())
    pack_func = PrimFunc(f"{func.name}_pack_{source.name}", (source, packed),
                         replace(func.body, block=pack_root), func.attrs)
    return Prepack(pack_func, func.params.index(source), packed)
