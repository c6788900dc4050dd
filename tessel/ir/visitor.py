"""Generic traversal of IR trees: `walk` (pre-order visit), `transform` (post-order rebuild)
and `StmtMutator` (top-down statement rebuild, for passes that keep state on the way down).

Children are found from the dataclass fields of each node, so every node kind is handled
without per-class visitor methods. Buffers are leaves that `transform` may replace too.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Mapping

from tessel.ir.buffer import Buffer, BufferRegion, Range
from tessel.ir.expr import BufferLoad, Expr, Var
from tessel.ir.stmt import (Block, BlockRealize, BufferStore, For, IfThenElse, IterVar,
                            SeqStmt, Stmt, seq)

NODE_TYPES = (Expr, Stmt, IterVar, BufferRegion, Range, Buffer)
_FIELDS: dict[type, tuple[str, ...]] = {}
_NODE_FIELDS: dict[type, tuple[str, ...]] = {}
# field annotations that never hold a node: traversals skip those fields
_LEAF_ANNOTATIONS = frozenset({"str", "str | None", "int", "int | None", "float", "bool",
                               "dict[str, Any]", "tuple[int, ...]", "tuple[Slot, ...]"})


def _fields(cls: type) -> tuple[str, ...]:
    if cls not in _FIELDS:
        _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls))
    return _FIELDS[cls]


def _node_fields(cls: type) -> tuple[str, ...]:
    """The fields of `cls` that may hold nodes (by their annotation; unknown ones count); a
    buffer has none (buffers are leaves)."""
    if cls not in _NODE_FIELDS:
        _NODE_FIELDS[cls] = () if issubclass(cls, Buffer) else tuple(
            f.name for f in dataclasses.fields(cls) if str(f.type) not in _LEAF_ANNOTATIONS)
    return _NODE_FIELDS[cls]


def children(node: Any) -> Iterator[Any]:
    """The direct child nodes of `node`, in field order."""
    return iter(_children(node))


def _lister(kinds: type | tuple[type, ...]) -> Callable[[Any], list[Any]]:
    """A function listing a node's direct children that are `kinds`, in field order."""
    def listed(node: Any) -> list[Any]:
        names = _NODE_FIELDS.get(type(node))
        if names is None:
            names = _node_fields(type(node))
        out = []
        for name in names:
            value = getattr(node, name)
            if isinstance(value, kinds):
                out.append(value)
            elif type(value) is tuple:
                out.extend([v for v in value if isinstance(v, kinds)])
        return out
    return listed


_children = _lister(NODE_TYPES)
_stmt_children = _lister(Stmt)  # a statement's statements are never inside its expressions


def walk(node: Any, fn: Callable[[Any], bool | None]) -> None:
    """Call fn on every node, parents first. If fn returns False, skip that node's children."""
    _walk(node, fn, _children)


def _walk(node: Any, fn: Callable[[Any], bool | None],
          kids: Callable[[Any], list[Any]]) -> None:
    stack = [node]
    pop, extend = stack.pop, stack.extend
    while stack:
        n = pop()
        if fn(n) is False:
            continue
        below = kids(n)
        if below:
            below.reverse()
            extend(below)


def transform(node: Any, fn: Callable[[Any], Any],
              keep: Callable[[Any], bool] | None = None) -> Any:
    """Rebuild `node` bottom-up: children first, then `fn(rebuilt)`; None from fn keeps it.

    Unchanged subtrees are shared, not copied. A node for which `keep` says True is kept as it
    is, without a look inside (a caller that knows fn changes nothing there). An expression
    that occurs more than once in `node` (the same object: a load that several terms share)
    is rebuilt once and its result shared, so a tree that is a DAG stays one, and a pass over
    it costs its distinct nodes, not its paths.
    """
    return _transform(node, fn, keep, {})


def _transform(node: Any, fn: Callable[[Any], Any], keep: Callable[[Any], bool] | None,
               memo: dict[int, tuple[Any, Any]]) -> Any:
    if isinstance(node, Expr):
        hit = memo.get(id(node))
        if hit is not None:
            return hit[1]
    if keep is not None and keep(node):
        return node
    if isinstance(node, Buffer):
        out = fn(node)
        return node if out is None else out
    changes = {}
    for name in _node_fields(type(node)):
        value = getattr(node, name)
        if isinstance(value, NODE_TYPES):
            new = _transform(value, fn, keep, memo)
            if new is not value:
                changes[name] = new
        elif isinstance(value, tuple) and any(isinstance(v, NODE_TYPES) for v in value):
            new_t = tuple(_transform(v, fn, keep, memo) if isinstance(v, NODE_TYPES) else v
                          for v in value)
            if any(a is not b for a, b in zip(new_t, value)):
                changes[name] = new_t
    rebuilt = dataclasses.replace(node, **changes) if changes else node
    out = fn(rebuilt)
    result = rebuilt if out is None else out
    if isinstance(node, Expr):
        memo[id(node)] = (node, result)  # holding node keeps its id unique
    return result


class StmtMutator:
    """Rebuilds a statement tree top-down: `stmt` sends each node but a SeqStmt to the method
    of its kind: `loop` (For), `branch` (IfThenElse), `realize` (BlockRealize), `scope` (other
    nodes with a statement `body`: codegen's Allocate, Promote) or `leaf` (stores, comments).
    Each rebuilds its node, conditions and bindings through `expr` (here unchanged); a pass
    overrides the kinds it changes."""

    def stmt(self, s: Stmt) -> Stmt:
        if isinstance(s, SeqStmt):
            return seq(*(self.stmt(x) for x in s.seq))
        if isinstance(s, For):
            return self.loop(s)
        if isinstance(s, IfThenElse):
            return self.branch(s)
        if isinstance(s, BlockRealize):
            return self.realize(s)
        if isinstance(getattr(s, "body", None), Stmt):
            return self.scope(s)
        return self.leaf(s)

    def loop(self, s: For) -> Stmt:
        return dataclasses.replace(s, body=self.stmt(s.body))

    def branch(self, s: IfThenElse) -> Stmt:
        return IfThenElse(self.expr(s.condition), self.stmt(s.then_case),
                          None if s.else_case is None else self.stmt(s.else_case))

    def realize(self, r: BlockRealize) -> Stmt:
        block = r.block
        init = None if block.init is None else self.stmt(block.init)
        block = dataclasses.replace(block, init=init, body=self.stmt(block.body))
        return BlockRealize(tuple(self.expr(v) for v in r.iter_values), self.expr(r.predicate),
                            block)

    def scope(self, s: Stmt) -> Stmt:
        return dataclasses.replace(s, body=self.stmt(s.body))

    def leaf(self, s: Stmt) -> Stmt:
        return s

    def expr(self, e: Expr) -> Expr:
        return e


def substitute(node: Any, vmap: Mapping[Var, Expr]) -> Any:
    """Replace variables by expressions (no re-simplification; see tessel.arith)."""
    if not vmap:
        return node
    return transform(node, lambda n: vmap.get(n) if isinstance(n, Var) else None)


def replace_buffers(node: Any, bmap: Mapping[Buffer, Buffer]) -> Any:
    if not bmap:
        return node
    return transform(node, lambda n: bmap.get(n) if isinstance(n, Buffer) else None)


def collect(node: Any, kind: type | tuple[type, ...], distinct: bool = False) -> list[Any]:
    """All nodes of the given type(s), in pre-order, with repeats; with `distinct`, an
    expression that occurs several times as the same object (a load shared by the terms of
    a formula) is visited, and listed, once."""
    found: list[Any] = []
    if not distinct:
        walk(node, lambda n: found.append(n) if isinstance(n, kind) else None)
        return found
    seen: set[int] = set()

    def visit(n: Any) -> bool | None:
        if isinstance(n, Expr):
            if id(n) in seen:
                return False
            seen.add(id(n))
        if isinstance(n, kind):
            found.append(n)
        return None
    walk(node, visit)
    return found


def collect_stmts(node: Any, kind: type | tuple[type, ...]) -> list[Any]:
    """As collect, for statement kinds: does not look inside expressions, regions and
    iteration variables, where no statement can be."""
    found: list[Any] = []
    _walk(node, lambda n: found.append(n) if isinstance(n, kind) else None, _stmt_children)
    return found


def free_vars(node: Any) -> set[Var]:
    return set(collect(node, Var))


def binding_vars(realize: BlockRealize, kind: str) -> set[Var]:
    """Variables used by the bindings of `realize`'s iter vars of one kind."""
    out: set[Var] = set()
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.kind == kind:
            out |= free_vars(value)
    return out


def uses_var(node: Any, var: Var) -> bool:
    return any(v is var for v in collect(node, Var))


def written_buffers(node: Any) -> set[Buffer]:
    return {s.buffer for s in collect_stmts(node, BufferStore)}


def read_buffers(node: Any) -> set[Buffer]:
    return {e.buffer for e in collect(node, BufferLoad, distinct=True)}


def blocks(node: Any) -> list[Block]:
    """All blocks under `node` in program order (the root block included)."""
    return collect_stmts(node, Block)


def block_realizes(node: Any) -> list[BlockRealize]:
    return collect(node, BlockRealize)
