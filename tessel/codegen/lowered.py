"""The lowered IR that code generation's passes produce and a printer walks.

The passes (see `tessel.codegen.passes`) turn a scheduled PrimFunc into a statement tree with
no blocks and no decisions left to make:

    lower_blocks   blocks -> their bindings substituted, predicates and inits as branches,
                   allocations as `Allocate` nodes (stack or heap)
    unroll         "unrolled" loops (and small loops under an auto-unroll annotation) copied
                   out with the loop variable a constant; the rest annotated for the compiler
    peel, unswitch a guarded vector tail peeled; the guards of a partial tile tested once per
                   tile, whole tiles running a copy without them
    vectorize      vectorized loops -> chunks of explicit vector expressions (`Broadcast`,
                   `Ramp`, `VectorLoad`, `VectorOp`, ... and `VectorStore` / `Scatter`), or
                   annotated `simd: "omp"` with the reason when the body has no vector form
    registers      "local" buffers whose accesses all land on constant elements -> variables
                   (`Allocate` with storage "registers"; `Promote` around a loop)
    prefetch       a register tile's streamed operand prefetched one chunk ahead (`Prefetch`)

Vector expressions carry their element dtype and lane count; a boolean vector is a mask of
integer dtype `mask` (all bits set where true). All nodes are frozen dataclasses, so the
generic traversals of `tessel.ir` (walk, transform, substitute, structural_equal) apply.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel.errors import TesselError
from tessel.ir import Buffer, Expr, Stmt
from tessel.ir.printer import StmtPrinter, expr_str

Slot = tuple[int, int]  # (first element offset, lanes): one variable of a promoted buffer


class CodegenError(TesselError, ValueError):
    """The program has no C form (an unsupported node, illegal nesting, an unbound name)."""


class SourceTooLarge(CodegenError):
    """The C of a program passed the budget it was rendered with (generate_c's max_chars), or
    its unrolled body has more nodes than C of that budget holds (lower_kernel's max_nodes)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise CodegenError(msg)


# ---- statements ----

@dataclass(frozen=True, eq=False, repr=False)
class LoweredFunc:
    """A PrimFunc after lowering: its parameters, which of them it writes, a plain body."""

    name: str
    params: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]
    body: Stmt

    def with_body(self, body: Stmt) -> "LoweredFunc":
        return LoweredFunc(self.name, self.params, self.outputs, body)

    def __repr__(self) -> str:
        return lowered_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class Allocate(Stmt):
    """`buffer` exists while `body` runs: a stack array, a heap block, or, with storage
    "registers", one variable per slot (zeroed)."""

    buffer: Buffer
    body: Stmt
    storage: str = "stack"
    slots: tuple[Slot, ...] = ()


@dataclass(frozen=True, eq=False, repr=False)
class Promote(Stmt):
    """While `body` runs, elements `base + offset` of `buffer` live in variables (one per
    slot): loaded before, stored back after."""

    buffer: Buffer
    base: Expr
    slots: tuple[Slot, ...]
    body: Stmt


@dataclass(frozen=True, eq=False, repr=False)
class Comment(Stmt):
    text: str


@dataclass(frozen=True, eq=False, repr=False)
class VectorStore(Stmt):
    """Consecutive elements of `buffer`, one per lane of `value`, from `buffer[indices]` on."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Scatter(Stmt):
    """Lane k of `value` stored to `targets[k]` (a BufferLoad or Register naming an element),
    in lane order."""

    targets: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False, repr=False)
class IntrinCall(Stmt):
    """A memory tensor intrinsic (tessel.intrin `name`) on its operands' first elements
    (`operands`: a BufferLoad each, whose address the call takes, in the description's
    parameter order), then its free strides, counts and partial extents (`ints`), then
    `zero`: nonzero when the accumulator starts at zero (what it holds is not read)."""

    name: str
    operands: tuple[Expr, ...]
    ints: tuple[int, ...]
    zero: Expr


@dataclass(frozen=True, eq=False, repr=False)
class Prefetch(Stmt):
    """A hint to bring the cache line `offset` bytes past `buffer[indices]` into the cache
    (codegen.passes.prefetch); the address may lie past the buffer: a prefetch never faults."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    offset: int


@dataclass(frozen=True, eq=False, repr=False)
class RegisterStore(Stmt):
    target: "Register"
    value: Expr


# ---- vector and register expressions ----

@dataclass(frozen=True, eq=False, repr=False)
class Broadcast(Expr):
    value: Expr
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Ramp(Expr):
    """base, base + stride, ..., in `lanes` lanes."""

    base: Expr
    stride: int
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class VectorLoad(Expr):
    """`lanes` consecutive elements of `buffer` from `buffer[indices]` on."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class VectorOp(Expr):
    """Lane-wise `op` of vectors: + - * / // % min max, comparisons, and or not, select
    (mask, a, b; a uniform mask picks one whole vector). Comparisons and logic give masks."""

    op: str
    args: tuple[Expr, ...]
    lanes: int
    dtype: str
    mask: str = ""


@dataclass(frozen=True, eq=False, repr=False)
class VectorCast(Expr):
    value: Expr
    lanes: int
    dtype: str
    mask: str = ""


@dataclass(frozen=True, eq=False, repr=False)
class VectorCall(Expr):
    """A vector math function of the C library (libmvec's `symbol`), or sigmoid through it."""

    name: str
    symbol: str
    args: tuple[Expr, ...]
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class VectorIntrin(Expr):
    """A tensor intrinsic's new accumulator (tessel.intrin `name`): its C function of the
    accumulator's vector and each input's, in the order of its description's parameters."""

    name: str
    args: tuple[Expr, ...]
    lanes: int
    dtype: str


@dataclass(frozen=True, eq=False, repr=False)
class Lanes(Expr):
    """A vector built from one scalar expression per lane (gathers, non-affine indices).
    `stride` > 0: the values were loads of one buffer `stride` elements apart (a strided
    load, which the printer may read as whole vectors and shuffle)."""

    values: tuple[Expr, ...]
    dtype: str
    stride: int = 0

    @property
    def lanes(self) -> int:
        return len(self.values)


@dataclass(frozen=True, eq=False, repr=False)
class MaskOf(Expr):
    """A boolean (uniform or a mask of another integer type) as a mask of integer dtype `mask`."""

    value: Expr
    lanes: int
    mask: str
    dtype: str = "bool"


@dataclass(frozen=True, eq=False, repr=False)
class Register(Expr):
    """The variable holding slot `start` of a promoted buffer: the whole slot (`lane` None),
    or one lane of a vector slot."""

    buffer: Buffer
    start: int
    slot_lanes: int
    dtype: str
    lane: int | None = None

    @property
    def lanes(self) -> int:
        return self.slot_lanes if self.lane is None else 1


@dataclass(frozen=True, eq=False, repr=False)
class LaneFold(Expr):
    """All lanes of a vector combined by `op` (+, max, min) into one scalar, as a tree of
    log2(lanes) vector steps (tessel.codegen.passes.lanes)."""

    op: str
    value: Expr
    dtype: str


VECTOR_NODES = (Broadcast, Ramp, VectorLoad, VectorOp, VectorCast, VectorCall, VectorIntrin, Lanes,
                MaskOf)


def lanes_of(e: Expr) -> int:
    """The lane count of `e` (1 for scalars)."""
    return getattr(e, "lanes", 1) if isinstance(e, VECTOR_NODES + (Register,)) else 1


def mask_of(e: Expr) -> str:
    """The integer dtype of a boolean vector's mask ("" for anything else)."""
    return getattr(e, "mask", "") if lanes_of(e) > 1 else ""


# ---- text, for tests and debugging ----

class _Writer(StmtPrinter):
    """The IR printer, with the lowered IR's nodes."""

    def e(self, x: Expr) -> str:
        return expr_str(x, self.names, other=self.node)

    def node(self, x: Expr) -> str:
        """The lowered IR's own expression nodes."""
        if isinstance(x, Broadcast):
            return f"broadcast({self.e(x.value)}, {x.lanes})"
        if isinstance(x, Ramp):
            return f"ramp({self.e(x.base)}, {x.stride}, {x.lanes})"
        if isinstance(x, VectorLoad):
            idx = ", ".join(self.e(i) for i in x.indices)
            return f"{self.names(x.buffer)}[{idx}:+{x.lanes}]"
        if isinstance(x, VectorOp):
            return f"v{x.op}({', '.join(self.e(a) for a in x.args)})"
        if isinstance(x, VectorCast):
            return f"vcast<{x.dtype}x{x.lanes}>({self.e(x.value)})"
        if isinstance(x, VectorCall):
            return f"{x.symbol}({', '.join(self.e(a) for a in x.args)})"
        if isinstance(x, VectorIntrin):
            return f"intrin.{x.name}({', '.join(self.e(a) for a in x.args)})"
        if isinstance(x, Lanes):
            return f"lanes({', '.join(self.e(v) for v in x.values)})"
        if isinstance(x, MaskOf):
            return f"mask<{x.mask}x{x.lanes}>({self.e(x.value)})"
        if isinstance(x, LaneFold):
            return f"fold_{x.op}({self.e(x.value)})"
        if isinstance(x, Register):
            lane = "" if x.lane is None else f"[{x.lane}]"
            return f"%{self.names(x.buffer)}_{x.start}{lane}"
        return f"<{type(x).__name__}>"

    def stmt(self, s: Stmt, d: int) -> None:
        if isinstance(s, VectorStore):
            idx = ", ".join(self.e(i) for i in s.indices)
            self.emit(d, f"{self.names(s.buffer)}[{idx}:+{lanes_of(s.value)}] = {self.e(s.value)}")
        elif isinstance(s, Scatter):
            self.emit(d, f"scatter({', '.join(self.e(t) for t in s.targets)}) = "
                         f"{self.e(s.value)}")
        elif isinstance(s, RegisterStore):
            self.emit(d, f"{self.e(s.target)} = {self.e(s.value)}")
        elif isinstance(s, IntrinCall):
            args = [f"&{self.e(o)}" for o in s.operands] + [str(i) for i in s.ints]
            self.emit(d, f"intrin.{s.name}({', '.join(args)}, zero={self.e(s.zero)})")
        elif isinstance(s, Allocate):
            slots = f", slots={list(s.slots)}" if s.slots else ""
            b = s.buffer
            self.emit(d, f"alloc {self.names(b)}: {b.dtype}{list(b.shape)} on {s.storage}{slots}")
            self.stmt(s.body, d + 1)
        elif isinstance(s, Promote):
            where = f"{self.names(s.buffer)}[{self.e(s.base)} + slots {list(s.slots)}]"
            self.emit(d, f"promote {where}:")
            self.stmt(s.body, d + 1)
        elif isinstance(s, Prefetch):
            idx = ", ".join(self.e(i) for i in s.indices)
            self.emit(d, f"prefetch(&{self.names(s.buffer)}[{idx}] + {s.offset} bytes)")
        elif isinstance(s, Comment):
            self.emit(d, f"# {s.text}")
        else:
            super().stmt(s, d)


def lowered_str(node: LoweredFunc | Stmt) -> str:
    """Indented text of a lowered function or statement (names made unique)."""
    w = _Writer()
    if isinstance(node, LoweredFunc):
        params = ", ".join(f"{w.names(p)}: {p.dtype}{list(p.shape)}" for p in node.params)
        w.emit(0, f"def {node.name}({params}):")
        w.stmt(node.body, 1)
    else:
        w.stmt(node, 0)
    return "\n".join(w.lines)
