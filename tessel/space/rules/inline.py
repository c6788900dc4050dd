"""AutoInline: inline elementwise producers into their consumers, or fold an elementwise
consumer into its producer (MetaSchedule's AutoInline with CPU defaults)."""
from __future__ import annotations

from dataclasses import dataclass

from tessel import ir
from tessel.ir import Block, BufferStore
from tessel.schedule import BlockRV, Schedule, ScheduleError
from tessel.space.rules.base import is_reduction


INLINE_RULE = "meta_schedule.inline_rule"


@dataclass(frozen=True)
class AutoInline:
    """`into_consumer`: compute_inline a spatial single-store block (transposes, exp, ...);
    `into_producer`: otherwise reverse_compute_inline it (epilogues such as bias add, ReLU).
    With both, a block whose one producer only moves data (its value one load: a layout
    change, a copy) takes the producer in (compute_inline of the producer) rather than going
    into it: blocks are visited consumers first, and the loops had followed the producer's
    domain. (A producer that computes keeps its loops: a Winograd output transform's
    straight-line formulas per tile, a requantizing epilogue's casts.)
    Blocks whose value branches on its indices (padding) are left to RandomComputeLocation
    unless `allow_if_then_else`, as MetaSchedule does on CPUs; a branch on data values
    (round half to even, sign, where) inlines like any arithmetic.

    `keep_shared_calls`: a producer that calls a math function (exp, tanh, ...) and feeds
    more than one consumer is not inlined here either. Inlined, every consumer computes the
    function again (softmax's exp, read by the row sum and the output); left in place,
    RandomComputeLocation samples where it is computed, inlining among its choices, so
    computing it once per row under the consumers' loop is a design the search can find.

    A block annotated meta_schedule.inline_rule = "disable" (MetaSchedule's own key) is never
    inlined: a matmul's padded copy of its operand (graph.opdefs.nn._matmul_lower), which
    inlined would be read through a clamp again."""

    into_consumer: bool = True
    into_producer: bool = True
    allow_if_then_else: bool = False
    keep_shared_calls: bool = True

    def apply(self, sch: Schedule, block: BlockRV) -> list[Schedule]:
        if not self.inlinable(sch, block):
            return [sch]
        if self.into_producer and self.into_consumer:
            # a data-moving producer goes into this block rather than this block into it:
            # the loops then walk this block's output (a layout change fused with a transpose,
            # ConvNeXt's blocked-to-channels-last: stores 96 apart lane by lane, the loads
            # contiguous, were the producer's loops kept)
            producers = sch.get_producers(block)
            if len(producers) == 1 and self.inlinable(sch, producers[0]) and \
                    isinstance(sch.get(producers[0]).body.value, ir.BufferLoad):
                try:
                    sch.compute_inline(producers[0])
                    return [sch]
                except ScheduleError:
                    pass
        for wanted, primitive in ((self.into_consumer, sch.compute_inline),
                                  (self.into_producer, sch.reverse_compute_inline)):
            if not wanted:
                continue
            try:
                primitive(block)  # a failed primitive leaves the schedule unchanged
                return [sch]
            except ScheduleError:
                continue
        return [sch]

    def inlinable(self, sch: Schedule, block: BlockRV) -> bool:
        """Whether this rule inlines `block` one way or the other (see the class docstring)."""
        node = sch.get(block)
        if is_reduction(node) or not isinstance(node.body, BufferStore) or \
                node.init is not None or node.annotations.get(INLINE_RULE) == "disable":
            return False
        if not self.allow_if_then_else and has_condition(node):
            return False
        return not (self.keep_shared_calls and calls_math(node)
                    and len(sch.get_consumers(block)) > 1)


def has_condition(block: Block) -> bool:
    """Whether the block's value branches on its indices (padding, a concatenation: a branch
    reads only where the condition holds). A branch on data (round half to even, sign, a
    where of a mask tensor) reads the same elements either way and does not count."""
    return any(not ir.collect(s.cond, ir.BufferLoad) for s in ir.collect(block.body, ir.Select)) \
        or any(c.name == "if_then_else" for c in ir.collect(block.body, ir.Call))


COSTLY = frozenset({"exp", "log", "tanh", "erf", "sigmoid", "pow"})  # tens of instructions


def calls_math(block: Block) -> bool:
    """Whether the block's value calls a costly math function (COSTLY: exp, log, tanh, ...)."""
    return any(c.name in COSTLY for c in ir.collect(block.body, ir.Call))


__all__ = ["AutoInline", "INLINE_RULE", "calls_math", "has_condition"]
