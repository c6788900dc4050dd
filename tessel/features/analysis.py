"""One pass over a scheduled loop nest: the facts every feature set is computed from.

`analyze(func)` walks the program once and returns a `Nest`: every loop (extent, kind,
parent, auto-unroll annotation) in pre-order, every buffer store with the loops around it
and its arithmetic op counts, and every buffer access with the element stride of each
enclosing loop variable in the flattened (row-major) index.

Names never enter: loops are numbered in pre-order, buffers in order of first access
(a store's buffer before the buffers its value loads), so structurally equal programs give
identical facts.

Speed is the point (the tuner featurizes thousands of candidates): index expressions are
made affine by a small dedicated linearizer, not the general simplifier, and the per-store
analysis (flattened index forms over block iteration variables, op counts) is cached by the
identity of the store node. Candidates of one workload share their block bodies (schedule
primitives rebuild loops and bindings but keep untouched bodies), so only the bindings are
re-linearized per candidate. Floor division and modulo by a constant are approximated
(`x // c` has coefficient 1/c, `x % c` keeps x's coefficients): exact enough for strides and
for whether a loop variable moves an index at all, which is what touch counts need.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from tessel.errors import TesselError
from tessel.ir import BinOp, Cast, Expr, FloatImm, IntImm, Var

KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
UNROLL_KEY = "pragma_auto_unroll_max_step"
# arithmetic op kinds counted per store (MetaSchedule/Ansor's compute features)
OP_KINDS = ("float_mad", "float_addsub", "float_mul", "float_divmod", "float_cmp",
            "float_math_func", "float_minmax", "int_mad", "int_addsub", "int_mul",
            "int_divmod", "int_cmp", "int_minmax", "bool_op", "select_op", "cast_op")
OP_INDEX = {k: i for i, k in enumerate(OP_KINDS)}
_CACHE_LIMIT = 200_000


class FeatureError(TesselError, ValueError):
    """A program or candidate cannot be featurized (e.g. knob features without knobs)."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise FeatureError(msg)


@dataclass(frozen=True)
class Access:
    """One buffer access of a store: `strides[q]` is the element stride of loop `path[q]`."""
    slot: int
    write: bool
    path: tuple[int, ...]
    strides: tuple[float, ...]


@dataclass(frozen=True)
class StoreFacts:
    """A buffer store: its buffer slot, enclosing loops, op counts and accesses."""
    slot: int
    path: tuple[int, ...]
    ops: np.ndarray
    accesses: tuple[Access, ...]


@dataclass(frozen=True, eq=False)
class Nest:
    """The analysed loop nest. Loops are numbered in pre-order (a parent before its children)."""
    extents: np.ndarray      # float64 per loop
    kinds: np.ndarray        # index into KINDS per loop
    parents: np.ndarray      # parent loop, -1 at top level
    unroll_steps: np.ndarray  # auto-unroll annotation per loop (0 if none)
    buffer_bytes: np.ndarray  # bytes per element, per buffer slot
    buffer_sizes: np.ndarray  # elements, per buffer slot
    is_param: np.ndarray     # bool per buffer slot
    stores: tuple[StoreFacts, ...]
    accesses: tuple[Access, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accesses", tuple(a for s in self.stores for a in s.accesses))

    @property
    def n_loops(self) -> int:
        return len(self.extents)

    @property
    def n_buffers(self) -> int:
        return len(self.buffer_bytes)

    @cached_property
    def depths(self) -> np.ndarray:
        out = np.zeros(self.n_loops, dtype=np.int64)
        for i, p in enumerate(self.parents):
            out[i] = 0 if p < 0 else out[p] + 1
        return out

    @cached_property
    def top_down(self) -> np.ndarray:
        """Product of the lengths of the enclosing loops, the loop itself included."""
        out = self.extents.copy()
        for i, p in enumerate(self.parents):
            if p >= 0:
                out[i] *= out[p]
        return out

    @cached_property
    def bottom_up(self) -> np.ndarray:
        """Iterations of the innermost bodies under one entry to each loop: its length times
        the summed bottom-up products of its child loops (a plain product on a chain)."""
        inner = np.zeros(self.n_loops)
        for i in range(self.n_loops - 1, -1, -1):
            p = self.parents[i]
            if p >= 0:
                inner[p] += self.extents[i] * max(inner[i], 1.0)
        return self.extents * np.maximum(inner, 1.0)

    @cached_property
    def touch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(touch count, reuse ratio, stride), each [loop, buffer slot]; see `access_counts`."""
        shape = (self.n_loops, self.n_buffers)
        count, reuse, stride = np.zeros(shape), np.zeros(shape), np.zeros(shape)
        for a in self.accesses:
            if not a.path:
                continue
            c, r = access_counts(self.extents, a)
            idx = np.asarray(a.path)
            np.maximum.at(count, (idx, a.slot), c)
            np.maximum.at(reuse, (idx, a.slot), r)
            s = np.asarray(a.strides)
            cur = stride[idx, a.slot]
            stride[idx, a.slot] = np.where(cur == 0, s, cur)
        return count, reuse, stride

    @cached_property
    def longest_chain(self) -> tuple[int, ...]:
        """The deepest root-to-leaf loop chain (the first one in program order on ties)."""
        if self.n_loops == 0:
            return ()
        leaf = int(np.argmax(self.depths))
        chain = [leaf]
        while self.parents[chain[-1]] >= 0:
            chain.append(int(self.parents[chain[-1]]))
        return tuple(reversed(chain))


def access_counts(extents: np.ndarray, a: Access) -> tuple[np.ndarray, np.ndarray]:
    """AutoTVM's touch count and reuse ratio of access `a` at each loop of its path: below
    loop q, the loops whose variable moves the index multiply the touched elements, the
    others multiply the reuse (so count * reuse is the bottom-up product along the path)."""
    lens = extents[np.asarray(a.path)]
    moves = np.asarray(a.strides) != 0
    count = np.cumprod(np.where(moves, lens, 1.0)[::-1])[::-1]
    reuse = np.cumprod(np.where(moves, 1.0, lens)[::-1])[::-1]
    return count, reuse


# linear forms of index expressions ------------------------------------------------------
_linear_cache: dict[int, tuple[Expr, dict]] = {}


def linear(e: Expr) -> dict:
    """{var: coef, 1: const} of an index expression (cached by node identity)."""
    hit = _linear_cache.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    if len(_linear_cache) > _CACHE_LIMIT:
        _linear_cache.clear()
    form = _linear(e)
    _linear_cache[id(e)] = (e, form)
    return form


def _add(x: dict, y: dict, scale: float = 1.0) -> dict:
    out = dict(x)
    for k, v in y.items():
        out[k] = out.get(k, 0.0) + scale * v
    return out


def _linear(e: Expr) -> dict:
    t = type(e)
    if t is Var:
        return {e: 1.0}
    if t is IntImm or t is FloatImm:
        return {1: float(e.value)}
    if t is Cast:
        return linear(e.value)
    if t is BinOp:
        return _linear_binop(e)
    return {v: 1.0 for v in _vars(e)}  # not affine: mark dependence only


def _linear_binop(e: BinOp) -> dict:
    op, a, b = e.op, linear(e.a), linear(e.b)
    if op == "+":
        return _add(a, b)
    if op == "-":
        return _add(a, b, -1.0)
    if op == "*":
        if set(b) <= {1}:
            return {k: v * b.get(1, 0.0) for k, v in a.items()}
        if set(a) <= {1}:
            return {k: v * a.get(1, 0.0) for k, v in b.items()}
    if op == "//" and set(b) == {1} and b[1] != 0:
        return {k: v / b[1] for k, v in a.items() if k != 1}
    if op == "%" and set(b) == {1}:
        return {k: v for k, v in a.items() if k != 1}
    return {k: 1.0 for k in set(a) | set(b) if k != 1}


def _vars(e: Expr) -> list[Var]:
    out, stack = [], [e]
    while stack:
        n = stack.pop()
        if type(n) is Var:
            out.append(n)
        elif isinstance(n, Expr):
            stack.extend(c for c in vars(n).values() if isinstance(c, Expr))
            stack.extend(x for v in vars(n).values() if isinstance(v, tuple)
                         for x in v if isinstance(x, Expr))
    return out
