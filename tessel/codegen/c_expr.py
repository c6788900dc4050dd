"""C text for scalar expressions.

`ExprPrinter` renders one IR expression as C with minimal parentheses (c_vector.KernelExprs adds
the lowered IR's vector and register nodes); names, literals and the C helpers it may call.
"""
from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np

from tessel.codegen.lowered import CodegenError, SourceTooLarge, check
from tessel.codegen.passes.affine import is_nonnegative, is_positive_const
from tessel.ir import (BinOp, Buffer, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not,
                       Select, Var, fresh_name, is_float)

C_TYPES = {"float32": "float", "float64": "double", "float16": "_Float16", "int8": "int8_t",
           "uint8": "uint8_t", "int16": "int16_t", "uint16": "uint16_t", "int32": "int32_t",
           "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "bool": "uint8_t",
           "bfloat16": "uint16_t"}  # bfloat16: its bits, computed in float (BF16_HELPER)
_C_KEYWORDS = """auto break case char const continue default do double else enum extern float
for goto if inline int long register restrict return short signed sizeof static struct switch
typedef union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
_Imaginary _Noreturn _Static_assert _Thread_local _Float16 alignas alignof bool true false"""
# names the generated file uses or that the headers / gcc define as macros
_LIBRARY_NAMES = """main args tessel_entry tessel_time tessel_time_in_model tessel_evict
tessel_sweep tessel_produce TESSEL_ALLOC_FAILED TESSEL_THREADS tessel_floordiv_i32
tessel_floordiv_i64
tessel_floormod_i32 tessel_floormod_i64 int8_t uint8_t int16_t uint16_t int32_t uint32_t uint64_t
int64_t size_t NULL INFINITY NAN aligned_alloc free clock_gettime CLOCK_MONOTONIC linux unix i386
expf exp logf log sqrtf sqrt tanhf tanh erff erf powf pow fabsf fabs floorf floor ceilf ceil
nearbyintf nearbyint fma fmaf rint rintf trunc truncf
isnan isinf isfinite isnormal signbit fpclassify abs labs llabs div ldiv lldiv malloc calloc
realloc memcpy memset memmove exit abort qsort rand
srand atoi atof strtol strtod printf fprintf round roundf fmax fmaxf fmin fminf sin sinf cos cosf
omp_get_num_threads omp_get_thread_num"""
RESERVED = frozenset((_C_KEYWORDS + " " + _LIBRARY_NAMES).split())

# C precedence levels: higher binds tighter
PRIMARY, UNARY, MUL, ADD, REL, EQ, AND, OR, TERNARY = 16, 14, 13, 12, 10, 9, 5, 4, 3
_BINARY = {"+": ("+", ADD), "-": ("-", ADD), "*": ("*", MUL), "/": ("/", MUL),
           "<": ("<", REL), "<=": ("<=", REL), ">": (">", REL), ">=": (">=", REL),
           "==": ("==", EQ), "!=": ("!=", EQ), "and": ("&&", AND), "or": ("||", OR)}
_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "erf": "erf",
         "pow": "pow", "abs": "fabs", "floor": "floor", "ceil": "ceil",
         "round": "nearbyint"}  # ties to even in the default rounding mode, no exception
_NARROW_INTS = ("int8", "uint8", "int16", "uint16")


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
        if base[0].isdigit() or base[0] == "_" or base.startswith("tessel_"):
            base = "v" + base  # _X and __x are reserved in C; tessel_* are our helpers
        return fresh_name(base, self.used)

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
        if e.dtype == "bfloat16":
            self.helpers.add(BF16_HELPER)
            return f"tessel_bf16_f32({text})", PRIMARY
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
        offset = 0  # constant indices, folded into one term
        for idx, stride in zip(indices, buf.strides):
            if isinstance(idx, IntImm):
                offset += idx.value * stride
                continue
            if stride == 1:
                terms.append(f"(int64_t){self.operand(idx, UNARY)}" if wide
                             else self.operand(idx, ADD))
            elif wide:
                terms.append(f"(int64_t){self.operand(idx, UNARY)} * {stride}")
            else:
                terms.append(f"{self.operand(idx, MUL)} * {stride}")
        text = " + ".join(terms)
        if not terms:
            return str(offset)
        if offset:
            text += f" {'+' if offset > 0 else '-'} {abs(offset)}"
        return text

    def _binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max") and is_float(e.dtype):
            helper = minmax_helper(e.op, e.dtype)
            self.helpers.add(helper)
            a, b = number_first(e.a, e.b, is_number)
            return f"{helper}({self(a)}, {self(b)})", PRIMARY
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
        if e.dtype.startswith("u") or (is_nonnegative(e.a) and is_positive_const(e.b)):
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
        if e.dtype == "bfloat16":  # a float rounded to bfloat16's precision, still a float
            self.helpers.add(BF16_HELPER)
            return f"tessel_bf16_round({self(e.value)})", PRIMARY
        if e.value.dtype == "bfloat16" and is_float(e.dtype):
            return self.render(e.value) if e.dtype == "float32" else \
                (f"(double){self.operand(e.value, UNARY)}", UNARY)
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


# min and max of floats propagate NaN from either operand (tessel.ir.BinOp): `a > b ? a : b`
# is one maxss/maxsd (b where the comparison fails, so b's NaN passes), the second test passes
# a's. The printer puts a constant first, so that test folds away (relu: one instruction).
MINMAX_HELPER = """\
static inline {t} tessel_{op}_{b}({t} a, {t} b) {{
    const {t} m = a {cmp} b ? a : b;
    return a != a ? a : m;
}}"""


def minmax_helper(op: str, dtype: str) -> str:
    """The C helper of a float min or max (float16 computes in float)."""
    return f"tessel_{op}_{'f64' if dtype == 'float64' else 'f32'}"


def is_number(e: Expr) -> bool:
    """A constant other than NaN: min and max against it need no NaN test of it."""
    return isinstance(e, FloatImm) and not math.isnan(e.value)


def number_first(a: Expr, b: Expr, known: Callable[[Expr], bool]) -> tuple[Expr, Expr]:
    """The operands of a float min or max with a `known` number first (min and max commute:
    the same value either way, a NaN operand's NaN included; only a zero's sign may differ,
    and number first gives relu(-0.0) = -0.0 as ONNX Runtime and torch do)."""
    return (b, a) if known(b) and not known(a) else (a, b)


BF16_HELPER = "tessel_bf16"  # one name for the three conversions below
_BF16_SOURCE = """\
static inline float tessel_bf16_f32(uint16_t b) {  /* bfloat16 is float's upper half */
    const uint32_t u = (uint32_t)b << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t tessel_f32_bf16(float f) {  /* to nearest, ties to even; NaN quiet */
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float tessel_bf16_round(float f) {
    return tessel_bf16_f32(tessel_f32_bf16(f));
}"""


def helper_source(name: str) -> str:
    if name == BF16_HELPER:
        return _BF16_SOURCE
    bits = name[-3:]
    if name.startswith(("tessel_min_", "tessel_max_")):
        op = name.split("_")[1]
        return MINMAX_HELPER.format(t="double" if bits == "f64" else "float", op=op, b=bits,
                                    cmp="<" if op == "min" else ">")
    template = FLOOR_HELPERS[name[:-3] + "{b}"]
    return template.format(b=bits, t="int64_t" if bits == "i64" else "int32_t")
