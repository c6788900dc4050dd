"""Statements of the loop-nest IR: loops, blocks, stores, and the PrimFunc that holds them.

The IR follows TensorIR: a *block* is the unit a schedule works on. It names its iteration
variables (spatial or reduction, each with an extent), the expressions that bind them to the
surrounding loop variables (in the enclosing `BlockRealize`), the buffer regions it reads and
writes, an optional `init` statement for reductions (run at the first reduction iteration),
and the buffers it allocates. Loops always start at 0 and have constant extents.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from tessel.ir.buffer import Buffer, BufferRegion
from tessel.ir.expr import Expr, IRError, Var, const, convert

SPATIAL, REDUCE = "spatial", "reduce"
LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y",
               "threadIdx.z", "vthread")


class Stmt:
    __slots__ = ()

    def __repr__(self) -> str:
        from tessel.ir.printer import stmt_str
        return stmt_str(self)


@dataclass(frozen=True, eq=False, repr=False)
class BufferStore(Stmt):
    buffer: Buffer
    value: Expr
    indices: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if len(self.indices) != self.buffer.ndim:
            raise IRError(f"store to {self.buffer.name}: {len(self.indices)} indices for "
                          f"{self.buffer.ndim} dims")
        if self.value.dtype != self.buffer.dtype:
            raise IRError(f"store to {self.buffer.name} ({self.buffer.dtype}) of a "
                          f"{self.value.dtype} value")


@dataclass(frozen=True, eq=False, repr=False)
class SeqStmt(Stmt):
    seq: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False, repr=False)
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False, repr=False)
class For(Stmt):
    """`for loop_var in range(extent)`, run as `kind`.

    `thread` names the hardware axis for kind "thread_binding". `annotations` carries
    free-form hints (e.g. {"pragma_auto_unroll_max_step": 64}); treat it as read-only.
    """

    loop_var: Var
    extent: int
    body: Stmt
    kind: str = "serial"
    thread: str | None = None
    annotations: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.extent, int) or self.extent < 1:
            raise IRError(f"loop {self.loop_var.name}: extent must be a positive int, "
                          f"got {self.extent!r}")
        if self.kind not in LOOP_KINDS:
            raise IRError(f"loop {self.loop_var.name}: unknown kind {self.kind!r}")
        if (self.kind == "thread_binding") != (self.thread is not None):
            raise IRError(f"loop {self.loop_var.name}: a thread tag goes with kind "
                          "'thread_binding' and only with it")


@dataclass(frozen=True, eq=False)
class IterVar:
    """A block iteration variable ranging over [0, extent)."""

    var: Var
    extent: int
    kind: str = SPATIAL

    def __post_init__(self) -> None:
        if self.kind not in (SPATIAL, REDUCE):
            raise IRError(f"iter var {self.var.name}: kind must be {SPATIAL!r} or {REDUCE!r}")


@dataclass(frozen=True, eq=False, repr=False)
class Block(Stmt):
    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def is_reduction(self) -> bool:
        return any(iv.kind == REDUCE for iv in self.iter_vars)


@dataclass(frozen=True, eq=False, repr=False)
class BlockRealize(Stmt):
    """Instantiates `block` with `iter_values` bound to its iter vars, when `predicate` holds."""

    iter_values: tuple[Expr, ...]
    predicate: Expr
    block: Block

    def __post_init__(self) -> None:
        if len(self.iter_values) != len(self.block.iter_vars):
            raise IRError(f"block {self.block.name}: {len(self.iter_values)} bindings for "
                          f"{len(self.block.iter_vars)} iter vars")

    def binding(self) -> dict:
        """Each iter var of the block -> the expression this realize binds it to."""
        return dict(zip((iv.var for iv in self.block.iter_vars), self.iter_values))


def seq(*stmts: Stmt) -> Stmt:
    """Flatten nested sequences; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        flat.extend(s.seq if isinstance(s, SeqStmt) else (s,))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


def realize(block: Block, iter_values=(), predicate: Expr | bool = True) -> BlockRealize:
    return BlockRealize(tuple(convert(v) for v in iter_values), convert(predicate), block)


CONSTANT_PARAMS = "constant_params"
MEASURE = "measure"  # "in_model": each call timed from the caches a model leaves it
PARTITION = "partition"  # "rows": each thread a band of axis 2 of the output (blocked rows)


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A tensor program: parameter buffers (inputs, then outputs) and a body whose root is a
    block named "root" that allocates the intermediate buffers.

    `attrs` carries metadata that is not part of the program's identity (e.g. the operator
    name and arguments it was made from), except CONSTANT_PARAMS: the positions of the
    parameters the caller holds constant (a model's weights). A program of such a workload is
    measured with its packing of those parameters done once, outside the timed calls, as a
    compiled model runs it; its records' times depend on that, so it is part of the identity.
    So is MEASURE = "in_model" (a model's kernels, tessel.graph.compiler.tasks): each call is timed
    from the caches a model leaves it, its weights, output and scratch out of them and its
    activation inputs just written by the threads (codegen.c: tessel_time_in_model), instead
    of repeated calls from warm caches. And PARTITION = "rows" (tessel.graph.compiler.tasks): the
    parallel loop gives each thread a contiguous share of axis 2 of the output, the rows of a
    blocked NCHW[x]c tensor (RewriteParallelVectorizeUnroll), and a model's neighbouring
    kernels do the same, so each core reads the rows it wrote; the in-model timing has the
    threads produce the activation inputs the same way.
    """

    name: str
    params: tuple[Buffer, ...]
    body: BlockRealize
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def root(self) -> Block:
        return self.body.block

    def script(self) -> str:
        from tessel.ir.printer import func_str
        return func_str(self)

    def structural_hash(self) -> str:
        from tessel.ir.structural import structural_hash
        return structural_hash(self)

    def with_body(self, body: BlockRealize) -> "PrimFunc":
        return PrimFunc(self.name, self.params, body, self.attrs)

    @property
    def constant_params(self) -> tuple[int, ...]:
        """Positions of the parameters the caller holds constant (attrs[CONSTANT_PARAMS])."""
        return tuple(self.attrs.get(CONSTANT_PARAMS, ()))

    @property
    def measure(self) -> str:
        """How a program of this workload is timed: "warm" (repeated calls) or "in_model"."""
        return self.attrs.get(MEASURE, "warm")

    @property
    def partition(self) -> str:
        """How the threads share the work: "" (the outer loops fused, as the schedule has
        them) or "rows" (attrs[PARTITION])."""
        return self.attrs.get(PARTITION, "")

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        """Parameters written by some block."""
        from tessel.ir.visitor import written_buffers
        written = written_buffers(self.body)
        return tuple(p for p in self.params if p in written)

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        outs = self.outputs
        return tuple(p for p in self.params if p not in outs)

    def __repr__(self) -> str:
        return self.script()


Node = Union[Expr, Stmt]
TRUE = const(True)
