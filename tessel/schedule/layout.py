"""Layout primitive: transform_layout re-lays out an intermediate buffer through an index map.

    Bc = sch.cache_read(C, 1, "global")                                # copy of B (K, N)
    sch.transform_layout(Bc, 0, "write", "lambda k, n: (n // 8, k, n % 8)")

Every access `B[idx]` in the program becomes `B'[index_map(idx)]`, where B' has the shape the
map's outputs span over B's shape. Index maps are lambdas over the old indices built from
+ - * // % and integer constants; a Python callable is accepted too and recorded in the trace
as the equivalent lambda text, so traces stay JSON. Maps are parsed with `ast` and never
evaluated as Python.
"""
from __future__ import annotations

import ast
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Union

import numpy as np

from tessel import arith, ir
from tessel.ir import BinOp, Buffer, BufferLoad, BufferRegion, BufferStore, Expr, IntImm, Var
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.trace import BlockRV, ScheduleError, check

IndexMapLike = Union[str, Callable[..., Any]]
_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}
ENUMERATION_LIMIT = 1 << 20  # injectivity is checked on at most this many points per group


# 1. index maps ------------------------------------------------------------------------------
@dataclass(frozen=True)
class IndexMap:
    """A parsed index map: its parameters and outputs (IR expressions in `params`)."""

    params: tuple[Var, ...]
    outputs: tuple[Expr, ...]

    @property
    def text(self) -> str:
        """The canonical lambda text, as stored in traces."""
        outs = ", ".join(render(e) for e in self.outputs)
        names = ", ".join(p.name for p in self.params)
        return f"lambda {names}: ({outs}{',' if len(self.outputs) == 1 else ''})"

    def apply(self, indices: tuple[Expr, ...]) -> tuple[Expr, ...]:
        vmap = dict(zip(self.params, indices))
        return tuple(ir.substitute(e, vmap) for e in self.outputs)


def render(e: Expr, prec: int = 0) -> str:
    if isinstance(e, Var):
        return e.name
    if isinstance(e, IntImm):
        return str(e.value) if e.value >= 0 else f"({e.value})"
    assert isinstance(e, BinOp)
    p = _PREC[e.op]
    text = f"{render(e.a, p)} {e.op} {render(e.b, p + 1)}"
    return f"({text})" if p < prec else text


def parse_index_map(index_map: IndexMapLike) -> IndexMap:
    """An IndexMap from lambda text or a Python callable, or ScheduleError."""
    if isinstance(index_map, str):
        return _from_text(index_map)
    check(callable(index_map), f"transform_layout: index_map must be a lambda string or a "
                               f"callable, got {type(index_map).__name__}")
    return _from_text(_callable_text(index_map))


def _callable_text(fn: Callable[..., Any]) -> str:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ScheduleError("transform_layout: cannot read the index_map's signature") from None
    check(all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
              for p in params), "transform_layout: index_map may only take plain positional "
                                "arguments (the old indices)")
    vars_ = tuple(Var(p.name) for p in params)
    try:
        out = fn(*vars_)
        outs = tuple(ir.convert(o) for o in (out if isinstance(out, (tuple, list)) else (out,)))
    except (ir.IRError, TypeError, ValueError, ArithmeticError) as err:
        raise ScheduleError(f"transform_layout: index_map cannot be applied to indices: {err}"
                            ) from None
    for e in outs:
        _check_ir(e, set(vars_))
    return IndexMap(vars_, outs).text


def _check_ir(e: Expr, params: set[Var]) -> None:
    ok = ((isinstance(e, Var) and e in params) or (isinstance(e, IntImm) and e.dtype == "int32")
          or (isinstance(e, BinOp) and e.op in _PREC))
    check(ok, f"transform_layout: index_map output {e!r} uses something other than its "
              "arguments, integer constants and + - * // %")
    if isinstance(e, BinOp):
        _check_ir(e.a, params)
        _check_ir(e.b, params)


def _from_text(text: str) -> IndexMap:
    try:
        tree_ = ast.parse(text.strip(), mode="eval")
    except SyntaxError as err:
        raise ScheduleError(f"transform_layout: index_map {text!r} is not valid Python: "
                            f"{err.msg}") from None
    fn = tree_.body
    check(isinstance(fn, ast.Lambda), f"transform_layout: index_map {text!r} is not a lambda")
    args = fn.args
    check(not (args.vararg or args.kwarg or args.kwonlyargs or args.defaults or args.posonlyargs),
          f"transform_layout: index_map {text!r} may only take plain positional arguments")
    names = [a.arg for a in args.args]
    check(len(set(names)) == len(names), f"transform_layout: index_map {text!r} repeats an "
                                         "argument name")
    params = {n: Var(n) for n in names}
    body = fn.body.elts if isinstance(fn.body, (ast.Tuple, ast.List)) else [fn.body]
    outs = tuple(_ast_expr(node, params, text) for node in body)
    check(len(outs) >= 1, f"transform_layout: index_map {text!r} has no outputs")
    return IndexMap(tuple(params.values()), outs)


def _ast_expr(node: ast.AST, params: dict[str, Var], text: str) -> Expr:
    if isinstance(node, ast.Name) and node.id in params:
        return params[node.id]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ir.const(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _ast_expr(node.operand, params, text)
        return ir.const(0) - inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp) and type(node.op) in _AST_OPS:
        a, b = _ast_expr(node.left, params, text), _ast_expr(node.right, params, text)
        if _AST_OPS[type(node.op)] in ("//", "%"):
            check(isinstance(b, IntImm) and b.value > 0,
                  f"transform_layout: index_map {text!r} divides by {render(b)}; only positive "
                  "constant divisors are allowed")
        return ir.binop(_AST_OPS[type(node.op)], a, b)
    raise ScheduleError(f"transform_layout: index_map {text!r} uses "
                        f"{ast.dump(node)[:60]}; only its arguments, int constants and "
                        "+ - * // % are allowed")


# 2. the new shape and its checks ------------------------------------------------------------
def mapped_shape(imap: IndexMap, shape: tuple[int, ...], name: str) -> tuple[int, ...]:
    """The shape the map's outputs span when the old indices cover `shape`."""
    check(len(imap.params) == len(shape),
          f"transform_layout: index_map takes {len(imap.params)} argument(s) but buffer "
          f"{name} has {len(shape)} dimension(s)")
    ana = arith.Analyzer({p: n for p, n in zip(imap.params, shape)})
    out = []
    for d, e in enumerate(imap.outputs):
        lo, hi = ana.const_int_bound(e)
        check(lo >= 0, f"transform_layout: output {d} ({render(e)}) of the index_map can be "
                       f"negative ({lo}) on buffer {name}")
        check(hi != math.inf, f"transform_layout: output {d} ({render(e)}) is unbounded")
        out.append(int(hi) + 1)
    return tuple(out)


def _np_eval(e: Expr, env: dict[Var, np.ndarray]) -> np.ndarray | int:
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, IntImm):
        return e.value
    a, b = _np_eval(e.a, env), _np_eval(e.b, env)
    return {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide,
            "%": np.mod}[e.op](a, b)


def _independent_groups(imap: IndexMap) -> list[tuple[list[int], list[int]]]:
    """Partition the map into (params, outputs) groups that share no parameter: the map is
    injective iff each group is, so each is enumerated on its own (small) box."""
    owner = list(range(len(imap.params)))

    def find(k: int) -> int:
        while owner[k] != k:
            k = owner[k]
        return k
    uses = [[k for k, p in enumerate(imap.params) if ir.uses_var(e, p)] for e in imap.outputs]
    for used in uses:
        for k in used[1:]:
            owner[find(k)] = find(used[0])
    roots = sorted({find(k) for k in range(len(imap.params))})
    return [([k for k in range(len(imap.params)) if find(k) == r],
             [d for d, used in enumerate(uses) if used and find(used[0]) == r]) for r in roots]


def _group_injective(imap: IndexMap, shape: tuple[int, ...], new_shape: tuple[int, ...],
                     params: list[int], outputs: list[int]) -> bool:
    box = tuple(shape[k] for k in params)
    if not outputs:
        return math.prod(box) == 1
    if math.prod(box) > ENUMERATION_LIMIT:  # a leading sub-box
        cap = max(1, int(ENUMERATION_LIMIT ** (1 / len(box))))
        box = tuple(min(n, cap) for n in box)
    grids = np.indices(box, dtype=np.int64).reshape(len(box), -1)
    env = {imap.params[k]: g for k, g in zip(params, grids)}
    outs = [np.broadcast_to(_np_eval(imap.outputs[d], env), grids.shape[1:]) for d in outputs]
    flat = np.sort(np.ravel_multi_index(tuple(outs), tuple(new_shape[d] for d in outputs)))
    return bool(np.all(flat[1:] != flat[:-1]))


def check_injective(imap: IndexMap, shape: tuple[int, ...], new_shape: tuple[int, ...],
                    name: str) -> None:
    """Distinct old indices must map to distinct new ones: checked by sizes, then by
    enumeration of each group of outputs that share parameters (on a leading sub-box for
    groups above ENUMERATION_LIMIT points)."""
    check(math.prod(new_shape) >= math.prod(shape),
          f"transform_layout: the index_map is not injective on buffer {name}: shape "
          f"{new_shape} holds fewer elements than {shape}")
    for params, outputs in _independent_groups(imap):
        check(_group_injective(imap, shape, new_shape, params, outputs),
              f"transform_layout: the index_map {imap.text!r} is not injective on buffer "
              f"{name}: two elements would share one location")


# 3. rewriting the program -------------------------------------------------------------------
def _all_ranges(func: ir.PrimFunc) -> arith.Analyzer:
    """An analyzer knowing the range of every loop and iter var of func (all distinct)."""
    ana = arith.Analyzer()
    for loop in ir.collect(func.body, ir.For):
        ana.update(loop.loop_var, loop.extent)
    for iv in ir.collect(func.body, ir.IterVar):
        ana.update(iv.var, iv.extent)
    return ana


def _map_region(r: BufferRegion, new: Buffer, imap: IndexMap, ana: arith.Analyzer) -> BufferRegion:
    extents = [ana.simplify(rng.extent) for rng in r.region]
    if all(isinstance(x, IntImm) and x.value == 1 for x in extents):
        idx = imap.apply(tuple(rng.min for rng in r.region))
        return BufferRegion.point(new, tuple(ana.simplify(i) for i in idx))
    offsets = [Var(f"t{d}") for d in range(len(extents))]
    idx = imap.apply(tuple(rng.min + t for rng, t in zip(r.region, offsets)))
    dom = {t: x for t, x in zip(offsets, extents)}
    return BufferRegion(new, arith.relax_region(idx, dom, new.shape, ana))


def rewrite_accesses(func: ir.PrimFunc, buf: Buffer, new: Buffer, imap: IndexMap) -> ir.PrimFunc:
    ana = _all_ranges(func)

    def indices(idx: tuple[Expr, ...]) -> tuple[Expr, ...]:
        return tuple(ana.simplify(i) for i in imap.apply(idx))

    def visit(node: Any) -> Any:
        if isinstance(node, BufferLoad) and node.buffer is buf:
            return BufferLoad(new, indices(node.indices), node.dtype)
        if isinstance(node, BufferStore) and node.buffer is buf:
            return BufferStore(new, node.value, indices(node.indices))
        if isinstance(node, BufferRegion) and node.buffer is buf:
            return _map_region(node, new, imap, ana)
        return None
    body = ir.replace_buffers(ir.transform(func.body, visit), {buf: new})
    return func.with_body(body)


# 4. the primitive ---------------------------------------------------------------------------
def _pick_buffer(block: ir.Block, index: int, buffer_type: str) -> Buffer:
    check(buffer_type in ("read", "write"),
          f"transform_layout: buffer_type must be 'read' or 'write', got {buffer_type!r}")
    regions = block.reads if buffer_type == "read" else block.writes
    check(isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(regions),
          f"transform_layout: block {block.name} {buffer_type}s {len(regions)} buffer(s); "
          f"buffer_index {index!r} is out of range")
    return regions[index].buffer


def _transform_layout(self, block: BlockRV, buffer_index: int, buffer_type: str,
                      index_map: str) -> None:
    blk = tree.find_realize(self.func, self._block_name(block)).block
    buf = _pick_buffer(blk, buffer_index, buffer_type)
    check(buf not in self.func.params,
          f"transform_layout: buffer {buf.name} is a parameter of {self.func.name}; its layout "
          "is fixed by the caller's arrays. Stage it with cache_read/cache_write and transform "
          "the layout of the cache buffer instead")
    imap = parse_index_map(index_map)
    shape = mapped_shape(imap, buf.shape, buf.name)
    check_injective(imap, buf.shape, shape, buf.name)
    new = Buffer(buf.name, shape, buf.dtype, buf.scope)
    self.func = rewrite_accesses(self.func, buf, new, imap)


class LayoutPrimitives:
    """Mixed into Schedule. The public transform_layout turns a callable index map into its
    lambda text first, then runs the recorded instruction (kind "transform_layout") on the
    text, so traces hold JSON text and replay through the same method."""

    _transform_layout_instruction = instruction(
        "transform_layout", ("block", "buffer_index", "buffer_type", "index_map"),
        method="transform_layout")(_transform_layout)

    def transform_layout(self, block: BlockRV, buffer_index: int, buffer_type: str,
                         index_map: IndexMapLike) -> None:
        """Re-lay out the buffer_index-th read (buffer_type "read") or write ("write") buffer
        of `block` with index_map, in every access of the program. The buffer must not be a
        parameter. The trace records index_map as canonical lambda text."""
        text = parse_index_map(index_map).text
        self._transform_layout_instruction(block, buffer_index, buffer_type, text)



__all__ = ["LayoutPrimitives", "IndexMap", "parse_index_map", "mapped_shape", "check_injective"]
