"""Schedule rules (MetaSchedule's transformation modules) and their post-order application.

A rule is a small object with one method, `apply(sch, block) -> list[Schedule]`: it analyses
one block and transforms the schedule, possibly forking it into several designs (each a
schedule of its own), or returns `[sch]` when it does not apply. `RuleSpace` applies a list
of rules to every block of a program, consumers before producers (so a producer sees the
tiled loops of its consumers when it picks a compute location), and records the designs'
traces:

    space = RuleSpace([AutoInline(), MultiLevelTiling(), ParallelizeVectorizeUnroll(cores=2)])
    traces = space.designs(func)
    sch = space.sample(func, random.Random(0))
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from tessel import intrin, ir
from tessel.ir import REDUCE, Block, BlockRealize, PrimFunc, Var
from tessel.schedule import BlockRV, LoopRV, Schedule, ScheduleError, tree
from tessel.schedule.trace import is_pure
from tessel.space.base import SearchSpace, check


class ScheduleRule(Protocol):
    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]: ...


class RuleSpace(SearchSpace):
    """The design space that a list of rules generates on any program."""

    def __init__(self, rules: Sequence[ScheduleRule], name: str | None = None) -> None:
        super().__init__()
        check(len(rules) >= 1, "a rule space needs at least one rule")
        for rule in rules:
            check(callable(getattr(rule, "apply", None)),
                  f"{rule!r} is not a schedule rule (it has no apply(sch, block) method)")
        self.rules = list(rules)
        self.name = name or "rules(" + ", ".join(type(r).__name__ for r in self.rules) + ")"

    def generate(self, func: PrimFunc, seed: int = 0) -> list[Schedule]:
        states = [Schedule(func, seed=seed)]
        for name in reversed([b.name for b in leaf_blocks(func)]):
            for rule in self.rules:
                states = [out for sch in states for out in _apply(rule, sch, name)]
        check(any(_transformed(s) for s in states),
              f"{self.name} match no block of {func.name} (blocks: "
              f"{', '.join(b.name for b in leaf_blocks(func))})")
        for sch in states:
            sch.trace = sch.trace.simplified()
        return states


def _apply(rule: ScheduleRule, sch: Schedule, name: str) -> list[Schedule]:
    if name not in {b.name for b in ir.blocks(sch.func.body)}:
        return [sch]  # inlined by an earlier rule
    trial = sch.copy()
    try:
        out = rule.apply(trial, trial.get_block(name))
    except ScheduleError:
        return [sch]
    return out or [sch]


def _transformed(sch: Schedule) -> bool:
    return any(not is_pure(i.kind) for i in sch.trace.instructions)


AUTO_TENSORIZE = "meta_schedule.auto_tensorize"  # block annotation: the intrinsic to apply
UNITS = (AUTO_TENSORIZE, intrin.ANNOTATION)  # annotations of a block scheduled as one unit


# ---- block analysis shared by the rules -----------------------------------------------------
def leaf_blocks(func: PrimFunc) -> list[Block]:
    """Blocks without blocks inside, in program order; a block that a tensor intrinsic will
    compute (annotated with one of UNITS) counts as one, and the blocks inside it do not."""
    out: list[Block] = []

    def visit(node) -> bool | None:
        if isinstance(node, Block) and node is not func.body.block:
            if any(key in node.annotations for key in UNITS):
                out.append(node)
                return False
            if not ir.collect_stmts(node.body, BlockRealize):
                out.append(node)
        return None
    ir.walk(func.body, visit)
    return out


@dataclass(frozen=True)
class LoopInfo:
    """A loop of a block whose binding is exactly one iter var."""

    loop: LoopRV
    extent: int
    kind: str  # the iter var kind: "spatial" or "reduce"
    var: Var | None = None  # the block iter var it binds


def simple_loops(sch: Schedule, block: BlockRV) -> list[LoopInfo] | None:
    """The block's loops, each binding exactly one of its iter vars directly (an untiled
    block), or None when the bindings are anything else. An iter var of extent 1 bound to 0
    (a primitive simplified its unit loop's variable away) pairs with a unit loop that binds
    nothing."""
    realize = block_realize(sch, block)
    loops = sch.get_loops(block)
    nodes = [sch.get(l) for l in loops]
    by_var = {n.loop_var: (l, n) for l, n in zip(loops, nodes)}
    if not ir.is_true(realize.predicate):
        return None
    infos, unbound = [], 0
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        if iv.extent == 1 and ir.as_int(value) == 0:
            unbound += 1
            continue
        if not isinstance(value, Var) or value not in by_var:
            return None
        loop, node = by_var.pop(value)
        infos.append((nodes.index(node), LoopInfo(loop, node.extent, iv.kind, iv.var)))
    if len(by_var) != unbound or any(node.extent != 1 for _, node in by_var.values()):
        return None
    return [info for _, info in sorted(infos, key=lambda x: x[0])]


def single_reads(block: Block) -> list[tuple[int, tuple[ir.Expr, ...]]]:
    """(position in block.reads, index tuple) of each read the block loads at one index
    tuple only (B[k, j] of a matmul; not a stencil's several taps)."""
    out = []
    for index, region in enumerate(block.reads):
        loads = {l.indices for l in ir.collect(block.body, ir.BufferLoad)
                 if l.buffer is region.buffer}
        if len(loads) == 1:
            out.append((index, next(iter(loads))))
    return out


def block_realize(sch: Schedule, block: BlockRV) -> BlockRealize:
    return tree.find_realize(sch.func, sch.get(block).name)


def is_reduction(block: Block) -> bool:
    return any(iv.kind == REDUCE for iv in block.iter_vars)


def writes_output(func: PrimFunc, block: Block) -> bool:
    return bool(ir.written_buffers(block) & set(func.params))


def has_data_reuse(block: Block) -> bool:
    """Some read does not depend on some spatial iter var (so tiling can reuse it), or is a
    sliding window: one of its indices moves with both a spatial and a reduction iter var
    (y * 2 + ry of a pooling window, whose neighbours overlap; a tile of outputs keeps its
    partial results in registers while the window slides)."""
    spatial = [iv.var for iv in block.iter_vars if iv.kind != REDUCE]
    reduce = [iv.var for iv in block.iter_vars if iv.kind == REDUCE]
    if not spatial:
        return False
    for r in block.reads:
        if not all(any(ir.uses_var(rg.min, v) for rg in r.region) for v in spatial):
            return True
        if any(any(ir.uses_var(rg.min, v) for v in spatial)
               and any(ir.uses_var(rg.min, v) for v in reduce) for rg in r.region):
            return True
    return False


__all__ = ["AUTO_TENSORIZE", "UNITS", "ScheduleRule", "RuleSpace", "leaf_blocks", "LoopInfo",
           "simple_loops", "single_reads", "block_realize",
           "is_reduction", "writes_output", "has_data_reuse"]
