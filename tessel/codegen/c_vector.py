"""C text for vector and register expressions, through GCC/Clang vector extensions.

Each vector type is a `typedef ... __attribute__((vector_size(n)))`; loads and stores go
through unaligned, may-alias helper types, so any element may start a vector. Masks are
integer vectors with all bits set in true lanes; selects blend with them.
"""
from __future__ import annotations

from tessel.codegen.c_expr import (C_TYPES, PRIMARY, TERNARY, ExprPrinter, Names, is_number,
                                   number_first)
from tessel import intrin
from tessel.codegen.lowered import (Broadcast, LaneFold, Lanes, MaskOf, Ramp, Register, VectorCall,
                                    VectorCast, VectorIntrin, VectorLoad, VectorOp, lanes_of,
                                    mask_of)
from tessel.codegen.passes.vectorize import MASK_DTYPE, VECTOR_DTYPES
from tessel.ir import DTYPE_BITS, Buffer, BufferLoad, Expr, is_float

_VEC_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "//": "/", "%": "%", "<": "<", "<=": "<=",
            ">": ">", ">=": ">=", "==": "==", "!=": "!=", "and": "&", "or": "|"}


def _is_number(e: Expr) -> bool:
    """A constant other than NaN, or one broadcast to every lane."""
    return is_number(e.value if isinstance(e, Broadcast) else e)


# element types of vectors: the vectorizer's, and the narrow integers a tensor intrinsic's
# operands are loaded as (tessel.intrin)
_ELEMENTS = {**VECTOR_DTYPES, "int8": "i8", "uint8": "u8", "int16": "i16", "uint16": "u16",
             "bfloat16": "bf16"}  # its bits: uint16_t


def vtype(dtype: str, width: int) -> str:
    return f"tessel_{_ELEMENTS[dtype]}x{width}"


class KernelExprs(ExprPrinter):
    """Scalar, vector and register expressions of a lowered kernel as C text. Notes the
    vector types and helpers it uses (`vtypes`) and names promoted buffers' variables."""

    def __init__(self, names: Names, params: tuple[Buffer, ...]) -> None:
        super().__init__(names, params)
        self.vtypes: set[tuple[str, int, str]] = set()
        self.registers: dict[tuple[int, int], str] = {}  # (id(buffer), start) -> variable

    def type_of(self, dtype: str, width: int, fn: str = "") -> str:
        self.vtypes.add((dtype, width, fn))
        return vtype(dtype, width) + (f"_{fn}" if fn else "")

    def _broadcast(self, e: Broadcast) -> tuple[str, int]:
        return f"{self.type_of(e.dtype, e.lanes, 'splat')}({self(e.value)})", PRIMARY

    def _ramp(self, e: Ramp) -> tuple[str, int]:
        splat, t = self.type_of(e.dtype, e.lanes, "splat"), self.type_of(e.dtype, e.lanes)
        steps = ", ".join(str(e.stride * k) for k in range(e.lanes))
        return f"({splat}({self(e.base)}) + ({t}){{{steps}}})", PRIMARY

    def _vectorload(self, e: VectorLoad) -> tuple[str, int]:
        load = self.type_of(e.dtype, e.lanes, "load")
        return f"{load}(&{self.element(e.buffer, e.indices)})", PRIMARY

    def _vectorop(self, e: VectorOp) -> tuple[str, int]:
        args, op = e.args, e.op
        if op == "not":
            return f"(~{self(args[0])})", PRIMARY
        if op == "?:":
            cond = self.operand(args[0], TERNARY)
            return f"({cond} ? {self(args[1])} : {self(args[2])})", PRIMARY
        if op in ("min", "max") and is_float(e.dtype):
            args = number_first(*args, _is_number)
        if op in ("select", "min", "max"):
            fn = self.type_of(e.dtype, e.lanes, op)
            if op == "select":
                self.type_of(MASK_DTYPE[e.dtype], e.lanes)
            return f"{fn}({', '.join(self(a) for a in args)})", PRIMARY
        if op not in ("and", "or"):
            self.type_of(args[0].dtype, e.lanes)
        return f"({self(args[0])} {_VEC_OPS[op]} {self(args[1])})", PRIMARY

    def _maskof(self, e: MaskOf) -> tuple[str, int]:
        if lanes_of(e.value) == 1:
            splat = self.type_of(e.mask, e.lanes, "splat")
            return f"{splat}(-({C_TYPES[e.mask]})({self(e.value)}))", PRIMARY
        return f"__builtin_convertvector({self(e.value)}, {self.type_of(e.mask, e.lanes)})", \
            PRIMARY

    def _vectorcast(self, e: VectorCast) -> tuple[str, int]:
        t = self.type_of(e.dtype, e.lanes)
        minus = "-" if mask_of(e.value) else ""
        value = f"{minus}{self(e.value)}"
        if e.value.dtype in ("float32", "float64") and e.dtype in _NARROW_INTS:
            # through int32: a float's conversion to 8 or 16 bits has no instruction, and GCC
            # converts lane by lane (a quantizing kernel 0.24 ms -> its int32 speed);
            # vcvttps2dq then vpmovdb. Equal for every value the narrow type holds (the C
            # conversion of any other is undefined)
            value = f"__builtin_convertvector({value}, {self.type_of('int32', e.lanes)})"
        return f"__builtin_convertvector({value}, {t})", PRIMARY

    def _vectorcall(self, e: VectorCall) -> tuple[str, int]:
        if not e.symbol:  # floor, ceil; float32 exp, sigmoid: tessel's helpers (below)
            return f"{self.type_of(e.dtype, e.lanes, e.name)}({self(e.args[0])})", PRIMARY
        self.vtypes.add((e.dtype, e.lanes, f"mvec {e.symbol} {len(e.args)}"))
        args = [self(a) for a in e.args]
        if e.name == "sigmoid":  # (float64: through the C library's exp)
            one = f"{self.type_of(e.dtype, e.lanes, 'splat')}(1)"
            return f"({one} / ({one} + {e.symbol}(-{args[0]})))", PRIMARY
        return f"{e.symbol}({', '.join(args)})", PRIMARY

    def _vectorintrin(self, e: VectorIntrin) -> tuple[str, int]:
        self.vtypes.add((e.dtype, e.lanes, f"intrin {e.name}"))
        for a in e.args:
            self.type_of(a.dtype, a.lanes, "load")
        spec = intrin.get(e.name)
        return f"{spec.c_name}({', '.join(self(a) for a in e.args)})", PRIMARY

    def _lanes(self, e: Lanes) -> tuple[str, int]:
        first = e.values[0]
        if e.stride == 2 and e.lanes in _SHUFFLED_WIDTHS and all(
                isinstance(v, BufferLoad) and v.buffer is first.buffer for v in e.values):
            load = self.type_of(e.dtype, e.lanes, "load_s2")
            return f"{load}(&{self.element(first.buffer, first.indices)})", PRIMARY
        items = ", ".join(self(v) for v in e.values)
        return f"(({self.type_of(e.dtype, e.lanes)}){{{items}}})", PRIMARY

    def _lanefold(self, e: LaneFold) -> tuple[str, int]:
        fold = self.type_of(e.dtype, lanes_of(e.value), f"fold_{_FOLD_NAMES[e.op]}")
        return f"{fold}({self(e.value)})", PRIMARY

    def _register(self, e: Register) -> tuple[str, int]:
        name = self.registers[(id(e.buffer), e.start)]
        return (name if e.lane is None else f"{name}[{e.lane}]"), PRIMARY


_NARROW_INTS = ("int8", "uint8", "int16", "uint16")


# ---- helper source ----

def _type_source(dtype: str, width: int) -> list[str]:
    name, elem, size = vtype(dtype, width), C_TYPES[dtype], width * DTYPE_BITS[dtype] // 8
    return [f"typedef {elem} {name} __attribute__((vector_size({size})));",
            f"typedef {elem} {name}_u __attribute__((vector_size({size}), aligned({size // width}),"
            f" may_alias));"]


def _function_source(dtype: str, width: int, fn: str) -> str:
    t, elem = vtype(dtype, width), C_TYPES[dtype]
    if fn == "load":
        return f"static inline {t} {t}_load(const {elem}* p) {{ return *(const {t}_u*)p; }}"
    if fn == "store":
        return f"static inline void {t}_store({elem}* p, {t} v) {{ *({t}_u*)p = v; }}"
    m = vtype(MASK_DTYPE[dtype], width)
    return {
        "load": f"static inline {t} {t}_load(const {elem}* p) {{ return *(const {t}_u*)p; }}",
        "store": f"static inline void {t}_store({elem}* p, {t} v) {{ *({t}_u*)p = v; }}",
        "splat": f"static inline {t} {t}_splat({elem} x) {{ return ({t}){{"
                 f"{', '.join(['x'] * width)}}}; }}",
        "select": f"static inline {t} {t}_select({m} m, {t} a, {t} b) {{\n"
                  f"    return ({t})((m & ({m})a) | (~m & ({m})b));\n}}",
        "min": _minmax_source("min", dtype, width),
        "max": _minmax_source("max", dtype, width),
    }[fn]


# x86's min and max instructions, [dtype, width] -> guard, builtin: `a > b ? a : b` lane-wise
# (b where the comparison fails, so b's NaN passes). GCC's 512-bit ones take a merge source,
# a mask and a rounding mode; clang's differ by version, so clang computes them with selects.
_X86_MINMAX = {("float32", 4): ("__SSE__", "ps"), ("float32", 8): ("__AVX__", "ps256"),
               ("float64", 2): ("__SSE2__", "pd"), ("float64", 4): ("__AVX__", "pd256"),
               ("float32", 16): ("__AVX512F__) && !defined(__clang__", "ps512_mask"),
               ("float64", 8): ("__AVX512F__) && !defined(__clang__", "pd512_mask")}


def _minmax_source(op: str, dtype: str, width: int) -> str:
    """min or max; of floats NaN-propagating (tessel.ir.BinOp): the compare-select (or x86's
    instruction) passes b's NaN, the OR with the mask of a's NaN lanes passes a's (all bits
    set: a NaN). With a constant `a` (the printer puts it first) that OR folds away."""
    t, m, cmp = vtype(dtype, width), vtype(MASK_DTYPE[dtype], width), "<" if op == "min" else ">"
    head = f"static inline {t} {t}_{op}({t} a, {t} b) {{"
    if dtype not in ("float32", "float64"):
        return f"{head} return {t}_select(a {cmp} b, a, b); }}"
    lines = [head]
    if (dtype, width) in _X86_MINMAX:
        guard, suffix = _X86_MINMAX[dtype, width]
        merge = ", a, -1, 4" if suffix.endswith("_mask") else ""
        lines += [f"#if defined({guard})",
                  f"    {t} r = __builtin_ia32_{op}{suffix}(a, b{merge});", "#else"]
    lines.append(f"    {t} r = {t}_select(a {cmp} b, a, b);")
    if (dtype, width) in _X86_MINMAX:
        lines.append("#endif")
    lines += [f"    return ({t})(({m})r | (a != a));", "}"]
    return "\n".join(lines)


# x86's rounding instructions by (dtype, lanes): guard, the intrinsic's suffix and vector type
_X86_ROUND = {("float32", 4): ("__SSE4_1__", "_mm_round_ps", "__m128"),
              ("float64", 2): ("__SSE4_1__", "_mm_round_pd", "__m128d"),
              ("float32", 8): ("__AVX__", "_mm256_round_ps", "__m256"),
              ("float64", 4): ("__AVX__", "_mm256_round_pd", "__m256d"),
              ("float32", 16): ("__AVX512F__", "_mm512_roundscale_ps", "__m512"),
              ("float64", 8): ("__AVX512F__", "_mm512_roundscale_pd", "__m512d")}
# immediate of x86's round instructions (exceptions suppressed), NEON's vrnd letter
_X86_MODE = {"floor": "0x09", "ceil": "0x0A", "round": "0x08"}  # -inf, +inf, nearest even
_ARM_LETTER = {"floor": "m", "ceil": "p", "round": "n"}
_ARM_ROUND = {("float32", 4): ("vrnd{}q_f32", "float32x4_t"),
              ("float64", 2): ("vrnd{}q_f64", "float64x2_t")}


def _rounding_source(dtype: str, width: int, fn: str) -> str:
    """floor, ceil or round (ties to even) of a vector: the ISA's rounding instruction where
    the target has one for this width (x86 SSE4.1 / AVX / AVX-512, AArch64 NEON), else lane
    by lane. Exact and without exceptions, as floorf and nearbyintf."""
    t, scalar = vtype(dtype, width), ("" if dtype == "float64" else "f")
    mode = _X86_MODE[fn]
    lines = [f"static inline {t} {t}_{fn}({t} x) {{"]
    if (dtype, width) in _X86_ROUND:
        guard, name, native = _X86_ROUND[dtype, width]
        lines += [f"#if defined({guard})", f"    return ({t}){name}(({native})x, {mode});",
                  "#endif"]
    if (dtype, width) in _ARM_ROUND:
        name, native = _ARM_ROUND[dtype, width]
        letter = _ARM_LETTER[fn]
        lines += ["#if defined(__aarch64__)",
                  f"    return ({t}){name.format(letter)}(({native})x);", "#endif"]
    c_fn = "nearbyint" if fn == "round" else fn
    lines += [f"    {t} r;", f"    for (int i = 0; i < {width}; ++i) r[i] = {c_fn}{scalar}(x[i]);",
              "    return r;", "}"]
    return "\n".join(lines)


# ---- exp and sigmoid of float32 vectors, inline (VECTOR_MATH) ----

# e^x = 2^n e^r, n = round(x log2 e), r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 in two parts,
# Cody and Waite), e^r by the Cephes library's degree-7 polynomial: within 1 ulp of e^x
_LN2_HI, _LN2_LO = "0.693359375f", "-2.12194440e-4f"
_EXP_POLY = ("1.9875691500e-4f", "1.3981999507e-3f", "8.3334519073e-3f", "4.1665795894e-2f",
             "1.6666665459e-1f", "5.0000001201e-1f")


def _exp_source(width: int) -> str:
    """e^x on `width` float32 lanes in the vector's own registers (libmvec's call clobbers
    every vector register: a kernel's live accumulators spill around each one). x is clamped
    to [-104, 89], where 2^n (n in [-150, 128]) is two normal powers of two: below about
    -87.3 the product is subnormal, then 0; above about 88.7 it is inf; NaN stays NaN."""
    t, m = vtype("float32", width), vtype("int32", width)
    poly = [f"    p = p * r + {t}_splat({c});" for c in _EXP_POLY[1:]]
    return "\n".join([
        f"static inline {t} {t}_exp({t} x) {{",
        f"    {m} high = x > {t}_splat(89.0f), low = x < {t}_splat(-104.0f);",
        f"    x = ({t})((high & ({m}){t}_splat(89.0f)) | (~high & ({m})x));",
        f"    x = ({t})((low & ({m}){t}_splat(-104.0f)) | (~low & ({m})x));",
        f"    const {t} magic = {t}_splat(12582912.0f);  /* 1.5 * 2^23: rounds to an integer */",
        f"    {t} t = x * {t}_splat(1.44269504088896341f) + magic;",
        f"    {t} n = t - magic;",
        f"    {t} r = x - n * {t}_splat({_LN2_HI});",
        f"    r = r - n * {t}_splat({_LN2_LO});",
        f"    {t} p = {t}_splat({_EXP_POLY[0]});", *poly,
        f"    p = p * r * r + r + {t}_splat(1.0f);",
        f"    {m} k = ({m})t - ({m})magic, half = k >> 1;",
        f"    {t} a = ({t})((half + 127) << 23), b = ({t})((k - half + 127) << 23);",
        "    return p * a * b;", "}"])


def _sigmoid_source(width: int) -> str:
    """1 / (1 + e^-x) on `width` float32 lanes, within 3 ulp where the result is a normal
    number; 0 below about -88.7 (e^-x overflows; libmvec's call did the same). Measured
    against forms that avoid the overflow (e^-|x| and a reciprocal estimate with a Newton
    step): in a convolution's SiLU epilogue on AVX-512 they were 7% slower."""
    t = vtype("float32", width)
    return (f"static inline {t} {t}_sigmoid({t} x) {{\n"
            f"    return {t}_splat(1.0f) / ({t}_splat(1.0f) + {t}_exp(-x));\n}}")


_NEEDS = {"min": ("select",), "max": ("select",), "load_s2": ("load",),  # helpers' helpers
          "exp": ("splat",), "sigmoid": ("exp", "splat"), "fold_max": ("max",),
          "fold_min": ("min",)}
_FOLD_NAMES = {"+": "sum", "max": "max", "min": "min"}  # LaneFold's op -> its helper's name


def _fold_source(dtype: str, width: int, name: str) -> str:
    """All `width` lanes combined by `name` (sum, max, min) into lane 0 in log2(width) steps:
    the vector and itself rotated by half the remaining width (LaneFold)."""
    t, m, elem = vtype(dtype, width), vtype(MASK_DTYPE[dtype], width), C_TYPES[dtype]
    lines = [f"static inline {elem} {t}_fold_{name}({t} v) {{"]
    half = width // 2
    while half:
        order = ", ".join(str((k + half) % width) for k in range(width))
        rotated = (f"__builtin_shufflevector(v, v, {order})",
                   f"__builtin_shuffle(v, ({m}){{{order}}})")
        step = [f"v + {r}" if name == "sum" else f"{t}_{name}(v, {r})" for r in rotated]
        lines += ["#if defined(__clang__)", f"    v = {step[0]};", "#else",
                  f"    v = {step[1]};", "#endif"]
        half //= 2
    return "\n".join(lines + ["    return v[0];", "}"])
_SHUFFLED_WIDTHS = (2, 4, 8, 16)  # strided loads of these widths are two loads and a shuffle


def _load_s2(dtype: str, width: int) -> str:
    """Every other element from p[0] on: two overlapping vector loads that end exactly at the
    last element needed (never past it), and a shuffle of the even lanes out of the pair."""
    t, m = vtype(dtype, width), vtype(MASK_DTYPE[dtype], width)
    picks = ", ".join(str(2 * k if 2 * k < width else 2 * k + 1) for k in range(width))
    return (f"static inline {t} {t}_load_s2(const {C_TYPES[dtype]}* p) {{\n"
            f"    {t} a = {t}_load(p), b = {t}_load(p + {width - 1});\n"
            f"#if defined(__clang__)\n"
            f"    return __builtin_shufflevector(a, b, {picks});\n"
            f"#else\n"
            f"    return __builtin_shuffle(a, b, ({m}){{{picks}}});\n"
            f"#endif\n}}")


def _intrin_source(name: str) -> str:
    """A tensor intrinsic's C function, compiled with the features it needs."""
    spec = intrin.get(name)
    attr = f"__attribute__((target(\"{spec.c_target}\"))) " if spec.c_target else ""
    if spec.memory:
        body = "\n".join("    " + line for line in spec.c_body.splitlines())
        prelude = f"{spec.prelude}\n" if spec.prelude else ""
        return (f"{prelude}static {attr}void {spec.c_name}({spec.c_signature(C_TYPES)}) "
                f"{{\n{body}\n}}")
    params = spec.desc.params
    acc = next(p for p in params if p is spec.block.body.buffer)
    args = [f"{vtype(acc.dtype, acc.size)} acc"] + [f"{vtype(p.dtype, p.size)} {p.name.lower()}"
                                                    for p in params if p is not acc]
    body = "\n".join("    " + line for line in spec.c_body.splitlines())
    return (f"static inline {attr}{vtype(acc.dtype, acc.size)} {spec.c_name}("
            f"{', '.join(args)}) {{\n{body}\n}}")


def vector_source(used: set[tuple[str, int, str]]) -> str:
    """Typedefs and inline helpers for the vector types and helpers (fn "" for a type
    alone) a kernel uses."""
    used = set(used) | {(d, w, need) for d, w, fn in used for need in _NEEDS.get(fn, ())}
    types = {(d, w) for d, w, _ in used if w}  # width 0: a memory intrinsic, no vector type
    types |= {(MASK_DTYPE[d], w) for d, w, fn in used
              if fn in ("select", "min", "max", "load_s2", "exp", "fold_sum", "fold_max",
                        "fold_min")}
    order = sorted(types, key=lambda t: (t[0].startswith("float"), t))
    lines = [line for d, w in order for line in _type_source(d, w)]
    fns = ("load", "store", "splat", "select", "min", "max")
    lines += [_function_source(d, w, fn) for d, w in order for fn in fns if (d, w, fn) in used]
    lines += [_load_s2(d, w) for d, w in order if (d, w, "load_s2") in used]
    lines += [_fold_source(d, w, name) for d, w in order for name in _FOLD_NAMES.values()
              if (d, w, f"fold_{name}") in used]
    rounding = [(d, w, fn) for d, w in order for fn in _X86_MODE if (d, w, fn) in used]
    if any((d, w) in _X86_ROUND for d, w, _ in rounding):
        lines.insert(0, "#if defined(__x86_64__) || defined(__i386__)\n#include <immintrin.h>"
                        "\n#endif")
    if any((d, w) in _ARM_ROUND for d, w, _ in rounding):
        lines.insert(0, "#if defined(__aarch64__)\n#include <arm_neon.h>\n#endif")
    lines += [_rounding_source(d, w, fn) for d, w, fn in rounding]
    lines += [source(w) for d, w in order
              for fn, source in (("exp", _exp_source), ("sigmoid", _sigmoid_source))
              if (d, w, fn) in used]
    names = sorted(fn.split()[1] for _, _, fn in used if fn.startswith("intrin "))
    includes = sorted({h for n in names for h in intrin.get(n).includes})
    lines = [f"#include <{h}>" for h in includes] + lines + [_intrin_source(n) for n in names]
    for d, w, fn in sorted(used):
        if fn.startswith("mvec "):  # a C library vector function: "mvec <symbol> <arity>"
            _, symbol, arity = fn.split()
            t = vtype(d, w)
            lines.append(f"extern {t} {symbol}({', '.join([t] * int(arity))});")
    return "\n".join(lines)
