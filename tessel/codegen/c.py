"""Loop IR -> one C11 translation unit: a static kernel plus two exported entry points.

    int32_t tessel_entry(void** args)      calls the kernel on the parameter buffers
    int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs)

Blocks become C scopes binding their iteration variables; a block's init runs when all its
reduction variables are 0. Loops map to C by kind: "parallel" to an OpenMP worksharing loop;
"vectorized" to explicit SIMD code (see simd.py), or `omp simd` when the body has a construct
with no vector form; "unrolled" loops of small extent are unrolled here, one scope per
iteration with the loop variable a constant (larger ones get `GCC unroll`, as do serial
loops under `pragma_auto_unroll_max_step`, unless `pragma_unroll_explicit` asks for unrolling
here). A "local" buffer whose every access lands on a constant element after that unrolling
and vectorization is promoted to variables (registers) where it is allocated; one that a
serial loop reaches only at `loop-invariant base + constant` lives in variables during that
loop (see simd.Registers). Other allocations are stack arrays (small "local" buffers) or
64-byte aligned heap blocks. A failed heap allocation makes the kernel return ALLOC_FAILED,
which tessel_entry passes on.
"""
from __future__ import annotations

import numpy as np

from tessel.codegen.c_expr import (  # noqa: F401 (CodegenError, float_literal: re-exported)
    UNARY, CodegenError, ExprPrinter, Lin, Names, SourceTooLarge, c_type, check, comment_text,
    float_literal, helper_source, linear)
from tessel.codegen.reductions import vectorize_reductions
from tessel.codegen.simd import (NotVectorizable, Slots, VectorLoops, unrolled_stores,
                                 vector_source)
from tessel.ir import (REDUCE, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Expr, For,
                       IfThenElse, IntImm, IterVar, PrimFunc, SeqStmt, Stmt, Var, substitute,
                       uses_var)
from tessel.target import Target

ALLOC_FAILED = 1  # kernel status when a heap allocation fails
ALIGN_BYTES = 64
STACK_LIMIT_BYTES = 64 * 1024  # "local" buffers up to this size live on the stack
MAX_UNROLL = 65534  # the largest factor `#pragma GCC unroll` accepts
MAX_UNROLL_EXTENT = 32  # "unrolled" loops up to this extent are unrolled by the generator...
UNROLL_BUDGET = 512  # ...when the unrolled nest has at most this many stores


# ---- statements ----

_LOOP_MARK = object()  # in KernelWriter.frames: the start of a loop body


def trip_count(s: Stmt | None, vectors: bool = False) -> int:
    """Iterations of the deepest loop nest in `s` (for auto-unroll decisions); with `vectors`,
    a vectorized loop counts once."""
    if isinstance(s, For):
        inner = trip_count(s.body, vectors)
        return inner if vectors and s.kind == "vectorized" else s.extent * inner
    if isinstance(s, SeqStmt):
        return max(trip_count(x, vectors) for x in s.seq)
    if isinstance(s, IfThenElse):
        return max(trip_count(s.then_case, vectors), trip_count(s.else_case, vectors))
    if isinstance(s, BlockRealize):
        return max(trip_count(s.block.body, vectors), trip_count(s.block.init, vectors))
    return 1


def explicit_unroll(s: For) -> bool:
    """Whether the generator itself unrolls loop `s` (else `#pragma GCC unroll`)."""
    return (s.kind == "unrolled" and s.extent <= MAX_UNROLL_EXTENT
            and unrolled_stores(s, MAX_UNROLL_EXTENT) <= UNROLL_BUDGET)


class KernelWriter(VectorLoops):
    """Renders a PrimFunc's body as the statements of one static C function.

    `env` maps variables to affine forms (unrolled loop variables to constants, iteration
    variables to their bindings; see c_expr.linear), `ranges` gives loop variables their
    bounds; both decide vector accesses and register promotion.
    """

    def __init__(self, func: PrimFunc, target: Target, names: Names,
                 max_chars: int | None = None) -> None:
        self.func, self.target, self.names = func, target, names
        self.max_chars = max_chars  # budget of the kernel body (None: unlimited)
        self.chars = 0
        self.expr = ExprPrinter(names, func.params, resolve=self.resolve)
        self.lines: list[str] = []
        self.depth = 1
        self.frames: list[object] = []  # live heap buffers and loop marks, outermost first
        self.parallel: For | None = None  # the enclosing parallel loop
        self.no_return: For | None = None  # outermost enclosing parallel or simd loop
        self.simd_vars: list[Var] = []  # variables of the enclosing vectorized loops
        self.unroll_max_step = 0  # from a pragma_auto_unroll_max_step annotation
        self.unroll_explicit = False  # ...with pragma_unroll_explicit: unrolled here
        self.fail_flag: str | None = None  # set by failed allocations inside a parallel loop
        self.fail_pending = False  # a flag raised in the current OpenMP loop is to be checked
        self.env: dict[Var, Lin | None] = {}
        self.ranges: dict[object, tuple[int, int]] = {}
        self.promoted: dict[Buffer, Slots] = {}  # local buffers living in variables
        self.recording: dict[Buffer, list[tuple[int | None, int]]] = {}  # probed accesses
        self.init_vectors()

    def emit(self, text: str) -> None:
        line = "    " * self.depth + text
        self.chars += len(line) + 1
        if self.max_chars is not None and self.chars > self.max_chars:
            raise SourceTooLarge(f"the generated C passed its budget of {self.max_chars:,} "
                                 "characters (unrolled or lane-by-lane code this long takes "
                                 "the compiler tens of seconds); not compiled")
        self.lines.append(line)

    def emit_block(self, head: str, body, tail: str = "}") -> None:
        """`head {`, the lines `body()` emits one level deeper, `}`."""
        self.emit(f"{head} {{" if head else "{")
        self.depth += 1
        body()
        self.depth -= 1
        self.emit(tail)

    def body_lines(self) -> list[str]:
        self.realize(self.func.body)
        self.emit("return 0;")
        if self.fail_flag is not None:
            self.lines.insert(0, f"    int32_t {self.fail_flag} = 0;")
        return self.lines

    # -- trying: all mutable state, to roll back a probe or a failed vectorization --

    _PLAIN_STATE = ("depth", "parallel", "no_return", "unroll_max_step", "unroll_explicit",
                    "fail_flag", "fail_pending", "chars")

    def snapshot(self) -> dict:
        state = {key: getattr(self, key) for key in self._PLAIN_STATE}
        state.update(
            lines=len(self.lines), frames=list(self.frames), simd_vars=list(self.simd_vars),
            env=dict(self.env), ranges=dict(self.ranges), promoted=dict(self.promoted),
            recording={b: len(xs) for b, xs in self.recording.items()},
            names=(dict(self.names.by_id), set(self.names.used)),
            expr=(set(self.expr.bound), set(self.expr.visible), set(self.expr.helpers)),
            vector=self.vector_state())
        return state

    def restore(self, state: dict) -> None:
        for key in self._PLAIN_STATE:
            setattr(self, key, state[key])
        del self.lines[state["lines"]:]
        self.frames, self.simd_vars = state["frames"], state["simd_vars"]
        self.env, self.ranges, self.promoted = state["env"], state["ranges"], state["promoted"]
        self.recording = {b: self.recording[b][:n] for b, n in state["recording"].items()}
        self.names.by_id, self.names.used = state["names"]
        self.expr.bound, self.expr.visible, self.expr.helpers = state["expr"]
        self.restore_vectors(state["vector"])

    # -- statements --

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, BufferStore) and self.chunk is not None:
            self.vector_store(s)
        elif isinstance(s, BufferStore):
            self.store(s)
        elif isinstance(s, IfThenElse):
            self.if_then_else(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, BlockRealize):
            self.emit_block("", lambda: self.realize(s))
        elif isinstance(s, Block):
            raise CodegenError(f"block {s.name} is not wrapped in a BlockRealize")
        else:
            raise CodegenError(f"cannot generate C for statement node {type(s).__name__}")

    def scope_body(self, s: Stmt) -> None:
        """The body of a loop or branch: a block directly inside reuses the braces."""
        if isinstance(s, BlockRealize):
            self.realize(s)
        else:
            self.stmt(s)

    def store(self, s: BufferStore) -> None:
        target = self.expr.element(s.buffer, s.indices)
        value = self.expr(s.value)
        if s.buffer.dtype == "float16":  # computed in float: round explicitly
            if isinstance(s.value, BufferLoad):
                value = value.removeprefix("(float)")
            else:
                value = f"(_Float16){self.expr.operand(s.value, UNARY)}"
        self.emit(f"{target} = {value};")

    def if_then_else(self, s: IfThenElse) -> None:
        if self.lane_varying(s.condition):
            self.guarded(s.condition, lambda: self.branches(s, vector=True), s)
            return
        self.branches(s)

    def branches(self, s: IfThenElse, vector: bool = False) -> None:
        """`if (c) ... else ...`; with vector=True only the then-branch (all lanes took it)."""
        if vector:
            self.scope_body(s.then_case)
            return
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.depth += 1
        self.scope_body(s.then_case)
        self.depth -= 1
        if s.else_case is not None:
            self.emit_block("} else", lambda: self.scope_body(s.else_case))
        else:
            self.emit("}")

    # -- loops --

    def loop(self, s: For) -> None:
        if s.kind == "vectorized" and self.chunk is not None:
            raise NotVectorizable(f"loop {s.loop_var.name} is a vectorized loop nested in one")
        saved = (self.parallel, list(self.simd_vars), self.unroll_max_step, self.unroll_explicit,
                 self.no_return)
        self.note_auto_unroll(s)
        if s.kind == "vectorized" and not self.simd_vars:
            self.vector_loop(s)
        elif explicit_unroll(s) or self.auto_unroll_here(s):
            self.unrolled_loop(s)
        else:
            self.c_loop(s)
        (self.parallel, self.simd_vars, self.unroll_max_step, self.unroll_explicit,
         self.no_return) = saved
        if self.no_return is None and self.fail_pending:
            self.fail_pending = False
            self.emit_block(f"if ({self.fail_flag})", self.fail)

    def c_loop(self, s: For) -> None:
        """A C `for` loop, with local buffers promoted around it where they can be."""
        slots = self.loop_slots(s, lambda: self.plain_loop(s))
        for x in slots:
            for line in x.declarations(self, load=True):
                self.emit(line)
            self.promoted[x.buffer] = x
        self.plain_loop(s)
        for x in slots:
            del self.promoted[x.buffer]
            for line in x.write_back(self):
                self.emit(line)

    def plain_loop(self, s: For) -> None:
        """A C `for` loop, with the pragmas of its kind."""
        for pragma in self.loop_pragmas(s):
            self.emit(pragma)
        if s.kind in ("parallel", "vectorized") and self.no_return is None:
            self.no_return = s  # OpenMP forbids `return` inside its loops
        var, ctype = self.names(s.loop_var), c_type(s.loop_var.dtype)
        self.bind_loop_var(s.loop_var, Lin(None, 0) if s.extent == 1 else None,
                           (0, s.extent - 1))
        self.frames.append(_LOOP_MARK)
        self.emit_block(f"for ({ctype} {var} = 0; {var} < {s.extent}; ++{var})",
                        lambda: self.scope_body(s.body))
        self.frames.pop()
        self.unbind_loop_var(s.loop_var)

    def unrolled_loop(self, s: For) -> None:
        """One C scope per iteration, the loop variable a constant in each."""
        var, ctype = self.names(s.loop_var), c_type(s.loop_var.dtype)
        for value in range(s.extent):
            self.bind_loop_var(s.loop_var, Lin(None, value), None)
            self.emit_block("", lambda: (self.emit(f"const {ctype} {var} = {value};"),
                                         self.scope_body(s.body)))
            self.unbind_loop_var(s.loop_var)

    def bind_loop_var(self, var: Var, form: Lin | None, bounds: tuple[int, int] | None) -> None:
        """Declare `var` to expressions: a form (None: an atom of its own) and its bounds."""
        self.expr.bound.add(var)
        if form is not None:
            self.env[var] = form
        if bounds is not None:
            self.ranges[var] = bounds

    def unbind_loop_var(self, var: Var) -> None:
        self.expr.bound.discard(var)
        self.env.pop(var, None)
        self.ranges.pop(var, None)

    def note_auto_unroll(self, s: For) -> None:
        step = s.annotations.get("pragma_auto_unroll_max_step", 0)
        if isinstance(step, int) and step > 0:
            self.unroll_max_step = max(self.unroll_max_step, step)
            self.unroll_explicit = bool(s.annotations.get("pragma_unroll_explicit", False))

    def auto_unroll_here(self, s: For) -> bool:
        """Under pragma_auto_unroll_max_step with pragma_unroll_explicit (TVM's UnrollLoop), a
        serial loop is unrolled here when its nest, counting a vectorized loop as one vector
        instance, runs at most max_step times."""
        return (self.unroll_explicit and s.kind == "serial" and s.extent <= MAX_UNROLL_EXTENT
                and 1 < trip_count(s, vectors=True) <= self.unroll_max_step
                and unrolled_stores(s, MAX_UNROLL_EXTENT) * s.extent <= UNROLL_BUDGET)

    def loop_pragmas(self, s: For) -> list[str]:
        name = s.loop_var.name
        if s.kind == "thread_binding":
            raise CodegenError(f"loop {name} is bound to {s.thread}; thread_binding needs the "
                               "CUDA backend")
        if s.kind == "parallel":
            return self.parallel_pragmas(s)
        if s.kind == "vectorized":
            first = not self.simd_vars
            self.simd_vars.append(s.loop_var)
            # gcc takes one pragma per loop: `omp simd` (which implies ivdep) unless nested
            return ["#pragma omp simd"] if first else ["#pragma GCC ivdep"]
        if s.kind == "unrolled" or (self.unroll_max_step and
                                    1 < trip_count(s) <= self.unroll_max_step):
            return [f"#pragma GCC unroll {min(s.extent, MAX_UNROLL)}"]
        return []

    def parallel_pragmas(self, s: For) -> list[str]:
        name = s.loop_var.name
        if self.parallel is not None:
            raise CodegenError(f"parallel loop {name} is nested inside parallel loop "
                               f"{self.parallel.loop_var.name}; only one level of "
                               "parallelism is supported")
        check(not self.simd_vars, f"parallel loop {name} is inside a vectorized loop")
        self.parallel = s
        return [f"#pragma omp parallel for num_threads({self.target.cores}) schedule(static)"]

    # -- blocks --

    def realize(self, r: BlockRealize) -> None:
        block = r.block
        if block.iter_vars or block.name != "root":
            self.emit(f"// block {comment_text(block.name)}")
        bindings = {iv.var: v for iv, v in zip(block.iter_vars, r.iter_values)}
        predicate = r.predicate if not bindings else substitute(r.predicate, bindings)
        if self.lane_varying(predicate):
            self.guarded(predicate, lambda: self.instance(r, check_predicate=False), r)
        else:
            self.instance(r)

    def instance(self, r: BlockRealize, check_predicate: bool = True) -> None:
        """Bind the block's iteration variables, then run its body (under its predicate)."""
        block = r.block
        saved_env, chunk = dict(self.env), self.chunk
        saved_bindings = dict(chunk.bindings) if chunk is not None else {}
        for iv, value in zip(block.iter_vars, r.iter_values):
            self.check_vectorizable(block.name, iv, value)
            self.emit(f"const {c_type(iv.var.dtype)} {self.names(iv.var)} = {self.expr(value)};")
            self.env[iv.var] = linear(value, self.env, self.ranges)
            self.note_varying_binding(iv.var, value)
            self.expr.bound.add(iv.var)
        if not check_predicate or (isinstance(r.predicate, IntImm) and r.predicate.value):
            self.block_body(block)
        else:
            self.emit_block(f"if ({self.expr(r.predicate)})", lambda: self.block_body(block))
        for iv in block.iter_vars:
            self.expr.bound.discard(iv.var)
        self.env = saved_env
        if chunk is not None:
            chunk.bindings = saved_bindings

    def check_vectorizable(self, block: str, iv: IterVar, value: Expr) -> None:
        for var in self.simd_vars:
            check(iv.kind != REDUCE or not uses_var(value, var),
                  f"vectorized loop {var.name} binds reduction variable {iv.var.name} of "
                  f"block {block}; a reduction cannot be vectorized this way")

    def block_body(self, block: Block) -> None:
        """The block's allocations (local buffers promoted to variables where they can be),
        init and body."""
        slots = self.block_slots(block, lambda: self.block_contents(block))
        self.promoted.update({x.buffer: x for x in slots})
        self.block_contents(block)
        for x in slots:
            del self.promoted[x.buffer]

    def block_contents(self, block: Block) -> None:
        if block.alloc_buffers and self.chunk is not None:
            raise NotVectorizable(f"block {block.name} allocates buffers in every lane")
        heap = [buf for buf in block.alloc_buffers if self.allocate(buf)]
        if block.init is not None:
            self.init(block)
        self.stmt(block.body)
        for buf in reversed(heap):
            self.emit(f"free({self.names(buf)});")
            self.frames.pop()
        self.expr.visible.difference_update(block.alloc_buffers)

    def init(self, block: Block) -> None:
        """TensorIR: the init runs when every reduction variable is 0."""
        conds = [f"{self.names(iv.var)} == 0" for iv in block.iter_vars if iv.kind == REDUCE]
        if conds:
            self.emit_block(f"if ({' && '.join(conds)})", lambda: self.scope_body(block.init))
        else:
            self.stmt(block.init)

    # -- register promotion (the rest is in simd.Registers) --

    def resolve(self, buf: Buffer, indices: tuple[Expr, ...]) -> str | None:
        """ExprPrinter hook: a scalar access of a promoted (or probed) buffer."""
        return self.local_access(buf, indices, 1)

    def array_element(self, buf: Buffer, indices: tuple[Expr, ...]) -> str:
        """`name[index]` of an array buffer (never a promoted variable)."""
        check(buf in self.expr.visible, f"buffer {buf.name} is neither a parameter nor "
                                        "allocated by an enclosing block")
        return f"{self.names(buf)}[{self.expr.index(buf, indices)}]"

    # -- allocations --

    def allocate(self, buf: Buffer) -> bool:
        """Declare `buf`; True if it is on the heap (and must be freed)."""
        check(buf.scope != "shared", f"buffer {buf.name} has scope 'shared', which needs the "
                                     "CUDA backend")
        name, ctype = self.names(buf), c_type(buf.dtype)
        nbytes = buf.size * np.dtype(np.bool_ if buf.dtype == "bool" else buf.dtype).itemsize
        self.expr.visible.add(buf)
        if buf in self.promoted:
            for line in self.promoted[buf].declarations(self, load=False):
                self.emit(line)
            return False
        if buf.scope == "local" and nbytes <= STACK_LIMIT_BYTES:
            self.emit(f"{ctype} {name}[{buf.size}] __attribute__((aligned({ALIGN_BYTES})));")
            return False
        padded = -(-nbytes // ALIGN_BYTES) * ALIGN_BYTES  # aligned_alloc wants a multiple
        self.emit(f"{ctype}* restrict {name} = ({ctype}*)aligned_alloc({ALIGN_BYTES}, {padded});")
        self.emit_block(f"if ({name} == NULL)", self.fail)
        self.frames.append(buf)
        return True

    def fail(self) -> None:
        """Give up after a failed allocation: free what is live and return ALLOC_FAILED, or
        inside an OpenMP loop (no return allowed) raise a shared flag and skip the iteration;
        the flag is checked after that loop."""
        if self.no_return is None:
            self.free_live(len(self.frames))
            self.emit("return TESSEL_ALLOC_FAILED;")
            return
        loop_start = len(self.frames) - self.frames[::-1].index(_LOOP_MARK)
        self.free_live(len(self.frames) - loop_start)
        self.fail_flag = self.fail_flag or self.names.fresh("alloc_failed")
        self.fail_pending = True
        self.emit("#pragma omp atomic write")
        self.emit(f"{self.fail_flag} = 1;")
        self.emit("continue;")

    def free_live(self, count: int) -> None:
        """Free the innermost `count` frames' heap buffers."""
        for frame in reversed(self.frames[len(self.frames) - count:]):
            if isinstance(frame, Buffer):
                self.emit(f"free({self.names(frame)});")


# ---- the translation unit ----

_PREAMBLE = """\
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TESSEL_ALLOC_FAILED 1"""

_TIME_FN = """\
int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs) {
    int32_t status = tessel_entry(args);  // warm-up
    for (int32_t r = 0; status == 0 && r < repeat; ++r) {
        struct timespec start, stop;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (int32_t n = 0; status == 0 && n < number; ++n) {
            status = tessel_entry(args);
        }
        clock_gettime(CLOCK_MONOTONIC, &stop);
        const double secs = (double)(stop.tv_sec - start.tv_sec)
                            + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);
        out_secs[r] = secs / number;
    }
    return status;
}"""


def wrap_call(head: str, args: list[str], tail: str, indent: str = "", width: int = 100) -> str:
    """`head(a, b, c)tail` on one line, or one argument per line when too long."""
    line = f"{indent}{head}({', '.join(args)}){tail}"
    if len(line) <= width:
        return line
    inner = ",\n".join(f"{indent}        {a}" for a in args)
    return f"{indent}{head}(\n{inner}){tail}"


def _describe(buf: Buffer) -> str:
    return f"{comment_text(buf.name)} {buf.dtype}[{', '.join(map(str, buf.shape))}]"


def generate_c(func: PrimFunc, target: Target, *, max_chars: int | None = None) -> str:
    """Render `func` as a C11 translation unit exporting tessel_entry and tessel_time. With
    `max_chars`, a kernel body longer than that raises SourceTooLarge as soon as it passes."""
    check(isinstance(func, PrimFunc), f"generate_c needs a PrimFunc, got {type(func).__name__}")
    check(len(set(map(id, func.params))) == len(func.params),
          f"function {func.name} lists a parameter buffer twice")
    func = vectorize_reductions(func, target)
    names = Names()
    outputs = set(func.outputs)
    types = [c_type(p.dtype) + "*" for p in func.params]
    types = [t if p in outputs else "const " + t for t, p in zip(types, func.params)]
    params = [f"{t} restrict {names(p)}" for t, p in zip(types, func.params)]
    kernel = names.fresh(func.name)
    writer = KernelWriter(func, target, names, max_chars)
    body = writer.body_lines()
    casts = [f"({t})args[{k}]" for k, t in enumerate(types)]
    inputs = ", ".join(_describe(p) for p in func.params if p not in outputs) or "none"
    outs = ", ".join(_describe(p) for p in func.params if p in outputs) or "none"
    parts = [
        f"// tessel kernel {comment_text(func.name)}\n// inputs: {inputs}\n// outputs: {outs}",
        _PREAMBLE,
        *(helper_source(h) for h in sorted(writer.expr.helpers)),
        *([vector_source(writer.vtypes)] if writer.vtypes else []),
        "\n".join([wrap_call(f"static int32_t {kernel}", params, " {"), *body, "}"]),
        "\n".join(["int32_t tessel_entry(void** args) {",
                   wrap_call(f"return {kernel}", casts, ";", "    "), "}"]),
        _TIME_FN,
    ]
    return "\n\n".join(parts) + "\n"
