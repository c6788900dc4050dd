"""RandomComputeLocation: move a producer under a sampled loop of its consumers (or inline
it, or leave it at the root), through sample_compute_location."""
from __future__ import annotations

from dataclasses import dataclass

from tessel.schedule import BlockRV, Schedule, tree
from tessel.space.rules.base import writes_output
from tessel.space.rules.tiling import TILED


@dataclass(frozen=True)
class RandomComputeLocation:
    """Applies to blocks in the root scope that do not write an output of the function,
    have a consumer and were not tiled by MultiLevelTiling."""

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        at_root = tree.scope_block(tree.block_path(sch.func, node.name)) is sch.func.body.block
        if (not at_root or TILED in node.annotations or writes_output(sch.func, node)
                or not sch.get_consumers(block)):
            return [sch]
        loc = sch.sample_compute_location(block)
        sch.compute_at(block, loc)
        return [sch]


__all__ = ["RandomComputeLocation"]
