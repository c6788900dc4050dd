"""Replay that shares work between traces of one design.

A search replays many traces of one workload that differ in a few decisions: the mutants of
an evolutionary search change one tile size or the unroll step of a program measured before,
and everything up to the first changed decision (the inlined producers, the splits and
reorders of the tiles that did not change) is rebuilt identically each time.

    cache = ReplayCache(func)
    sch = cache.apply(trace)        # == trace.apply(Schedule(func)), structurally

A ReplayCache keeps a trie of the instructions (with their decisions) of every trace it has
replayed, and at each node that precedes a sampling instruction a snapshot of the schedule
there (Schedule.copy: the IR is immutable and shared, so a snapshot costs a few dicts). A new
trace starts from the deepest snapshot on its path and replays only the rest. Schedules are
deterministic functions of the program and the instructions with their decisions, so the
result is the program plain replay builds, with the same trace.
"""
from __future__ import annotations

from typing import Any, Mapping

from tessel.ir import PrimFunc
from tessel.schedule.schedule import Schedule
from tessel.schedule.trace import RV, Trace, is_sampling

MAX_STATES = 4096  # snapshots kept; past this the cache starts over


class _Node:
    __slots__ = ("children", "state")

    def __init__(self) -> None:
        self.children: dict[tuple[Any, Any], _Node] = {}
        self.state: tuple[Schedule, dict[RV, Any]] | None = None


class ReplayCache:
    """Replays traces on `func` (from Schedule(func, seed)), sharing common prefixes."""

    def __init__(self, func: PrimFunc, seed: int = 0, max_states: int = MAX_STATES) -> None:
        self.func, self.seed, self.max_states = func, seed, max_states
        self.replayed = self.shared = 0  # instructions replayed / skipped thanks to the cache
        self._start_over()

    def apply(self, trace: Trace, decisions: Mapping[int, Any] | None = None) -> Schedule:
        """The schedule `trace` (with `decisions` overriding its own) builds on the program;
        ScheduleError when it does not fit, as Trace.apply."""
        chosen = trace.chosen(decisions)
        edges = [_edge(trace, index, chosen) for index in range(len(trace.instructions))]
        node, start = self._deepest(edges)
        sch, env = node.state[0].copy(), dict(node.state[1])
        self.shared += start
        for index in range(start, len(edges)):
            if edges[index][1] is not _PLAIN and node.state is None:  # before a sampling step
                self._store(node, sch, env)
            trace.replay_step(sch, index, env, chosen)
            self.replayed += 1
            node = node.children.setdefault(edges[index], _Node())
        return sch

    def _deepest(self, edges: list[tuple[Any, Any]]) -> tuple[_Node, int]:
        """The deepest node on the path of `edges` that holds a snapshot, and the index of
        the instruction it stands before."""
        node, best = self._root, (self._root, 0)
        for index, edge in enumerate(edges):
            node = node.children.get(edge)
            if node is None:
                break
            if node.state is not None:
                best = (node, index + 1)
        return best

    def _store(self, node: _Node, sch: Schedule, env: dict[RV, Any]) -> None:
        if self.states >= self.max_states:
            self._start_over()  # the old trie is dropped
            return
        node.state = (sch.copy(), dict(env))
        self.states += 1

    def _start_over(self) -> None:
        self._root, self.states = _Node(), 0
        self._root.state = (Schedule(self.func, seed=self.seed), {})


_PLAIN = object()  # the decision slot of an edge that is not a sampling instruction


def _edge(trace: Trace, index: int, chosen: Mapping[int, Any]) -> tuple[Any, Any]:
    inst = trace.instructions[index]
    return inst, chosen.get(index) if is_sampling(inst.kind) else _PLAIN


__all__ = ["ReplayCache", "MAX_STATES"]
