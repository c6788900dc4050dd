"""Navigating and rewriting the program tree by node identity.

IR nodes are immutable, so a primitive finds the nodes it changes (by block name or loop
variable), builds replacements, and `replace` rebuilds the path from the root. Loop
variables and block names are the stable identities random variables point at.
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Mapping

from tessel import ir
from tessel.ir import Block, BlockRealize, For, PrimFunc, Stmt, Var
from tessel.ir.visitor import children
from tessel.schedule.trace import ScheduleError


class _Index:
    """Where every loop and block of one (immutable) tree is: each statement's parent, and
    the first BlockRealize of each block name and For of each loop variable in pre-order.
    Primitives look up several nodes of each program version; one walk answers them all."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.parent: dict[int, Any] = {}
        self.loops: dict[Var, For] = {}
        self.blocks: dict[str, BlockRealize] = {}
        stack: list[tuple[Any, Any]] = [(root, None)]
        while stack:
            node, parent = stack.pop()
            if id(node) in self.parent:
                continue  # a node shared within the tree: its first place counts
            self.parent[id(node)] = parent
            if isinstance(node, For):
                self.loops.setdefault(node.loop_var, node)
            elif isinstance(node, BlockRealize):
                self.blocks.setdefault(node.block.name, node)
            kids = [c for c in children(node) if isinstance(c, Stmt)]
            stack.extend((c, node) for c in reversed(kids))

    def path(self, node: Any | None, missing: str) -> list[Any]:
        """The nodes from the root down to `node`; ScheduleError `missing` when it is None."""
        if node is None:
            raise ScheduleError(missing)
        out = []
        while node is not None:
            out.append(node)
            node = self.parent[id(node)]
        return out[::-1]


_INDEXES: dict[int, _Index] = {}
_KEPT_INDEXES = 8
_INDEXES_LOCK = threading.Lock()  # runs sharing a budget tune in threads of one process


def _index(root: Any) -> _Index:
    with _INDEXES_LOCK:
        index = _INDEXES.get(id(root))
        if index is None or index.root is not root:
            if len(_INDEXES) >= _KEPT_INDEXES:
                _INDEXES.pop(next(iter(_INDEXES)))
            index = _INDEXES[id(root)] = _Index(root)
        return index


def block_path(func: PrimFunc, name: str) -> list[Any]:
    """Path from the function body to the BlockRealize of block `name`."""
    index = _index(func.body)
    return index.path(index.blocks.get(name), f"no block named {name!r} in {func.name}")


def loop_path(func: PrimFunc, var: Var) -> list[Any]:
    """Path from the function body to the For of loop `var`."""
    index = _index(func.body)
    return index.path(index.loops.get(var), f"loop {var.name} no longer exists in {func.name}")


def find_realize(func: PrimFunc, name: str) -> BlockRealize:
    return block_path(func, name)[-1]


def find_loop(func: PrimFunc, var: Var) -> For:
    return loop_path(func, var)[-1]


def enclosing_loops(path: list[Any]) -> list[For]:
    """The loops of `path` below its last enclosing block (outermost first)."""
    loops: list[For] = []
    for node in path[:-1]:
        if isinstance(node, Block):
            loops = []
        elif isinstance(node, For):
            loops.append(node)
    return loops


def scope_block(path: list[Any]) -> Block:
    """The nearest block strictly above the last node of `path`."""
    for node in reversed(path[:-1]):
        if isinstance(node, Block):
            return node
    raise ScheduleError("node has no enclosing block")


def replace(func: PrimFunc, old: Any, new: Any | None) -> PrimFunc:
    """Replace node `old` (by identity) with `new`; `new=None` deletes a statement from its
    sequence."""
    return replace_many(func, {id(old): new})


def replace_many(func: PrimFunc, mapping: Mapping[int, Any]) -> PrimFunc:
    """Replace several nodes at once, keyed by id(old node). A loop whose body is deleted
    is deleted too."""
    body = rebuild(func.body, mapping)
    if not isinstance(body, BlockRealize):
        raise ScheduleError("cannot remove the root block")
    return func.with_body(body)


def rebuild(node: Any, mapping: Mapping[int, Any]) -> Any:
    if id(node) in mapping:
        return mapping[id(node)]
    if isinstance(node, ir.SeqStmt):
        new_seq = [rebuild(s, mapping) for s in node.seq]
        if all(a is b for a, b in zip(new_seq, node.seq)):
            return node
        kept = [s for s in new_seq if s is not None]
        return ir.seq(*kept) if kept else None
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Stmt):
            new = rebuild(value, mapping)
            if new is None and isinstance(node, For):
                return None
            if new is not value:
                changes[f.name] = new if new is not None else ir.SeqStmt(())
    return dataclasses.replace(node, **changes) if changes else node


def loop_nest_blocks(stmt: Any) -> list[Block]:
    """Blocks directly under `stmt` (not nested inside another block's body)."""
    found: list[Block] = []

    def visit(node: Any) -> bool | None:
        if isinstance(node, BlockRealize):
            found.append(node.block)
            return False
        return None
    ir.walk(stmt, visit)
    return found


def child_blocks(node: Any) -> list[Block]:
    """Blocks directly under a block's body or a loop."""
    body = node.body if isinstance(node, (Block, For)) else node
    return loop_nest_blocks(body)


def wrap_loops(loops: list[For], body: Stmt) -> Stmt:
    """Rebuild the loop chain `loops` (outermost first) around `body`."""
    for loop in reversed(loops):
        body = For(loop.loop_var, loop.extent, body, loop.kind, loop.thread, loop.annotations)
    return body
