"""MultiLevelTilingWithIntrin: multi-level tiling whose innermost block is a tensor intrinsic
(MetaSchedule's MultiLevelTilingWithIntrin, for the CPU's dot-product instructions).

For a reduction block that a registered intrinsic of the target can compute (an int8 matmul,
dense or convolution: C[.., j] += A[.., k] * B[.., j, k] in int32), the rule

1. packs the read that plays the intrinsic's B (indexed by the spatial iter var j that fills
   its lanes and the reduction var k of its group) so that each instruction's operand is
   consecutive: B'[j // L, .., k // G, j % L, k % G], made once at the root (a weight's
   pack then leaves the kernel: tessel.prepack);
2. splits j by L and k by G, moves the two inner loops innermost and blockizes them: the
   outer block `<name>_o` is one instruction's work, annotated AUTO_TENSORIZE with the
   intrinsic's name (RewriteTensorize tensorizes it once the postprocessors are done);
3. tiles the outer block with MultiLevelTiling (SSRSRS, a local write cache), without
   MultiLevelTiling's own packing: its innermost spatial tiles are the register tile of
   int32 vectors, which the auto-unroll annotation unrolls so the accumulators stay in
   registers.

The intrinsics are tried in the target's order (the widest first: VNNI-512, then VNNI-256,
then the 16-bit paths); the first that fits gives the designs. A block no intrinsic fits, or a
target without any, is left to the plain MultiLevelTiling.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from tessel import intrin, ir
from tessel.ir import REDUCE, Block, BufferLoad
from tessel.schedule import BlockRV, Schedule, ScheduleError
from tessel.space.rules.base import AUTO_TENSORIZE, is_reduction, simple_loops
from tessel.space.rules.tiling import MultiLevelTiling
from tessel.target import Target


@dataclass(frozen=True)
class MultiLevelTilingWithIntrin:
    intrinsics: tuple[str, ...] = ()  # names of tessel.intrin.REGISTRY, in preference order
    tiling: MultiLevelTiling = field(default_factory=MultiLevelTiling)

    def for_target(self, target: Target) -> MultiLevelTilingWithIntrin:
        """This rule with the target's intrinsics (when none are given) and tiling."""
        names = self.intrinsics or tuple(i.name for i in intrin.for_target(target))
        return replace(self, intrinsics=names, tiling=self.tiling.for_target(target))

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        if not self.intrinsics or not is_reduction(node) or node.init is None \
                or simple_loops(sch, block) is None or not _integer_update(node):
            return [sch]
        for name in self.intrinsics:
            for j, k in _candidates(node, intrin.get(name)):
                trial = sch.copy()
                try:
                    outer = tile_for_intrin(trial, block, intrin.get(name), j, k)
                except ScheduleError:
                    continue
                tiling = replace(self.tiling, pack_reads=False)
                return tiling.apply(trial, outer)
        return [sch]


def _integer_update(block: Block) -> bool:
    """An update into an integer accumulator (the only kind the intrinsics compute)."""
    store = block.body
    return isinstance(store, ir.BufferStore) and ir.is_int(store.buffer.dtype)


def _candidates(block: Block, spec: intrin.TensorIntrin) -> list[tuple[ir.Var, ir.Var]]:
    """(spatial var for the lanes, reduction var for the group) pairs whose extents the
    intrinsic's divide, the last spatial var first."""
    lanes, group = (iv.extent for iv in spec.block.iter_vars)
    spatial = [iv.var for iv in reversed(block.iter_vars)
               if iv.kind != REDUCE and iv.extent % lanes == 0]
    reduce = [iv.var for iv in reversed(block.iter_vars)
              if iv.kind == REDUCE and iv.extent % group == 0]
    return [(j, k) for j in spatial for k in reduce]


def tile_for_intrin(sch: Schedule, block: BlockRV, spec: intrin.TensorIntrin, j: ir.Var,
                    k: ir.Var) -> BlockRV:
    """Pack B for `spec`, split j and k by its lanes and group, blockize the two inner loops
    and check the outer block tensorizes (on a copy); return the outer block, annotated
    AUTO_TENSORIZE. ScheduleError when any step does not fit."""
    lanes, group = (iv.extent for iv in spec.block.iter_vars)
    index, dims = _operand_b(sch.get(block), j, k)
    rank = len(sch.get(block).reads[index].buffer.shape)
    names = [f"d{n}" for n in range(rank)]
    dj, dk = names[dims[0]], names[dims[1]]
    rest = [n for n in names if n not in (dj, dk)]
    outs = [f"{dj} // {lanes}", *rest, f"{dk} // {group}", f"{dj} % {lanes}", f"{dk} % {group}"]
    sch.cache_read(block, index, "global")
    sch.transform_layout(block, index, "read", f"lambda {', '.join(names)}: ({', '.join(outs)})")
    infos = simple_loops(sch, block)
    if infos is None:
        raise ScheduleError("tile_for_intrin: the block's loops are not simple")
    order, inner = [], []
    for info in infos:
        if info.var is j or info.var is k:
            outer_loop, inner_loop = sch.split(info.loop, [None, lanes if info.var is j
                                                           else group])
            order.append(outer_loop)
            inner.append((info.var is k, inner_loop))
        else:
            order.append(info.loop)
    inner_loops = [loop for _, loop in sorted(inner, key=lambda t: t[0])]  # j's, then k's
    sch.reorder(*order, *inner_loops)
    outer = sch.blockize(inner_loops[0])
    check = sch.copy()
    check.tensorize(outer, spec.name)
    sch.annotate(outer, AUTO_TENSORIZE, spec.name)
    return outer


def _operand_b(block: Block, j: ir.Var, k: ir.Var) -> tuple[int, tuple[int, int]]:
    """The read of `block` indexed by j in one dimension and by k in another (the
    intrinsic's B), and those dimensions; ScheduleError when none is."""
    for index, region in enumerate(block.reads):
        loads = {l.indices for l in ir.collect(block.body, BufferLoad)
                 if l.buffer is region.buffer}
        if len(loads) != 1:
            continue
        idx = next(iter(loads))
        at_j = [d for d, i in enumerate(idx) if i is j]
        at_k = [d for d, i in enumerate(idx) if i is k]
        others = [i for i in idx if i is not j and i is not k]
        if len(at_j) == len(at_k) == 1 and not any(ir.uses_var(i, j) or ir.uses_var(i, k)
                                                   for i in others):
            return index, (at_j[0], at_k[0])
    raise ScheduleError(f"tile_for_intrin: no read of block {block.name} is indexed by "
                        f"{j.name} and {k.name} alone")


__all__ = ["MultiLevelTilingWithIntrin", "tile_for_intrin", "AUTO_TENSORIZE"]
