"""The core of Schedule (schedule.py shows it in use): the program under transformation, its
random variables, its trace, the `instruction` decorator and the queries (get_block,
get_loops, ...).

Every public primitive and sampling method is an *instruction*: calling it records one
entry in `sch.trace` (calls made by other primitives are not recorded). A primitive either
succeeds or raises ScheduleError and leaves the schedule exactly as it was.
"""
from __future__ import annotations

import functools
import inspect
import random
from typing import Any, Callable, TypeVar

from tessel.ir import Block, For, PrimFunc
from tessel.schedule import tree
from tessel.schedule.trace import (RV, BlockRV, Instruction, InstructionKind, IntRV, LoopRV,
                                   ScheduleError, Trace, check, register)

F = TypeVar("F", bound=Callable[..., Any])


def instruction(name: str, params: tuple[str, ...], *, sampling: bool = False,
                pure: bool = False, method: str | None = None) -> Callable[[F], F]:
    """Register a Schedule method as the instruction kind `name` with the argument list
    `params` (its parameters, in order, but `self` and a sampling method's `decision`), and
    make it record itself in the trace when called from outside. The registry, not the
    method's signature, defines what a trace stores; a method whose parameters do not match
    its registered list is refused at import time."""
    def wrap(fn: F) -> F:
        sig = inspect.signature(fn)
        names = tuple(p for p in sig.parameters if p not in ("self", "decision"))
        if names != params:
            raise TypeError(f"{fn.__qualname__}: parameters {names} differ from instruction "
                            f"{name!r}'s registered arguments {params}")
        variadic = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
        kind = register(InstructionKind(name, params, method or name, variadic, sampling, pure))
        return _recording(fn, sig, kind)  # type: ignore[return-value]
    return wrap


def _recording(fn: Callable[..., Any], sig: inspect.Signature, kind: InstructionKind
               ) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(self: "ScheduleBase", *args: Any, **kwargs: Any) -> Any:
        if self._depth:
            return fn(self, *args, **kwargs)
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        self._depth += 1
        self._decision = None
        try:
            out = fn(self, *args, **kwargs)
        finally:
            self._depth -= 1
        recorded = tuple((k, _freeze(bound.arguments[k])) for k in kind.params)
        outputs = tuple(o for o in (out if isinstance(out, (list, tuple)) else (out,))
                        if isinstance(o, RV))
        self.trace.append(Instruction(kind.name, recorded, outputs), self._decision)
        return out

    return wrapper


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


class ScheduleBase:
    def __init__(self, func: PrimFunc, seed: int = 0) -> None:
        if not isinstance(func, PrimFunc):
            raise ScheduleError(f"Schedule needs a PrimFunc, got {type(func).__name__}")
        self.func = func
        self.trace = Trace()
        self.rng = random.Random(seed)
        self._rvs: dict[RV, Any] = {}
        self._next_id = 0
        self._depth = 0
        self._decision: Any = None

    # ---- random variables -------------------------------------------------------------
    def _new(self, cls: type, value: Any) -> Any:
        rv = cls(self._next_id)
        self._next_id += 1
        self._rvs[rv] = value
        return rv

    def _value(self, rv: Any, cls: type) -> Any:
        check(isinstance(rv, cls), f"expected a {cls.__name__}, got {rv!r}")
        check(rv in self._rvs, f"{rv!r} does not belong to this schedule")
        return self._rvs[rv]

    def get(self, rv: Any) -> Any:
        """The current node or value behind a random variable: a Block, a For or an int."""
        if isinstance(rv, BlockRV):
            return tree.find_realize(self.func, self._value(rv, BlockRV)).block
        if isinstance(rv, LoopRV):
            return tree.find_loop(self.func, self._value(rv, LoopRV))
        return self._value(rv, IntRV)

    def _int(self, v: Any) -> int | None:
        """A factor argument: an int, an IntRV, or None."""
        if v is None or isinstance(v, int):
            return v
        return self._value(v, IntRV)

    def copy(self):
        """An independent schedule in the same state (same program, trace, random stream)."""
        out = type(self).__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.trace = self.trace.copy()
        out._rvs = dict(self._rvs)
        out.rng = random.Random()
        out.rng.setstate(self.rng.getstate())
        return out

    # ---- queries ------------------------------------------------------------------------
    @instruction("get_block", ("name",), pure=True)
    def get_block(self, name: str) -> BlockRV:
        """The block called `name` (ScheduleError if the program has none)."""
        tree.block_path(self.func, name)
        return self._new(BlockRV, name)

    @instruction("get_loops", ("block",), pure=True)
    def get_loops(self, block: BlockRV) -> list[LoopRV]:
        """The loops around `block` inside its scope, outermost first."""
        path = tree.block_path(self.func, self._value(block, BlockRV))
        return [self._new(LoopRV, loop.loop_var) for loop in tree.enclosing_loops(path)]

    @instruction("get_child_blocks", ("parent",), pure=True)
    def get_child_blocks(self, parent: BlockRV | LoopRV) -> list[BlockRV]:
        """The blocks directly under a block or loop, in program order."""
        node = self.get(parent)
        return [self._new(BlockRV, b.name) for b in tree.child_blocks(node)]

    @instruction("get_producers", ("block",), pure=True)
    def get_producers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks in the same scope that write a buffer `block` reads, in program order."""
        blk = self.get(block)
        reads = {r.buffer for r in blk.reads}
        return [self._new(BlockRV, b.name) for b in self._scope_blocks(block)
                if b is not blk and reads & {w.buffer for w in b.writes}]

    @instruction("get_consumers", ("block",), pure=True)
    def get_consumers(self, block: BlockRV) -> list[BlockRV]:
        """Blocks in the same scope that read a buffer `block` writes, in program order."""
        blk = self.get(block)
        writes = {w.buffer for w in blk.writes}
        return [self._new(BlockRV, b.name) for b in self._scope_blocks(block)
                if b is not blk and writes & {r.buffer for r in b.reads}]

    def _scope_blocks(self, block: BlockRV) -> list[Block]:
        path = tree.block_path(self.func, self._value(block, BlockRV))
        return tree.child_blocks(tree.scope_block(path))

    def _block_name(self, block: BlockRV) -> str:
        name = self._value(block, BlockRV)
        tree.block_path(self.func, name)
        return name

    def _loop(self, loop: LoopRV) -> For:
        return tree.find_loop(self.func, self._value(loop, LoopRV))

    def __repr__(self) -> str:
        return f"Schedule({self.func.name}, {len(self.trace)} instructions)"


__all__ = ["ScheduleBase", "instruction"]
