"""Loop primitives: split, fuse, reorder, add_unit_loop, and the loop-kind annotations
parallel, vectorize, unroll, bind, plus free-form annotate/unannotate.

As in TensorIR, blocks never change here: only the loops around them and the expressions
that bind block iteration variables to loop variables (and block predicates).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from tessel import arith, ir
from tessel.ir import REDUCE, THREAD_TAGS, BlockRealize, Expr, For, Stmt, Var
from tessel.schedule import tree
from tessel.schedule.base import instruction
from tessel.schedule.trace import BlockRV, IntRV, LoopRV, ScheduleError, check


def _outer_analyzer(path: list[Any]) -> arith.Analyzer:
    ana = arith.Analyzer()
    for node in path[:-1]:
        if isinstance(node, For):
            ana.update(node.loop_var, node.extent)
    return ana


def simplify_at(path: list[Any], stmt: Stmt) -> Stmt:
    """Simplify `stmt`, which replaces path[-1], knowing the ranges of the loops above it."""
    return arith.simplify_stmt(stmt, _outer_analyzer(path))


def _check_serial(loop: For, primitive: str) -> None:
    check(loop.kind == "serial", f"{primitive}: loop {loop.loop_var.name} is {loop.kind}; "
                                 f"{primitive} works on serial loops only")


def _check_kind_nesting(func: Any, primitive: str) -> None:
    """C/OpenMP limits on loop kinds: one level of parallelism, no parallel loop inside a
    vectorized one."""
    def walk(node: Any, parallel: For | None, vector: For | None) -> None:
        if isinstance(node, For):
            name = node.loop_var.name
            if node.kind == "parallel":
                check(parallel is None, f"{primitive}: parallel loop {name} would be nested in "
                      f"parallel loop {parallel.loop_var.name if parallel else ''}")
                check(vector is None, f"{primitive}: parallel loop {name} would be inside "
                      f"vectorized loop {vector.loop_var.name if vector else ''}")
                parallel = node
            elif node.kind == "vectorized":
                vector = node
        for child in ir.children(node):
            if isinstance(child, Stmt):
                walk(child, parallel, vector)
    walk(func.body, None, None)


def _with_predicate(stmt: Stmt, cond: Expr) -> Stmt:
    """Add `cond` to the predicate of every block realized under stmt (not inside blocks)."""
    def visit(node: Any) -> Any:
        if isinstance(node, BlockRealize):
            return BlockRealize(node.iter_values, ir.logical_and(node.predicate, cond), node.block)
        return None
    return _map_realizes(stmt, visit)


def _map_realizes(stmt: Stmt, fn) -> Stmt:
    realizes = tree.loop_nest_blocks(stmt)  # blocks directly under stmt
    names = {b.name for b in realizes}
    mapping = {}
    for r in ir.collect(stmt, BlockRealize):
        if r.block.name in names:
            new = fn(r)
            if new is not None:
                mapping[id(r)] = new
    return tree.rebuild(stmt, mapping)


def _spatial_only(loop: For, primitive: str) -> None:
    """Every block under `loop` must bind the loop var only to spatial iter vars."""
    for r in ir.collect(loop.body, BlockRealize):
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            if iv.kind == REDUCE and ir.uses_var(value, loop.loop_var):
                raise ScheduleError(
                    f"{primitive}: loop {loop.loop_var.name} carries reduction iter var "
                    f"{iv.var.name} of block {r.block.name}; it cannot run in {primitive} form")


def _perfect_chain(loops: list[For]) -> None:
    for outer, inner in zip(loops, loops[1:]):
        check(outer.body is inner,
              f"loops {outer.loop_var.name} and {inner.loop_var.name} are not perfectly nested "
              "(something else sits between them)")


class LoopPrimitives:
    """Mixed into Schedule."""

    @instruction("split", ("loop", "factors"))
    def split(self, loop: LoopRV, factors: list[int | IntRV | None]) -> list[LoopRV]:
        """Split `loop` into len(factors) nested loops, outermost first. One factor may be
        None (inferred). If the product exceeds the extent, blocks get a predicate."""
        node = self._loop(loop)
        _check_serial(node, "split")
        values = [self._int(f) for f in factors]
        extents = _infer_factors(node, values)
        path = tree.loop_path(self.func, node.loop_var)
        name = node.loop_var.name
        new_vars = [Var(f"{name}_{i}") for i in range(len(extents))]
        fused: Expr = ir.const(0)
        for v, n in zip(new_vars, extents):
            fused = fused * n + v
        body = ir.substitute(node.body, {node.loop_var: fused})
        if math.prod(extents) != node.extent:
            body = _with_predicate(body, fused < node.extent)
        stmt: Stmt = body
        for v, n in reversed(list(zip(new_vars, extents))):
            stmt = For(v, n, stmt)
        self.func = tree.replace(self.func, node, simplify_at(path, stmt))
        return [self._new(LoopRV, v) for v in new_vars]

    @instruction("fuse", ("loops",))
    def fuse(self, *loops: LoopRV) -> LoopRV:
        """Fuse perfectly nested serial loops (outermost first) into one."""
        check(len(loops) >= 1, "fuse needs at least one loop")
        nodes = [self._loop(l) for l in loops]
        check(len({id(n) for n in nodes}) == len(nodes), "fuse: a loop is listed twice")
        for n in nodes:
            _check_serial(n, "fuse")
        _perfect_chain(nodes)
        path = tree.loop_path(self.func, nodes[0].loop_var)
        fused = Var("_".join(n.loop_var.name for n in nodes) + "_fused")
        vmap, stride = {}, 1
        for n in reversed(nodes):
            vmap[n.loop_var] = (fused // stride) % n.extent if n is not nodes[0] else fused // stride
            stride *= n.extent
        stmt = For(fused, stride, ir.substitute(nodes[-1].body, vmap))
        self.func = tree.replace(self.func, nodes[0], simplify_at(path, stmt))
        return self._new(LoopRV, fused)

    @instruction("reorder", ("loops",))
    def reorder(self, *loops: LoopRV) -> None:
        """Put the given loops, which lie on one chain of single-child nesting, in this order
        (the loops between them keep their places)."""
        nodes = [self._loop(l) for l in loops]
        check(len({id(n) for n in nodes}) == len(nodes), "reorder: a loop is listed twice")
        ids = {id(n) for n in nodes}
        chain = _chain_between(self.func, nodes)
        placed = iter(nodes)
        new_chain = [next(placed) if id(c) in ids else c for c in chain]
        body = chain[-1].body
        new_func = tree.replace(self.func, chain[0], tree.wrap_loops(new_chain, body))
        _check_kind_nesting(new_func, "reorder")
        self.func = new_func

    @instruction("add_unit_loop", ("target",))
    def add_unit_loop(self, target: BlockRV | LoopRV) -> LoopRV:
        """Wrap a block or loop in a new loop of extent 1."""
        if isinstance(target, BlockRV):
            path = tree.block_path(self.func, self._block_name(target))
        else:
            path = tree.loop_path(self.func, self._value(target, LoopRV))
        var = Var("u")
        self.func = tree.replace(self.func, path[-1], For(var, 1, path[-1]))
        return self._new(LoopRV, var)

    def _set_kind(self, loop: LoopRV, kind: str, thread: str | None = None,
                  check_as: str | None = None) -> None:
        node = self._loop(loop)
        new = For(node.loop_var, node.extent, node.body, kind, thread, node.annotations)
        new_func = tree.replace(self.func, node, new)
        if check_as:
            _check_kind_nesting(new_func, check_as)
        self.func = new_func

    @instruction("parallel", ("loop",))
    def parallel(self, loop: LoopRV) -> None:
        """Run `loop`'s iterations on the target's cores (OpenMP). The loop may carry no
        reduction, and parallel loops may not nest or sit inside a vectorized loop."""
        node = self._loop(loop)
        _spatial_only(node, "parallel")
        self._set_kind(loop, "parallel", check_as="parallel")

    @instruction("vectorize", ("loop",))
    def vectorize(self, loop: LoopRV) -> None:
        """Run `loop`'s iterations in vector lanes. The loop may carry no reduction; code
        generation decides how (vector loads and stores, or `omp simd` with the reason)."""
        node = self._loop(loop)
        _spatial_only(node, "vectorized")
        self._set_kind(loop, "vectorized", check_as="vectorize")

    @instruction("unroll", ("loop",))
    def unroll(self, loop: LoopRV) -> None:
        """Unroll `loop` completely in the generated code."""
        self._set_kind(loop, "unrolled")

    @instruction("bind", ("loop", "thread"))
    def bind(self, loop: LoopRV, thread: str) -> None:
        """Bind `loop` to a GPU thread axis (tessel.ir.THREAD_TAGS), for GPU code; the C
        backend refuses bound loops. Only a vthread may carry a reduction."""
        check(thread in THREAD_TAGS, f"bind: unknown thread axis {thread!r}; use one of "
                                     f"{THREAD_TAGS}")
        node = self._loop(loop)
        if thread != "vthread":
            _spatial_only(node, f"bound to {thread}")
        self._set_kind(loop, "thread_binding", thread)

    @instruction("annotate", ("target", "key", "value"))
    def annotate(self, target: BlockRV | LoopRV, key: str, value: Any) -> None:
        """Attach a hint such as pragma_auto_unroll_max_step=64 to a loop or block. The value
        may be an IntRV (a sampled value, e.g. from sample_categorical)."""
        check(isinstance(key, str) and key, "annotate: key must be a non-empty string")
        if isinstance(value, IntRV):
            value = self._value(value, IntRV)
        check(isinstance(value, (int, float, str, bool)),
              f"annotate: value must be a number, string or bool, got {value!r}")
        self._set_annotations(target, lambda a: {**a, key: value})

    @instruction("unannotate", ("target", "key"))
    def unannotate(self, target: BlockRV | LoopRV, key: str) -> None:
        """Remove the annotation `key` from a loop or block (it must be there)."""
        node = self.get(target)
        check(key in node.annotations, f"unannotate: no annotation {key!r} on {target!r}")
        self._set_annotations(target, lambda a: {k: v for k, v in a.items() if k != key})

    def _set_annotations(self, target: BlockRV | LoopRV, fn) -> None:
        node = self.get(target)
        new = dataclasses.replace(node, annotations=fn(node.annotations))
        if isinstance(target, BlockRV):
            realize = tree.find_realize(self.func, node.name)
            self.func = tree.replace(self.func, realize, dataclasses.replace(realize, block=new))
        else:
            self.func = tree.replace(self.func, node, new)


def _infer_factors(loop: For, values: list[int | None]) -> list[int]:
    name = loop.loop_var.name
    check(len(values) >= 2, f"split: loop {name} needs at least 2 factors, got {len(values)}")
    check(sum(v is None for v in values) <= 1, f"split: loop {name}: at most one factor may be None")
    for v in values:
        check(v is None or v >= 1, f"split: loop {name}: factors must be positive, got {values}")
    known = math.prod(v for v in values if v is not None)
    if None in values:
        return [-(-loop.extent // known) if v is None else v for v in values]
    check(known >= loop.extent, f"split: factors {values} of loop {name} multiply to {known}, "
                                f"less than its extent {loop.extent}")
    return list(values)


def _chain_between(func: ir.PrimFunc, nodes: list[For]) -> list[For]:
    """The loop chain from the outermost to the innermost of `nodes`, each the only child of
    the one above."""
    paths = [tree.loop_path(func, n.loop_var) for n in nodes]
    deepest = max(paths, key=len)
    top = min(paths, key=len)[-1]
    for p in paths:
        check(any(x is p[-1] for x in deepest), "reorder: the loops are not on one line of nesting")
    start = next(i for i, x in enumerate(deepest) if x is top)
    chain = deepest[start:]
    for c in chain:
        check(isinstance(c, For), "reorder: a block lies between the loops")
    _perfect_chain(chain)
    return chain
