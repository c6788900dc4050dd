"""Search spaces: AutoTVM templates, MetaSchedule schedule rules, postprocessors, mutators.

    space = make_space("auto", target)                  # rules on any program
    space = make_space("conv2d")                        # a built-in template
    space = make_space([AutoInline(), MultiLevelTiling()], target)   # your own rule list
    space = make_space(lambda sch: ...)                 # a probabilistic program
    space = make_space(["auto", "matmul"], target)      # a union
    sch = space.sample(func, random.Random(0))          # a Schedule; sch.trace is the record
    final = postprocess(sch, default_postprocs(target)) # None if the program is invalid

Both kinds of space produce traces; see base.py for the interface.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence, Union

from tessel.space.base import FunctionSpace, SearchSpace, SpaceError, UnionSpace, check
from tessel.space.config import Config, ConfigSpace, Knob
from tessel.space.mutators import (MUTATORS, MutateComputeLocation, MutateParallel,
                                   MutateRegisterTile, MutateTileSize, MutateUnroll,
                                   Mutator)
from tessel.space.postproc import (Postproc, RewriteLayout, RewriteParallelVectorizeUnroll,
                                   RewriteReductionBlock, VerifyCodegen, VerifyLoops,
                                   default_postprocs, final_func, postprocess,
                                   postprocs_for)
from tessel.space.rules import (AddRFactor, AutoInline, MultiLevelTiling,
                                MultiLevelTilingWithIntrin, ParallelizeVectorizeUnroll,
                                RandomComputeLocation, RuleSpace, ScheduleRule, UnrollCases,
                                default_rules)
from tessel.space.templates import TEMPLATES, TemplateContext, TemplateSpace
from tessel.target import Target

SPACE_NAMES = ("auto", *TEMPLATES)
# what make_space accepts: a name, a space, a rule, a function on a Schedule, or a list
SpaceLike = Union[str, SearchSpace, ScheduleRule, Callable[..., object], Sequence[Any]]


def make_space(spec: SpaceLike = "auto", target: Target | None = None) -> SearchSpace:
    """A SearchSpace from "auto", a template name, a rule or list of rules, a function on a
    Schedule (one argument: a probabilistic program; two: a template `(cfg, sch)`), a
    SearchSpace, or a list of any of these but rules (their union)."""
    target = target if target is not None else Target("host")
    if isinstance(spec, SearchSpace):
        return spec
    if isinstance(spec, str):
        if spec == "auto":
            return RuleSpace(default_rules(target), name="auto")
        check(spec in TEMPLATES, f"unknown space {spec!r}; known: {', '.join(SPACE_NAMES)}, "
                                 "or pass rules, a function or a SearchSpace")
        return TemplateSpace(TEMPLATES[spec], spec)
    if _is_rule(spec):
        return RuleSpace([_for_target(spec, target)])
    if isinstance(spec, (list, tuple)):
        check(len(spec) > 0, "an empty list is not a search space")
        if all(_is_rule(x) for x in spec):
            return RuleSpace([_for_target(x, target) for x in spec])
        check(not any(_is_rule(x) for x in spec), "a list mixes schedule rules with spaces; "
              "put the rules in a list of their own")
        return UnionSpace([make_space(x, target) for x in spec])
    if callable(spec):
        return TemplateSpace(spec) if required_positional(spec) == 2 else FunctionSpace(spec)
    raise SpaceError(f"cannot make a search space of {spec!r}")


def _for_target(rule: Any, target: Target) -> Any:
    """A rule with what it left to the target (MultiLevelTiling's lanes, registers, the
    intrinsics of MultiLevelTilingWithIntrin) filled in."""
    return rule.for_target(target) if isinstance(rule, (MultiLevelTiling,
                                                        MultiLevelTilingWithIntrin)) else rule


def _is_rule(x: Any) -> bool:
    return not isinstance(x, (SearchSpace, type)) and callable(getattr(x, "apply", None))


def required_positional(fn: Any) -> int | None:
    """How many positional arguments `fn` requires (None: a builtin without a signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               for p in params)


__all__ = ["make_space", "SPACE_NAMES", "SpaceLike", "SearchSpace", "SpaceError", "FunctionSpace",
           "UnionSpace", "RuleSpace", "TemplateSpace", "TemplateContext", "ConfigSpace",
           "Config", "Knob", "TEMPLATES", "ScheduleRule", "default_rules",
           "AutoInline", "AddRFactor", "MultiLevelTiling", "MultiLevelTilingWithIntrin",
           "ParallelizeVectorizeUnroll",
           "RandomComputeLocation", "UnrollCases", "Postproc", "postprocess", "final_func",
           "default_postprocs", "postprocs_for", "RewriteLayout", "RewriteReductionBlock",
           "RewriteParallelVectorizeUnroll", "required_positional",
           "VerifyLoops", "VerifyCodegen", "Mutator", "MUTATORS", "MutateTileSize",
           "MutateRegisterTile",
           "MutateUnroll", "MutateParallel", "MutateComputeLocation"]
