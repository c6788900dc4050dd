"""AutoTVM configuration spaces: knobs, their candidate values, and configs.

A template declares knobs (define_split, define_reorder, define_annotate, define_knob; see
templates/base.py); each knob is a finite list of *entities* (its candidate values). The
ConfigSpace is their product:

    space.size / len(space)         number of configs (often billions)
    space.dims                      entities per knob, in definition order (grid, GA, SA)
    cfg = space.get(12345)          index -> Config;  space.index_of(cfg.choices) -> index
    cfg["tile_i"]                   the chosen entity of a knob, e.g. (4, 8, 1, 4)

Entities: a split is the tuple of its factors, outermost first (policy "power2" leaves the
outermost to be inferred: None); a reorder is a permutation of loop positions; an annotate
is one action per loop ("none", "unroll", "vec"); define_knob's entities are its values.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from typing import Any, Sequence

from tessel.schedule.sampling import divisors
from tessel.space.base import check

SPLIT_POLICIES = ("factors", "power2")
REORDER_POLICIES = ("all", "interval", "candidate")
ANNOTATE_POLICIES = ("try_unroll", "try_vec", "try_unroll_vec")
MAX_KNOB_ENTITIES = 100_000  # a categorical knob larger than this is a template bug


@dataclass(frozen=True)
class Knob:
    """One knob: a name, its kind ("split", "reorder", "annotate", "other") and entities."""

    name: str
    kind: str
    entities: tuple[Any, ...]
    policy: str = ""

    def __len__(self) -> int:
        return len(self.entities)

    def index(self, entity: Any) -> int:
        check(entity in self.entities, f"knob {self.name!r}: {entity!r} is not one of its "
                                       f"{len(self.entities)} values")
        return self.entities.index(entity)


@dataclass(frozen=True)
class Config:
    """A point of a ConfigSpace: one entity index per knob."""

    index: int
    names: tuple[str, ...]
    choices: tuple[int, ...]
    values: tuple[Any, ...]

    def __getitem__(self, name: str) -> Any:
        check(name in self.names, f"config has no knob {name!r} (knobs: {', '.join(self.names)})")
        return self.values[self.names.index(name)]


class ConfigSpace:
    """The knobs of a template on one workload, in definition order."""

    def __init__(self, knobs: Sequence[Knob] = ()) -> None:
        self.knobs: dict[str, Knob] = {}
        for knob in knobs:
            self.add(knob)

    def add(self, knob: Knob) -> None:
        check(knob.name not in self.knobs, f"knob {knob.name!r} is defined twice")
        check(len(knob) >= 1, f"knob {knob.name!r} has no values")
        self.knobs[knob.name] = knob

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.knobs.values()]

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def __len__(self) -> int:
        return self.size

    def get(self, index: int) -> Config:
        """Config number `index` (mixed radix, the first knob varying fastest)."""
        check(0 <= index < self.size, f"config index {index} out of range 0..{self.size - 1}")
        choices, rest = [], index
        for dim in self.dims:
            choices.append(rest % dim)
            rest //= dim
        return self.from_choices(choices)

    def index_of(self, choices: Sequence[int]) -> int:
        index, stride = 0, 1
        for choice, dim in zip(choices, self.dims):
            index += choice * stride
            stride *= dim
        return index

    def from_choices(self, choices: Sequence[int]) -> Config:
        knobs = list(self.knobs.values())
        check(len(choices) == len(knobs), f"{len(choices)} choices for {len(knobs)} knobs")
        for knob, c in zip(knobs, choices):
            check(isinstance(c, int) and 0 <= c < len(knob),
                  f"knob {knob.name!r}: choice {c!r} not in 0..{len(knob) - 1}")
        return Config(self.index_of(choices), tuple(self.knobs), tuple(choices),
                      tuple(k.entities[c] for k, c in zip(knobs, choices)))

    def random(self, rng: random.Random) -> Config:
        return self.get(rng.randrange(self.size))

    def __repr__(self) -> str:
        body = ", ".join(f"{k.name}: {len(k)}" for k in self.knobs.values())
        return f"ConfigSpace(size={self.size}; {body})"


# ---- entity lists ---------------------------------------------------------------------------
def split_entities(extent: int, num_outputs: int, policy: str, max_factor: int | None,
                   name: str) -> tuple[tuple[int | None, ...], ...]:
    check(policy in SPLIT_POLICIES, f"define_split {name!r}: policy {policy!r} is not one of "
                                    f"{SPLIT_POLICIES}")
    check(num_outputs >= 2, f"define_split {name!r}: num_outputs must be >= 2")
    cap = max_factor or extent
    if policy == "power2":
        pows = [1 << p for p in range(max(1, cap).bit_length()) if (1 << p) <= min(cap, extent)]
        inner = [c for c in itertools.product(pows, repeat=num_outputs - 1)
                 if math.prod(c) <= extent]
        return tuple((None,) + c for c in inner)
    return tuple(_factorizations(extent, num_outputs, cap))


def _factorizations(extent: int, n: int, cap: int) -> list[tuple[int, ...]]:
    """Ordered n-tuples multiplying to extent, every factor but the first at most cap."""
    if n == 1:
        return [(extent,)]
    out = []
    for inner in divisors(extent):
        if inner <= cap:
            out.extend(rest + (inner,) for rest in _factorizations(extent // inner, n - 1, cap))
    return sorted(out, key=lambda t: tuple(-f for f in t))


def reorder_entities(n: int, policy: str, candidates: Sequence[Sequence[int]] | None,
                     interval: tuple[int, int] | None, name: str) -> tuple[tuple[int, ...], ...]:
    check(policy in REORDER_POLICIES, f"define_reorder {name!r}: policy {policy!r} is not one "
                                      f"of {REORDER_POLICIES}")
    if policy == "all":
        check(math.factorial(n) <= MAX_KNOB_ENTITIES,
              f"define_reorder {name!r}: {n} loops have too many orders for policy 'all'")
        return tuple(itertools.permutations(range(n)))
    if policy == "interval":
        lo, hi = interval if interval is not None else (0, n)
        check(0 <= lo < hi <= n, f"define_reorder {name!r}: bad interval {interval!r}")
        return tuple(tuple(range(lo)) + p + tuple(range(hi, n))
                     for p in itertools.permutations(range(lo, hi)))
    check(bool(candidates), f"define_reorder {name!r}: policy 'candidate' needs candidates")
    out = tuple(tuple(c) for c in candidates)
    for c in out:
        check(sorted(c) == list(range(n)),
              f"define_reorder {name!r}: candidate {list(c)} is not a permutation of 0..{n - 1}")
    return out


def annotate_entities(n: int, policy: str, name: str) -> tuple[tuple[str, ...], ...]:
    check(policy in ANNOTATE_POLICIES, f"define_annotate {name!r}: policy {policy!r} is not one "
                                       f"of {ANNOTATE_POLICIES}")
    check(n >= 1, f"define_annotate {name!r}: no loops given")
    outer = ("none", "unroll") if "unroll" in policy else ("none",)
    last = outer + (("vec",) if "vec" in policy else ())
    return tuple(itertools.product(*([outer] * (n - 1) + [last])))


__all__ = ["Knob", "Config", "ConfigSpace", "split_entities", "reorder_entities",
           "annotate_entities", "SPLIT_POLICIES", "REORDER_POLICIES", "ANNOTATE_POLICIES"]
