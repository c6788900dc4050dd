"""Traces: the record of a schedule's execution, as data.

A trace is an ordered list of instructions. Each instruction names the `Schedule` method it
replays (its kind), the keyword arguments it was called with (random variables and literal
values) and the random variables it produced. Sampling instructions (kinds starting with
`sample_`) also carry a *decision*: the value they drew. Replaying a trace on a fresh
schedule of the same program, with the same decisions, rebuilds the same program; with other
decisions it explores the design space.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tessel.errors import TesselError

if TYPE_CHECKING:
    from tessel.schedule.schedule import Schedule

FORMAT = "tessel.trace/1"


class ScheduleError(TesselError, ValueError):
    """A primitive was used where it is not legal, or a trace does not fit a program."""


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise ScheduleError(msg)


@dataclass(frozen=True)
class RV:
    """A random variable: a handle to a block, a loop or a sampled integer of one schedule."""

    id: int
    prefix = "x"

    def __repr__(self) -> str:
        return f"{self.prefix}{self.id}"


@dataclass(frozen=True, repr=False)
class BlockRV(RV):
    prefix = "b"


@dataclass(frozen=True, repr=False)
class LoopRV(RV):
    prefix = "l"


@dataclass(frozen=True, repr=False)
class IntRV(RV):
    prefix = "v"


_RV_TYPES = {cls.prefix: cls for cls in (BlockRV, LoopRV, IntRV)}
# instructions that only look things up or draw values: removable when their outputs are unused
PURE_KINDS = frozenset({"get_block", "get_loops", "get_child_blocks", "get_producers",
                        "get_consumers", "get_sref_parent"})


def is_sampling(kind: str) -> bool:
    return kind.startswith("sample_")


@dataclass(frozen=True)
class Instruction:
    kind: str
    args: tuple[tuple[str, Any], ...]
    outputs: tuple[RV, ...]

    def inputs(self) -> list[RV]:
        """The random variables this instruction reads."""
        found: list[RV] = []
        for _, v in self.args:
            for x in v if isinstance(v, tuple) else (v,):
                if isinstance(x, RV):
                    found.append(x)
        return found


def _encode(v: Any) -> Any:
    if isinstance(v, RV):
        return {"rv": repr(v)}
    if isinstance(v, tuple):
        return [_encode(x) for x in v]
    return v


def _decode(v: Any) -> Any:
    if isinstance(v, dict) and set(v) == {"rv"}:
        text = v["rv"]
        check(text[:1] in _RV_TYPES and text[1:].isdigit(), f"bad random variable {text!r}")
        return _RV_TYPES[text[0]](int(text[1:]))
    if isinstance(v, list):
        return tuple(_decode(x) for x in v)
    return v


def _freeze(v: Any) -> Any:
    return tuple(_freeze(x) for x in v) if isinstance(v, (list, tuple)) else v


class Trace:
    """Instructions plus the decisions of the sampling ones (keyed by instruction index)."""

    def __init__(self, instructions: Iterable[Instruction] = (),
                 decisions: Mapping[int, Any] | None = None) -> None:
        self.instructions: list[Instruction] = list(instructions)
        self.decisions: dict[int, Any] = {k: _freeze(v) for k, v in (decisions or {}).items()}

    def __len__(self) -> int:
        return len(self.instructions)

    def append(self, inst: Instruction, decision: Any = None) -> None:
        if is_sampling(inst.kind):
            self.decisions[len(self.instructions)] = _freeze(decision)
        self.instructions.append(inst)

    def copy(self) -> "Trace":
        return Trace(self.instructions, self.decisions)

    def sampling_sites(self) -> list[int]:
        """Indices of the sampling instructions, in order."""
        return [i for i, inst in enumerate(self.instructions) if is_sampling(inst.kind)]

    def with_decision(self, index: int, decision: Any) -> "Trace":
        """A copy whose sampling instruction `index` takes `decision` on replay."""
        check(0 <= index < len(self.instructions) and is_sampling(self.instructions[index].kind),
              f"instruction {index} is not a sampling instruction")
        out = self.copy()
        out.decisions[index] = _freeze(decision)
        return out

    def apply(self, sch: "Schedule", decisions: Mapping[int, Any] | None = None) -> "Schedule":
        """Replay on `sch` (normally a fresh schedule of the same program) and return it.

        `decisions` overrides recorded decisions by instruction index. A decision that does
        not fit raises ScheduleError and leaves no half-applied instruction behind.
        """
        env: dict[RV, Any] = {}
        chosen = {**self.decisions, **{k: _freeze(v) for k, v in (decisions or {}).items()}}
        for index, inst in enumerate(self.instructions):
            kwargs = {k: _remap(v, env, inst) for k, v in inst.args}
            if is_sampling(inst.kind):
                kwargs["decision"] = chosen.get(index)
            method = getattr(sch, inst.kind, None)
            check(method is not None and getattr(method, "is_instruction", False),
                  f"trace instruction {index} has unknown kind {inst.kind!r}")
            outs = _as_tuple(method(**kwargs))
            check(len(outs) == len(inst.outputs),
                  f"instruction {index} ({inst.kind}) made {len(outs)} outputs on replay, "
                  f"{len(inst.outputs)} when recorded")
            env.update(zip(inst.outputs, outs))
        return sch

    def simplified(self) -> "Trace":
        """Drop lookups and samples whose results nothing uses (dead-code elimination)."""
        live: set[RV] = set()
        keep: list[int] = []
        for index in range(len(self.instructions) - 1, -1, -1):
            inst = self.instructions[index]
            removable = inst.kind in PURE_KINDS or is_sampling(inst.kind)
            if removable and not live.intersection(inst.outputs):
                continue
            keep.append(index)
            live.update(inst.inputs())
        keep.reverse()
        return Trace([self.instructions[i] for i in keep],
                     {new: self.decisions[old] for new, old in enumerate(keep)
                      if old in self.decisions})

    def to_json(self) -> str:
        insts = [[i.kind, {k: _encode(v) for k, v in i.args}, [repr(o) for o in i.outputs]]
                 for i in self.instructions]
        decisions = [[k, _encode(v)] for k, v in sorted(self.decisions.items())]
        return json.dumps({"format": FORMAT, "insts": insts, "decisions": decisions})

    @staticmethod
    def from_json(text: str) -> "Trace":
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise ScheduleError(f"not a trace: {err}") from None
        check(isinstance(doc, dict) and doc.get("format") == FORMAT,
              f"not a trace (expected format {FORMAT!r})")
        insts = [Instruction(kind, tuple((k, _decode(v)) for k, v in args.items()),
                             tuple(_decode({"rv": o}) for o in outs))
                 for kind, args, outs in doc["insts"]]
        return Trace(insts, {int(k): _decode(v) for k, v in doc["decisions"]})

    def script(self) -> str:
        """Python that rebuilds the schedule, given `sch = tessel.Schedule(func)`."""
        lines = []
        for index, inst in enumerate(self.instructions):
            args = [f"{k}={_py(v)}" for k, v in inst.args]
            if index in self.decisions:
                args.append(f"decision={_py(self.decisions[index])}")
            call = f"sch.{inst.kind}({', '.join(args)})"
            outs = ", ".join(repr(o) for o in inst.outputs)
            lines.append(f"{outs} = {call}" if outs else call)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.script()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Trace) and self.instructions == other.instructions
                and self.decisions == other.decisions)

    __hash__ = None  # type: ignore[assignment]


def _py(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)


def _as_tuple(out: Any) -> tuple:
    if out is None:
        return ()
    if isinstance(out, (list, tuple)):
        return tuple(out)
    return (out,)


def _remap(v: Any, env: Mapping[RV, Any], inst: Instruction) -> Any:
    if isinstance(v, RV):
        check(v in env, f"{inst.kind} uses {v!r} before any instruction defines it")
        return env[v]
    if isinstance(v, tuple):
        return tuple(_remap(x, env, inst) for x in v)
    return v
