"""Steps the built-in templates share: finding the compute block, inlining transposes,
packing the output tile into a local buffer, parallelizing, unrolling."""
from __future__ import annotations

import contextlib

from tessel import ir
from tessel.ir import REDUCE, Block
from tessel.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from tessel.space.base import SpaceError
from tessel.space.rules.base import leaf_blocks
from tessel.space.rules.tiling import cache_write_at as pack_output  # noqa: F401 (shared)


def compute_block(sch: Schedule, template: str, n_spatial: int | None,
                  n_reduce: int) -> BlockRV:
    """The one reduction block of the workload, checked to have the expected iter vars
    (n_spatial None: at least 3, a batched operator)."""
    reductions = [b for b in leaf_blocks(sch.func) if any(iv.kind == REDUCE for iv in b.iter_vars)]
    if len(reductions) != 1:
        raise SpaceError(f"template {template}: expected one reduction block, found "
                         f"{len(reductions)} in {sch.func.name}")
    block = reductions[0]
    spatial = sum(iv.kind != REDUCE for iv in block.iter_vars)
    reduce = len(block.iter_vars) - spatial
    ok = (spatial == n_spatial if n_spatial is not None else spatial >= 3) and reduce == n_reduce
    if not ok or block.init is None:
        want = f"{n_spatial}" if n_spatial is not None else "at least 3"
        raise SpaceError(f"template {template}: block {block.name} of {sch.func.name} has "
                         f"{spatial} spatial and {reduce} reduce iter vars; expected {want} "
                         f"spatial and {n_reduce} reduce")
    return sch.get_block(block.name)


def inline_spatial_producers(sch: Schedule, block: BlockRV, keep_padding: bool) -> None:
    """Inline the elementwise producers of `block` (transposes; padding unless keep_padding)."""
    for producer in sch.get_producers(block):
        node = sch.get(producer)
        if keep_padding and _has_condition(node):
            continue
        with contextlib.suppress(ScheduleError):
            sch.compute_inline(producer)


def _has_condition(block: Block) -> bool:
    return bool(ir.collect(block.body, ir.Select)) or any(
        c.name == "if_then_else" for c in ir.collect(block.body, ir.Call))


def parallel_outer(sch: Schedule, loops: list[LoopRV]) -> LoopRV:
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    sch.parallel(fused)
    return fused


def auto_unroll(sch: Schedule, loop: LoopRV, max_step: int) -> None:
    if max_step > 0:
        sch.annotate(loop, "pragma_auto_unroll_max_step", max_step)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


def parallel_rest(sch: Schedule, skip: set[str]) -> None:
    """Parallelize the outermost loop of every other root-level nest (padding, epilogues)."""
    for blk in leaf_blocks(sch.func):
        if blk.name in skip or any(iv.kind == REDUCE for iv in blk.iter_vars):
            continue
        loops = sch.get_loops(sch.get_block(blk.name))
        if not loops or sch.get(loops[0]).kind != "serial":
            continue
        for outer in (loops[:2], loops[:1]):
            try:
                parallel_outer(sch, outer)
                break
            except ScheduleError:
                continue


__all__ = ["compute_block", "inline_spatial_producers", "pack_output",
           "parallel_outer", "auto_unroll", "parallel_rest"]
