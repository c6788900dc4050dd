"""RandomComputeLocation: move a producer under a sampled loop of its consumers (or inline
it, or leave it at the root), through sample_compute_location."""
from __future__ import annotations

from dataclasses import dataclass

from tessel.schedule import BlockRV, Schedule, tree
from tessel.space.rules.base import writes_output
from tessel.space.rules.inline import INLINE_RULE
from tessel.space.rules.tiling import TILED


@dataclass(frozen=True)
class RandomComputeLocation:
    """Applies to blocks in the root scope that do not write an output of the function,
    have a consumer and were not tiled by MultiLevelTiling. A block AutoInline must not
    inline (meta_schedule.inline_rule = "disable") stays at the root: inlining is among the
    sampled locations."""

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        at_root = tree.scope_block(tree.block_path(sch.func, node.name)) is sch.func.body.block
        if (not at_root or TILED in node.annotations or writes_output(sch.func, node)
                or not sch.get_consumers(block)
                or node.annotations.get(INLINE_RULE) == "disable"):
            return [sch]
        loc = sch.sample_compute_location(block)
        sch.compute_at(block, loc)
        return [sch]


__all__ = ["RandomComputeLocation"]
