"""Explicit SIMD for vectorized loops, through GCC/Clang vector extensions.

A vectorized loop is cut into chunks (`chunk_plan`): full vectors of the target's width, then
narrower vectors and scalar lanes for a remainder. Inside a vector chunk every expression is
either *uniform* (the same in all lanes: rendered as scalar C, splatted where it meets a vector)
or *varying* (rendered as a vector). A varying load whose element offset moves by 1 per lane is
one vector load, any other varying access goes lane by lane (gather / scatter). A construct with
no vector form raises `NotVectorizable`, and the writer falls back to `#pragma omp simd`.

Vectorized-loop semantics are OpenMP simd semantics: each statement runs for all lanes of a
chunk before the next statement, so iterations must not depend on each other.
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tessel.codegen.c_expr import (AND, C_TYPES, LANE, TERNARY, Env, Lin, Ranges, check,
                                   comment_text, flat_index, interval, is_nonnegative, linear,
                                   varies)
from tessel.ir import (BinOp, Block, BlockRealize, Buffer, BufferLoad, BufferStore, Call, Cast,
                       Expr, For, IntImm, Not, Select, Stmt, Var, children, collect, is_float,
                       substitute)
from tessel.ir.expr import CMP_OPS
from tessel.target import Target

if TYPE_CHECKING:
    from tessel.codegen.c import KernelWriter

VECTOR_DTYPES = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}
MASK_DTYPE = {"float32": "int32", "float64": "int64", "int32": "int32", "int64": "int64"}
MAX_UNROLLED_CHUNKS = 4  # more full vectors than this become a C loop over chunks
_VEC_OPS = {"+": "+", "-": "-", "*": "*", "/": "/"}


class NotVectorizable(Exception):
    """The loop body has a construct explicit SIMD does not handle; the message says which."""


@dataclass(frozen=True)
class Chunk:
    """Iterations [start, start + count * width) of a vectorized loop, `width` lanes at a time;
    width 1 is a scalar lane, count > 1 a C loop over the chunks."""

    start: int
    width: int
    count: int = 1


def chunk_plan(extent: int, lanes: int, min_lanes: int) -> list[Chunk]:
    """Full vectors (unrolled when few), then halving vectors down to `min_lanes`, then scalars."""
    full, pos = extent // lanes, 0
    if full > MAX_UNROLLED_CHUNKS:
        chunks, pos = [Chunk(0, lanes, full)], full * lanes
    else:
        chunks = [Chunk(k * lanes, lanes) for k in range(full)]
        pos = full * lanes
    width = lanes // 2
    while pos < extent:
        if width >= min_lanes and extent - pos >= width:
            chunks.append(Chunk(pos, width))
            pos += width
        elif width < min_lanes:
            chunks.extend(Chunk(p, 1) for p in range(pos, extent))
            pos = extent
        width //= 2
    return chunks


def choose_lanes(body: Stmt, target: Target) -> tuple[int, int]:
    """(lanes of a full vector, fewest lanes worth a vector) for the widest data type in `body`."""
    dtypes = {e.dtype for e in collect(body, (BufferLoad, Cast))}
    dtypes |= {s.buffer.dtype for s in collect(body, BufferStore)}
    bits = max((int(d[-2:]) for d in dtypes if d in VECTOR_DTYPES), default=32)
    lanes = max(2, target.vector_bits // bits)
    return lanes, min(lanes, max(2, 128 // bits))


def vtype(dtype: str, width: int) -> str:
    return f"tessel_{VECTOR_DTYPES[dtype]}x{width}"


# ---- helper source ----

def _type_source(dtype: str, width: int) -> list[str]:
    name, elem, size = vtype(dtype, width), C_TYPES[dtype], width * int(dtype[-2:]) // 8
    return [f"typedef {elem} {name} __attribute__((vector_size({size})));",
            f"typedef {elem} {name}_u __attribute__((vector_size({size}), aligned({size // width}),"
            f" may_alias));"]


def _function_source(dtype: str, width: int, fn: str) -> str:
    t, elem, m = vtype(dtype, width), C_TYPES[dtype], vtype(MASK_DTYPE[dtype], width)
    return {
        "load": f"static inline {t} {t}_load(const {elem}* p) {{ return *(const {t}_u*)p; }}",
        "store": f"static inline void {t}_store({elem}* p, {t} v) {{ *({t}_u*)p = v; }}",
        "splat": f"static inline {t} {t}_splat({elem} x) {{ return ({t}){{"
                 f"{', '.join(['x'] * width)}}}; }}",
        "select": f"static inline {t} {t}_select({m} m, {t} a, {t} b) {{\n"
                  f"    return ({t})((m & ({m})a) | (~m & ({m})b));\n}}",
        "min": f"static inline {t} {t}_min({t} a, {t} b) {{ return {t}_select(a < b, a, b); }}",
        "max": f"static inline {t} {t}_max({t} a, {t} b) {{ return {t}_select(a > b, a, b); }}",
    }[fn]


_NEEDS = {"min": ("select",), "max": ("select",)}  # helpers that call other helpers


def vector_source(used: set[tuple[str, int, str]]) -> str:
    """Typedefs and inline helpers for the vector types and helpers (fn "" for a type
    alone) a kernel uses."""
    used = set(used) | {(d, w, need) for d, w, fn in used for need in _NEEDS.get(fn, ())}
    types = {(d, w) for d, w, _ in used}
    types |= {(MASK_DTYPE[d], w) for d, w, fn in used if fn in ("select", "min", "max")}
    order = sorted(types, key=lambda t: (t[0].startswith("float"), t))
    lines = [line for d, w in order for line in _type_source(d, w)]
    fns = ("load", "store", "splat", "select", "min", "max")
    lines += [_function_source(d, w, fn) for d, w in order for fn in fns if (d, w, fn) in used]
    for d, w, fn in sorted(used):
        if fn.startswith("mvec "):  # a C library vector function: "mvec <symbol> <arity>"
            _, symbol, arity = fn.split()
            t = vtype(d, w)
            lines.append(f"extern {t} {symbol}({', '.join([t] * int(arity))});")
    return "\n".join(lines)


# ---- vector expressions ----

class V(NamedTuple):
    """A rendered value: C text, whether it is a vector, and its dtype; varying booleans are
    masks (all bits set in true lanes) of integer dtype `mask`."""

    text: str
    vec: bool
    dtype: str
    mask: str = ""


@dataclass
class VectorChunk:
    """The vector chunk being written: its loop variable (whose C variable holds lane 0), the
    lane count, the affine base of lane 0, and the varying iteration variables bound inside it
    (as expressions of the loop variable and uniform variables)."""

    var: Var
    width: int
    base: Lin
    bindings: dict[Var, Expr] = field(default_factory=dict)


class VectorPrinter:
    """Renders expressions inside a vector chunk of `writer` (see the module docstring)."""

    def __init__(self, writer: KernelWriter, chunk: VectorChunk) -> None:
        self.w, self.chunk, self.width = writer, chunk, chunk.width

    def type_of(self, dtype: str, fn: str = "") -> str:
        """The vector type of `dtype` (or with `fn`, the helper `<type>_<fn>`), noted as used."""
        if dtype not in VECTOR_DTYPES:
            raise NotVectorizable(f"{dtype} values have no vector form here")
        self.w.vtypes.add((dtype, self.width, fn))
        return vtype(dtype, self.width) + (f"_{fn}" if fn else "")

    def vector(self, e: Expr, dtype: str | None = None) -> str:
        """`e` as a vector of its dtype (a uniform value is splatted)."""
        return self.as_vector(self.render(e), dtype or e.dtype)

    def as_vector(self, v: V, dtype: str) -> str:
        if v.vec:
            return v.text
        if dtype == "bool":  # a uniform condition as an all-lanes mask
            return f"{self.type_of('int32', 'splat')}(-(int32_t)({v.text}))"
        return f"{self.type_of(dtype, 'splat')}({v.text})"

    def render(self, e: Expr) -> V:
        if not varies(e, self.w.env):
            return V(self.w.expr(e), False, e.dtype)
        method = getattr(self, "_" + type(e).__name__.lower(), None)
        if method is None:
            raise NotVectorizable(f"{type(e).__name__} has no vector form here")
        return method(e)

    def lanes(self, e: Expr, dtype: str) -> V:
        """A vector built lane by lane from scalar C (gathers, non-affine indices)."""
        items = ", ".join(self.w.lane_text(e, lane) for lane in range(self.width))
        return V(f"(({self.type_of(dtype)}){{{items}}})", True, dtype)

    def _var(self, e: Var) -> V:
        form = self.w.env[e]
        if form is None or e.dtype not in VECTOR_DTYPES:
            return self.lanes(e, e.dtype)
        t, splat = self.type_of(e.dtype), self.type_of(e.dtype, "splat")
        steps = ", ".join(str(form.lane * k) for k in range(self.width))
        return V(f"({splat}({self.w.expr(e)}) + ({t}){{{steps}}})", True, e.dtype)

    def _bufferload(self, e: BufferLoad) -> V:
        self.type_of(e.dtype)
        form = flat_index(e.buffer, e.indices, self.w.env, self.w.ranges)
        if form is None or form.lane != 1:
            return self.lanes(e, e.dtype)
        promoted = self.w.local_access(e.buffer, e.indices, self.width)
        if promoted is not None:
            return V(promoted, True, e.dtype)
        load = self.type_of(e.dtype, "load")
        return V(f"{load}(&{self.w.array_element(e.buffer, e.indices)})", True, e.dtype)

    def _binop(self, e: BinOp) -> V:
        if e.op in CMP_OPS:
            return self.compare(e)
        if e.op in ("and", "or"):
            a, b = self.render(e.a), self.render(e.b)
            mask = a.mask or b.mask
            ta, tb = self.mask_vector(a, mask), self.mask_vector(b, mask)
            return V(f"({ta} {'&' if e.op == 'and' else '|'} {tb})", True, "bool", mask)
        self.type_of(e.dtype)
        if e.op in ("//", "%"):
            if is_float(e.dtype) or not (is_nonnegative(e.a) and _positive_const(e.b)):
                return self.lanes(e, e.dtype)
            return V(f"({self.vector(e.a)} {'/' if e.op == '//' else '%'} {self.vector(e.b)})",
                     True, e.dtype)
        a, b = self.vector(e.a), self.vector(e.b)
        if e.op in ("min", "max"):
            return V(f"{self.type_of(e.dtype, e.op)}({a}, {b})", True, e.dtype)
        return V(f"({a} {_VEC_OPS[e.op]} {b})", True, e.dtype)

    def compare(self, e: BinOp) -> V:
        dtype = e.a.dtype
        self.type_of(dtype)
        text = f"({self.vector(e.a, dtype)} {e.op} {self.vector(e.b, dtype)})"
        return V(text, True, "bool", MASK_DTYPE[dtype])

    def mask_vector(self, v: V, mask: str) -> str:
        """A boolean as a mask vector of integer dtype `mask`."""
        if not v.vec:
            return f"{self.type_of(mask, 'splat')}(-({C_TYPES[mask]})({v.text}))"
        if v.mask == mask:
            return v.text
        return f"__builtin_convertvector({v.text}, {self.type_of(mask)})"

    def _not(self, e: Not) -> V:
        a = self.render(e.a)
        return V(f"(~{a.text})", True, "bool", a.mask)

    def _select(self, e: Select) -> V:
        self.type_of(e.dtype)
        cond = self.render(e.cond)
        if not cond.vec:  # one branch for all lanes: stays lazy
            text = self.w.expr.operand(e.cond, TERNARY)
            return V(f"({text} ? {self.vector(e.true_value)} : {self.vector(e.false_value)})",
                     True, e.dtype)
        for branch in (e.true_value, e.false_value):
            self.check_speculation_safe(branch)
        mask = self.mask_vector(cond, MASK_DTYPE[e.dtype])
        a, b = self.vector(e.true_value), self.vector(e.false_value)
        return V(f"{self.type_of(e.dtype, 'select')}({mask}, {a}, {b})", True, e.dtype)

    def check_speculation_safe(self, e: Expr) -> None:
        """A lane may evaluate a branch the scalar program skips: every load in it must be
        provably in bounds, and no integer division may see a zero divisor."""
        for node in collect(e, (BufferLoad, BinOp)):
            if isinstance(node, BinOp):
                if node.op in ("//", "%") and not is_float(node.dtype) and \
                        not _positive_const(node.b):
                    raise NotVectorizable("a division in a select branch may trap")
            elif not self.in_bounds(node):
                raise NotVectorizable(f"a select branch may load {node.buffer.name} out of bounds")

    def in_bounds(self, load: BufferLoad) -> bool:
        if load.buffer in self.w.promoted:
            return True
        form = flat_index(load.buffer, load.indices, self.w.env, self.w.ranges)
        span = interval(form, self.w.ranges) if form is not None else None
        return span is not None and 0 <= span[0] and span[1] < load.buffer.size

    def _cast(self, e: Cast) -> V:
        value = self.render(e.value)
        if e.dtype == "bool":
            source = e.value.dtype
            vec, zero = self.as_vector(value, source), self.as_vector(V("0", False, source), source)
            return V(f"({vec} != {zero})", True, "bool", MASK_DTYPE[source])
        t = self.type_of(e.dtype)
        if value.dtype == "bool":  # a mask is -1 where true
            return V(f"__builtin_convertvector(-{self.mask_vector(value, value.mask or 'int32')}, "
                     f"{t})", True, e.dtype)
        return V(f"__builtin_convertvector({self.as_vector(value, e.value.dtype)}, {t})", True,
                 e.dtype)

    def _call(self, e: Call) -> V:
        """exp, log, tanh, erf, pow and sigmoid through the C library's vector variants
        (glibc's libmvec) where the target has them; other intrinsics have no vector form."""
        base = "exp" if e.name == "sigmoid" else e.name
        symbol = mvec_symbol(base, e.dtype, self.width, self.w.target)
        if symbol is None:
            raise NotVectorizable(f"{e.name} has no vector form here")
        self.w.vtypes.add((e.dtype, self.width, f"mvec {symbol} {len(e.args)}"))
        args = [self.vector(a, e.dtype) for a in e.args]
        if e.name == "sigmoid":
            one = f"{self.type_of(e.dtype, 'splat')}(1)"
            return V(f"({one} / ({one} + {symbol}(-{args[0]})))", True, e.dtype)
        return V(f"{symbol}({', '.join(args)})", True, e.dtype)


# ---- the C library's vector math (x86-64 vector function ABI, glibc's libmvec) ----

MVEC_FUNCTIONS = ("exp", "log", "tanh", "erf", "pow")
_MVEC_ISA = {128: (("sse2", "b"),), 256: (("avx2", "d"), ("avx", "c")), 512: (("avx512f", "e"),)}


def mvec_symbol(name: str, dtype: str, width: int, target: Target) -> str | None:
    """The libmvec entry computing `name` on `width` lanes of `dtype` for `target` (e.g.
    _ZGVdN8v_expf for 8 float32 lanes with AVX2), or None: not x86-64, no such variant, or
    this machine's C library lacks it (older than glibc 2.35 for tanh and erf)."""
    if name not in MVEC_FUNCTIONS or dtype not in ("float32", "float64") or \
            target.arch != "x86_64":
        return None
    bits = width * int(dtype[-2:])
    features = target.features | {"sse2"}
    isa = next((letter for feature, letter in _MVEC_ISA.get(bits, ()) if feature in features),
               None)
    if isa is None:
        return None
    params = "v" * (2 if name == "pow" else 1)
    symbol = f"_ZGV{isa}N{width}{params}_{name}{'f' if dtype == 'float32' else ''}"
    return symbol if symbol in _libmvec_symbols() else None


@functools.cache
def _libmvec_symbols() -> frozenset[str]:
    """The MVEC_FUNCTIONS variants the C library on this machine exports."""
    import ctypes
    try:
        lib = ctypes.CDLL("libmvec.so.1")
    except OSError:
        return frozenset()
    names = {f"_ZGV{isa}N{w}{'v' * (2 if f == 'pow' else 1)}_{f}{suffix}"
             for f in MVEC_FUNCTIONS for isa in "bcde" for w in (2, 4, 8, 16)
             for suffix in ("f", "")}
    return frozenset(n for n in names if hasattr(lib, n))


def _positive_const(e: Expr) -> bool:
    return isinstance(e, IntImm) and e.value > 0


def store_is_vectorizable(s: BufferStore, env: Env) -> None:
    """A store in a vector chunk must write a different element in each lane."""
    if s.buffer.dtype not in VECTOR_DTYPES:
        raise NotVectorizable(f"stores of {s.buffer.dtype} have no vector form here")
    if not any(varies(i, env) for i in s.indices):
        raise NotVectorizable(f"every lane stores to the same element of {s.buffer.name}")


def unrolled_stores(s: Stmt, max_extent: int) -> int:
    """Stores in `s` once its "unrolled" loops of extent <= max_extent are unrolled."""
    if isinstance(s, BufferStore):
        return 1
    inner = sum(unrolled_stores(c, max_extent) for c in children(s) if isinstance(c, Stmt))
    if isinstance(s, For) and s.kind == "unrolled" and s.extent <= max_extent:
        return inner * s.extent
    return inner


# ---- register promotion ----

MAX_PROMOTED_VARS = 64  # a promoted buffer becomes at most this many variables
Access = tuple["Lin | None", int]  # (element offset, lanes); None: not an affine offset


@dataclass
class Slots:
    """Where a promoted buffer lives: elements `base + offset` in vector variables (by first
    offset, with their lanes) and scalar variables; an element inside a vector variable is
    that vector's lane. `base` is 0 for a buffer promoted where it is allocated, else a form
    over variables bound outside the loop it is promoted around."""

    buffer: Buffer
    base: Lin
    vectors: dict[int, int]  # first offset -> lanes
    scalars: list[int]
    names: dict[int, str] = field(default_factory=dict)  # first offset -> C name

    def declarations(self, writer: VectorLoops, load: bool) -> list[str]:
        """Declare the variables: zeroed, or with `load` read from the array."""
        buf, out = self.buffer, []
        for start, width in sorted(self.vectors.items()):
            self.names[start] = writer.names.fresh(f"{buf.name}_{start}")
            t = vtype(buf.dtype, width)
            writer.vtypes.add((buf.dtype, width, "load" if load else ""))
            value = f"{t}_load(&{self.array(writer, start)})" if load else "{0}"
            out.append(f"{t} {self.names[start]} = {value};")
        for offset in self.scalars:
            self.names[offset] = writer.names.fresh(f"{buf.name}_{offset}")
            value = self.array(writer, offset) if load else "0"
            out.append(f"{C_TYPES[buf.dtype]} {self.names[offset]} = {value};")
        return out

    def write_back(self, writer: VectorLoops) -> list[str]:
        out = []
        for start, width in sorted(self.vectors.items()):
            writer.vtypes.add((self.buffer.dtype, width, "store"))
            out.append(f"{vtype(self.buffer.dtype, width)}_store(&{self.array(writer, start)}, "
                       f"{self.names[start]});")
        out += [f"{self.array(writer, k)} = {self.names[k]};" for k in self.scalars]
        return out

    def array(self, writer: VectorLoops, offset: int) -> str:
        terms = [f"{c} * {writer.names(v)}" for v, c in self.base.terms.items()]
        terms += [str(offset)] if offset or not terms else []
        return f"{writer.names(self.buffer)}[{' + '.join(terms)}]"

    def element(self, form: Lin, width: int) -> str:
        rest = form + self.base.scale(-1)
        check(rest.is_const, f"buffer {self.buffer.name} was promoted, but an access of it "
                             "moved")
        offset = rest.const
        if width > 1:
            return self.names[offset]
        if offset in self.names and offset not in self.vectors:
            return self.names[offset]
        start = max(s for s in self.vectors if s <= offset)
        return f"{self.names[start]}[{offset - start}]"


def plan_slots(buf: Buffer, accesses: list[Access], outer: set[Var] | None = None,
               ranges: Ranges | None = None) -> Slots | None:
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
    return Slots(buf, base, dict(vectors), scalars)


def _expand(e: Expr, bindings: dict[Var, Expr]) -> Expr:
    """`e` with block iteration variables replaced by their bindings, transitively."""
    for _ in range(len(bindings) + 1):
        if not any(v in bindings for v in collect(e, Var)):
            break
        e = substitute(e, bindings)
    return e


class Registers:
    """The KernelWriter's register promotion of "local" buffers: where a block allocates
    one whose every access lands on a constant element after unrolling and vectorization,
    or around a serial loop whose body reaches one only at `loop-invariant base + constant`
    (then loaded before the loop and stored back after it). Candidates are probed: the code
    is written once with accesses recorded, and thrown away."""

    def probe(self, candidates: list[Buffer], write) -> dict[Buffer, list[Access]]:
        state = self.snapshot()
        self.recording.update({b: [] for b in candidates})
        try:
            write()
            return {b: self.recording[b] for b in candidates}
        finally:
            self.restore(state)

    def block_slots(self, block: Block, write) -> list[Slots]:
        candidates = [b for b in block.alloc_buffers if b.scope == "local"
                      and b.size <= 16 * MAX_PROMOTED_VARS and b.dtype != "float16"]
        if not candidates or self.chunk is not None:
            return []
        accesses = self.probe(candidates, write)
        slots = [plan_slots(b, accesses[b]) for b in candidates]
        return [x for x in slots if x is not None]

    def loop_slots(self, s: For, write) -> list[Slots]:
        candidates = self.loop_candidates(s)
        if not candidates:
            return []
        outer = set(self.expr.bound)
        accesses = self.probe(candidates, write)
        slots = [plan_slots(b, accesses[b], outer, self.ranges) for b in candidates]
        return [x for x in slots if x is not None]

    def loop_candidates(self, s: For) -> list[Buffer]:
        """Visible local arrays whose indices in `s.body`, bindings expanded, use no serial
        loop variable from `s` inward (a quick filter before probing)."""
        if s.kind != "serial" or s.extent == 1 or self.chunk is not None or self.simd_vars:
            return []
        nodes = [n for n in collect(s.body, (BufferLoad, BufferStore))
                 if n.buffer.scope == "local" and n.buffer in self.expr.visible
                 and n.buffer not in self.promoted and n.buffer.dtype != "float16"]
        if not nodes:
            return []
        bindings = {iv.var: v for r in collect(s.body, BlockRealize)
                    for iv, v in zip(r.block.iter_vars, r.iter_values)}
        serial = {f.loop_var for f in collect(s.body, For) if f.extent > 1
                  and f.kind in ("serial", "parallel") and not self.unroll_explicit}
        serial.add(s.loop_var)
        found = {}
        for n in nodes:
            uses = {v for i in n.indices for v in collect(_expand(i, bindings), Var)}
            found[n.buffer] = found.get(n.buffer, True) and not uses & serial
        return [b for b, ok in found.items() if ok]

    def local_access(self, buf: Buffer, indices: tuple[Expr, ...], width: int) -> str | None:
        """The variable (or vector lane) holding `buf[indices]` (`width` lanes from there), if
        `buf` is promoted; while probing, record the access."""
        if buf not in self.promoted and buf not in self.recording:
            return None
        form = flat_index(buf, indices, self.env, self.ranges)
        if form is not None and form.lane != (1 if width > 1 else 0):
            form = None
        form = form.without_lane() if form is not None else None
        if buf in self.recording:
            self.recording[buf].append((form, width))
            return None
        check(form is not None, f"buffer {buf.name} was promoted, but an access of it is not "
                                "at an affine element")
        return self.promoted[buf].element(form, width)


# ---- vectorized loops in the kernel writer ----

class VectorLoops(Registers):
    """The KernelWriter's vectorized loops: explicit SIMD chunks, lane-wise fallbacks inside
    them, and `omp simd` when the body has no vector form."""

    chunk: VectorChunk | None

    def init_vectors(self) -> None:
        self.chunk = None  # the vector chunk being written
        self.vtypes: set[tuple[str, int, str]] = set()  # vector types and helpers used
        self.vprint: VectorPrinter | None = None

    def vector_state(self) -> tuple:
        chunk = self.chunk
        return chunk, dict(chunk.bindings) if chunk else None, set(self.vtypes), self.vprint

    def restore_vectors(self, state: tuple) -> None:
        self.chunk, bindings, self.vtypes, self.vprint = state
        if self.chunk is not None:
            self.chunk.bindings = bindings

    def vector_loop(self, s: For) -> None:
        """Explicit SIMD chunks; on NotVectorizable, roll back and leave it to `omp simd`."""
        lanes, min_lanes = choose_lanes(s.body, self.target)
        state = self.snapshot()
        try:
            self.simd_vars.append(s.loop_var)
            for chunk in chunk_plan(s.extent, lanes, min_lanes):
                self.vector_chunk(s, chunk)
            self.simd_vars.pop()
        except NotVectorizable as err:
            self.restore(state)
            self.emit(f"// loop {comment_text(s.loop_var.name)}: {comment_text(str(err))}; "
                      "left to omp simd")
            self.c_loop(s)

    def vector_chunk(self, s: For, c: Chunk) -> None:
        var, ctype = self.names(s.loop_var), C_TYPES[s.loop_var.dtype]
        if c.count > 1:  # the variable is start + width * (the chunk's number)
            last, number = c.start + (c.count - 1) * c.width, ("chunk", s.loop_var)
            base = Lin({number: c.width}, c.start)
            self.bind_loop_var(s.loop_var, base, None)
            self.ranges[number] = (0, c.count - 1)
            head = f"for ({ctype} {var} = {c.start}; {var} <= {last}; {var} += {c.width})"
            self.emit_block(head, lambda: self.chunk_body(s, base, c.width))
            self.ranges.pop(number)
        else:
            self.bind_loop_var(s.loop_var, Lin(None, c.start), None)
            self.emit_block("", lambda: (self.emit(f"const {ctype} {var} = {c.start};"),
                                         self.chunk_body(s, Lin(None, c.start), c.width)))
        self.unbind_loop_var(s.loop_var)

    def chunk_body(self, s: For, base: Lin, width: int) -> None:
        if width == 1:  # a scalar lane
            self.env[s.loop_var] = base
            self.scope_body(s.body)
            return
        saved = self.chunk, self.vprint
        self.chunk = VectorChunk(s.loop_var, width, base)
        self.vprint = VectorPrinter(self, self.chunk)
        self.env[s.loop_var] = base + Lin.atom(LANE)
        self.ranges[LANE] = (0, width - 1)
        self.scope_body(s.body)
        self.chunk, self.vprint = saved
        self.ranges.pop(LANE, None)

    def note_varying_binding(self, var: Var, value: Expr) -> None:
        """An iteration variable bound to a lane-varying value: remember its value in terms of
        the chunk's loop variable, for lane-by-lane code."""
        if self.chunk is not None and varies(value, self.env):
            self.chunk.bindings[var] = substitute(value, self.chunk.bindings)

    def lane_varying(self, e: Expr) -> bool:
        return self.chunk is not None and varies(e, self.env)

    # -- lane by lane --

    def lane_map(self, lane: int) -> dict[Var, Expr]:
        chunk = self.chunk
        shifted = {chunk.var: chunk.var + lane}
        return {**shifted, **{v: substitute(e, shifted) for v, e in chunk.bindings.items()}}

    def lane_text(self, e: Expr, lane: int, parent: int = 0) -> str:
        """Scalar C of `e` in one lane of the current chunk."""
        lane_e = substitute(e, self.lane_map(lane))
        with self.lane_scope():
            return self.expr.operand(lane_e, parent) if parent else self.expr(lane_e)

    @contextmanager
    def lane_scope(self):
        """Write scalar code for single lanes: the loop variable is lane 0's value again."""
        chunk, vprint = self.chunk, self.vprint
        self.env[chunk.var] = chunk.base
        self.chunk = self.vprint = None
        try:
            yield chunk
        finally:
            self.chunk, self.vprint = chunk, vprint
            self.env[chunk.var] = chunk.base + Lin.atom(LANE)

    def guarded(self, cond: Expr, vector_body, stmt: Stmt) -> None:
        """`if (cond holds in every lane) { vector code } else { lane by lane }`."""
        self.emit(f"if ({self.all_lanes(cond)}) {{")
        self.depth += 1
        vector_body()
        self.depth -= 1
        self.emit("} else {")
        self.depth += 1
        for lane in range(self.chunk.width):
            lane_stmt = substitute(stmt, self.lane_map(lane))
            with self.lane_scope():
                self.stmt(lane_stmt)
        self.depth -= 1
        self.emit("}")

    def all_lanes(self, cond: Expr) -> str:
        """C for `cond` holding in every lane: uniform conjuncts once, a conjunction of affine
        comparisons in the first and the last lane (where it holds is an interval of lanes),
        anything else in every lane."""
        parts = _conjuncts(cond)
        uniform = [p for p in parts if not varies(p, self.env)]
        varying = [p for p in parts if varies(p, self.env)]
        ends = all(isinstance(p, BinOp) and p.op in ("<", "<=", ">", ">=", "==")
                   and linear(p.a, self.env, self.ranges) is not None
                   and linear(p.b, self.env, self.ranges) is not None
                   for p in varying)
        lanes = (0, self.chunk.width - 1) if ends else range(self.chunk.width)
        texts = [self.expr.operand(p, AND) for p in uniform]
        texts += [self.lane_text(p, lane, AND) for lane in lanes for p in varying]
        return " && ".join(texts)

    # -- stores --

    def vector_store(self, s: BufferStore) -> None:
        store_is_vectorizable(s, self.env)
        width, dtype = self.chunk.width, s.buffer.dtype
        value = self.vprint.vector(s.value, dtype)
        form = flat_index(s.buffer, s.indices, self.env, self.ranges)
        if form is not None and form.lane == 1:
            promoted = self.local_access(s.buffer, s.indices, width)
            if promoted is not None:
                self.emit(f"{promoted} = {value};")
            else:
                element = self.array_element(s.buffer, s.indices)
                self.emit(f"{self.vprint.type_of(dtype, 'store')}(&{element}, {value});")
            return
        lanes = self.names.fresh("lanes")  # a scatter, in lane order
        self.emit_block("", lambda: self.scatter(s, lanes, value))

    def scatter(self, s: BufferStore, lanes: str, value: str) -> None:
        self.emit(f"const {self.vprint.type_of(s.buffer.dtype)} {lanes} = {value};")
        for lane in range(self.chunk.width):
            target = substitute(s.buffer.load(s.indices), self.lane_map(lane))
            with self.lane_scope():
                element = self.expr.element(target.buffer, target.indices)
            self.emit(f"{element} = {lanes}[{lane}];")


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]
