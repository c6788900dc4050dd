"""MultiLevelTilingWithIntrin: multi-level tiling whose innermost block is a tensor intrinsic
(MetaSchedule's MultiLevelTilingWithIntrin, for the CPU's dot-product instructions).

For a reduction block that a registered intrinsic of the target can compute (an int8 matmul,
dense or convolution: C[.., j] += A[.., k] * B[.., j, k] in int32; a bfloat16 one into
float32), the rule

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
from tessel.ir import REDUCE, Block
from tessel.schedule import BlockRV, Schedule, ScheduleError
from tessel.space.rules.base import AUTO_TENSORIZE, is_reduction, simple_loops, single_reads
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
                or simple_loops(sch, block) is None:
            return [sch]
        for name in self.intrinsics:
            spec = intrin.get(name)
            if not _dtypes_fit(node, spec):
                continue
            for j, k in _candidates(node, spec):
                trial = sch.copy()
                try:
                    outer = tile_for_memory_intrin(trial, block, spec, j, k) if spec.memory \
                        else tile_for_intrin(trial, block, spec, j, k)
                except ScheduleError:
                    continue
                # the lanes' axis (the outer block's iter var in j's place: whole vectors of
                # the instruction) tiled innermost, so a convolution's register tile holds
                # output-channel vectors, as the priors assume of the last tiled axis
                at = next(n for n, iv in enumerate(node.iter_vars) if iv.var is j)
                lanes = trial.get(outer).iter_vars[at].var
                tiling = replace(self.tiling, pack_reads=False)
                designs = [d for d in tiling.designs(trial, outer, lanes)
                           if _fits(d, d.get_block(trial.get(outer).name), name,
                                    _output_dim(node, j))]
                if designs:
                    return designs
        return [sch]


def _fits(sch: Schedule, outer: BlockRV, name: str, lanes_at: int) -> bool:
    """Whether the tiled design tensorizes (checked on a copy), once a local accumulator has
    the lanes' dimension last (a convolution's output channels are H * W apart in NCHW, the
    instruction's accumulator is one vector); a design accumulating in place into such an
    output does not."""
    try:
        acc = sch.get(outer).writes[0].buffer
        rank = len(acc.shape)
        if acc not in sch.func.params and lanes_at != rank - 1:
            names = [f"d{n}" for n in range(rank)]
            outs = [n for n in names if n != names[lanes_at]] + [names[lanes_at]]
            sch.transform_layout(outer, 0, "write", _index_map(names, outs))
        sch.copy().tensorize(outer, name)
        return True
    except ScheduleError:
        return False


def _output_dim(block: Block, j: ir.Var) -> int:
    """The dimension of the block's output that the lanes' iter var `j` indexes."""
    store = block.body
    return next(d for d, index in enumerate(store.indices) if index is j)


def _dtypes_fit(block: Block, spec: intrin.TensorIntrin) -> bool:
    """Whether the block updates an accumulator of the intrinsic's dtype from operands of its
    inputs' dtypes (an int8 matmul into int32, bfloat16 into float32; a float32 matmul takes
    no intrinsic)."""
    store, acc = block.body, spec.block.body.buffer
    if not isinstance(store, ir.BufferStore) or store.buffer.dtype != acc.dtype:
        return False
    inputs = {p.dtype for p in spec.desc.params if p is not acc}
    reads = {r.buffer.dtype for r in block.reads if r.buffer is not store.buffer}
    return bool(reads) and reads <= inputs


def _candidates(block: Block, spec: intrin.TensorIntrin) -> list[tuple[ir.Var, ir.Var]]:
    """(spatial var for the lanes, reduction var for the group) pairs whose extents the
    intrinsic's divide, the last spatial var first (a memory intrinsic's: its columns and its
    whole step of the reduction)."""
    lanes, group = _lanes_group(spec)
    spatial = [iv.var for iv in reversed(block.iter_vars)
               if iv.kind != REDUCE and iv.extent % lanes == 0]
    reduce = [iv.var for iv in reversed(block.iter_vars)
              if iv.kind == REDUCE and iv.extent % group == 0]
    return [(j, k) for j in spatial for k in reduce]


def _lanes_group(spec: intrin.TensorIntrin) -> tuple[int, int]:
    if spec.memory:
        roles = _memory_roles(spec)
        return roles.tiles * roles.lanes, roles.step
    ivs = spec.block.iter_vars
    return ivs[0].extent, ivs[1].extent


@dataclass(frozen=True)
class _Roles:
    """A memory intrinsic's shape: `rows` of A and C (up to `rows`, when `partial`), `tiles`
    column tiles of `lanes` columns, `taps` reduction loops of its own (a window's), a step
    of `step` elements of the reduction in groups of `group`."""

    rows: int
    partial: bool
    tiles: int
    lanes: int
    taps: int
    step: int
    group: int


def _memory_roles(spec: intrin.TensorIntrin) -> _Roles:
    """The roles of a memory intrinsic's iteration variables: spatial (rows, column tiles,
    columns), then reduction (taps: free ones of extent 1; the step's two)."""
    spatial = [iv for iv in spec.block.iter_vars if iv.kind != REDUCE]
    reduce = [iv for iv in spec.block.iter_vars if iv.kind == REDUCE]
    taps = [iv for iv in reduce[:-2] if iv.extent == 1 and iv.var in spec.free_vars]
    return _Roles(spatial[0].extent, spatial[0].var in spec.partial_vars, spatial[1].extent,
                  spatial[2].extent, len(taps), reduce[-2].extent * reduce[-1].extent,
                  reduce[-1].extent)


def tile_for_intrin(sch: Schedule, block: BlockRV, spec: intrin.TensorIntrin, j: ir.Var,
                    k: ir.Var) -> BlockRV:
    """Pack B for `spec` (and A, when k is not its last dimension: a convolution's input
    channels), split j and k by its lanes and group and blockize the two inner loops; return
    the outer block, annotated AUTO_TENSORIZE. ScheduleError when a step does not fit."""
    lanes, group = (iv.extent for iv in spec.block.iter_vars)
    _pack_a(sch, block, j, k, group)
    _pack_b(sch, block, j, k, lanes, group)
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
    sch.annotate(outer, AUTO_TENSORIZE, spec.name)
    return outer


def _pack_b(sch: Schedule, block: BlockRV, j: ir.Var, k: ir.Var, lanes: int,
            group: int) -> None:
    """B'[j // lanes, .., k // group, j % lanes, k % group]: each instruction's operand
    consecutive, made once at the root."""
    index, dims = _operand_b(sch.get(block), j, k)
    rank = len(sch.get(block).reads[index].buffer.shape)
    names = [f"d{n}" for n in range(rank)]
    dj, dk = names[dims[0]], names[dims[1]]
    rest = [n for n in names if n not in (dj, dk)]
    outs = [f"{dj} // {lanes}", *rest, f"{dk} // {group}", f"{dj} % {lanes}", f"{dk} % {group}"]
    sch.cache_read(block, index, "global")
    sch.transform_layout(block, index, "read", _index_map(names, outs))


MEMORY_REDUCTION = 1024  # a memory intrinsic's call runs up to this much of the reduction


def tile_for_memory_intrin(sch: Schedule, block: BlockRV, spec: intrin.TensorIntrin,
                           j: ir.Var, k: ir.Var) -> BlockRV:
    """As tile_for_intrin, for AMX's blocks (amx.py): B packed as for VNNI (16 columns of 4
    consecutive k); A read where it lies, its reduction axis last (rows of consecutive k: a
    matmul's or an NHWC convolution's, not an NCHW one's); rows i (the spatial var that
    indexes A and not B) split by the intrinsic's rows (a partial one's: the most, up to its
    rows, that divide i), columns j by its column tiles x 16, k by a chunk of up to
    MEMORY_REDUCTION (the call's own loop) x 4; an intrinsic with taps of its own (a
    convolution's window) takes the block's other reduction loops inside the call; the
    inner loops blockized."""
    roles = _memory_roles(spec)
    node = sch.get(block)
    extent = {iv.var: iv.extent for iv in node.iter_vars}
    i = _rows_var(node, j, k, roles)
    rows = roles.rows if not roles.partial else \
        max(r for r in range(1, roles.rows + 1) if extent[i] % r == 0)
    taps = [iv.var for iv in node.iter_vars
            if iv.kind == REDUCE and iv.var is not k and iv.extent > 1]
    if len(taps) > roles.taps:
        raise ScheduleError(f"tile_for_memory_intrin: {spec.name} takes {roles.taps} "
                            f"reduction loops besides {k.name}; block {node.name} has "
                            f"{len(taps)}")
    chunk = max(c for c in range(roles.step, min(extent[k], MEMORY_REDUCTION) + 1, roles.step)
                if extent[k] % c == 0)
    _pack_b(sch, block, j, k, roles.lanes, roles.group)
    infos = simple_loops(sch, block)
    if infos is None:
        raise ScheduleError("tile_for_memory_intrin: the block's loops are not simple")
    order, inner, tap_loops = [], {}, []
    for info in infos:
        if info.var is i:
            outer_loop, inner[0] = sch.split(info.loop, [None, rows])
        elif info.var is j:
            outer_loop, inner[1], inner[2] = sch.split(info.loop, [None, roles.tiles,
                                                                   roles.lanes])
        elif info.var is k:
            outer_loop, inner[3], inner[4] = sch.split(info.loop, [None, chunk // roles.group,
                                                                   roles.group])
        elif any(info.var is t for t in taps):
            tap_loops.append(info.loop)
            continue
        else:
            outer_loop = info.loop
        order.append(outer_loop)
    inner_loops = tap_loops + [inner[n] for n in range(5)]
    sch.reorder(*order, *inner_loops)
    outer = sch.blockize(inner_loops[0])
    sch.annotate(outer, AUTO_TENSORIZE, spec.name)
    return outer


def _rows_var(block: Block, j: ir.Var, k: ir.Var, roles: _Roles) -> ir.Var:
    """The spatial var of a memory intrinsic's rows: one that indexes a read with k in its
    last dimension (A, rows of consecutive k) and not j (a convolution's output column,
    through its window's index), and whose extent the intrinsic's rows divide (any, for a
    partial one)."""
    for _, idx in single_reads(block):
        if not idx or idx[-1] is not k or any(ir.uses_var(x, j) for x in idx):
            continue
        for iv in reversed(block.iter_vars):
            if iv.kind != REDUCE and iv.extent > 1 and \
                    (roles.partial or iv.extent % roles.rows == 0) and \
                    any(ir.uses_var(x, iv.var) for x in idx[:-1]):
                return iv.var
    raise ScheduleError(f"tile_for_memory_intrin: no read of block {block.name} has rows of "
                        f"consecutive {k.name} and {roles.rows} rows")


def _pack_a(sch: Schedule, block: BlockRV, j: ir.Var, k: ir.Var, group: int) -> None:
    """Give the intrinsic's A (the read indexed by k and not by j) its group of k
    consecutive: a read whose k dimension is not the last (NCHW data: the channels) is laid
    out with k split, its inner part last (N, C / G, H, W, G); a parameter through a copy."""
    node = sch.get(block)
    for index, idx in single_reads(node):
        at_k = [d for d, i in enumerate(idx) if i is k]
        if len(at_k) != 1 or any(ir.uses_var(i, j) for i in idx) or at_k[0] == len(idx) - 1:
            continue
        names = [f"d{n}" for n in range(len(idx))]
        dk = names[at_k[0]]
        outs = [f"{dk} // {group}" if n == dk else n for n in names] + [f"{dk} % {group}"]
        if node.reads[index].buffer in sch.func.params:
            sch.cache_read(block, index, "global")
        sch.transform_layout(block, index, "read", _index_map(names, outs))
        return


def _index_map(names: list[str], outs: list[str]) -> str:
    """transform_layout's lambda text mapping the indices `names` to `outs`."""
    return f"lambda {', '.join(names)}: ({', '.join(outs)})"


def _operand_b(block: Block, j: ir.Var, k: ir.Var) -> tuple[int, tuple[int, int]]:
    """The read of `block` indexed by j in one dimension and by k in another (the
    intrinsic's B), and those dimensions; ScheduleError when none is."""
    for index, idx in single_reads(block):
        at_j = [d for d, i in enumerate(idx) if i is j]
        at_k = [d for d, i in enumerate(idx) if i is k]
        others = [i for i in idx if i is not j and i is not k]
        if len(at_j) == len(at_k) == 1 and not any(ir.uses_var(i, j) or ir.uses_var(i, k)
                                                   for i in others):
            return index, (at_j[0], at_k[0])
    raise ScheduleError(f"tile_for_intrin: no read of block {block.name} is indexed by "
                        f"{j.name} and {k.name} alone")


__all__ = ["MultiLevelTilingWithIntrin", "tile_for_intrin", "tile_for_memory_intrin",
           "AUTO_TENSORIZE"]
