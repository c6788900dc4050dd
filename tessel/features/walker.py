"""`analyze(func) -> Nest`: the single walk over a program that all feature sets share.

Results are cached per PrimFunc object (weakly), so extracting several feature sets of one
candidate walks it once.
"""
from __future__ import annotations

import weakref
from typing import Callable

import numpy as np

from tessel.features.analysis import (_CACHE_LIMIT, KIND_INDEX, OP_INDEX, OP_KINDS,
                                      UNROLL_KEY, Access, Nest, StoreFacts, linear)
from tessel.ir import (DTYPE_BITS, REDUCE, BinOp, BlockRealize, Buffer, BufferLoad,
                       BufferStore, Call, Cast, Expr, For, IfThenElse, Not, PrimFunc, Select,
                       SeqStmt, Stmt, is_float)

_nest_cache: "weakref.WeakKeyDictionary[PrimFunc, Nest]" = weakref.WeakKeyDictionary()
# id(store) -> (store, [(buffer, flattened index form, is_write)], op counts)
_store_cache: dict[int, tuple[BufferStore, list, np.ndarray]] = {}


_vectors: "weakref.WeakKeyDictionary[PrimFunc, dict[str, np.ndarray]]" = \
    weakref.WeakKeyDictionary()


def vector(func: PrimFunc, name: str, compute: Callable[[PrimFunc], np.ndarray]
           ) -> np.ndarray:
    """`compute(func)`, the feature set `name` of the program: computed once per func object
    (the IR is immutable; a search scores a population's programs each generation, and a
    transfer model encodes each twice), read-only."""
    vecs = _vectors.get(func)
    if vecs is None:
        vecs = _vectors[func] = {}
    vec = vecs.get(name)
    if vec is None:
        vec = vecs[name] = np.asarray(compute(func))
        vec.setflags(write=False)
    return vec


def analyze(func: PrimFunc) -> Nest:
    """The loop nest facts of `func` (cached for the lifetime of the func object)."""
    nest = _nest_cache.get(func)
    if nest is None:
        nest = _Walker().run(func)
        _nest_cache[func] = nest
    return nest


class _Walker:
    def __init__(self) -> None:
        self.extents: list[float] = []
        self.kinds: list[int] = []
        self.parents: list[int] = []
        self.unroll: list[float] = []
        self.stack: list[int] = []
        self.env: dict = {}  # Var -> {loop id: coef}
        self.slots: dict[Buffer, int] = {}
        self.stores: list[StoreFacts] = []

    def run(self, func: PrimFunc) -> Nest:
        self.stmt(func.body)
        bufs = list(self.slots)
        params = set(func.params)
        return Nest(np.asarray(self.extents, dtype=np.float64),
                    np.asarray(self.kinds, dtype=np.int64),
                    np.asarray(self.parents, dtype=np.int64),
                    np.asarray(self.unroll, dtype=np.float64),
                    np.asarray([DTYPE_BITS[b.dtype] / 8 for b in bufs], dtype=np.float64),
                    np.asarray([b.size for b in bufs], dtype=np.float64),
                    np.asarray([b in params for b in bufs], dtype=bool),
                    tuple(self.stores))

    def stmt(self, s: Stmt) -> None:
        t = type(s)
        if t is For:
            self.loop(s)
        elif t is SeqStmt:
            for x in s.seq:
                self.stmt(x)
        elif t is BlockRealize:
            self.realize(s)
        elif t is BufferStore:
            self.store(s, tuple(self.stack))
        elif t is IfThenElse:
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)

    def loop(self, s: For) -> None:
        lid = len(self.extents)
        self.extents.append(float(s.extent))
        self.kinds.append(KIND_INDEX[s.kind])
        self.parents.append(self.stack[-1] if self.stack else -1)
        step = s.annotations.get(UNROLL_KEY, 0) if s.annotations else 0
        self.unroll.append(float(step) if isinstance(step, (int, float)) else 0.0)
        self.env[s.loop_var] = {lid: 1.0}
        self.stack.append(lid)
        self.stmt(s.body)
        self.stack.pop()

    def realize(self, r: BlockRealize) -> None:
        block = r.block
        spatial: set[int] = set()
        reduce: set[int] = set()
        for iv, value in zip(block.iter_vars, r.iter_values):
            form = self.compose(linear(value))
            self.env[iv.var] = form
            (reduce if iv.kind == REDUCE else spatial).update(form)
        if block.init is not None:
            path = tuple(l for l in self.stack if l not in reduce or l in spatial)
            self.stmt_at(block.init, path)
        self.stmt(block.body)

    def stmt_at(self, s: Stmt, path: tuple[int, ...]) -> None:
        """Walk a reduction's init statement as if only `path` enclosed it."""
        saved, self.stack = self.stack, list(path)
        self.stmt(s)
        self.stack = saved

    def compose(self, form: dict) -> dict:
        out: dict[int, float] = {}
        for var, coef in form.items():
            inner = self.env.get(var)
            if inner is None:
                continue
            for lid, c in inner.items():
                out[lid] = out.get(lid, 0.0) + coef * c
        return out

    def slot(self, buf: Buffer) -> int:
        s = self.slots.get(buf)
        if s is None:
            s = self.slots[buf] = len(self.slots)
        return s

    def store(self, s: BufferStore, path: tuple[int, ...]) -> None:
        accesses, ops = store_summary(s)
        out = []
        for buf, form, write in accesses:
            loops = self.compose(form)
            out.append(Access(self.slot(buf), write, path,
                              tuple(loops.get(l, 0.0) for l in path)))
        self.stores.append(StoreFacts(out[0].slot, path, ops, tuple(out)))


# per-store summaries (cached by node identity) ------------------------------------------
def store_summary(s: BufferStore) -> tuple[list, np.ndarray]:
    """[(buffer, flattened index form, is_write)] (the store first) and the op counts."""
    hit = _store_cache.get(id(s))
    if hit is not None and hit[0] is s:
        return hit[1], hit[2]
    if len(_store_cache) > _CACHE_LIMIT:
        _store_cache.clear()
    ops = np.zeros(len(OP_KINDS))
    loads: list[BufferLoad] = []
    _scan(s.value, ops, loads)
    for idx in s.indices:
        _scan(idx, ops, loads)
    accesses = [(s.buffer, flat_form(s.buffer, s.indices), True)]
    accesses += [(ld.buffer, flat_form(ld.buffer, ld.indices), False) for ld in loads]
    _store_cache[id(s)] = (s, accesses, ops)
    return accesses, ops


def flat_form(buf: Buffer, indices: tuple[Expr, ...]) -> dict:
    """The row-major flattened index as {var: coef}."""
    out: dict = {}
    for stride, idx in zip(buf.strides, indices):
        for k, v in linear(idx).items():
            if k != 1:
                out[k] = out.get(k, 0.0) + stride * v
    return out


_ARITH = {"+": "addsub", "-": "addsub", "*": "mul", "/": "divmod", "//": "divmod",
          "%": "divmod", "min": "minmax", "max": "minmax"}


def _scan(e: Expr, ops: np.ndarray, loads: list[BufferLoad]) -> None:
    """Count the ops of `e` by kind into `ops` and collect its loads in pre-order."""
    t = type(e)
    if t is BinOp:
        _count_binop(e, ops)
        _scan(e.a, ops, loads)
        _scan(e.b, ops, loads)
    elif t is BufferLoad:
        loads.append(e)
        for idx in e.indices:
            _scan(idx, ops, loads)
    elif t is Call:
        ops[OP_INDEX["float_math_func"]] += 1
        for a in e.args:
            _scan(a, ops, loads)
    elif t is Select:
        ops[OP_INDEX["select_op"]] += 1
        for x in (e.cond, e.true_value, e.false_value):
            _scan(x, ops, loads)
    elif t is Cast:
        ops[OP_INDEX["cast_op"]] += 1
        _scan(e.value, ops, loads)
    elif t is Not:
        ops[OP_INDEX["bool_op"]] += 1
        _scan(e.a, ops, loads)


def _count_binop(e: BinOp, ops: np.ndarray) -> None:
    if e.op in ("and", "or"):
        ops[OP_INDEX["bool_op"]] += 1
        return
    prefix = "float" if is_float(e.a.dtype) else "int"
    if e.op not in _ARITH:
        ops[OP_INDEX[prefix + "_cmp"]] += 1
    elif e.op in ("+", "-") and _is_mul(e.a, e.b):
        ops[OP_INDEX[prefix + "_mad"]] += 1
        ops[OP_INDEX[prefix + "_mul"]] -= 1  # the fused multiply is counted by its BinOp
    else:
        ops[OP_INDEX[prefix + "_" + _ARITH[e.op]]] += 1


def _is_mul(a: Expr, b: Expr) -> bool:
    return any(type(x) is BinOp and x.op == "*" for x in (a, b))
