"""Register promotion: "local" buffers that can live in variables (the last lowering pass).

A stack buffer whose every access, after unrolling and vectorization, lands on a constant
element becomes variables where it is allocated (`Allocate` with storage "registers": one
variable per vector access's lanes and per other element, zeroed). Around a serial loop, a
local buffer that the loop's body reaches only at `loop-invariant base + constant` is
promoted for the loop's duration (`Promote`: loaded before the loop, stored back after).
That is what keeps a register tile's accumulators in vector registers across the reduction
loop. Accesses of a promoted buffer become `Register` reads and `RegisterStore`s.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel.codegen.lowered import (Allocate, CodegenError, Comment, IntrinCall, LoweredFunc,
                                    Promote, Register, RegisterStore, Scatter, Slot,
                                    VectorLoad, VectorStore, check, lanes_of)
from tessel.codegen.passes.affine import Lin, flat_index, interval
from tessel.codegen.passes.vectorize import VECTOR_DTYPES
from tessel.ir import (Buffer, BufferLoad, BufferStore, Expr, For, IfThenElse, Stmt,
                       StmtMutator, Var, children, collect, collect_stmts, const, transform)

MAX_PROMOTED_VARS = 64  # a promoted buffer becomes at most this many variables
_HALF = ("float16", "bfloat16")  # computed in float: their buffers keep their own storage
Access = tuple["Lin | None", int]  # (element offset, lanes); None: not an affine offset


@dataclass(frozen=True)
class Slots:
    """Where a promoted buffer lives: elements `base + offset` in vector variables (first
    offset -> lanes) and scalar variables; an element inside a vector variable is a lane."""

    buffer: Buffer
    base: Lin
    vectors: dict[int, int]
    scalars: tuple[int, ...]

    @property
    def slots(self) -> tuple[Slot, ...]:
        return tuple(sorted(self.vectors.items())) + tuple((k, 1) for k in self.scalars)

    def register(self, form: Lin | None, width: int) -> Register:
        buf = self.buffer
        rest = form + self.base.scale(-1) if form is not None else None
        check(rest is not None and rest.is_const,
              f"buffer {buf.name} was promoted, but an access of it moved")
        offset = rest.const
        if width > 1 or offset in self.scalars:
            return Register(buf, offset, width, buf.dtype)
        start = max(s for s in self.vectors if s <= offset)
        return Register(buf, start, self.vectors[start], buf.dtype, offset - start)


def plan_slots(buf: Buffer, accesses: list[Access], outer: set[Var] | None = None,
               ranges: dict | None = None) -> Slots | None:
    """Variables for `buf` if every access is at `base + constant` for one base (0, or with
    `outer` a form over those variables, in bounds over `ranges`), inside the buffer, and its
    vector accesses never partly overlap; None otherwise."""
    forms = [f for f, _ in accesses]
    if not accesses or any(f is None for f in forms):
        return None
    base = Lin(forms[0].terms)
    if any(f.terms != base.terms for f in forms):
        return None
    if outer is None and not base.is_const or \
            any(not isinstance(v, Var) or v not in (outer or ()) for v in base.terms):
        return None
    span = interval(base, ranges or {})
    first = min(f.const for f in forms)
    end = max(f.const + w for f, w in accesses)
    if span is None or span[0] + first < 0 or span[1] + end > buf.size:
        return None
    vectors = sorted({(f.const, w) for f, w in accesses if w > 1})
    for (a, wa), (b, _) in zip(vectors, vectors[1:]):
        if a + wa > b:
            return None
    if vectors and buf.dtype not in VECTOR_DTYPES:
        return None
    covered = {off + k for off, w in vectors for k in range(w)}
    scalars = sorted({f.const for f, w in accesses if w == 1 and f.const not in covered})
    if len(vectors) + len(scalars) > MAX_PROMOTED_VARS:
        return None
    return Slots(buf, base, dict(vectors), tuple(scalars))


def promote_registers(func: LoweredFunc) -> LoweredFunc:
    return func.with_body(_Promoter().stmt(func.body))


def lin_expr(form: Lin, dtype: str = "int32") -> Expr:
    """An affine form over variables as an expression."""
    out: Expr | None = None
    for var, coeff in form.terms.items():
        out = var * coeff if out is None else out + var * coeff
    return const(form.const, dtype) if out is None else out + form.const


class _Promoter(StmtMutator):
    def __init__(self) -> None:
        self.ranges: dict[object, tuple[int, int]] = {}
        self.loops: list[Var] = []  # enclosing loop variables, outermost first
        self.stack: list[Buffer] = []  # local stack buffers allocated around this point
        self.promoted: dict[Buffer, Slots] = {}
        self.in_simd = False

    # -- statements --

    def scope(self, s: Stmt) -> Stmt:
        return self.allocate(s) if isinstance(s, Allocate) else self.leaf(s)

    def leaf(self, s: Stmt) -> Stmt:
        if isinstance(s, BufferStore):
            if s.buffer in self.promoted:
                return RegisterStore(self.register(s.buffer, s.indices, 1), self.expr(s.value))
            return BufferStore(s.buffer, self.expr(s.value), self.expr(s.indices))
        if isinstance(s, VectorStore):
            width = lanes_of(s.value)
            if s.buffer in self.promoted:
                return RegisterStore(self.register(s.buffer, s.indices, width), self.expr(s.value))
            return VectorStore(s.buffer, self.expr(s.indices), self.expr(s.value))
        if isinstance(s, Scatter):
            return Scatter(self.expr(s.targets), self.expr(s.value))
        if isinstance(s, IntrinCall):  # its buffers are never promoted (_pointed)
            return s
        if isinstance(s, (Comment, Promote)):
            return s
        raise CodegenError(f"register promotion met statement node {type(s).__name__}")

    def allocate(self, s: Allocate) -> Stmt:
        buf = s.buffer
        slots = None
        if s.storage == "stack" and buf.scope == "local" and buf.dtype not in _HALF and \
                buf.size <= 16 * MAX_PROMOTED_VARS and buf not in _pointed(s.body):
            slots = plan_slots(buf, self.accesses(buf, s.body))
        if slots is None:
            local = s.storage == "stack" and buf.scope == "local"
            self.stack.extend([buf] if local else [])
            body = self.stmt(s.body)
            del self.stack[len(self.stack) - local:]
            return Allocate(buf, body, s.storage)
        self.promoted[buf] = slots
        body = self.stmt(s.body)
        del self.promoted[buf]
        return Allocate(buf, body, "registers", slots.slots)

    def loop(self, s: For) -> Stmt:
        promote = self.loop_slots(s)
        self.promoted.update({x.buffer: x for x in promote})
        saved = self.in_simd
        self.in_simd = saved or s.kind == "vectorized"
        self.ranges[s.loop_var] = (0, s.extent - 1)
        self.loops.append(s.loop_var)
        out: Stmt = For(s.loop_var, s.extent, self.stmt(s.body), s.kind, s.thread,
                        dict(s.annotations))
        self.loops.pop()
        del self.ranges[s.loop_var]
        self.in_simd = saved
        for x in reversed(promote):
            del self.promoted[x.buffer]
            out = Promote(x.buffer, lin_expr(x.base), x.slots, out)
        return out

    def loop_slots(self, s: For) -> list[Slots]:
        """Stack buffers the serial loop `s` reaches only at `invariant base + constant`."""
        if s.kind != "serial" or s.extent == 1 or self.in_simd or \
                "vector_chunks" in s.annotations:
            return []
        out = []
        pointed = _pointed(s)
        for buf in self.stack:
            if buf in self.promoted or buf.dtype in _HALF or buf in pointed:
                continue
            accesses = self.accesses(buf, s)
            if not accesses:
                continue
            slots = plan_slots(buf, accesses, set(self.loops), self.ranges)
            if slots is not None:
                out.append(slots)
        return out

    def accesses(self, buf: Buffer, s: Stmt) -> list[Access]:
        """Every access of `buf` in `s`: its element offset (with the ranges of the loops
        around it, for floor division by constants) and its lanes."""
        out: list[Access] = []
        _accesses(buf, s, dict(self.ranges), out)
        return out

    # -- expressions --

    def register(self, buf: Buffer, indices: tuple[Expr, ...], width: int) -> Register:
        return self.promoted[buf].register(flat_index(buf, indices, {}, self.ranges), width)

    def expr(self, e):
        """`e` (an expression or a tuple of them) with promoted accesses as registers."""
        if not self.promoted:
            return e
        if isinstance(e, tuple):
            return tuple(self.expr(x) for x in e)

        def fn(n):
            if isinstance(n, (BufferLoad, VectorLoad)) and n.buffer in self.promoted:
                return self.register(n.buffer, n.indices, _width(n))
            return None
        return transform(e, fn)


_ACCESS_NODES = (BufferLoad, VectorLoad, BufferStore, VectorStore)


def _pointed(s: Stmt) -> set[Buffer]:
    """The buffers a memory intrinsic in `s` takes the address of: they stay in memory."""
    return {o.buffer for call in collect_stmts(s, IntrinCall) for o in call.operands}


def _accesses(buf: Buffer, s: Stmt, ranges: dict, out: list[Access]) -> None:
    """Appends the accesses of `buf` in `s`: those of the statements inside first, then a
    branch's condition's; a statement with none inside (a store) is searched whole."""
    if isinstance(s, For):
        ranges = {**ranges, s.loop_var: (0, s.extent - 1)}
    inner = [c for c in children(s) if isinstance(c, Stmt)]
    for c in inner:
        _accesses(buf, c, ranges, out)
    if isinstance(s, IfThenElse):
        nodes = collect(s.condition, _ACCESS_NODES)
    else:
        nodes = [] if inner else collect(s, _ACCESS_NODES)
    out.extend((flat_index(buf, n.indices, {}, ranges), _width(n))
               for n in nodes if n.buffer is buf)


def _width(n) -> int:
    if isinstance(n, VectorLoad):
        return n.lanes
    if isinstance(n, VectorStore):
        return lanes_of(n.value)
    return 1


__all__ = ["promote_registers", "plan_slots", "Slots", "MAX_PROMOTED_VARS"]
