"""Vectorized loops -> explicit vector code (the pass before register promotion).

A vectorized loop is cut into chunks (`chunk_plan`): full vectors of the target's width, then
narrower vectors and scalar lanes for a remainder. Inside a vector chunk every expression is
either *uniform* (the same in all lanes: left scalar, broadcast where it meets a vector) or
*varying* (a vector node). A varying load whose element offset moves by 1 per lane is one
`VectorLoad`; any other varying access goes lane by lane (`Lanes`, `Scatter`). A branch whose
condition varies runs its vector code when the condition holds in every lane, else lane by
lane. A construct with no vector form raises `NotVectorizable` and the loop stays a
vectorized loop annotated `simd: "omp"` (the printer's `#pragma omp simd`), with a comment
saying why.

Vectorized-loop semantics are OpenMP simd semantics: each statement runs for all lanes of a
chunk before the next statement, so iterations must not depend on each other.
"""
from __future__ import annotations

from dataclasses import dataclass

from tessel.codegen.lowered import (Broadcast, Comment, Lanes, LoweredFunc, MaskOf, Ramp,
                                    Scatter, VectorCall, VectorCast, VectorLoad, VectorOp,
                                    VectorStore, lanes_of, mask_of)
from tessel.codegen.passes.affine import (LANE, Lin, flat_index, interval, is_nonnegative,
                                          is_positive_const, linear)
from tessel.codegen.passes.fold import Mentions, substitute_folding
from tessel.ir import (BinOp, BufferLoad, BufferStore, Call, Cast, Expr, For, IfThenElse,
                       IntImm, Not, Select, Stmt, StmtMutator, Var, cast, collect, collect_stmts,
                       const, is_float, select, seq)
from tessel.ir.expr import CMP_OPS, binop
from tessel.target import Target

VECTOR_DTYPES = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64"}
# integers that are only loaded and converted, or converted and stored (quantized data: a
# QuantizeLinear's uint8 output, a DequantizeLinear's input): contiguous vectors at the cast
NARROW = ("int8", "uint8", "int16", "uint16")
# vectorized by tessel's helpers (the ISA's rounding instruction)
ROUNDED = ("floor", "ceil", "round")
VECTOR_MATH = ("exp", "sigmoid")  # float32 functions of tessel's own (c_vector.py)
MASK_DTYPE = {"float32": "int32", "float64": "int64", "int32": "int32", "int64": "int64"}
MAX_UNROLLED_CHUNKS = 4  # more full vectors than this become a loop over chunks


class NotVectorizable(Exception):
    """The loop body has a construct explicit SIMD does not handle; the message says which."""


@dataclass(frozen=True)
class Chunk:
    """Iterations [start, start + count * width) of a vectorized loop, `width` lanes at a time;
    width 1 is a scalar lane, count > 1 a loop over the chunks."""

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
    # (distinct: an unrolled body shares its unchanged subexpressions between copies)
    dtypes = {e.dtype for e in collect(body, (BufferLoad, Cast), distinct=True)}
    dtypes |= {s.buffer.dtype for s in collect_stmts(body, BufferStore)}
    bits = max((int(d[-2:]) for d in dtypes if d in VECTOR_DTYPES), default=32)
    lanes = max(2, target.vector_bits // bits)
    return lanes, min(lanes, max(2, 128 // bits))


def vectorize(func: LoweredFunc, target: Target) -> LoweredFunc:
    return func.with_body(_Loops(target).stmt(func.body))


class _Loops(StmtMutator):
    """Walks the program to its vectorized loops, keeping the ranges of the loops around."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.ranges: dict[object, tuple[int, int]] = {}
        self.in_simd = False  # inside a vectorized loop left to `omp simd`

    def loop(self, s: For, simd: str = "ivdep") -> Stmt:
        """`s` rebuilt; a vectorized one as vector chunks, or when left to the compiler with
        `simd`: "omp" (the outermost, `omp simd`) or "ivdep" (one nested in it)."""
        if s.kind == "vectorized" and not self.in_simd:
            return self.vector_loop(s)
        annotations = dict(s.annotations)
        if s.kind == "vectorized":
            annotations["simd"] = simd
        self.ranges[s.loop_var] = (0, s.extent - 1)
        body = self.stmt(s.body)
        del self.ranges[s.loop_var]
        return For(s.loop_var, s.extent, body, s.kind, s.thread, annotations)

    def vector_loop(self, s: For) -> Stmt:
        """Explicit vector chunks; when the body has no vector form, `omp simd`."""
        lanes, min_lanes = choose_lanes(s.body, self.target)
        mentions = Mentions([s.loop_var])  # shared by the chunks
        try:
            return seq(*(self.chunk(s, c, mentions)
                         for c in chunk_plan(s.extent, lanes, min_lanes)))
        except NotVectorizable as err:
            self.in_simd = True
            loop = self.loop(s, simd="omp")
            self.in_simd = False
            return seq(Comment(f"loop {s.loop_var.name}: {err}; left to omp simd"), loop)

    def chunk(self, s: For, c: Chunk, mentions: Mentions) -> Stmt:
        if c.count == 1:
            return self.chunk_body(s, IntImm(c.start, s.loop_var.dtype), c.width, mentions)
        number = Var(f"{s.loop_var.name}_vec", s.loop_var.dtype)
        self.ranges[number] = (0, c.count - 1)
        body = self.chunk_body(s, binop("+", number * c.width, c.start), c.width, mentions)
        del self.ranges[number]
        return For(number, c.count, body, annotations={"vector_chunks": c.width})

    def chunk_body(self, s: For, base: Expr, width: int, mentions: Mentions) -> Stmt:
        if width == 1:  # a scalar lane
            return self.stmt(substitute_folding(s.body, {s.loop_var: base}, mentions))
        env = {s.loop_var: linear(base, {}) + Lin.atom(LANE)}
        ranges = {**self.ranges, LANE: (0, width - 1)}
        return _Chunk(s.loop_var, base, width, env, ranges, self.target,
                      mentions).stmt(s.body)


class _Chunk(StmtMutator):
    """The statements of one vector chunk: loop variable `var` is `base + lane`."""

    def __init__(self, var: Var, base: Expr, width: int, env: dict, ranges: dict,
                 target: Target, mentions: Mentions) -> None:
        self.var, self.base, self.width = var, base, width
        self.env, self.ranges, self.target = env, ranges, target
        self.varies = mentions  # whether an expression depends on the lane (uses var)

    # -- statements --

    def branch(self, s: IfThenElse) -> Stmt:
        if not self.varies(s.condition):
            return super().branch(s)
        # all lanes took the then-branch, or lane by lane
        every = self.all_lanes(s.condition)
        if isinstance(every, IntImm) and every.value:
            return self.stmt(s.then_case)
        lanes = seq(*(self.at_lane(s, k) for k in range(self.width)))
        if isinstance(every, IntImm):
            return lanes
        return IfThenElse(every, self.stmt(s.then_case), lanes)

    def loop(self, s: For) -> Stmt:
        if s.kind == "vectorized":
            raise NotVectorizable(f"loop {s.loop_var.name} is a vectorized loop nested in one")
        self.ranges[s.loop_var] = (0, s.extent - 1)
        body = self.stmt(s.body)
        del self.ranges[s.loop_var]
        return For(s.loop_var, s.extent, body, s.kind, s.thread, dict(s.annotations))

    def scope(self, s: Stmt) -> Stmt:
        raise NotVectorizable(f"buffer {s.buffer.name} is allocated in every lane")

    def leaf(self, s: Stmt) -> Stmt:
        if isinstance(s, BufferStore):
            return self.store(s)
        if isinstance(s, Comment):
            return s
        raise NotVectorizable(f"{type(s).__name__} has no vector form here")

    def store(self, s: BufferStore) -> Stmt:
        if s.buffer.dtype in NARROW:  # a conversion, or a copy (a pad's select) via int32
            value = s.value if isinstance(s.value, Cast) else cast(s.buffer.dtype,
                                                                   _widened(s.value))
            if not isinstance(value, Cast):
                raise NotVectorizable(f"stores of {s.buffer.dtype} have no vector form here")
            return self.narrow_store(BufferStore(s.buffer, value, s.indices))
        if s.buffer.dtype not in VECTOR_DTYPES:
            raise NotVectorizable(f"stores of {s.buffer.dtype} have no vector form here")
        if not any(self.varies(i) for i in s.indices):
            raise NotVectorizable(f"every lane stores to the same element of {s.buffer.name}")
        value = self.vector(s.value, s.buffer.dtype)
        form = flat_index(s.buffer, s.indices, self.env, self.ranges)
        if form is not None and form.lane == 1:
            return VectorStore(s.buffer, self.lane_exprs(s.indices, 0), value)
        if not collect(value, VectorLoad):
            # gathered in, scattered out: the vector form would be the scalar loop written out
            # lane by lane (an R18-C12 sample: 490 KB of it, past gcc's 60 s), no faster
            raise NotVectorizable(f"the stores to {s.buffer.name} and every varying load "
                                  "go lane by lane")
        targets = tuple(BufferLoad(s.buffer, self.lane_exprs(s.indices, k), s.buffer.dtype)
                        for k in range(self.width))
        return Scatter(targets, value)

    def narrow_store(self, s: BufferStore) -> Stmt:
        """A narrow integer store of a converted value: the value in its own vector dtype,
        converted lane by lane (C's conversion, as the scalar cast) and stored whole."""
        inner = s.value.value
        self.check_dtype(inner.dtype)
        form = flat_index(s.buffer, s.indices, self.env, self.ranges)
        if form is None or form.lane != 1:
            raise NotVectorizable(f"stores of {s.buffer.dtype} go whole vectors only")
        value = VectorCast(self.vector(inner, inner.dtype), self.width, s.buffer.dtype)
        return VectorStore(s.buffer, self.lane_exprs(s.indices, 0), value)

    def at_lane(self, s: Stmt, lane: int) -> Stmt:
        out = substitute_folding(s, {self.var: self.lane_value(lane)}, self.varies)
        if any(f.kind == "vectorized" for f in collect(out, For)):
            raise NotVectorizable("a vectorized loop is nested in a lane-by-lane branch")
        return out

    def all_lanes(self, cond: Expr) -> Expr:
        """`cond` holding in every lane: uniform conjuncts once, a conjunction of affine
        comparisons in the first and the last lane (where it holds is an interval of lanes),
        anything else in every lane."""
        parts = _conjuncts(cond)
        uniform = [p for p in parts if not self.varies(p)]
        varying = [p for p in parts if self.varies(p)]
        ends = all(isinstance(p, BinOp) and p.op in ("<", "<=", ">", ">=", "==")
                   and linear(p.a, self.env, self.ranges) is not None
                   and linear(p.b, self.env, self.ranges) is not None
                   for p in varying)
        lanes = (0, self.width - 1) if ends else range(self.width)
        terms = uniform + [self.lane_exprs(p, lane) for lane in lanes for p in varying]
        out = terms[0]
        for t in terms[1:]:
            out = binop("and", out, t)
        return out

    # -- lanes --

    def lane_value(self, lane: int) -> Expr:
        return binop("+", self.base, lane)

    def lane_exprs(self, e, lane: int):
        """`e` (an expression or a tuple of them) in one lane."""
        vmap = {self.var: self.lane_value(lane)}
        if isinstance(e, tuple):
            return tuple(substitute_folding(x, vmap, self.varies) for x in e)
        return substitute_folding(e, vmap, self.varies)

    def lanes(self, e: Expr) -> Lanes:
        """A vector built lane by lane from scalar expressions (gathers, non-affine indices)."""
        return Lanes(tuple(self.lane_exprs(e, k) for k in range(self.width)), e.dtype)

    # -- expressions --

    def check_dtype(self, dtype: str) -> None:
        if dtype not in VECTOR_DTYPES:
            raise NotVectorizable(f"{dtype} values have no vector form here")

    def vector(self, e: Expr, dtype: str | None = None) -> Expr:
        """`e` as a vector of its dtype (a uniform value is broadcast)."""
        return self.as_vector(self.render(e), dtype or e.dtype)

    def as_vector(self, v: Expr, dtype: str) -> Expr:
        if lanes_of(v) > 1:
            return v
        if dtype == "bool":  # a uniform condition as an all-lanes mask
            return MaskOf(v, self.width, "int32")
        self.check_dtype(dtype)
        return Broadcast(v, self.width, dtype)

    def render(self, e: Expr) -> Expr:
        """The vector form of `e`, or `e` itself when it is uniform."""
        if not self.varies(e):
            return e
        method = getattr(self, "_" + type(e).__name__.lower(), None)
        if method is None:
            raise NotVectorizable(f"{type(e).__name__} has no vector form here")
        return method(e)

    def _var(self, e: Var) -> Expr:
        if e.dtype not in VECTOR_DTYPES:
            return self.lanes(e)
        return Ramp(self.base, self.env[e].lane, self.width, e.dtype)

    def _bufferload(self, e: BufferLoad) -> Expr:
        self.check_dtype(e.dtype)
        form = flat_index(e.buffer, e.indices, self.env, self.ranges)
        if form is None or form.lane != 1:
            lanes = self.lanes(e)
            if form is not None and form.lane > 1:  # a strided load
                return Lanes(lanes.values, lanes.dtype, form.lane)
            return lanes
        return VectorLoad(e.buffer, self.lane_exprs(e.indices, 0), self.width, e.dtype)

    def _binop(self, e: BinOp) -> Expr:
        if e.op in CMP_OPS:
            dtype = e.a.dtype
            self.check_dtype(dtype)
            args = (self.vector(e.a, dtype), self.vector(e.b, dtype))
            return VectorOp(e.op, args, self.width, "bool", MASK_DTYPE[dtype])
        if e.op in ("and", "or"):
            a, b = self.render(e.a), self.render(e.b)
            mask = mask_of(a) or mask_of(b)
            return VectorOp(e.op, (self.mask_vector(a, mask), self.mask_vector(b, mask)),
                            self.width, "bool", mask)
        self.check_dtype(e.dtype)
        if e.op in ("//", "%") and (is_float(e.dtype) or not (is_nonnegative(e.a)
                                                              and is_positive_const(e.b))):
            return self.lanes(e)
        return VectorOp(e.op, (self.vector(e.a), self.vector(e.b)), self.width, e.dtype)

    def narrow_load(self, e: Cast) -> Expr:
        """A narrow integer load converted to a vector dtype: loaded whole, converted."""
        load = e.value
        self.check_dtype(e.dtype)
        if not self.varies(load):
            return VectorCast(Broadcast(load, self.width, load.dtype), self.width, e.dtype)
        form = flat_index(load.buffer, load.indices, self.env, self.ranges)
        if form is None or form.lane != 1:
            raise NotVectorizable(f"loads of {load.dtype} go whole vectors only")
        narrow = VectorLoad(load.buffer, self.lane_exprs(load.indices, 0), self.width,
                            load.dtype)
        return VectorCast(narrow, self.width, e.dtype)

    def mask_vector(self, v: Expr, mask: str) -> Expr:
        """A boolean as a mask vector of integer dtype `mask`."""
        if lanes_of(v) == 1 or mask_of(v) != mask:
            return MaskOf(v, self.width, mask)
        return v

    def _not(self, e: Not) -> Expr:
        a = self.render(e.a)
        return VectorOp("not", (a,), self.width, "bool", mask_of(a))

    def _select(self, e: Select) -> Expr:
        self.check_dtype(e.dtype)
        cond = self.render(e.cond)
        if lanes_of(cond) == 1:  # one branch for all lanes: stays lazy
            return VectorOp("?:", (cond, self.vector(e.true_value), self.vector(e.false_value)),
                            self.width, e.dtype)
        for branch in (e.true_value, e.false_value):
            self.check_speculation_safe(branch)
        mask = self.mask_vector(cond, MASK_DTYPE[e.dtype])
        return VectorOp("select", (mask, self.vector(e.true_value), self.vector(e.false_value)),
                        self.width, e.dtype)

    def check_speculation_safe(self, e: Expr) -> None:
        """A lane may evaluate a branch the scalar program skips: every load in it must be
        provably in bounds, and no integer division may see a zero divisor."""
        for node in collect(e, (BufferLoad, BinOp)):
            if isinstance(node, BinOp):
                if node.op in ("//", "%") and not is_float(node.dtype) and \
                        not is_positive_const(node.b):
                    raise NotVectorizable("a division in a select branch may trap")
            elif not self.in_bounds(node):
                raise NotVectorizable(f"a select branch may load {node.buffer.name} out of bounds")

    def in_bounds(self, load: BufferLoad) -> bool:
        form = flat_index(load.buffer, load.indices, self.env, self.ranges)
        span = interval(form, self.ranges) if form is not None else None
        return span is not None and 0 <= span[0] and span[1] < load.buffer.size

    def _cast(self, e: Cast) -> Expr:
        if e.value.dtype in NARROW and isinstance(e.value, BufferLoad) and e.dtype != "bool":
            return self.narrow_load(e)
        value = self.render(e.value)
        if e.dtype == "bool":
            source = e.value.dtype
            zero = const(0.0 if is_float(source) else 0, source)
            args = (self.as_vector(value, source), self.as_vector(zero, source))
            self.check_dtype(source)
            return VectorOp("!=", args, self.width, "bool", MASK_DTYPE[source])
        self.check_dtype(e.dtype)
        if value.dtype == "bool":  # a mask is -1 where true
            return VectorCast(self.mask_vector(value, mask_of(value) or "int32"), self.width,
                              e.dtype)
        return VectorCast(self.as_vector(value, e.value.dtype), self.width, e.dtype)

    def _call(self, e: Call) -> Expr:
        """floor and ceil through tessel's own helpers (the ISA's rounding instruction:
        c_vector.py, symbol ""), and float32 exp and sigmoid (inline, on any ISA: a library
        call clobbers every vector register); log, tanh, erf, pow and float64 exp and sigmoid
        through the C library's vector variants (glibc's libmvec) where the target has them;
        other intrinsics have no vector form."""
        if e.name in ROUNDED and e.dtype in ("float32", "float64") or \
                e.name in VECTOR_MATH and e.dtype == "float32":
            return VectorCall(e.name, "", (self.vector(e.args[0], e.dtype),), self.width,
                              e.dtype)
        base = "exp" if e.name == "sigmoid" else e.name
        symbol = mvec_symbol(base, e.dtype, self.width, self.target)
        if symbol is None:
            raise NotVectorizable(f"{e.name} has no vector form here")
        args = tuple(self.vector(a, e.dtype) for a in e.args)
        return VectorCall(e.name, symbol, args, self.width, e.dtype)


def _widened(e: Expr) -> Expr:
    """A narrow integer expression as int32, the widening pushed into selects' branches so a
    narrow load converts where it is loaded (narrow_load) and a constant is an int32 one."""
    if isinstance(e, Select):
        return select(e.cond, _widened(e.true_value), _widened(e.false_value))
    if isinstance(e, IntImm):
        return const(e.value, "int32")
    return cast("int32", e)


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, BinOp) and e.op == "and":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


# ---- the C library's vector math (x86-64 vector function ABI, glibc's libmvec) ----

MVEC_FUNCTIONS = ("exp", "log", "tanh", "erf", "pow")
_MVEC_ISA = {128: (("sse2", "b"),), 256: (("avx2", "d"), ("avx", "c")), 512: (("avx512f", "e"),)}


def mvec_symbol(name: str, dtype: str, width: int, target: Target) -> str | None:
    """The libmvec entry computing `name` on `width` lanes of `dtype` for `target` (e.g.
    _ZGVdN8v_expf for 8 float32 lanes with AVX2), or None: not x86-64, no such variant, or
    the target's C library lacks it (older than glibc 2.35 for tanh and erf)."""
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
    return symbol if target.has_vector_function(symbol) else None


__all__ = ["vectorize", "NotVectorizable", "chunk_plan", "choose_lanes", "mvec_symbol",
           "Chunk", "VECTOR_DTYPES", "MASK_DTYPE", "NARROW", "ROUNDED"]
