"""Traces: the record of a schedule's execution, as data.

A trace is an ordered list of instructions. Each instruction names its *kind* (a stable name
from the instruction registry, INSTRUCTIONS, which is also the `Schedule` method that replays
it), its arguments (random variables and literal values, named and ordered as the registry
says) and the random variables it produced. Sampling instructions also carry a *decision*:
the value they drew. Replaying a trace on a fresh schedule of the same program, with the same
decisions, rebuilds the same program; with other decisions it explores the design space.

Stored traces (format tessel.trace/2) hold each instruction's arguments as a list in the
registry's order, so renaming a Python parameter changes nothing stored. Traces of format
tessel.trace/1 (keyword arguments, before the registry) are read through the argument names
frozen in V1_ARGS; a trace of an unknown format or with an instruction this tessel does not
know is refused with a ScheduleError that says so, never replayed into another program.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from tessel.errors import TesselError

if TYPE_CHECKING:
    from tessel.schedule.schedule import Schedule

FORMAT = "tessel.trace/2"
V1_FORMAT = "tessel.trace/1"


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


@dataclass(frozen=True)
class InstructionKind:
    """What tessel knows about one kind of instruction: its stable name (stored in traces),
    its argument names in stored order (when `variadic`, the last one collects the method's
    positional arguments, as in fuse(*loops)), the Schedule method that replays it, and
    whether it draws a decision (sampling) or only looks things up (pure: removable when
    its outputs are unused)."""
    name: str
    params: tuple[str, ...]
    method: str
    variadic: bool = False
    sampling: bool = False
    pure: bool = False

    def call_args(self, values: tuple) -> tuple:
        """The positional arguments of the replaying method, given the stored values."""
        return (*values[:-1], *values[-1]) if self.variadic else tuple(values)


INSTRUCTIONS: dict[str, InstructionKind] = {}


def register(kind: InstructionKind) -> InstructionKind:
    """Add a kind to the registry (one definition per name)."""
    known = INSTRUCTIONS.get(kind.name)
    check(known is None or known == kind,
          f"instruction kind {kind.name!r} is registered twice, differently")
    INSTRUCTIONS[kind.name] = kind
    return kind


def instruction_kind(name: str, index: int) -> InstructionKind:
    kind = INSTRUCTIONS.get(name)
    check(kind is not None, f"trace instruction {index} has unknown kind {name!r} (a trace "
                            "made by another version of tessel?)")
    return kind


# The argument names of format tessel.trace/1, which stored arguments by the name of the
# Python parameter at the time (frozen: old records are read through this table, whatever
# the parameters are called today).
V1_ARGS: dict[str, tuple[str, ...]] = {
    "add_unit_loop": ("target",), "annotate": ("target", "key", "value"),
    "bind": ("loop", "thread"),
    "cache_read": ("block", "read_buffer_index", "storage_scope"),
    "cache_write": ("block", "write_buffer_index", "storage_scope"),
    "compute_at": ("block", "loop", "preserve_unit_loops"), "compute_inline": ("block",),
    "decompose_reduction": ("block", "loop"), "fuse": ("loops",), "get_block": ("name",),
    "get_child_blocks": ("parent",), "get_consumers": ("block",), "get_loops": ("block",),
    "get_producers": ("block",), "parallel": ("loop",), "reorder": ("loops",),
    "reverse_compute_at": ("block", "loop", "preserve_unit_loops"),
    "reverse_compute_inline": ("block",), "rfactor": ("loop", "factor_axis"),
    "sample_categorical": ("candidates", "probs"), "sample_compute_location": ("block",),
    "sample_perfect_tile": ("loop", "n", "max_innermost_factor"),
    "split": ("loop", "factors"),
    "transform_layout": ("block", "buffer_index", "buffer_type", "index_map"),
    "unannotate": ("target", "key"), "unroll": ("loop",), "vectorize": ("loop",),
}


def is_sampling(kind: str) -> bool:
    found = INSTRUCTIONS.get(kind)
    return found is not None and found.sampling


def is_pure(kind: str) -> bool:
    found = INSTRUCTIONS.get(kind)
    return found is not None and found.pure


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
        chosen = self.chosen(decisions)
        for index in range(len(self.instructions)):
            self.replay_step(sch, index, env, chosen)
        return sch

    def chosen(self, decisions: Mapping[int, Any] | None = None) -> dict[int, Any]:
        """The decisions a replay takes: the recorded ones, overridden by `decisions`."""
        return {**self.decisions, **{k: _freeze(v) for k, v in (decisions or {}).items()}}

    def replay_step(self, sch: "Schedule", index: int, env: dict[RV, Any],
                    chosen: Mapping[int, Any]) -> None:
        """Replay instruction `index` on `sch`; `env` maps the trace's random variables to
        the schedule's (and takes the instruction's outputs)."""
        inst = self.instructions[index]
        kind = INSTRUCTIONS.get(inst.kind)
        check(kind is not None, f"trace instruction {index} has unknown kind {inst.kind!r}")
        check(tuple(k for k, _ in inst.args) == kind.params,
              f"trace instruction {index} ({inst.kind}) has arguments "
              f"{tuple(k for k, _ in inst.args)}, expected {kind.params}")
        values = tuple(_remap(v, env, inst) for _, v in inst.args)
        extra = {"decision": chosen.get(index)} if kind.sampling else {}
        outs = _as_tuple(getattr(sch, kind.method)(*kind.call_args(values), **extra))
        check(len(outs) == len(inst.outputs),
              f"instruction {index} ({inst.kind}) made {len(outs)} outputs on replay, "
              f"{len(inst.outputs)} when recorded")
        env.update(zip(inst.outputs, outs))

    def simplified(self) -> "Trace":
        """Drop lookups and samples whose results nothing uses (dead-code elimination)."""
        live: set[RV] = set()
        keep: list[int] = []
        for index in range(len(self.instructions) - 1, -1, -1):
            inst = self.instructions[index]
            removable = is_pure(inst.kind) or is_sampling(inst.kind)
            if removable and not live.intersection(inst.outputs):
                continue
            keep.append(index)
            live.update(inst.inputs())
        keep.reverse()
        return Trace([self.instructions[i] for i in keep],
                     {new: self.decisions[old] for new, old in enumerate(keep)
                      if old in self.decisions})

    def to_json(self) -> str:
        insts = [[i.kind, [_encode(v) for _, v in i.args], [repr(o) for o in i.outputs]]
                 for i in self.instructions]
        decisions = [[k, _encode(v)] for k, v in sorted(self.decisions.items())]
        return json.dumps({"format": FORMAT, "insts": insts, "decisions": decisions})

    @staticmethod
    def from_json(text: str) -> "Trace":
        """The trace a to_json text (of this format or tessel.trace/1) describes. A text of
        another format, or naming an instruction or arguments this tessel does not know,
        raises ScheduleError saying which."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as err:
            raise ScheduleError(f"not a trace: {err}") from None
        check(isinstance(doc, dict) and "format" in doc, "not a trace (no format)")
        fmt = doc["format"]
        check(fmt in (FORMAT, V1_FORMAT), f"a trace of format {fmt!r}, which this tessel "
              f"does not read (it reads {FORMAT!r} and {V1_FORMAT!r}): made by a newer tessel?")
        check(isinstance(doc.get("insts"), list) and isinstance(doc.get("decisions"), list),
              "not a trace (insts and decisions must be lists)")
        read = _read_v1 if fmt == V1_FORMAT else _read_v2
        insts = [Instruction(kind, read(index, kind, args),
                             tuple(_decode({"rv": o}) for o in outs))
                 for index, (kind, args, outs) in enumerate(doc["insts"])]
        return Trace(insts, {int(k): _decode(v) for k, v in doc["decisions"]})

    def script(self) -> str:
        """Python that rebuilds the schedule, given `sch = tessel.Schedule(func)`."""
        lines = []
        for index, inst in enumerate(self.instructions):
            kind = INSTRUCTIONS.get(inst.kind)
            if kind is not None and kind.variadic:  # fuse(l0, l1): the values, positionally
                args = [_py(v) for v in kind.call_args(tuple(v for _, v in inst.args))]
            else:
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


def _read_v2(index: int, kind: str, values: Any) -> tuple[tuple[str, Any], ...]:
    params = instruction_kind(kind, index).params
    check(isinstance(values, list) and len(values) == len(params),
          f"trace instruction {index} ({kind}) stores {values!r}; this tessel's {kind} takes "
          f"{len(params)} arguments ({', '.join(params)})")
    return tuple(zip(params, (_decode(v) for v in values)))


def _read_v1(index: int, kind: str, args: Any) -> tuple[tuple[str, Any], ...]:
    """Arguments stored by name (tessel.trace/1), renamed to today's parameters."""
    instruction_kind(kind, index)
    names = V1_ARGS.get(kind)
    check(names is not None and isinstance(args, dict) and set(args) == set(names),
          f"trace instruction {index} ({kind}) of format {V1_FORMAT!r} has arguments "
          f"{tuple(args) if isinstance(args, dict) else args!r}, which that format never had")
    return _read_v2(index, kind, [args[name] for name in names])


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
