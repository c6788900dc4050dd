"""Lowered IR -> one C11 translation unit: a static kernel plus two exported entry points.

    int32_t tessel_entry(void** args)      calls the kernel on the parameter buffers
    int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs)

`generate_c` runs the lowering passes (`tessel.codegen.passes`: blocks, unrolling,
vectorization, register promotion), which make every decision, then prints the result with
`KernelPrinter`, a straight walk: loops map to C by kind ("parallel" to an OpenMP worksharing
loop, a vectorized loop the passes left whole to `omp simd`, pragmas from annotations),
`Allocate` to a stack array, a 64-byte aligned heap block or variables, vector nodes to GCC
vector extensions (see c_vector.py). A failed heap allocation makes the kernel return
ALLOC_FAILED, which tessel_entry passes on; inside an OpenMP loop, where C forbids `return`,
it raises a flag checked after the loop.
"""
from __future__ import annotations

from typing import Sequence

from tessel import intrin
from tessel.codegen.c_expr import (BF16_HELPER, UNARY, CodegenError, Names, SourceTooLarge,
                                   c_type, comment_text, float_literal, helper_source)
from tessel.codegen.c_vector import KernelExprs, vector_source, vtype
from tessel.codegen.lowered import (Allocate, Comment, IntrinCall, LoweredFunc, Prefetch,
                                    Promote, RegisterStore, Scatter, VectorStore, lanes_of)
from tessel.codegen.passes import lower_kernel
from tessel.codegen.passes.blocks import buffer_bytes
from tessel.ir import (Buffer, BufferLoad, BufferStore, Call, Cast, For, IfThenElse, PrimFunc,
                       SeqStmt, Stmt, collect, is_float, is_int)
from tessel.target import Target

ALLOC_FAILED = 1  # kernel status when a heap allocation fails
ALIGN_BYTES = 64
_LOOP_MARK = object()  # in KernelPrinter.frames: the start of a loop body


class KernelPrinter:
    """Prints a lowered kernel's body as the statements of one static C function."""

    def __init__(self, func: LoweredFunc, target: Target, names: Names,
                 max_chars: int | None = None) -> None:
        self.func, self.target, self.names = func, target, names
        self.max_chars = max_chars  # budget of the kernel body (None: unlimited)
        self.chars = 0
        self.expr = KernelExprs(names, func.params)
        self.lines: list[str] = []
        self.depth = 1
        self.frames: list[object] = []  # live heap buffers and loop marks, outermost first
        self.no_return: For | None = None  # outermost enclosing parallel or simd loop
        self.fail_flag: str | None = None  # set by failed allocations inside a parallel loop
        self.fail_pending = False  # a flag raised in the current OpenMP loop is to be checked

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
        self.stmt(self.func.body)
        self.emit("return 0;")
        if self.fail_flag is not None:
            self.lines.insert(0, f"    int32_t {self.fail_flag} = 0;")
        return self.lines

    # -- statements --

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, BufferStore):
            self.store(s)
        elif isinstance(s, VectorStore):
            store = self.expr.type_of(s.buffer.dtype, lanes_of(s.value), "store")
            self.emit(f"{store}(&{self.expr.element(s.buffer, s.indices)}, {self.expr(s.value)});")
        elif isinstance(s, RegisterStore):
            self.emit(f"{self.expr(s.target)} = {self.expr(s.value)};")
        elif isinstance(s, IntrinCall):
            self.expr.vtypes.add((s.operands[0].dtype, 0, f"intrin {s.name}"))
            args = [f"&{self.expr.element(o.buffer, o.indices)}" for o in s.operands]
            ints = [str(i) for i in s.ints] + [self.expr(s.zero)]
            self.emit(f"{intrin.get(s.name).c_name}({', '.join(args + ints)});")
        elif isinstance(s, Scatter):
            self.emit_block("", lambda: self.scatter(s))
        elif isinstance(s, IfThenElse):
            self.branches(s)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Allocate):
            self.emit_block("", lambda: self.allocate(s))
        elif isinstance(s, Promote):
            self.promote(s)
        elif isinstance(s, Prefetch):  # into L2 (locality 2); an integer address: no
            # pointer past an object's end
            address = f"(uintptr_t)&{self.expr.element(s.buffer, s.indices)} + {s.offset}"
            self.emit(f"__builtin_prefetch((const void*)({address}), 0, 2);")
        elif isinstance(s, Comment):
            self.emit(f"// {comment_text(s.text)}")
        else:
            raise CodegenError(f"cannot generate C for statement node {type(s).__name__}")

    def store(self, s: BufferStore) -> None:
        target = self.expr.element(s.buffer, s.indices)
        value = self.expr(s.value)
        if s.buffer.dtype == "float16":  # computed in float: round explicitly
            if isinstance(s.value, BufferLoad):
                value = value.removeprefix("(float)")
            else:
                value = f"(_Float16){self.expr.operand(s.value, UNARY)}"
        elif s.buffer.dtype == "bfloat16":  # its bits: copied as they are, else rounded
            if isinstance(s.value, BufferLoad) and s.value.dtype == "bfloat16":
                value = self.expr.element(s.value.buffer, s.value.indices)
            else:
                self.expr.helpers.add(BF16_HELPER)
                inner = s.value.value if isinstance(s.value, Cast) and \
                    s.value.dtype == "bfloat16" else s.value  # rounded by the store itself
                value = f"tessel_f32_bf16({self.expr(inner)})"
        self.emit(f"{target} = {value};")

    def scatter(self, s: Scatter) -> None:
        """The vector once, then each lane to its element, in lane order."""
        lanes = self.names.fresh("lanes")
        t = self.expr.type_of(s.value.dtype, lanes_of(s.value))
        self.emit(f"const {t} {lanes} = {self.expr(s.value)};")
        for k, target in enumerate(s.targets):
            self.emit(f"{self.expr(target)} = {lanes}[{k}];")

    def branches(self, s: IfThenElse) -> None:
        self.emit(f"if ({self.expr(s.condition)}) {{")
        self.depth += 1
        self.stmt(s.then_case)
        self.depth -= 1
        if s.else_case is not None:
            self.emit_block("} else", lambda: self.stmt(s.else_case))
        else:
            self.emit("}")

    # -- loops --

    def loop(self, s: For) -> None:
        saved = self.no_return
        for pragma in self.pragmas(s):
            self.emit(pragma)
        if s.kind in ("parallel", "vectorized") and self.no_return is None:
            self.no_return = s  # OpenMP forbids `return` inside its loops
        var, ctype = self.names(s.loop_var), c_type(s.loop_var.dtype)
        self.expr.bound.add(s.loop_var)
        self.frames.append(_LOOP_MARK)
        self.emit_block(f"for ({ctype} {var} = 0; {var} < {s.extent}; ++{var})",
                        lambda: self.stmt(s.body))
        self.frames.pop()
        self.expr.bound.discard(s.loop_var)
        self.no_return = saved
        if self.no_return is None and self.fail_pending:
            self.fail_pending = False
            self.emit_block(f"if ({self.fail_flag})", self.fail)

    def pragmas(self, s: For) -> list[str]:
        if s.kind == "parallel":
            return ["#pragma omp parallel for num_threads(TESSEL_THREADS) schedule(static)"]
        if s.kind == "vectorized":
            # gcc takes one pragma per loop: `omp simd` (which implies ivdep) unless nested
            return ["#pragma GCC ivdep" if s.annotations.get("simd") == "ivdep"
                    else "#pragma omp simd"]
        if "pragma_unroll" in s.annotations:
            return [f"#pragma GCC unroll {s.annotations['pragma_unroll']}"]
        return []

    # -- buffers --

    def allocate(self, s: Allocate) -> None:
        buf = s.buffer
        name, ctype = self.names(buf), c_type(buf.dtype)
        self.expr.visible.add(buf)
        heap = s.storage == "heap"
        if s.storage == "registers":
            for line in self.declare_registers(buf, s.slots, None):
                self.emit(line)
        elif s.storage == "stack":
            self.emit(f"{ctype} {name}[{buf.size}] __attribute__((aligned({ALIGN_BYTES})));")
        else:
            padded = -(-buffer_bytes(buf) // ALIGN_BYTES) * ALIGN_BYTES
            self.emit(f"{ctype}* restrict {name} = ({ctype}*)aligned_alloc({ALIGN_BYTES}, "
                      f"{padded});")
            self.emit_block(f"if ({name} == NULL)", self.fail)
            self.frames.append(buf)
        self.stmt(s.body)
        if heap:
            self.emit(f"free({name});")
            self.frames.pop()
        self.expr.visible.discard(buf)

    def promote(self, s: Promote) -> None:
        """Variables loaded from the array before the body, stored back after it."""
        for line in self.declare_registers(s.buffer, s.slots, s.base):
            self.emit(line)
        self.stmt(s.body)
        for start, width in s.slots:
            reg = self.expr.registers[(id(s.buffer), start)]
            element = self.slot_element(s.buffer, s.base, start)
            if width > 1:
                store = self.expr.type_of(s.buffer.dtype, width, "store")
                self.emit(f"{store}(&{element}, {reg});")
            else:
                self.emit(f"{element} = {reg};")

    def declare_registers(self, buf: Buffer, slots, base) -> list[str]:
        """One variable per slot: zeroed, or with `base` read from the array."""
        out = []
        for start, width in slots:
            name = self.names.fresh(f"{buf.name}_{start}")
            self.expr.registers[(id(buf), start)] = name
            if width > 1:
                t = self.expr.type_of(buf.dtype, width, "load" if base is not None else "")
                value = "{0}" if base is None else \
                    f"{vtype(buf.dtype, width)}_load(&{self.slot_element(buf, base, start)})"
                out.append(f"{t.removesuffix('_load')} {name} = {value};")
            else:
                value = "0" if base is None else self.slot_element(buf, base, start)
                out.append(f"{c_type(buf.dtype)} {name} = {value};")
        return out

    def slot_element(self, buf: Buffer, base, offset: int) -> str:
        index = self.expr.operand(base + offset if offset else base, 0)
        return f"{self.names(buf)}[{index}]"

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

# A kernel that rounds floats to integers (quantization: round, floor, ceil, a float's
# conversion to an int) computes each product and sum as the unfused program does: a fused
# epilogue's x * scale + bias contracted into one FMA moves the value by an ulp, which a
# rounding at a tie turns into a whole quantization step (a QDQ ResNet's residual conv
# differed from its reference in 1 of 200704 elements). Before the includes, so every
# function of the unit (the vector helpers, the intrinsics) has the same options.
_NO_CONTRACTION = """\
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif"""

def _time_source(call: str, buffers: Sequence[tuple[str, int, int]], threads: int,
                 setup: tuple[str, ...] = (), teardown: tuple[str, ...] = ()) -> str:
    """tessel_time: one warm-up `call`, then `repeat` timed batches of `number` calls, each
    batch's mean seconds per call in out_secs; `setup` runs before (it sets `status`) and
    `teardown` after, both untimed.

    tessel_time_in_model (its extra argument: the bytes of the last-level cache): the same,
    but each call is timed alone, after the caches were put in the state a model leaves them
    in (tessel.ir.MEASURE): a sweep over a buffer the size of the last-level cache (at most
    32 MB: codegen.module.sweep_bytes) by all `threads` evicts whatever the kernel used
    before (its scratch buffers, the private caches), `buffers` ((C pointer, bytes, planes):
    everything the kernel's arguments hold; planes 0 for all but the activation inputs) that
    are not activations are also flushed from every level, and the activation inputs are
    read and written by the threads as the kernel before it in the model has just written
    them: each thread its contiguous share of each of the buffer's `planes` equal parts (more
    than one when the model's kernels split their work by rows, PrimFunc.partition: the batch
    and channel blocks of NCHW[x]c)."""
    first = [*setup, "    if (status == 0) {", f"        status = {call};  // warm-up", "    }"] \
        if setup else [f"    int32_t status = {call};  // warm-up"]
    elapsed = ["secs += (double)(stop.tv_sec - start.tv_sec)",
               "        + 1e-9 * (double)(stop.tv_nsec - start.tv_nsec);"]

    def timer(head: str, before: list[str], timed: list[str], after: list[str]) -> str:
        return "\n".join([
            f"int32_t {head} {{", *first, *before,
            "    for (int32_t r = 0; status == 0 && r < repeat; ++r) {",
            "        struct timespec start, stop;",
            "        double secs = 0.0;",
            *timed,
            "        out_secs[r] = secs / number;",
            "    }",
            *after, *teardown,
            "    return status;",
            "}"])
    warm = timer("tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs)",
                 [], [
                     "        clock_gettime(CLOCK_MONOTONIC, &start);",
                     "        for (int32_t n = 0; status == 0 && n < number; ++n) {",
                     f"            status = {call};",
                     "        }",
                     "        clock_gettime(CLOCK_MONOTONIC, &stop);",
                     *(f"        {line}" for line in elapsed)], [])
    prepare = [f"            tessel_produce({ptr}, {nbytes}, {planes});" if planes else
               f"            tessel_evict({ptr}, {nbytes});" for ptr, nbytes, planes in buffers]
    in_model = timer(
        "tessel_time_in_model(void** args, int32_t number, int32_t repeat, double* out_secs,\n"
        "                             int64_t sweep_bytes)", [
            "    volatile char* sweep = (volatile char*)calloc((size_t)sweep_bytes + 64, 1);",
            "    if (sweep == NULL && status == 0) {",
            "        status = TESSEL_ALLOC_FAILED;",
            "    }"], [
            "        for (int32_t n = 0; status == 0 && n < number; ++n) {",
            "            tessel_sweep(sweep, sweep_bytes);",
            *prepare,
            "            clock_gettime(CLOCK_MONOTONIC, &start);",
            f"            status = {call};",
            "            clock_gettime(CLOCK_MONOTONIC, &stop);",
            *(f"            {line}" for line in elapsed),
            "        }"], [
            "    free((void*)sweep);"])
    return f"{_CACHE_STATE.format(threads=threads)}\n\n{warm}\n\n{in_model}"


_CACHE_STATE = """\
/* the cache state a model leaves a kernel in (tessel_time_in_model) */
static void tessel_sweep(volatile char* p, int64_t n) {{  /* every line written, by all threads */
    #pragma omp parallel for num_threads({threads}) schedule(static)
    for (int64_t i = 0; i < n; i += 64) p[i] += 1;
}}

/* read and written by the threads: each its contiguous share of every one of `planes` equal
   parts (1: of the whole buffer; a blocked tensor's channel blocks: a band of rows of each) */
static void tessel_produce(void* p, int64_t n, int64_t planes) {{
    volatile char* c = (volatile char*)p;
    int64_t plane = n / planes;
    #pragma omp parallel for num_threads({threads}) schedule(static)
    for (int32_t t = 0; t < {threads}; ++t) {{
        int64_t lo = plane * t / {threads}, hi = plane * (t + 1) / {threads};
        for (int64_t k = 0; k < planes; ++k) {{
            for (int64_t i = lo - lo % 64; i < hi; i += 64) c[k * plane + i] = c[k * plane + i];
        }}
    }}
}}

/* write back and drop the lines of [p, p + n) from every cache level: read next from memory */
static void tessel_evict(const void* p, int64_t n) {{
    const char* c = (const char*)p;
#if defined(__x86_64__) || defined(__i386__)
    for (int64_t i = 0; i < n; i += 64) __builtin_ia32_clflush(c + i);
    __builtin_ia32_mfence();
#elif defined(__aarch64__)
    for (int64_t i = 0; i < n; i += 64) __asm__ volatile("dc civac, %0" : : "r"(c + i) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
#else
    (void)c; (void)n;  /* the sweep alone evicts here */
#endif
}}"""


def wrap_call(head: str, args: list[str], tail: str, indent: str = "", width: int = 100) -> str:
    """`head(a, b, c)tail` on one line, or one argument per line when too long."""
    line = f"{indent}{head}({', '.join(args)}){tail}"
    if len(line) <= width:
        return line
    inner = ",\n".join(f"{indent}        {a}" for a in args)
    return f"{indent}{head}(\n{inner}){tail}"


def _describe(buf: Buffer) -> str:
    return f"{comment_text(buf.name)} {buf.dtype}[{', '.join(map(str, buf.shape))}]"


# A kernel body whose auto-unrolling makes it longer than this is lowered again with the
# auto-unroll step cut to each of UNROLL_CAPS in turn until it fits. gcc takes 10-15 s per MB
# of such code (-O2 no less; -O1 ran R18-C6's best programs 20x slower). Measured with
# benchmarks/unroll_budget.py (2026-11-25, 2-core Intel Xeon with AVX-512, gcc 12.2) on the
# five best programs of 64-trial searches of R18-C1, R18-C6 and R18-C8: under 200 KB instead
# of 600 KB they compiled in 8.8 s instead of 24.8 s and ran 0.987x as fast (geomean; the
# worst, R18-C1's best, 0.93x); under 100 KB, 0.76x (R18-C1's 7x7 windows need the copies).
# Budgets before: 1.2 MB, then 600 KB (2026-11-24, Zen 4: R18-C1 programs past 600 KB took
# 8-20 s of gcc each and none was within 15% of the best).
UNROLL_CHARS = 200_000
# C characters per IR node of an unrolled body, at the least: a body of more nodes than the
# budget over this is too large before it is vectorized and printed (ResNet-18's kernels on
# their priors, 2026-11-27: 4.5-4.7 for the Winograd output transforms, 5.5 for the input
# transforms, 14-60 for convolutions and matmuls)
MIN_CHARS_PER_NODE = 3
UNROLL_CAPS = (256, 128, 64, 16, 0)


def generate_c(func: PrimFunc, target: Target, *, max_chars: int | None = None,
               unroll_chars: int | None = UNROLL_CHARS,
               prepacks: Sequence[tuple[PrimFunc, int]] = (),
               constants: Sequence[int] = ()) -> str:
    """Render `func` as a C11 translation unit exporting tessel_entry, tessel_time and
    tessel_time_in_model (`constants`: positions of the parameters that are a model's
    weights, not activations; the prepacks' sources are too: _time_source). With
    `max_chars`, a kernel body longer than that raises SourceTooLarge as soon as it passes.
    A body past `unroll_chars` (None: no limit) is lowered again with less auto-unrolling
    (UNROLL_CAPS): the program is the same, its copies fewer, its compile time bounded.

    `prepacks`: stages split out of the kernel by tessel.prepack, each (its function,
    the position of the constant parameter it reads); `func` is then the kernel without them,
    taking one packed buffer per stage after its own parameters. The entry points take the
    parameters of the kernel before the split: tessel_entry packs and runs the kernel,
    tessel_time packs once and times the kernel alone, as a compiled model runs it."""
    step = _max_unroll_step(func)
    caps = [None] + [c for c in UNROLL_CAPS if c < step] if unroll_chars is not None else [None]
    budget = unroll_chars if max_chars is None or unroll_chars is None else min(unroll_chars,
                                                                                max_chars)
    packs = [(lower_kernel(f, target), source) for f, source in prepacks]
    rows = func.partition == "rows"
    exact = rounds_floats(func) or any(rounds_floats(f) for f, _ in prepacks)
    for cap in caps[:-1]:
        try:
            return print_c(lower_kernel(func, target, max_unroll_step=cap,
                                        max_nodes=budget // MIN_CHARS_PER_NODE), target,
                           max_chars=budget, prepacks=packs,
                           constants=constants, rows=rows, contract=not exact)
        except SourceTooLarge:
            continue
    return print_c(lower_kernel(func, target, max_unroll_step=caps[-1]), target,
                   max_chars=max_chars, prepacks=packs,
                   constants=constants, rows=rows, contract=not exact)


def rounds_floats(func: PrimFunc) -> bool:
    """Whether `func` rounds a float to an integer (round, floor, ceil, a conversion)."""
    return any((isinstance(e, Call) and e.name in ("round", "floor", "ceil"))
               or (isinstance(e, Cast) and is_int(e.dtype) and is_float(e.value.dtype))
               for e in collect(func.body, (Call, Cast)))


def _max_unroll_step(func: PrimFunc) -> int:
    steps = [f.annotations.get("pragma_auto_unroll_max_step", 0) for f in collect(func.body, For)]
    return max((s for s in steps if isinstance(s, int)), default=0)


def _param_types(func: LoweredFunc) -> list[str]:
    outputs = set(func.outputs)
    types = [c_type(p.dtype) + "*" for p in func.params]
    return [t if p in outputs else "const " + t for t, p in zip(types, func.params)]


def _kernel_source(func: LoweredFunc, target: Target, names: Names,
                   max_chars: int | None) -> tuple[str, str, KernelPrinter]:
    """(C name, C text, printer) of one kernel as a static function."""
    params = [f"{t} restrict {names(p)}" for t, p in zip(_param_types(func), func.params)]
    kernel = names.fresh(func.name)
    printer = KernelPrinter(func, target, names, max_chars)
    body = printer.body_lines()
    return kernel, "\n".join([wrap_call(f"static int32_t {kernel}", params, " {"), *body, "}"]), \
        printer


def print_c(func: LoweredFunc, target: Target, *, max_chars: int | None = None,
            prepacks: Sequence[tuple[LoweredFunc, int]] = (),
            constants: Sequence[int] = (), rows: bool = False, contract: bool = True) -> str:
    """The translation unit of a lowered kernel (and its split-out pack stages: generate_c;
    `rows`: its workload is partitioned by rows, PrimFunc.partition; without `contract`, no
    a * b + c becomes one FMA: _NO_CONTRACTION)."""
    names = Names()
    kernel, text, printer = _kernel_source(func, target, names, max_chars)
    packs = [(_kernel_source(f, target, names, None), f, source) for f, source in prepacks]
    printers = [printer, *(p for (_, _, p), _, _ in packs)]
    helpers = sorted(set().union(*(p.expr.helpers for p in printers)))
    vtypes = set().union(*(p.expr.vtypes for p in printers))
    _check_intrinsics(vtypes, target)
    types = _param_types(func)
    n_own = len(func.params) - len(packs)
    own = func.params[:n_own]
    outputs = set(func.outputs)
    inputs = ", ".join(_describe(p) for p in own if p not in outputs) or "none"
    outs = ", ".join(_describe(p) for p in own if p in outputs) or "none"
    head = f"// tessel kernel {comment_text(func.name)}\n// inputs: {inputs}\n// outputs: {outs}"
    if packs:
        head += ("\n// constant operands packed outside the timed calls: "
                 + ", ".join(comment_text(f.params[0].name) for _, f, _ in packs))
    threads = (f"#ifndef TESSEL_THREADS  /* a library of many kernels sets its own: "
               f"tessel.graph.export */\n#define TESSEL_THREADS {target.cores}\n#endif")
    parts = [head, *([] if contract else [_NO_CONTRACTION]), _PREAMBLE, threads,
             *(helper_source(h) for h in helpers),
             *([vector_source(vtypes)] if vtypes else []),
             *(t for (_, t, _), _, _ in packs), text]
    casts = [f"({t})args[{k}]" for k, t in enumerate(types[:n_own])]
    constant = {source for _, source in prepacks} | set(constants)
    buffers = [(f"args[{k}]", buffer_bytes(p), _planes(p, rows) if k not in constant and
                p not in outputs else 0) for k, p in enumerate(own)]
    if not packs:
        parts += ["\n".join(["int32_t tessel_entry(void** args) {",
                             wrap_call(f"return {kernel}", casts, ";", "    "), "}"]),
                  _time_source("tessel_entry(args)", buffers, target.cores)]
    else:
        parts += _prepacked_entries(kernel, casts, types[n_own:], packs, buffers, target.cores)
    return "\n\n".join(parts) + "\n"


def _check_intrinsics(vtypes: set[tuple[str, int, str]], target: Target) -> None:
    """CodegenError when the kernel uses a tensor intrinsic the target cannot run."""
    for _, _, fn in sorted(vtypes):
        if fn.startswith("intrin "):
            spec = intrin.get(fn.split()[1])
            missing = spec.missing(target)
            if missing:
                raise CodegenError(f"the kernel is tensorized with {spec.name}, which needs "
                                   f"{', '.join(missing)}; target {target} lacks it")


def _planes(buf: Buffer, rows: bool) -> int:
    """The parts of an activation input that each thread produced a share of (_time_source):
    with rows, one per batch and channel block of a blocked NCHW[x]c tensor."""
    return buf.shape[0] * buf.shape[1] if rows and len(buf.shape) == 5 else 1


def _prepacked_entries(kernel: str, casts: list[str], packed_types: list[str],
                       packs: list, buffers: list[tuple[str, int, int]],
                       threads: int) -> list[str]:
    """tessel_entry / tessel_time of a kernel whose constant operands are packed by the
    stages `packs` into heap buffers (freed at the end of each entry point)."""
    n = len(packs)
    prepack = ["static int32_t tessel_prepack(void** args, void** packed) {"]
    for i, ((name, _, _), f, source) in enumerate(packs):
        packed = f.params[1]
        nbytes = (buffer_bytes(packed) + 63) // 64 * 64
        t_src, t_dst = _param_types(f)
        prepack += [f"    packed[{i}] = aligned_alloc(64, {nbytes});",
                    f"    if (packed[{i}] == NULL) {{",
                    "        return TESSEL_ALLOC_FAILED;",
                    "    }",
                    f"    int32_t status{i} = {name}(({t_src})args[{source}], "
                    f"({t_dst})packed[{i}]);",
                    f"    if (status{i} != 0) {{",
                    f"        return status{i};",
                    "    }"]
    prepack += ["    return 0;", "}"]
    unpack = ["static void tessel_unpack(void** packed) {",
              f"    for (int32_t i = 0; i < {n}; ++i) {{",
              "        free(packed[i]);",
              "    }", "}"]
    packed_casts = [f"({t})packed[{i}]" for i, t in enumerate(packed_types)]
    main = ["static int32_t tessel_main(void** args, void** packed) {",
            wrap_call(f"return {kernel}", casts + packed_casts, ";", "    "), "}"]
    entry = f"""\
int32_t tessel_entry(void** args) {{
    void* packed[{n}] = {{0}};
    int32_t status = tessel_prepack(args, packed);
    if (status == 0) {{
        status = tessel_main(args, packed);
    }}
    tessel_unpack(packed);
    return status;
}}"""
    time_fn = _time_source(
        "tessel_main(args, packed)",
        [*buffers, *((f"packed[{i}]", buffer_bytes(f.params[1]), 0)
                     for i, (_, f, _) in enumerate(packs))], threads,
        setup=("    // the constant operands are packed once, outside the timed calls, as a",
               "    // compiled model packs its weights once",
               f"    void* packed[{n}] = {{0}};",
               "    int32_t status = tessel_prepack(args, packed);"),
        teardown=("    tessel_unpack(packed);",))
    return ["\n".join(prepack), "\n".join(unpack), "\n".join(main), entry, time_fn]


__all__ = ["generate_c", "print_c", "KernelPrinter", "CodegenError", "SourceTooLarge",
           "float_literal", "ALLOC_FAILED"]
