"""Postprocessors: finish a sampled schedule and reject the ones that cannot be valid.

Each postprocessor has `apply(sch)`, which transforms the schedule in place (recording its
primitives in the trace) or raises SpaceError / ScheduleError when the program is invalid.
`postprocess(sch, postprocs)` runs them on a copy and returns it, or None when one rejects
the program (with `strict=True` it raises SpaceError naming the reason), so no invalid
program is ever built or measured.

    RewriteLayout                    pack a read in panels of the innermost tile (cache_read +
                                     transform_layout) where MultiLevelTiling asked for it
    RewriteReductionBlock            decompose_reduction at the outermost reduction loop
    RewriteParallelVectorizeUnroll   root annotations of ParallelizeVectorizeUnroll -> fuse +
                                     parallel, vectorize, pragma_auto_unroll_max_step
    RewriteTensorize                 tensorize the blocks MultiLevelTilingWithIntrin marked
    VerifyLoops                      one parallel loop per nest, vector and unroll limits
    VerifyCodegen                    the program compacts and renders to C for the target
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Protocol, Sequence

from tessel import intrin, ir
from tessel.arith.linear import linear_form
from tessel.codegen.c import CodegenError, generate_c
from tessel.codegen.passes import compact_buffers
from tessel.ir import REDUCE, BlockRealize, For, PrimFunc
from tessel.schedule import BlockRV, LoopRV, Schedule, ScheduleError, tree
from tessel.space.base import SpaceError, check
from tessel.space.rules.base import AUTO_TENSORIZE, leaf_blocks
from tessel.space.rules.parallel import PARALLEL, UNROLL, VECTORIZE
from tessel.space.rules.tiling import PACK, packable_read
from tessel.target import Target

MAX_UNROLL_STEP = 512  # the largest pragma_auto_unroll_max_step accepted
MAX_UNROLLED_ITERATIONS = 4096  # product of the extents of nested "unrolled" loops
# a kernel doing at most this many iterations in all runs on one thread: starting and
# joining the threads (1-2 us) took longer than an LSTM step's 650-wide gates themselves
SERIAL_WORK = 4096


class Postproc(Protocol):
    def apply(self, sch: Schedule) -> None: ...


def postprocess(sch: Schedule, postprocs: Sequence[Postproc],
                strict: bool = False) -> Schedule | None:
    """A postprocessed copy of `sch`, or None (strict: SpaceError) when it is invalid."""
    out = sch.copy()
    try:
        for post in postprocs:
            post.apply(out)
    except (ScheduleError, SpaceError) as err:
        if strict:
            raise SpaceError(f"{type(post).__name__} rejects the program: {err}") from None
        return None
    return out


def default_postprocs(target: Target, verify_codegen: bool = False,
                      pack_panels: bool = True) -> list[Postproc]:
    """The CPU postprocessors; `verify_codegen` adds a C rendering check (it costs as much
    Python time as the rendering a build does anyway). `pack_panels=False` keeps every pack
    stage at the root, where tessel.prepack can take it out of the kernel when the
    packed operand is a constant (RewriteLayout)."""
    lanes = target.vector_lanes("float32")
    posts: list[Postproc] = [RewriteLayout(pack_panels), RewriteReductionBlock(),
                             RewriteParallelVectorizeUnroll(lanes=lanes, cores=target.cores),
                             RewriteTensorize(), VerifyLoops()]
    return posts + ([VerifyCodegen(target)] if verify_codegen else [])


def postprocs_for(func: PrimFunc, target: Target) -> list[Postproc]:
    """The postprocessors of a workload's programs: a workload with constant parameters keeps
    its pack stages at the root, where the measurement and the runtime take a constant's
    pack out of the kernel (tessel.prepack)."""
    return default_postprocs(target, pack_panels=not func.constant_params)


# ---- loop analysis --------------------------------------------------------------------------
def is_spatial_loop(loop: For) -> bool:
    """No block under the loop binds it to a reduction iter var."""
    for r in ir.collect_stmts(loop.body, BlockRealize):
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            if iv.kind == REDUCE and ir.uses_var(value, loop.loop_var):
                return False
    return True


def _fuses_contiguously(innermost: For, outer: For, inner_size: int) -> bool:
    """Whether fusing `outer` above the vector loops (the innermost one `innermost`, together
    `inner_size` iterations) keeps every access of the blocks under them a contiguous or a
    broadcast vector: each address steps by `inner_size` times the innermost loop's step."""
    for realize in ir.collect(innermost, BlockRealize):
        bind = realize.binding()
        for access in ir.collect(realize.block.body, (ir.BufferLoad, ir.BufferStore)):
            flat: ir.Expr = ir.const(0, "int32")
            for index, n in zip(access.indices, access.buffer.shape):
                flat = flat * int(n) + index
            flat = ir.substitute(flat, bind)
            form = linear_form(flat)
            if form is None:
                if ir.uses_var(flat, outer.loop_var):
                    return False
                continue
            if form.get(outer.loop_var, 0) != inner_size * form.get(innermost.loop_var, 0):
                return False
    return True


def fusible_prefix(sch: Schedule, loops: list[LoopRV]) -> list[int]:
    """Extents of the outermost loops that can be fused into one parallel loop: serial,
    spatial for every block under them, each the only child of the one above."""
    extents = []
    nodes = [sch.get(l) for l in loops]
    for i, node in enumerate(nodes):
        if node.kind != "serial" or not is_spatial_loop(node):
            break
        extents.append(node.extent)
        if i + 1 < len(nodes) and node.body is not nodes[i + 1]:
            break
    return extents


def parallel_plan(extents: list[int], max_extent: int) -> int:
    """How many of the prefix loops to fuse: until the product exceeds max_extent."""
    n, prod = 0, 1
    for extent in extents:
        n += 1
        prod *= extent
        if prod > max_extent:
            break
    return n if prod > 1 else 0


# ---- postprocessors -------------------------------------------------------------------------
@dataclass(frozen=True)
class RewriteLayout:
    """For blocks annotated meta_schedule.pack_read = 1: copy the read packable along the
    vector axis j (the spatial iter var the block's innermost loop feeds) into a buffer laid
    out as [j // t, <other dims>, j % t], t the extent of that loop (the vector tile), made by
    a pre-stage whose loops are (j // t, others, j % t). With `panels`, the stage goes inside
    the loop nest where each iteration reads its own panels (`_panel_loop`); without, it
    stays at the root: a stage there that packs a constant is done once for a model, ahead
    of its calls (tessel.prepack)."""

    panels: bool = True

    def apply(self, sch: Schedule) -> None:
        for block in leaf_blocks(sch.func):
            if PACK not in block.annotations:
                continue
            rv = sch.get_block(block.name)
            if block.annotations[PACK]:
                self._pack(sch, rv)
            sch.unannotate(rv, PACK)

    def _pack(self, sch: Schedule, block: BlockRV) -> None:
        loops = sch.get_loops(block)
        if not loops:
            return
        node = sch.get(block)
        # the vector axis: the innermost loop that iterates (a 1x1 conv's window loops of
        # extent 1 stay innermost after tiling)
        inner = next((l for l in reversed(loops) if sch.get(l).extent > 1), loops[-1])
        var = self._innermost_var(sch, block, inner)
        index = packable_read(node, var, sch.func) if var is not None else None
        t = sch.get(inner).extent
        if index is None or t < 2:
            return
        buf = node.reads[index].buffer
        idx = next(l.indices for l in ir.collect(node.body, ir.BufferLoad) if l.buffer is buf)
        dim = list(idx).index(var)
        rest = self._stream_order(sch, block, idx, dim)
        if dim == len(idx) - 1 and t == buf.shape[dim] and rest == list(range(dim)):
            return  # the panels would be the buffer as it is (a blocked pool's input): a copy
        at = self._panel_loop(sch, block, var) if self.panels else None
        pack = sch.cache_read(block, index, "global")
        above = 0
        if at is not None:
            with contextlib.suppress(ScheduleError):
                sch.compute_at(pack, at, preserve_unit_loops=True)
                above = len(sch.get_loops(pack)) - len(idx)
        names = [f"d{i}" for i in range(len(idx))]
        outs = [f"{names[dim]} // {t}", *(names[i] for i in rest), f"{names[dim]} % {t}"]
        sch.transform_layout(block, index, "read",
                             f"lambda {', '.join(names)}: ({', '.join(outs)})")
        pack_loops = sch.get_loops(pack)[above:]
        outer, inner = sch.split(pack_loops[dim], [None, t])
        sch.reorder(outer, *(pack_loops[i] for i in rest), inner)

    @staticmethod
    def _stream_order(sch: Schedule, block: BlockRV, idx: Sequence[ir.Expr],
                      dim: int) -> list[int]:
        """The packed buffer's dimensions other than the vector axis `dim`, in the order the
        block's loop nest first walks them (by the outermost loop feeding each index): the
        kernel then reads the packed operand as one forward stream, which the hardware
        prefetchers follow (a blocked conv weight read (O, KH, KW, I) by its loops but stored
        (O, I, KH, KW) was 32 streams 9 KB apart per output block)."""
        realize = tree.find_realize(sch.func, sch.get(block).name)
        binding = realize.binding()
        loop_vars = [sch.get(l).loop_var for l in sch.get_loops(block)]

        def first(index: ir.Expr) -> int:
            index = ir.substitute(index, binding)
            return min((k for k, v in enumerate(loop_vars) if ir.uses_var(index, v)),
                       default=-1)
        return sorted((i for i in range(len(idx)) if i != dim), key=lambda i: (first(idx[i]), i))

    @staticmethod
    def _panel_loop(sch: Schedule, block: BlockRV, var: ir.Var) -> LoopRV | None:
        """Where the pack stage goes: the deepest loop of the block's outer chain under which
        the packed region is one panel (every loop down to it that iterates feeds only the
        vector axis `var`, so no panel is packed twice), if placing the stage there leaves
        the parallel loop as long as it would have been. Each thread then packs the panels it
        reads, just before reading them, while they are in its own cache (GMM-1024 on the
        AVX-512 Xeon: 1-3% over one pack of all of B ahead of the parallel loop). None: the
        pack stays at the root."""
        realize = tree.find_realize(sch.func, sch.get(block).name)
        binding = realize.binding()
        loops = sch.get_loops(block)
        at = None
        for i, loop in enumerate(loops):
            node = sch.get(loop)
            if node.extent > 1:
                fed = [v for v, value in binding.items() if ir.uses_var(value, node.loop_var)]
                if fed != [var]:
                    break
                at = i
            if i + 1 < len(loops) and node.body is not sch.get(loops[i + 1]):
                break
        if at is None:
            return None
        root = sch.get(sch.get_block(sch.func.body.block.name))
        max_extent = root.annotations.get(PARALLEL, 0)
        if max_extent > 0 and parallel_plan(fusible_prefix(sch, loops), max_extent) > at + 1:
            return None  # the stage would end the fused parallel loop at `at`
        return loops[at]

    @staticmethod
    def _innermost_var(sch: Schedule, block: BlockRV, loop: LoopRV) -> ir.Var | None:
        """The spatial iter var that `loop` alone feeds, as its finest term, or None."""
        realize = tree.find_realize(sch.func, sch.get(block).name)
        lv = sch.get(loop).loop_var
        users = [(iv, v) for iv, v in zip(realize.block.iter_vars, realize.iter_values)
                 if ir.uses_var(v, lv)]
        if len(users) != 1 or users[0][0].kind == REDUCE:
            return None
        return users[0][0].var


@dataclass(frozen=True)
class RewriteReductionBlock:
    def apply(self, sch: Schedule) -> None:
        for block in leaf_blocks(sch.func):
            if block.init is None:
                continue
            rv = sch.get_block(block.name)
            realize = tree.find_realize(sch.func, block.name)
            reduce = ir.binding_vars(realize, REDUCE)
            loop = next((l for l in sch.get_loops(rv) if sch.get(l).loop_var in reduce), None)
            if loop is None:
                continue
            try:
                sch.decompose_reduction(rv, loop)
            except ScheduleError:
                continue  # the init stays in the block; the code generator handles it


@dataclass(frozen=True)
class RewriteParallelVectorizeUnroll:
    """The root's annotations made loop kinds. The parallel loop fuses the outermost spatial
    loops until it has meta_schedule.parallel iterations; in a workload partitioned by rows
    (PrimFunc.partition) it is instead the outermost loop over the output's rows, split in
    `cores` shares and moved above the others, so each thread computes a contiguous band of
    rows of every channel block (and walks the channel blocks in the schedule's order). A
    kernel of at most SERIAL_WORK iterations in all stays on one thread. An innermost loop
    too long to vectorize whole is vectorized in pieces; where no piece divides it, in
    vectors, the last one guarded (ViT's softmax rows of 197 ran their exponentials scalar:
    1.6 -> 0.4 ms)."""
    lanes: int = 8
    cores: int = 1

    def apply(self, sch: Schedule) -> None:
        root = sch.get_block(sch.func.body.block.name)
        ann = dict(sch.get(root).annotations)
        small = self._work(sch) <= SERIAL_WORK
        for block in leaf_blocks(sch.func):
            rv = sch.get_block(block.name)
            if ann.get(PARALLEL, 0) > 0 and not small:
                self._parallel(sch, rv, ann[PARALLEL])
            if ann.get(VECTORIZE, 0) > 0:
                self._vectorize(sch, rv, ann[VECTORIZE])
        if ann.get(UNROLL, 0) > 0:
            self._unroll(sch, ann[UNROLL])
        for key in (PARALLEL, VECTORIZE, UNROLL):
            if key in ann:
                sch.unannotate(root, key)

    def _parallel(self, sch: Schedule, block: BlockRV, max_extent: int) -> None:
        loops = sch.get_loops(block)
        if not loops or any(n.kind == "parallel" for n in ir.collect(sch.get(loops[0]), For)):
            return
        if sch.func.partition == "rows" and self._rows(sch, block, loops):
            return
        n = parallel_plan(fusible_prefix(sch, loops), max_extent)
        if n >= 1:
            sch.parallel(sch.fuse(*loops[:n]) if n > 1 else loops[0])

    def _rows(self, sch: Schedule, block: BlockRV, loops: list[LoopRV]) -> bool:
        """Parallelize by rows (the class doc); False where the block's store is not to a
        5-d tensor at its own iter vars, or its outermost row loop is not among the fusible
        outer loops or does not split evenly in `cores` shares."""
        store = sch.get(block).body
        if self.cores < 2 or not isinstance(store, ir.BufferStore) or len(store.indices) != 5 \
                or not isinstance(store.indices[2], ir.Var):
            return False
        row = tree.find_realize(sch.func, sch.get(block).name).binding()[store.indices[2]]
        prefix = len(fusible_prefix(sch, loops))
        at = next((j for j, l in enumerate(loops) if sch.get(l).extent > 1
                   and ir.uses_var(row, sch.get(l).loop_var)), None)
        if at is None or at >= prefix or sch.get(loops[at]).extent % self.cores:
            return False
        share = sch.split(loops[at], [self.cores, None])[0]
        if at > 0:
            sch.reorder(share, *loops[:at])
        sch.parallel(share)
        return True

    @staticmethod
    def _work(sch: Schedule) -> int:
        """Iterations of every leaf block's loop nest, summed."""
        total = 0
        for block in leaf_blocks(sch.func):
            extents = [sch.get(loop).extent for loop in sch.get_loops(sch.get_block(block.name))]
            total += math.prod(extents)
        return total

    def _vectorize(self, sch: Schedule, block: BlockRV, max_extent: int) -> None:
        loops = sch.get_loops(block)
        if not loops or not isinstance(sch.get(loops[-1]).body, BlockRealize) or \
                AUTO_TENSORIZE in sch.get(block).annotations:  # its instruction is the vector
            return
        chosen: list[LoopRV] = []
        prod = 1
        for loop in reversed(loops):
            node = sch.get(loop)
            ok = node.kind == "serial" and is_spatial_loop(node) and \
                prod * node.extent <= max_extent
            if not ok or (chosen and (prod >= self.lanes or sch.get(chosen[0]) is not node.body)):
                break
            vector = [sch.get(l) for l in chosen if sch.get(l).extent > 1]
            if vector and node.extent > 1 and not _fuses_contiguously(vector[-1], node, prod):
                break  # 8 channels of a blocked layout and 8 pixels: the reads would gather
            chosen.insert(0, loop)
            prod *= node.extent
        if prod > 1:
            sch.vectorize(sch.fuse(*chosen) if len(chosen) > 1 else chosen[0])
            return
        inner = sch.get(loops[-1])  # too long to vectorize whole: vectorize a piece of it
        factor = self._piece(inner.extent, max_extent)
        if not factor and inner.extent > self.lanes:  # none divides: vectors, the last
            factor = self.lanes  # one guarded (its lanes run one by one)
        if inner.kind == "serial" and is_spatial_loop(inner) and factor:
            sch.vectorize(sch.split(loops[-1], [None, factor])[1])

    def _piece(self, extent: int, max_extent: int) -> int:
        """The largest whole number of vectors <= max_extent dividing `extent` (0: none)."""
        return next((f for f in range(max_extent - max_extent % self.lanes, 0, -self.lanes)
                     if extent % f == 0), 0)

    def _unroll(self, sch: Schedule, max_step: int) -> None:
        seen = set()
        for block in leaf_blocks(sch.func):
            loops = sch.get_loops(sch.get_block(block.name))
            if not loops or sch.get(loops[0]).loop_var in seen:
                continue
            seen.add(sch.get(loops[0]).loop_var)
            sch.annotate(loops[0], "pragma_auto_unroll_max_step", max_step)
            sch.annotate(loops[0], "pragma_unroll_explicit", 1)


@dataclass(frozen=True)
class RewriteTensorize:
    """Tensorize each block MultiLevelTilingWithIntrin annotated with an intrinsic, once the
    loops around it are final (MetaSchedule's RewriteTensorize)."""

    def apply(self, sch: Schedule) -> None:
        for block in leaf_blocks(sch.func):
            name = block.annotations.get(AUTO_TENSORIZE)
            if name is not None and intrin.ANNOTATION not in block.annotations:
                sch.tensorize(sch.get_block(block.name), name)


@dataclass(frozen=True)
class VerifyLoops:
    """CPU limits: no thread binding, one parallel loop in a nest, vectorized extents at most
    max_vectorize_extent, bounded unrolling."""

    max_vectorize_extent: int = 64
    max_unroll_step: int = MAX_UNROLL_STEP
    max_unrolled: int = MAX_UNROLLED_ITERATIONS

    def apply(self, sch: Schedule) -> None:
        self._walk(sch.func.body, parallel=None, unrolled=1)

    def _walk(self, node: object, parallel: For | None, unrolled: int) -> None:
        if isinstance(node, For):
            parallel, unrolled = self._check(node, parallel, unrolled)
        for child in ir.children(node):
            if isinstance(child, ir.Stmt):
                self._walk(child, parallel, unrolled)

    def _check(self, loop: For, parallel: For | None, unrolled: int) -> tuple[For | None, int]:
        name = loop.loop_var.name
        check(loop.kind != "thread_binding", f"loop {name} is bound to a GPU thread on a CPU")
        if loop.kind == "parallel":
            check(parallel is None, f"parallel loop {name} is nested in parallel loop "
                                    f"{parallel.loop_var.name if parallel else ''}")
            parallel = loop
        if loop.kind == "vectorized":
            check(loop.extent <= self.max_vectorize_extent, f"vectorized loop {name} has "
                  f"extent {loop.extent} > max_vectorize_extent {self.max_vectorize_extent}")
        step = loop.annotations.get("pragma_auto_unroll_max_step", 0)
        check(not isinstance(step, int) or step <= self.max_unroll_step,
              f"loop {name}: pragma_auto_unroll_max_step {step} > {self.max_unroll_step}")
        if loop.kind == "unrolled":
            unrolled *= loop.extent
            check(unrolled <= self.max_unrolled, f"unrolled loops down to {name} make "
                                                 f"{unrolled} > {self.max_unrolled} copies")
        return parallel, unrolled


@dataclass(frozen=True)
class VerifyCodegen:
    """The program compacts and renders to C (no compiler run)."""

    target: Target

    def apply(self, sch: Schedule) -> None:
        try:
            generate_c(compact_buffers(sch.func), self.target)
        except CodegenError as err:
            raise SpaceError(f"code generation fails: {err}") from None


def final_func(sch: Schedule, postprocs: Sequence[Postproc]) -> PrimFunc:
    """The postprocessed program (SpaceError when a postprocessor rejects it)."""
    out = postprocess(sch, postprocs, strict=True)
    assert out is not None
    return out.func


__all__ = ["Postproc", "postprocess", "default_postprocs", "postprocs_for", "final_func",
           "is_spatial_loop", "fusible_prefix", "parallel_plan", "RewriteLayout",
           "RewriteReductionBlock", "RewriteParallelVectorizeUnroll", "VerifyLoops",
           "VerifyCodegen", "MAX_UNROLL_STEP"]
