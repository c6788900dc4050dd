"""Software prefetch of what a register tile reads and the hardware prefetchers do not bring
in time (after register promotion, the last pass): its weight stream one chunk ahead, and an
operand it steps through far apart a few steps ahead.

A register tile's reduction loop (the serial loop that promoted accumulators wrap) reads its
vector operand, a packed weight panel, one row an iteration. The loops around it revisit that
chunk of the panel from the caches, for every register tile of rows, before an enclosing
reduction loop moves on to the next chunk. In a model, whose weights do not stay in the caches
from one call to the next, the first pass over each chunk waits on memory while the passes
after it run from the caches: the stream is bursty, and the hardware prefetchers, which follow
the demand, do not run ahead of it. So the reduction loop's body first prefetches, into L2,
the same rows of the chunk that the enclosing reduction loop's next iteration reads (its
variable + 1: the panel's next rows, or past the panel's end the next panel's first ones, as
weights are packed), one prefetch per cache line the body reads: memory is read while the
tile computes. On a 2-core Xeon (AVX-512): a 128 x 768 x 768 dense layer with cold weights
507 -> 453 us a call in a C probe (376 with the weights in the caches); twelve 768/3072-wide
layers over 128 rows in sequence 0.89x -> 1.01x torch; BERT-base 81 -> 73 ms (onnxruntime 80).

What is prefetched: vector loads of a parameter (a model's packed weight, packed once outside
the kernel's calls: tessel.prepack) whose flat offset is affine in an enclosing serial loop
that writes nothing at a place of its own: no promoted accumulator's base and no store in it
indexes by its variable (a reduction loop around the tile, not a loop over the output, whose
next iteration reads a neighbouring tile that the caches hold). A prefetch never faults: its
address past a buffer's end is computed as an integer. A tile whose accumulators are all
variables (an Allocate in registers) has its loops in the allocation's body; they are led
alike. A block the kernel wrote itself (an operand it packs on every call, as GMM's B when B
is no constant) is not led: the kernel has just written it, so it is in the caches, and its
prefetches only cost. GMM-1024 on a 2-core Zen 3, B packed in the kernel: 169 -> 178
GFLOP/s median without them (numpy 184; 2026-11-29).

Far steps: a blocked convolution's tile loop over input channel blocks reads, each iteration,
a few lines of its input activation one channel block (H W 16 floats: 3-200 KiB) past the
last. An L1 stride prefetcher follows steps up to 2 KiB and an L2 streamer a run of lines
within a 4 KiB page, so every step waits on the other core's L2 or on memory (the activation
was written by the previous kernel, both threads each a share). The loop's body first
prefetches, into L2, the lines it reads of such an operand AHEAD iterations on (only
parameters: a block the kernel wrote itself is in its caches). On the 2-core Xeon: ResNet-50's
1x1 convolution 1024 -> 256 at 14 x 14 0.41 -> 0.35 ms a call in a model's cache state;
ResNet-50 about 1.5% faster, MobileNet-v3 3%, EfficientNet-B0 unchanged.
"""
from __future__ import annotations

from tessel.codegen.lowered import Allocate, LoweredFunc, Prefetch, Promote, VectorLoad, VectorStore
from tessel.codegen.passes.affine import flat_index
from tessel.codegen.passes.blocks import element_bytes
from tessel.ir import (Buffer, BufferLoad, BufferStore, For, SeqStmt, Stmt, StmtMutator, Var,
                       collect, collect_stmts, const, seq, substitute, uses_var)

LINE_BYTES = 64  # a cache line: one prefetch per line a body reads
MIN_ITERATIONS = 16  # a shorter reduction loop is no stream worth leading
# a step the hardware prefetchers do not follow: an L1 stride prefetcher takes steps up to 2
# KiB, an L2 streamer a run of lines within one 4 KiB page
FAR_BYTES = 2048
AHEAD = 2  # iterations of the tile's loop a far-striding operand is read ahead
MIN_STRIDED_ITERATIONS = 8  # a shorter loop reads little of its operands ahead
MAX_LINES = 16  # the most lines of one operand a body's prefetches cover


def prefetch_streams(func: LoweredFunc) -> LoweredFunc:
    return func.with_body(_Prefetcher(func.params).stmt(func.body))


class _Prefetcher(StmtMutator):
    def __init__(self, params: tuple[Buffer, ...]) -> None:
        self.loops: list[For] = []  # enclosing loops, outermost first
        self.params = set(params)

    def loop(self, s: For) -> Stmt:
        self.loops.append(s)
        body = self.stmt(s.body)
        self.loops.pop()
        return For(s.loop_var, s.extent, body, s.kind, s.thread, dict(s.annotations))

    def scope(self, s: Stmt) -> Stmt:
        if isinstance(s, Allocate) and s.storage == "registers":
            # a tile whose accumulators are variables: its loops are the statements of the
            # allocation's body (zeroing, the reduction loop, the write-back)
            body = s.body.seq if isinstance(s.body, SeqStmt) else (s.body,)
            tile = seq(*(self.tile_loop(x, {s.buffer}, set()) if isinstance(x, For)
                         else self.stmt(x) for x in body))
            return Allocate(s.buffer, tile, s.storage, s.slots)
        if not isinstance(s, Promote):
            return super().scope(s)
        chain = [s]  # promotions wrapping one another, then (a register tile's) loop
        while isinstance(chain[-1].body, Promote):
            chain.append(chain[-1].body)
        inner = chain[-1].body
        if isinstance(inner, For):
            out = self.tile_loop(inner, {p.buffer for p in chain},
                                 {v for p in chain for v in collect(p.base, Var)})
        else:
            out = self.stmt(inner)
        for p in reversed(chain):
            out = Promote(p.buffer, p.base, p.slots, out)
        return out

    def tile_loop(self, s: For, held: set[Buffer], spatial: set[Var]) -> Stmt:
        """A register tile's loop `s` (accumulators `held`, at places indexed by the `spatial`
        variables), its body led by the prefetches of its operands."""
        ranges = {loop.loop_var: (0, loop.extent - 1) for loop in (*self.loops, s)}
        lines = self.prefetches(s, ranges, held, spatial) + self.strided(s, ranges, held)
        out = self.loop(s)
        if not lines:
            return out
        return For(out.loop_var, out.extent, seq(*lines, out.body), out.kind, out.thread,
                   dict(out.annotations))

    def prefetches(self, s: For, ranges: dict, held: set[Buffer],
                   spatial: set[Var]) -> list[Prefetch]:
        """One Prefetch per cache line of each streamed operand the body of `s` reads
        (`ranges`: of `s` and the loops around it)."""
        if s.kind != "serial" or s.extent < MIN_ITERATIONS:
            return []
        reductions = self.reduction_loops(spatial)
        seen: dict[tuple, list[int]] = {}
        out = []
        for load in collect(s.body, VectorLoad, distinct=True):
            buf = load.buffer
            if buf.scope == "local" or buf not in self.params or buf in held or \
                    any(v not in ranges for i in load.indices for v in collect(i, Var)):
                continue  # (or a load inside a loop of the body: not an address here)
            form = flat_index(buf, load.indices, {}, ranges)
            # the innermost reduction loop the operand moves with
            outer = None if form is None else next(
                (v for v in reductions if form.terms.get(v)), None)
            if outer is None:
                continue
            size = element_bytes(buf)
            start = form.const * size
            key = (buf, frozenset(form.terms.items()))  # (atoms: equal for equal expressions)
            lines = seen.setdefault(key, [])
            if any(abs(start - other) < LINE_BYTES for other in lines):
                continue
            lines.append(start)
            out.append(Prefetch(buf, load.indices, form.terms[outer] * size))
        return out

    def strided(self, s: For, ranges: dict, held: set[Buffer]) -> list[Prefetch]:
        """One Prefetch per cache line of each operand that the tile's loop `s` steps through
        FAR_BYTES or more at a time (a blocked activation's channel blocks), AHEAD iterations
        on: the lines the body reads of it, its own loops included."""
        if s.kind != "serial" or s.extent < MIN_STRIDED_ITERATIONS:
            return []
        inner = {loop.loop_var: loop.extent for loop in collect_stmts(s.body, For)}
        ranges = {**ranges, **{v: (0, e - 1) for v, e in inner.items()}}
        at_first = {v: const(0, v.dtype) for v in inner}  # the body's first iteration
        seen: dict[tuple, set[int]] = {}
        out = []
        for load in collect(s.body, (VectorLoad, BufferLoad), distinct=True):
            buf = load.buffer
            if buf.scope == "local" or buf not in self.params or buf in held or \
                    any(v not in ranges for i in load.indices for v in collect(i, Var)):
                continue  # (a block the kernel wrote: in the caches)
            form = flat_index(buf, load.indices, {}, ranges)
            size = element_bytes(buf)
            if form is None or abs(form.terms.get(s.loop_var, 0)) * size < FAR_BYTES:
                continue
            lines = _lines_read(form, inner, size, getattr(load, "lanes", 1) * size)
            if lines is None:
                continue
            key = (buf, frozenset((v, c) for v, c in form.terms.items() if v not in inner))
            start = form.const * size
            done = seen.setdefault(key, set())
            first = tuple(substitute(i, at_first) for i in load.indices)
            for line in lines:
                if (start + line) // LINE_BYTES in done:
                    continue
                done.add((start + line) // LINE_BYTES)
                out.append(Prefetch(buf, first, form.terms[s.loop_var] * size * AHEAD + line))
        return out

    def reduction_loops(self, spatial: set[Var]) -> list[Var]:
        """The enclosing serial loops, innermost first, that write nothing at a place of
        their own (no accumulator's base holds their variable, no store in them indexes by
        it): reduction loops around the register tile, not loops over the output (whose next
        iteration, a neighbouring tile, the caches hold)."""
        return [loop.loop_var for loop in reversed(self.loops)
                if loop.kind == "serial" and loop.extent > 1 and loop.loop_var not in spatial
                and not _stores_along(loop.body, loop.loop_var)]


def _lines_read(form, inner: dict[Var, int], size: int, width: int) -> list[int] | None:
    """The byte offsets, a cache line apart, from a load's address at its body's first
    iteration (inner loops at 0) that cover what the load reads over the inner loops; None
    past MAX_LINES."""
    offsets = {0}
    for v, extent in inner.items():
        step = form.terms.get(v, 0) * size
        if step:
            offsets = {o + step * k for o in offsets for k in range(extent)}
            if len(offsets) > MAX_LINES * LINE_BYTES:  # (a line each byte: no need to go on)
                return None
    lo = min(offsets)
    lines = sorted({(o - lo) // LINE_BYTES for o in offsets}
                   | {(o - lo + width - 1) // LINE_BYTES for o in offsets})
    return None if len(lines) > MAX_LINES else [lo + k * LINE_BYTES for k in lines]


def _stores_along(s: Stmt, v: Var) -> bool:
    """Whether a store in `s` (or a promotion's base) indexes by `v`."""
    places = [i for st in collect_stmts(s, (BufferStore, VectorStore)) for i in st.indices]
    places += [p.base for p in collect_stmts(s, Promote)]
    return any(uses_var(i, v) for i in places)


__all__ = ["prefetch_streams", "LINE_BYTES", "MIN_ITERATIONS", "FAR_BYTES", "AHEAD"]
