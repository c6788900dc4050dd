"""Loop IR -> one C11 translation unit: a static kernel plus two exported entry points.

    int32_t tessel_entry(void** args)      calls the kernel on the parameter buffers
    int32_t tessel_time(void** args, int32_t number, int32_t repeat, double* out_secs)

Blocks become C scopes binding their iteration variables; a block's init runs when all its
reduction variables are 0. Loops map to C by kind: "parallel" to an OpenMP worksharing loop,
"vectorized" to `omp simd`, "unrolled" to `GCC unroll`. Allocations are stack arrays (small
"local" buffers) or 64-byte aligned heap blocks; a failed heap allocation makes the kernel
return ALLOC_FAILED, which tessel_entry passes on.
"""
from __future__ import annotations

import math
import re

import numpy as np

from tessel.ir import (REDUCE, BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferStore,
                       Call, Cast, Expr, FloatImm, For, IfThenElse, IntImm, IterVar, Not,
                       PrimFunc, Select, SeqStmt, Stmt, Var, is_float, uses_var)
from tessel.target import Target

ALLOC_FAILED = 1  # kernel status when a heap allocation fails
ALIGN_BYTES = 64
STACK_LIMIT_BYTES = 64 * 1024  # "local" buffers up to this size live on the stack
MAX_UNROLL = 65534  # the largest factor `#pragma GCC unroll` accepts

C_TYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "int8": "int8_t",
           "uint8": "uint8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
           "bool": "uint8_t"}
_C_KEYWORDS = """auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
_Imaginary _Noreturn _Static_assert _Thread_local _Float16 alignas alignof bool true false"""
# names the generated file uses or that the headers / gcc define as macros
_LIBRARY_NAMES = """main args tessel_entry tessel_time TESSEL_ALLOC_FAILED tessel_floordiv_i32
tessel_floordiv_i64 tessel_floormod_i32 tessel_floormod_i64 int8_t uint8_t int16_t int32_t
int64_t size_t NULL INFINITY NAN aligned_alloc free clock_gettime CLOCK_MONOTONIC linux unix i386
expf exp logf log sqrtf sqrt tanhf tanh erff erf powf pow fabsf fabs floorf floor ceilf ceil"""
RESERVED = frozenset((_C_KEYWORDS + " " + _LIBRARY_NAMES).split())

# C precedence levels: higher binds tighter
PRIMARY, UNARY, MUL, ADD, REL, EQ, AND, OR, TERNARY = 16, 14, 13, 12, 10, 9, 5, 4, 3
_BINARY = {"+": ("+", ADD), "-": ("-", ADD), "*": ("*", MUL), "/": ("/", MUL),
           "<": ("<", REL), "<=": ("<=", REL), ">": (">", REL), ">=": (">=", REL),
           "==": ("==", EQ), "!=": ("!=", EQ), "and": ("&&", AND), "or": ("||", OR)}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
         "pow": "pow", "abs": "fabs", "floor": "floor", "ceil": "ceil"}
_NARROW_INTS = ("int8", "uint8", "int16")


class CodegenError(ValueError):
    """The program cannot be rendered to C (unsupported node, illegal nesting, unbound name)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise CodegenError(msg)


def c_type(dtype: str) -> str:
    check(dtype in C_TYPES, f"dtype {dtype!r} has no C type")
    return C_TYPES[dtype]


class Names:
    """Unique, valid C identifiers for variables and buffers (keyed by object identity)."""

    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}
        self.used: set[str] = set(RESERVED)

    def fresh(self, base: str) -> str:
        base = re.sub(r"[^0-9A-Za-z_]", "_", base) or "v"
        if base[0].isdigit() or base[0] == "_":  # _X and __x are reserved in C
            base = "v" + base
        name, k = base, 0
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name

    def __call__(self, obj: Var | Buffer) -> str:
        if id(obj) not in self.by_id:
            self.by_id[id(obj)] = self.fresh(obj.name)
        return self.by_id[id(obj)]


def comment_text(text: str) -> str:
    """`text` made safe for a // comment (no newlines, no trailing line splice)."""
    return re.sub(r"[^ -~]", "?", text).rstrip("\\")


# ---- expressions ----

def float_literal(value: float, dtype: str) -> str:
    """The shortest C literal that rounds to the same `dtype` value (float16 via float)."""
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "-INFINITY"
    if dtype == "float64":
        text = repr(float(value))
    else:
        np_type = np.float16 if dtype == "float16" else np.float32
        with np.errstate(over="ignore"):
            exact = np.float32(np_type(value))
            if math.isinf(exact):
                return "INFINITY" if exact > 0 else "-INFINITY"
            text = next(t for p in range(1, 10)
                        if np.float32(t := f"{float(exact):.{p}g}") == exact)
    if not re.search(r"[.e]", text):
        text += ".0"
    return text if dtype == "float64" else text + "f"


def int_literal(value: int, dtype: str) -> str:
    bits = 64 if dtype == "int64" else 32
    if value == -(2 ** (bits - 1)):  # the minimum has no literal of its own type
        return f"({value + 1} - 1)"
    return str(value)


def _math_fn(name: str, dtype: str) -> str:
    return _MATH[name] if dtype == "float64" else _MATH[name] + "f"


def is_nonnegative(e: Expr) -> bool:
    """Provably >= 0: loop and iteration variables range over [0, extent)."""
    if isinstance(e, IntImm):
        return e.value >= 0
    if isinstance(e, Var):
        return True
    if isinstance(e, BinOp) and e.op in ("+", "*", "min"):
        return is_nonnegative(e.a) and is_nonnegative(e.b)
    if isinstance(e, BinOp) and e.op == "max":
        return is_nonnegative(e.a) or is_nonnegative(e.b)
    if isinstance(e, BinOp) and e.op in ("//", "%"):
        return is_nonnegative(e.a) and _positive_const(e.b)
    return False


def _positive_const(e: Expr) -> bool:
    return isinstance(e, IntImm) and e.value > 0


class ExprPrinter:
    """Renders expressions as C text with minimal, safe parentheses; float16 computes in float."""

    def __init__(self, names: Names, params: tuple[Buffer, ...]) -> None:
        self.names = names
        self.bound: set[Var] = set()  # variables declared at the current point
        self.visible: set[Buffer] = set(params)  # buffers declared at the current point
        self.helpers: set[str] = set()  # floor division helpers used

    def __call__(self, e: Expr) -> str:
        return self.render(e)[0]

    def render(self, e: Expr) -> tuple[str, int]:
        """(C text, its precedence level)."""
        for cls in type(e).__mro__:
            method = getattr(self, "_" + cls.__name__.lower(), None)
            if method is not None:
                return method(e)
        raise CodegenError(f"cannot generate C for expression node {type(e).__name__}")

    def operand(self, e: Expr, parent: int, right: bool = False) -> str:
        text, prec = self.render(e)
        logic = (AND, OR)
        needs = (prec < parent or (right and prec == parent)
                 or (prec in (REL, EQ) and parent in (REL, EQ))
                 or (prec in logic and parent in logic and prec != parent)
                 or (text.startswith("-") and (right or parent == UNARY)))
        return f"({text})" if needs else text

    def _var(self, e: Var) -> tuple[str, int]:
        check(e in self.bound, f"variable {e.name} is used outside the loop or block that "
                               "binds it")
        return self.names(e), PRIMARY

    def _intimm(self, e: IntImm) -> tuple[str, int]:
        text = int_literal(e.value, e.dtype)
        return text, UNARY if text.startswith("-") else PRIMARY

    def _floatimm(self, e: FloatImm) -> tuple[str, int]:
        text = float_literal(e.value, e.dtype)
        return text, UNARY if text.startswith("-") else PRIMARY

    def _bufferload(self, e: BufferLoad) -> tuple[str, int]:
        text = self.element(e.buffer, e.indices)
        return (f"(float){text}", UNARY) if e.dtype == "float16" else (text, PRIMARY)

    def element(self, buf: Buffer, indices: tuple[Expr, ...]) -> str:
        """`name[flat index]`."""
        check(buf in self.visible, f"buffer {buf.name} is neither a parameter nor allocated by "
                                   "an enclosing block")
        return f"{self.names(buf)}[{self.index(buf, indices)}]"

    def index(self, buf: Buffer, indices: tuple[Expr, ...]) -> str:
        """Row-major flat offset; int64 arithmetic for buffers of 2**31 elements or more."""
        wide = buf.size >= 2 ** 31
        terms = []
        for idx, stride in zip(indices, buf.strides):
            if isinstance(idx, IntImm) and idx.value == 0:
                continue
            if stride == 1:
                terms.append(f"(int64_t){self.operand(idx, UNARY)}" if wide
                             else self.operand(idx, ADD))
            elif wide:
                terms.append(f"(int64_t){self.operand(idx, UNARY)} * {stride}")
            else:
                terms.append(f"{self.operand(idx, MUL)} * {stride}")
        return " + ".join(terms) or "0"

    def _binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max"):
            a, b = self.operand(e.a, REL), self.operand(e.b, REL, right=True)
            return f"({a} {'<' if e.op == 'min' else '>'} {b} ? {a} : {b})", PRIMARY
        if e.op in ("//", "%"):
            return self.floor_div(e)
        if e.op == "-" and not is_float(e.dtype) and isinstance(e.a, IntImm) and e.a.value == 0:
            return self.narrow(f"-{self.operand(e.b, UNARY)}", UNARY, e.dtype)
        symbol, prec = _BINARY[e.op]
        text = f"{self.operand(e.a, prec)} {symbol} {self.operand(e.b, prec, right=True)}"
        return self.narrow(text, prec, e.dtype)

    def narrow(self, text: str, prec: int, dtype: str) -> tuple[str, int]:
        """C computes 8- and 16-bit integers in int; wrap back to the IR's dtype."""
        if dtype in _NARROW_INTS:
            return f"({C_TYPES[dtype]})({text})", UNARY
        return text, prec

    def floor_div(self, e: BinOp) -> tuple[str, int]:
        """`//` and `%` with Python (floor) semantics."""
        a, b = self.operand(e.a, MUL), self.operand(e.b, MUL, right=True)
        if is_float(e.dtype):
            floor = _math_fn("floor", e.dtype)
            if e.op == "//":
                return f"{floor}({a} / {b})", PRIMARY
            return f"{a} - {b} * {floor}({a} / {b})", ADD
        if e.dtype.startswith("u") or (is_nonnegative(e.a) and _positive_const(e.b)):
            return self.narrow(f"{a} {'/' if e.op == '//' else '%'} {b}", MUL, e.dtype)
        bits = "i64" if e.dtype == "int64" else "i32"
        helper = f"tessel_floor{'div' if e.op == '//' else 'mod'}_{bits}"
        self.helpers.add(helper)
        return self.narrow(f"{helper}({self(e.a)}, {self(e.b)})", PRIMARY, e.dtype)

    def _not(self, e: Not) -> tuple[str, int]:
        return f"!{self.operand(e.a, UNARY)}", UNARY

    def _select(self, e: Select) -> tuple[str, int]:
        cond = self.operand(e.cond, TERNARY)
        return f"({cond} ? {self(e.true_value)} : {self(e.false_value)})", PRIMARY

    def _cast(self, e: Cast) -> tuple[str, int]:
        if e.dtype == "bool":
            zero = float_literal(0.0, e.value.dtype) if is_float(e.value.dtype) else "0"
            return f"({self.operand(e.value, EQ)} != {zero})", PRIMARY
        return f"({c_type(e.dtype)}){self.operand(e.value, UNARY)}", UNARY

    def _call(self, e: Call) -> tuple[str, int]:
        args = [self(a) for a in e.args]
        one = float_literal(1.0, e.dtype)
        if e.name == "rsqrt":
            return f"{one} / {_math_fn('sqrt', e.dtype)}({args[0]})", MUL
        if e.name == "sigmoid":
            neg = f"-{self.operand(e.args[0], UNARY)}"
            return f"{one} / ({one} + {_math_fn('exp', e.dtype)}({neg}))", MUL
        check(e.name in _MATH, f"cannot generate C for intrinsic {e.name!r}")
        return f"{_math_fn(e.name, e.dtype)}({', '.join(args)})", PRIMARY


FLOOR_HELPERS = {
    "tessel_floordiv_{b}": """\
static inline {t} tessel_floordiv_{b}({t} a, {t} b) {{
    const {t} q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}}""",
    "tessel_floormod_{b}": """\
static inline {t} tessel_floormod_{b}({t} a, {t} b) {{
    const {t} r = a % b;
    return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;
}}""",
}


def helper_source(name: str) -> str:
    bits = name[-3:]
    template = FLOOR_HELPERS[name[:-3] + "{b}"]
    return template.format(b=bits, t="int64_t" if bits == "i64" else "int32_t")


# ---- statements ----

_LOOP_MARK = object()  # in KernelWriter.frames: the start of a loop body


def trip_count(s: Stmt | None) -> int:
    """Iterations of the deepest loop nest in `s` (for auto-unroll decisions)."""
    if isinstance(s, For):
        return s.extent * trip_count(s.body)
    if isinstance(s, SeqStmt):
        return max(trip_count(x) for x in s.seq)
    if isinstance(s, IfThenElse):
        return max(trip_count(s.then_case), trip_count(s.else_case))
    if isinstance(s, BlockRealize):
        return max(trip_count(s.block.body), trip_count(s.block.init))
    return 1


class KernelWriter:
    """Renders a PrimFunc's body as the statements of one static C function."""

    def __init__(self, func: PrimFunc, target: Target, names: Names) -> None:
        self.func, self.target, self.names = func, target, names
        self.expr = ExprPrinter(names, func.params)
        self.lines: list[str] = []
        self.depth = 1
        self.frames: list[object] = []  # live heap buffers and loop marks, outermost first
        self.parallel: For | None = None  # the enclosing parallel loop
        self.no_return: For | None = None  # outermost enclosing parallel or simd loop
        self.simd_vars: list[Var] = []  # variables of the enclosing vectorized loops
        self.unroll_max_step = 0  # from a pragma_auto_unroll_max_step annotation
        self.fail_flag: str | None = None  # set by failed allocations inside a parallel loop
        self.fail_pending = False  # a flag raised in the current OpenMP loop is to be checked

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

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

    def stmt(self, s: Stmt) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x)
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
        saved = (self.parallel, list(self.simd_vars), self.unroll_max_step, self.no_return)
        for pragma in self.loop_pragmas(s):
            self.emit(pragma)
        if s.kind in ("parallel", "vectorized") and self.no_return is None:
            self.no_return = s  # OpenMP forbids `return` inside its loops
        var, ctype = self.names(s.loop_var), c_type(s.loop_var.dtype)
        self.expr.bound.add(s.loop_var)
        self.frames.append(_LOOP_MARK)
        self.emit_block(f"for ({ctype} {var} = 0; {var} < {s.extent}; ++{var})",
                        lambda: self.scope_body(s.body))
        self.frames.pop()
        self.expr.bound.discard(s.loop_var)
        self.parallel, self.simd_vars, self.unroll_max_step, self.no_return = saved
        if self.no_return is None and self.fail_pending:
            self.fail_pending = False
            self.emit_block(f"if ({self.fail_flag})", self.fail)

    def loop_pragmas(self, s: For) -> list[str]:
        name = s.loop_var.name
        step = s.annotations.get("pragma_auto_unroll_max_step", 0)
        if isinstance(step, int) and step > 0:
            self.unroll_max_step = max(self.unroll_max_step, step)
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
        for iv, value in zip(block.iter_vars, r.iter_values):
            self.check_vectorizable(block.name, iv, value)
            self.emit(f"const {c_type(iv.var.dtype)} {self.names(iv.var)} = {self.expr(value)};")
            self.expr.bound.add(iv.var)
        if isinstance(r.predicate, IntImm) and r.predicate.value:
            self.block_body(block)
        else:
            self.emit_block(f"if ({self.expr(r.predicate)})", lambda: self.block_body(block))
        for iv in block.iter_vars:
            self.expr.bound.discard(iv.var)

    def check_vectorizable(self, block: str, iv: IterVar, value: Expr) -> None:
        for var in self.simd_vars:
            check(iv.kind != REDUCE or not uses_var(value, var),
                  f"vectorized loop {var.name} binds reduction variable {iv.var.name} of "
                  f"block {block}; a reduction cannot be vectorized this way")

    def block_body(self, block: Block) -> None:
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

    # -- allocations --

    def allocate(self, buf: Buffer) -> bool:
        """Declare `buf`; True if it is on the heap (and must be freed)."""
        check(buf.scope != "shared", f"buffer {buf.name} has scope 'shared', which needs the "
                                     "CUDA backend")
        name, ctype = self.names(buf), c_type(buf.dtype)
        nbytes = buf.size * np.dtype(np.bool_ if buf.dtype == "bool" else buf.dtype).itemsize
        self.expr.visible.add(buf)
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


def generate_c(func: PrimFunc, target: Target) -> str:
    """Render `func` as a C11 translation unit exporting tessel_entry and tessel_time."""
    check(isinstance(func, PrimFunc), f"generate_c needs a PrimFunc, got {type(func).__name__}")
    check(len(set(map(id, func.params))) == len(func.params),
          f"function {func.name} lists a parameter buffer twice")
    names = Names()
    outputs = set(func.outputs)
    types = [c_type(p.dtype) + "*" for p in func.params]
    types = [t if p in outputs else "const " + t for t, p in zip(types, func.params)]
    params = [f"{t} restrict {names(p)}" for t, p in zip(types, func.params)]
    kernel = names.fresh(func.name)
    writer = KernelWriter(func, target, names)
    body = writer.body_lines()
    casts = [f"({t})args[{k}]" for k, t in enumerate(types)]
    inputs = ", ".join(_describe(p) for p in func.params if p not in outputs) or "none"
    outs = ", ".join(_describe(p) for p in func.params if p in outputs) or "none"
    parts = [
        f"// tessel kernel {comment_text(func.name)}\n// inputs: {inputs}\n// outputs: {outs}",
        _PREAMBLE,
        *(helper_source(h) for h in sorted(writer.expr.helpers)),
        "\n".join([wrap_call(f"static int32_t {kernel}", params, " {"), *body, "}"]),
        "\n".join(["int32_t tessel_entry(void** args) {",
                   wrap_call(f"return {kernel}", casts, ";", "    "), "}"]),
        _TIME_FN,
    ]
    return "\n\n".join(parts) + "\n"
