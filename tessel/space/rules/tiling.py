"""MultiLevelTiling: tile a reduction block with data reuse into the CPU structure "SSRSRS".

Every spatial loop is split into as many tiles as the structure has "S" levels, every
reduction loop into as many as it has "R" levels, with sample_perfect_tile, and the tiles are
reordered level by level. For matmul:

    i0 j0 | i1 j1 | k0 | j2 i2 | k1 | i3 j3        (S S R S R S)

In the S level between the reductions the vector axis's tiles go first (`vector_outer`): the
k1 x 32 panel of the packed operand that a column of register tiles reads (32 KB at k1 = 256
with AVX-512) stays in L1 while the row tiles pass over it, and L2 serves again the rows'
smaller panels (10 x 256 floats, read by broadcasts). Rows first re-read every column panel
for each row tile: BERT's 128 x 768 -> 3072 dense ran 6% slower so, ViT's 197 x 768 -> 3072
3% (a 2-core Xeon, AVX-512). A block with no reduction loop of its own (an AMX call reduces
all of k inside it) keeps the rows first: it re-reads no panel across k steps. (BLIS orders
its loops the other way, keeping the broadcast operand's panel in L1; its streamed panel is
the one read by whole vectors.)

Write-cache options fork the design: accumulate in place, or in a "local" buffer
(cache_write) whose copy-out block runs at the end of S level 1 or 2 (reverse_compute_at),
with an elementwise consumer (bias add, batch norm + ReLU) folded into the copy-out. A
consumer that reads only part of the output (the crop of a product computed over padded
rows: graph.opdefs.nn.product) goes under the same loop instead, reading the local tile, and
the copy-out is inlined into it: no padded output is written and read again (ViT's dense
layers over 197 of 200 rows 4% faster). The
innermost spatial tile is at most max_innermost_factor (64: eight AVX2 vectors, four AVX-512
ones), so that ParallelizeVectorizeUnroll can vectorize it and the local tile can live in
registers. `vector_lanes` and `accumulator_registers` describe the target (its float32
Target.vector_lanes and Target.accumulator_registers; left None, the host's): the vector axis
is chosen by the lanes, and the expert priors (tessel.space.priors) size register tiles from
both.
Where two-vector register tiles of as many rows as the accumulators hold do not divide the
row axis and its perfect tiles are much smaller (AVX2: 6 rows over 1024 or 128 rows, whose
perfect tiles hold 4), a further design splits the rows by that count first, the last split
partial under a guard that code generation tests once per tile (partial_row_tile).
Extent-1 loops are left untiled, in place. When a read is indexed by the innermost spatial
iter var (B in matmul), a sampled choice (block annotation meta_schedule.pack_read) asks the
RewriteLayout postprocessor to pack it in panels of the final innermost tile (TVM's layout
rewrite): cache_read + transform_layout, decided after the tile sizes are.

The vector axis is the block's last spatial iter var by default. When that var cannot fill
whole vectors (its extent is not a multiple of the lanes: a convolution's 28- or 7-wide output
rows) or a read steps along it by more than one element (a stride-2 convolution's input: its
vector loads would be gathers), while another spatial var can and has a packable read (the
output channels of an NCHW convolution, read through the weight), a further design puts that
var's tile innermost and packs its read: the register tile then holds output channels in the
vector lanes, as in the NCHWc schedules of vendor libraries.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from tessel import ir
from tessel.arith.linear import steps_by_one
from tessel.ir import REDUCE, Block, BufferLoad
from tessel.schedule import BlockRV, LoopRV, Schedule, ScheduleError
from tessel.space.base import check
from tessel.space.priors import MAX_ROWS
from tessel.space.rules.base import has_data_reuse, is_reduction, simple_loops, single_reads
from tessel.target import Target

WRITE_CACHE_SCOPE = "local"
TILED = "meta_schedule.tiling_structure"  # block annotation: RandomComputeLocation skips it
PACK = "meta_schedule.pack_read"  # block annotation: 1 = RewriteLayout packs a parameter read
PARTIAL = "meta_schedule.partial_rows"  # block annotation: the row extent a partial tile splits


@dataclass(frozen=True)
class MultiLevelTiling:
    structure: str = "SSRSRS"
    max_innermost_factor: int = 64
    max_innermost_reduce_factor: int = 256
    write_cache_levels: tuple[int, ...] = (2, 1)  # after which S level the copy-out runs
    allow_no_write_cache: bool = True
    pack_reads: bool = True
    vector_outer: bool = True  # the vector axis's tiles first in the S level between R's
    vector_lanes: int | None = None  # float32 lanes of the target (AVX2 8, AVX-512 16)
    accumulator_registers: int | None = None  # registers a register tile holds (AVX2 12)
    partial_rows: bool = True  # a further design: register tiles of rows that leave a tail

    def __post_init__(self) -> None:
        check(set(self.structure) <= {"S", "R"} and "S" in self.structure,
              f"MultiLevelTiling: structure {self.structure!r} must be made of S and R")
        for key in ("vector_lanes", "accumulator_registers"):
            value = getattr(self, key)
            check(value is None or (isinstance(value, int) and value >= 1),
                  f"MultiLevelTiling: {key} must be a positive int or None, got {value!r}")
        n_s = self.structure.count("S")
        check(all(1 <= lvl <= n_s for lvl in self.write_cache_levels),
              f"MultiLevelTiling: write_cache_levels {self.write_cache_levels} must be in "
              f"1..{n_s}")

    @property
    def lanes(self) -> int:
        """float32 lanes of a vector: `vector_lanes`, or the host's."""
        return self.vector_lanes or Target("host").vector_lanes("float32")

    @property
    def accumulators(self) -> int:
        """Vector registers a register tile may hold: `accumulator_registers`, or the host's."""
        return self.accumulator_registers or Target("host").accumulator_registers

    def for_target(self, target: Target) -> MultiLevelTiling:
        """This rule with the fields left None taken from `target`."""
        return replace(self, vector_lanes=self.vector_lanes or target.vector_lanes("float32"),
                       accumulator_registers=self.accumulator_registers
                       or target.accumulator_registers)

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        node = sch.get(block)
        if not is_reduction(node) or node.init is None or not has_data_reuse(node):
            return [sch]
        if simple_loops(sch, block) is None:
            return [sch]
        designs = [d for vector_var in [None, *self.vector_axes(sch, block)]
                   for d in self.designs(sch, block, vector_var)]
        rows = self.partial_row_tile(sch, block)
        if rows is not None and self.write_cache_levels:
            designs += self.designs(sch, block, None, rows)
        return designs or [sch]

    def designs(self, sch: Schedule, block: BlockRV, vector_var: ir.Var | None = None,
                rows: int | None = None) -> list[Schedule]:
        """Copies of `sch` with `block` tiled (`tile`), one per write-cache option that fits;
        with `rows` (partial_row_tile), one accumulating in a local tile."""
        options: list[int | None] = [None] if self.allow_no_write_cache else []
        levels = options + list(self.write_cache_levels) if rows is None else \
            list(self.write_cache_levels[:1])
        out = []
        for level in levels:
            trial = sch.copy()
            try:
                self.tile(trial, block, level, vector_var, rows)
            except ScheduleError:
                continue
            out.append(trial)
        return out

    def partial_row_tile(self, sch: Schedule, block: BlockRV) -> int | None:
        """The rows of a register tile of two vectors that fills the accumulators, when they
        do not divide the row axis (the tiled spatial loop before the vector axis) and no
        divisor of it comes as close: 6 rows of AVX2's 12 accumulators over 1024 or 128 rows,
        whose perfect tiles hold 4. The tiling then splits the rows by it, and the last
        tile is partial (its guards hoisted out of the hot loops: tessel.codegen.passes.
        unswitch); on a Zen 3, 6 x 16 tiles ran GMM-1024 at 123 GFLOP/s, 4 x 16 at 112."""
        if not self.partial_rows:
            return None
        infos = [info for info in simple_loops(sch, block) or []
                 if info.kind != REDUCE and info.extent > 1]
        if len(infos) < 2 or infos[-1].extent % (2 * self.lanes):
            return None
        rows, extent = min(MAX_ROWS, self.accumulators // 2), infos[-2].extent
        if extent <= rows or extent % rows == 0:
            return None
        whole = max(d for d in range(1, rows + 1) if extent % d == 0)
        # only where the perfect tile is much smaller, and the split makes fewer tiles
        return rows if whole * 3 <= rows * 2 and -(-extent // rows) < extent // whole else None

    def vector_axes(self, sch: Schedule, block: BlockRV) -> list[ir.Var]:
        """Spatial iter vars other than the last worth putting in the vector lanes: only when
        the last one cannot fill whole vectors or some read steps along it by more than one
        element (a stride-2 convolution: its vectors would be gathers), those that can and
        have a packable read."""
        if not self.pack_reads:
            return []
        node = sch.get(block)
        spatial = [iv for iv in node.iter_vars if iv.kind != REDUCE]
        if not spatial or (spatial[-1].extent % self.lanes == 0
                           and not strided_read(node, spatial[-1].var)):
            return []
        return [iv.var for iv in spatial[:-1]
                if iv.extent % self.lanes == 0
                and packable_read(node, iv.var, sch.func) is not None]

    def tile(self, sch: Schedule, block: BlockRV, write_level: int | None,
             vector_var: ir.Var | None = None, rows: int | None = None) -> list[list[LoopRV]]:
        """Tile `block`; with write_level, accumulate in a local buffer copied out at the
        end of that S level; with vector_var, that spatial iter var's innermost tile goes last
        (the vector axis); with `rows`, the row axis is first split by that many rows
        (the last split partial), and the tiles of its outer loop hold whole such splits.
        Returns the loops of each level."""
        levels = self._split(sch, block, vector_var, rows)
        sch.annotate(block, TILED, self.structure)
        if self.pack_reads and packable_read(sch.get(block), vector_var, sch.func) is not None:
            sch.annotate(block, PACK, sch.sample_categorical([0, 1], [0.5, 0.5]))
        flat = [loop for level in levels for loop in level]
        if len(flat) > 1:
            sch.reorder(*flat)
        if write_level is not None:
            s_levels = [lvl for lvl, c in zip(levels, self.structure) if c == "S"]
            at = next((lvl[-1] for lvl in reversed(s_levels[:write_level]) if lvl), None)
            if at is None:
                raise ScheduleError("MultiLevelTiling: no loop to put the write cache under")
            cache_write_at(sch, block, at)
        return levels

    def _between_reductions(self) -> int | None:
        """With vector_outer, the index of the S level just before the last R level of the
        structure (SSRSRS: 3, the register tiles' repeats), if any; else None."""
        at = self.structure.rfind("S", 0, max(self.structure.rfind("R"), 0))
        return at if self.vector_outer and at >= 0 else None

    def _split(self, sch: Schedule, block: BlockRV, vector_var: ir.Var | None = None,
               rows: int | None = None) -> list[list[LoopRV]]:
        levels: list[list[LoopRV]] = [[] for _ in self.structure]
        infos = list(simple_loops(sch, block) or [])
        if vector_var is not None:  # its loop last: its innermost tile ends the last S level
            infos.sort(key=lambda info: info.var is vector_var)
        spatial = [info for info in infos if info.kind != REDUCE]
        vector = spatial[-1].var if spatial else None
        tiled = [info for info in spatial if info.extent > 1]
        row = tiled[-2].var if rows is not None and len(tiled) >= 2 else None
        between = self._between_reductions() if any(
            info.kind == REDUCE and info.extent > 1 for info in infos) else None
        for info in infos:
            if info.extent == 1:
                continue
            code = "R" if info.kind == REDUCE else "S"
            where = [i for i, c in enumerate(self.structure) if c == code]
            if len(where) == 1:
                levels[where[0]].append(info.loop)
                continue
            limit = (self.max_innermost_reduce_factor if code == "R"
                     else self.max_innermost_factor)
            loop, partial = info.loop, None
            if info.var is row:  # whole splits of `rows` tiled, the last split partial
                sch.annotate(block, PARTIAL, info.extent)
                loop, partial = sch.split(info.loop, [None, rows])
            factors = sch.sample_perfect_tile(loop, len(where), limit)
            for i, loop in zip(where, sch.split(loop, factors)):
                if i == between and info.var is vector:
                    levels[i].insert(0, loop)  # vector_outer
                else:
                    levels[i].append(loop)
            if partial is not None:
                levels[where[-1]].append(partial)
        return levels


def packable_read(block: Block, var: ir.Var | None = None,
                  func: ir.PrimFunc | None = None) -> int | None:
    """The index of a read of `block` from a buffer loaded at one index tuple of which the
    spatial iter var `var` (default: the last) is exactly one dimension (B[k, j] of
    C[i, j] += A[i, k] * B[k, j]; W[o, c, h, w] of a conv2d for o): packing it in panels of
    the innermost tile makes the vector loads contiguous. Given the block's `func`, an
    intermediate buffer (the kernel computes it) whose innermost index is `var` itself is
    passed over: its vector loads are contiguous already (a blocked layout's padded input),
    and packing it would copy it once more on every call."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind != REDUCE]
    if not spatial:
        return None
    last = spatial[-1] if var is None else var
    params = set(func.params) if func is not None else None
    for index, idx in single_reads(block):
        region = block.reads[index]
        if region.buffer in ir.written_buffers(block):
            continue
        if params is not None and region.buffer not in params and idx[-1] is last and \
                not _transposed_copy(func, region.buffer):
            continue
        if sum(ir.uses_var(i, last) for i in idx) == 1 and last in idx and len(idx) >= 2:
            return index
    return None


def _transposed_copy(func: ir.PrimFunc, buffer: ir.Buffer, depth: int = 4) -> bool:
    """Whether intermediate `buffer` is a copy (through elementwise stages, which AutoInline
    folds into their reader after this rule has tiled it) of a parameter read with its
    innermost axis elsewhere: attention's k^T, a transpose of the keys, is read one element a
    lane once folded (BERT's q k^T 271 -> 141 us a call packed, on a Xeon), so its read is
    packable. (Keys that tile badly, ViT's 197, come padded: graph.opdefs.nn._matmul_lower.)"""
    producer = next((b for b in ir.visitor.blocks(func.body)
                     if any(w.buffer is buffer for w in b.writes)), None)
    if producer is None or depth == 0 or is_reduction(producer):
        return False
    stores = ir.collect(producer.body, ir.BufferStore)
    if len(stores) != 1 or not isinstance(stores[0].indices[-1], ir.Var):
        return False
    inner = stores[0].indices[-1]
    params = set(func.params)
    for load in ir.collect(producer.body, BufferLoad):
        if not any(ir.uses_var(i, inner) for i in load.indices):
            continue
        if load.buffer in params and not ir.uses_var(load.indices[-1], inner):
            return True
        if load.buffer not in params and load.indices[-1] is inner and \
                _transposed_copy(func, load.buffer, depth - 1):
            return True
    return False


def strided_read(block: Block, var: ir.Var) -> bool:
    """Whether some read of `block` indexes a dimension by `var` with a step other than one
    (x * 2 + rx of a stride-2 convolution's input) or not affinely."""
    return any(not steps_by_one(index, var)
               for load in ir.collect(block.body, BufferLoad) for index in load.indices)


def cache_write_at(sch: Schedule, block: BlockRV, at: LoopRV) -> BlockRV:
    """Accumulate `block` in a local buffer, fold a single elementwise consumer into the
    copy-out block when possible, and move the copy-out under `at`; a single spatial consumer
    that cannot be folded (it reads part of the output: the crop of a product over padded
    rows, ViT's 197 of 200) goes under `at` too, reading the local buffer, the copy-out
    inlined into it. Returns the block under `at` that reads the local buffer: the copy-out,
    or that consumer."""
    out = sch.cache_write(block, 0, WRITE_CACHE_SCOPE)
    consumers = sch.get_consumers(out)
    folded = False
    if len(consumers) == 1:
        try:
            sch.reverse_compute_inline(consumers[0])
            folded = True
        except ScheduleError:
            pass
    sch.reverse_compute_at(out, at)
    if folded or len(consumers) != 1 or \
            any(iv.kind == REDUCE for iv in sch.get(consumers[0]).iter_vars):
        return out
    try:
        sch.reverse_compute_at(consumers[0], at)
        sch.compute_inline(out)
    except ScheduleError:
        return out  # the consumer stays where it is, or under `at` reading the copy
    return consumers[0]


__all__ = ["MultiLevelTiling", "cache_write_at", "packable_read", "strided_read", "TILED",
           "PACK", "PARTIAL"]
