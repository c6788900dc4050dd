"""AutoTVM template spaces: a schedule written by an expert, with knobs declared up front.

    def my_template(cfg: TemplateContext, sch: Schedule) -> None:
        i, j, k = sch.get_loops(sch.get_block("C"))
        cfg.define_split("tile_i", i, num_outputs=3)
        cfg.define_knob("unroll", [0, 16, 64])
        i0, i1, i2 = cfg.apply_split("tile_i", i)
        ...
    space = TemplateSpace(my_template)
    space.config_space(func)          # ConfigSpace: size, dims, index <-> config
    sch = space.apply_config(func, space.config_space(func).get(7))

Every knob is a sampling instruction in the trace, recorded where it is defined, whose
decision is the config's choice: a "factors" split is `sample_perfect_tile` (decision: the
factors), every other knob `sample_categorical` over its entity indices (or its int values).
So a config is the decisions of a trace (`config_of(func, trace)`), and a trace replays to
the same program without the template. Changing the decision of a categorical knob changes
control flow of the template, so `replay` runs the template again with the decoded config.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tessel.ir import PrimFunc
from tessel.ir.structural import structural_hash
from tessel.schedule import IntRV, LoopRV, Schedule, ScheduleError, Trace
from tessel.space.base import (MAX_SAMPLE_TRIES, Neighbour, SearchSpace, SpaceError, check,
                               first_valid)
from tessel.space.postproc import Postproc, postprocess

if TYPE_CHECKING:
    from tessel.space.mutators import Mutator
from tessel.space.config import (Config, ConfigSpace, Knob, annotate_entities, reorder_entities,
                                 split_entities)

Template = Callable[["TemplateContext", Schedule], Any]


class TemplateContext:
    """The `cfg` a template receives. Collecting (config=None): each define_* adds a knob and
    takes its first entity. Applying: each define_* checks the knob and takes config's choice."""

    def __init__(self, sch: Schedule, space: ConfigSpace, config: Config | None) -> None:
        self.sch, self.space, self.config = sch, space, config
        self._rvs: dict[str, list[IntRV]] = {}
        self._chosen: dict[str, Any] = {}

    # -- definitions ----------------------------------------------------------------------------
    def define_split(self, name: str, loop: LoopRV, num_outputs: int = 2,
                     policy: str = "factors", max_factor: int | None = None) -> None:
        extent = self.sch.get(loop).extent
        ents = split_entities(extent, num_outputs, policy, max_factor, name)
        choice = self._define(Knob(name, "split", ents, policy))
        if policy == "factors":
            cap = max_factor or extent
            self._rvs[name] = self.sch.sample_perfect_tile(loop, num_outputs, cap,
                                                           decision=ents[choice])
        else:
            self._categorical(len(ents), choice)

    def define_reorder(self, name: str, loops: Sequence[LoopRV], policy: str = "all",
                       candidates: Sequence[Sequence[int | LoopRV]] | None = None,
                       interval: tuple[int, int] | None = None) -> None:
        cands = None if candidates is None else [
            [list(loops).index(x) if isinstance(x, LoopRV) else x for x in c] for c in candidates]
        ents = reorder_entities(len(loops), policy, cands, interval, name)
        self._categorical(len(ents), self._define(Knob(name, "reorder", ents, policy)))

    def define_annotate(self, name: str, loops: Sequence[LoopRV], policy: str) -> None:
        ents = annotate_entities(len(loops), policy, name)
        self._categorical(len(ents), self._define(Knob(name, "annotate", ents, policy)))

    def define_knob(self, name: str, values: Sequence[Any]) -> None:
        ents = tuple(values)
        check(len(ents) >= 1, f"define_knob {name!r}: the knob has no values")
        choice = self._define(Knob(name, "other", ents))
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in ents)
        self._categorical(len(ents), choice, list(ents) if ints else None)

    def _define(self, knob: Knob) -> int:
        if self.config is None:
            self.space.add(knob)
            choice = 0
        else:
            known = self.space.knobs.get(knob.name)
            check(known == knob, f"knob {knob.name!r} differs from its definition when the "
                                 "space was collected (knobs must not depend on other knobs)")
            choice = self.config.choices[self.config.names.index(knob.name)]
        self._chosen[knob.name] = knob.entities[choice]
        return choice

    def _categorical(self, n: int, choice: int, values: list[int] | None = None) -> IntRV:
        return self.sch.sample_categorical(values or list(range(n)), [1.0] * n, decision=choice)

    # -- reading and applying choices -----------------------------------------------------------
    def __getitem__(self, name: str) -> Any:
        check(name in self._chosen, f"knob {name!r} is used before it is defined")
        return self._chosen[name]

    def apply_split(self, name: str, loop: LoopRV) -> list[LoopRV]:
        factors = self._rvs.get(name) or list(self[name])
        return self.sch.split(loop, factors)

    def apply_annotate(self, name: str, loops: Sequence[LoopRV]) -> None:
        for loop, action in zip(loops, self[name]):
            if action == "unroll":
                self.sch.unroll(loop)
            elif action == "vec":
                self.sch.vectorize(loop)


class TemplateSpace(SearchSpace):
    """The space of one template on any workload it accepts."""

    def __init__(self, template: Template, name: str | None = None) -> None:
        super().__init__()
        check(callable(template), f"a template must be callable, got {template!r}")
        self.template = template
        self.name = name or getattr(template, "__name__", "template")
        self._spaces: dict[str, ConfigSpace] = {}

    def config_space(self, func: PrimFunc) -> ConfigSpace:
        key = structural_hash(func)
        if key not in self._spaces:
            space = ConfigSpace()
            self._run(func, space, None)
            check(len(space.knobs) > 0, f"template {self.name!r} declares no knobs")
            self._spaces[key] = space
        return self._spaces[key]

    def _run(self, func: PrimFunc, space: ConfigSpace, config: Config | None) -> Schedule:
        sch = Schedule(func)
        self.template(TemplateContext(sch, space, config), sch)
        return sch

    def apply_config(self, func: PrimFunc, config: Config) -> Schedule:
        """The schedule of one config (ScheduleError when the config is not legal here)."""
        return self._run(func, self.config_space(func), config)

    def generate(self, func: PrimFunc, seed: int = 0) -> list[Schedule]:
        return [self.apply_config(func, self.config_space(func).get(0))]

    def sample(self, func: PrimFunc, rng: random.Random) -> Schedule:
        space = self.config_space(func)
        return first_valid(lambda: self.apply_config(func, space.random(rng)),
                           f"template {self.name!r}: no legal config of {func.name}")

    def config_of(self, func: PrimFunc, trace: Trace) -> Config:
        """The config whose knobs the trace's sampling decisions are."""
        space = self.config_space(func)
        sites = trace.sampling_sites()
        check(len(sites) == len(space.knobs), f"template {self.name!r}: the trace has "
              f"{len(sites)} sampling instructions for {len(space.knobs)} knobs")
        choices = []
        for site, knob in zip(sites, space.knobs.values()):
            decision = trace.decisions.get(site)
            kind = trace.instructions[site].kind
            choices.append(knob.index(tuple(decision)) if kind == "sample_perfect_tile"
                           else decision)
        return space.from_choices(choices)

    def replay(self, func: PrimFunc, trace: Trace) -> Schedule:
        try:
            config = self.config_of(func, trace)
        except SpaceError as err:
            raise ScheduleError(str(err)) from None
        return self.apply_config(func, config)

    def mutate(self, func: PrimFunc, trace: Trace, rng: random.Random,
               mutators: Sequence[tuple["Mutator", float]] = (),
               postprocs: Sequence[Postproc] = ()) -> Neighbour | None:
        """A neighbour: one knob changed (AutoTVM's move), legal and passing `postprocs`.
        Template spaces do not use trace mutators."""
        space = self.config_space(func)
        try:
            choices = list(self.config_of(func, trace).choices)
        except ValueError:  # SpaceError: the trace is not one of this template's
            return None
        movable = [k for k, dim in enumerate(space.dims) if dim > 1]
        for _ in range(MAX_SAMPLE_TRIES):
            if not movable:
                return None
            k = rng.choice(movable)
            new = list(choices)
            new[k] = rng.choice([c for c in range(space.dims[k]) if c != choices[k]])
            try:
                sch = self.apply_config(func, space.from_choices(new))
            except (ScheduleError, ValueError):  # an illegal config
                continue
            final = postprocess(sch, postprocs) if postprocs else sch
            if final is not None:
                return Neighbour(sch, final)
        return None


__all__ = ["Template", "TemplateContext", "TemplateSpace"]
