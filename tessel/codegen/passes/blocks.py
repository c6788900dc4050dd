"""Blocks -> plain statements: the first lowering pass.

A block's iteration variables are replaced by their bindings (expressions of loop variables),
its predicate becomes a branch, its init a branch taken when every reduction variable is 0
(TensorIR's rule), its allocations `Allocate` nodes: buffers up to STACK_LIMIT_BYTES on the
stack (a row of softmax's exp computed under a parallel row loop must not cost an
allocation per row), larger ones on the heap. Loop nestings C cannot express are refused
here, before any code is written.
"""
from __future__ import annotations

from tessel import intrin
from tessel.codegen.lowered import (Allocate, CodegenError, Comment, IntrinCall, LoweredFunc,
                                    VectorIntrin, VectorLoad, VectorStore, check)
from tessel.codegen.passes.fold import substitute_folding
from tessel.ir import (DTYPE_BITS, REDUCE, Block, BlockRealize, Buffer, BufferLoad,
                       BufferStore, Expr, FloatImm, For, IfThenElse, IntImm, PrimFunc, Stmt,
                       StmtMutator, Var, collect_stmts, const, is_true, seq, uses_var)

STACK_LIMIT_BYTES = 64 * 1024  # buffers up to this size live on the stack


def lower_blocks(func: PrimFunc) -> LoweredFunc:
    check(isinstance(func, PrimFunc), f"generate_c needs a PrimFunc, got {type(func).__name__}")
    check(len(set(map(id, func.params))) == len(func.params),
          f"function {func.name} lists a parameter buffer twice")
    body = _Lowering().stmt(func.body)
    return LoweredFunc(func.name, func.params, func.outputs, body)


def storage_of(buf: Buffer) -> str:
    check(buf.scope != "shared", f"buffer {buf.name} has scope 'shared', which needs the CUDA "
                                 "backend")
    return "stack" if buffer_bytes(buf) <= STACK_LIMIT_BYTES else "heap"


def buffer_bytes(buf: Buffer) -> int:
    """The bytes of `buf`'s elements (a bool is one)."""
    return buf.size * element_bytes(buf)


def element_bytes(buf: Buffer) -> int:
    """The bytes of one element of `buf` (a bool is one)."""
    return DTYPE_BITS[buf.dtype] // 8


class _Lowering(StmtMutator):
    def __init__(self) -> None:
        self.parallel: For | None = None  # the enclosing parallel loop
        self.simd: list[Var] = []  # variables of the enclosing vectorized loops
        self.vmap: dict[Var, Expr] = {}  # the enclosing blocks' iter vars -> their bindings

    def expr(self, e: Expr) -> Expr:
        return substitute_folding(e, self.vmap)

    def scope(self, s: Stmt) -> Stmt:
        if isinstance(s, Block):
            raise CodegenError(f"block {s.name} is not wrapped in a BlockRealize")
        return self.leaf(s)

    def leaf(self, s: Stmt) -> Stmt:
        check(isinstance(s, BufferStore), f"cannot generate C for statement node "
                                          f"{type(s).__name__}")
        return substitute_folding(s, self.vmap)

    def loop(self, s: For) -> Stmt:
        name = s.loop_var.name
        if s.kind == "thread_binding":
            raise CodegenError(f"loop {name} is bound to {s.thread}; thread_binding needs the "
                               "CUDA backend")
        saved = self.parallel, list(self.simd)
        if s.kind == "parallel":
            if self.parallel is not None:
                raise CodegenError(f"parallel loop {name} is nested inside parallel loop "
                                   f"{self.parallel.loop_var.name}; only one level of "
                                   "parallelism is supported")
            check(not self.simd, f"parallel loop {name} is inside a vectorized loop")
            self.parallel = s
        elif s.kind == "vectorized":
            self.simd.append(s.loop_var)
        body = self.stmt(s.body)
        self.parallel, self.simd = saved
        return For(s.loop_var, s.extent, body, s.kind, s.thread, dict(s.annotations))

    def realize(self, r: BlockRealize) -> Stmt:
        block = r.block
        inner = dict(self.vmap)
        for iv, value in zip(block.iter_vars, r.iter_values):
            value = self.expr(value)
            for var in self.simd:
                check(iv.kind != REDUCE or not uses_var(value, var),
                      f"vectorized loop {var.name} binds reduction variable {iv.var.name} of "
                      f"block {block.name}; a reduction cannot be vectorized this way")
            inner[iv.var] = value
        saved, self.vmap = self.vmap, inner
        body = self.tensorized(block) if intrin.ANNOTATION in block.annotations else \
            self.stmt(block.body)
        if block.init is not None and not isinstance(body, IntrinCall):
            body = seq(self.init(block), body)
        predicate = self.expr(r.predicate)
        self.vmap = saved
        for buf in reversed(block.alloc_buffers):
            body = Allocate(buf, body, storage_of(buf))
        if not is_true(predicate):
            body = IfThenElse(predicate, body)
        if block.iter_vars or block.name != "root":
            body = seq(Comment(f"block {block.name}"), body)
        return body

    def tensorized(self, block: Block) -> Stmt:
        """A block marked by tensorize: one VectorIntrin, its operands loaded whole from
        their first elements, the accumulator stored back."""
        check(not self.simd, f"block {block.name} is tensorized inside a vectorized loop")
        try:
            spec = intrin.get(block.annotations[intrin.ANNOTATION])
            bound = intrin.bind(block, spec)
        except intrin.IntrinError as err:
            raise CodegenError(str(err)) from None
        if spec.memory:
            return self.memory_call(block, spec, bound)
        operands = bound.operands
        loads = {o.param: VectorLoad(o.buffer, tuple(self.expr(i) for i in o.indices),
                                     o.param.size, o.param.dtype) for o in operands}
        acc = next(o for o in operands if o.param is spec.block.body.buffer)
        value = VectorIntrin(spec.name, (loads[acc.param], *(loads[o.param] for o in operands
                                                             if o is not acc)),
                             acc.param.size, acc.param.dtype)
        return VectorStore(acc.buffer, loads[acc.param].indices, value)

    def memory_call(self, block: Block, spec, bound) -> Stmt:
        """A memory intrinsic's call on its operands' first elements; the block's init (zeros
        into the accumulator) becomes the call's `zero` flag: the instruction starts its
        accumulator at zero in the first step of the reduction instead of loading it."""
        acc = next(o for o in bound.operands if o.param is spec.block.body.buffer).buffer
        zero: Expr = const(0)
        if block.init is not None:
            stores = collect_stmts(block.init, BufferStore)
            check(all(st.buffer is acc and isinstance(st.value, (IntImm, FloatImm))
                      and st.value.value == 0 for st in stores),
                  f"block {block.name} is tensorized with {spec.name}, whose init may only "
                  f"set its accumulator {acc.name} to 0")
            first = self.first_step(block)
            zero = const(1) if first is None else first
        operands = tuple(BufferLoad(o.buffer, tuple(self.expr(i) for i in o.indices),
                                    o.buffer.dtype) for o in bound.operands)
        return IntrinCall(spec.name, operands, bound.strides + bound.counts + bound.extents,
                         zero)

    def first_step(self, block: Block) -> Expr | None:
        """The condition that every reduction variable of `block` is 0 (None: it has none)."""
        conds = [self.vmap[iv.var] == const(0) for iv in block.iter_vars if iv.kind == REDUCE]
        if not conds:
            return None
        cond = conds[0]
        for c in conds[1:]:
            cond = cond & c
        return cond

    def init(self, block: Block) -> Stmt:
        """TensorIR: the init runs when every reduction variable is 0."""
        init = self.stmt(block.init)
        cond = self.first_step(block)
        return init if cond is None else IfThenElse(cond, init)


__all__ = ["lower_blocks", "storage_of", "buffer_bytes", "STACK_LIMIT_BYTES"]
