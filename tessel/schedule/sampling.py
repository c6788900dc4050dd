"""Sampling instructions: the random choices of a probabilistic schedule.

Each takes an optional `decision`. Without one it draws from the schedule's seeded random
stream; with one it checks the decision fits and uses it, so a trace replays exactly and a
mutator can propose new decisions.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from tessel.schedule.base import instruction
from tessel.schedule.trace import IntRV, LoopRV, Trace, check


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def sample_tile(rng, extent: int, n: int, max_innermost_factor: int) -> list[int]:
    """n factors whose product is `extent`, innermost <= max_innermost_factor: the innermost
    is drawn uniformly from the allowed divisors, then each outer level from the divisors of
    what remains (as MetaSchedule's SamplePerfectTile does)."""
    inner = rng.choice([d for d in divisors(extent) if d <= max_innermost_factor])
    factors = [inner]
    rest = extent // inner
    for _ in range(n - 2):
        f = rng.choice(divisors(rest))
        factors.append(f)
        rest //= f
    factors.append(rest)
    return factors[::-1]


def fit_tile(decision: Sequence[int], extent: int, max_innermost_factor: int) -> list[int]:
    """Tile sizes for `extent` shaped like `decision` (tile sizes recorded for another extent):
    from the innermost level out, each factor is the divisor of what remains nearest to the
    recorded one by ratio (the larger on a tie; the innermost at most max_innermost_factor),
    and the outermost takes the rest. Register and vector tiles that divide the new extent
    stay as they were."""
    out: list[int] = []
    rest = extent
    for level, want in enumerate(reversed(decision[1:])):
        cap = max_innermost_factor if level == 0 else rest
        best = min((d for d in divisors(rest) if d <= cap),
                   key=lambda d: (abs(math.log(d / want)), -d))
        out.append(best)
        rest //= best
    return [rest, *reversed(out)]


def transplant(trace: Trace, sch: Any) -> Any:
    """Replay on `sch` a trace recorded on another shape of its program (the same blocks and
    loops, other extents), each tile-size decision fitted to its loop's extent here
    (fit_tile); every other decision as recorded. Returns `sch`, whose own trace holds the
    fitted decisions; ScheduleError when the trace does not fit this program."""
    env: dict[Any, Any] = {}
    chosen = dict(trace.decisions)
    for index, inst in enumerate(trace.instructions):
        if inst.kind == "sample_perfect_tile" and index in chosen:
            args = dict(inst.args)
            check(args["loop"] in env, f"sample_perfect_tile uses {args['loop']!r} before any "
                                       "instruction defines it")
            extent = sch.get(env[args["loop"]]).extent
            if math.prod(chosen[index]) != extent:
                chosen[index] = tuple(fit_tile(chosen[index], extent,
                                               args["max_innermost_factor"]))
        trace.replay_step(sch, index, env, chosen)
    return sch


def check_tile(decision: Any, extent: int, n: int, max_innermost_factor: int, name: str) -> list[int]:
    ok = (isinstance(decision, (list, tuple)) and len(decision) == n
          and all(isinstance(f, int) and f >= 1 for f in decision))
    check(ok, f"sample_perfect_tile: decision {decision!r} for loop {name} is not {n} "
              "positive ints")
    check(math.prod(decision) == extent,
          f"sample_perfect_tile: decision {list(decision)} multiplies to {math.prod(decision)}, "
          f"not loop {name}'s extent {extent}")
    check(decision[-1] <= max_innermost_factor,
          f"sample_perfect_tile: innermost factor {decision[-1]} exceeds "
          f"max_innermost_factor={max_innermost_factor}")
    return list(decision)


class SamplingInstructions:
    """Mixed into Schedule."""

    @instruction("sample_perfect_tile", ("loop", "n", "max_innermost_factor"), sampling=True)
    def sample_perfect_tile(self, loop: LoopRV, n: int, max_innermost_factor: int = 16,
                            decision: Sequence[int] | None = None) -> list[IntRV]:
        """n tile sizes whose product is exactly the loop's extent."""
        node = self._loop(loop)
        check(isinstance(n, int) and n >= 1, f"sample_perfect_tile: n must be >= 1, got {n!r}")
        check(isinstance(max_innermost_factor, int) and max_innermost_factor >= 1,
              "sample_perfect_tile: max_innermost_factor must be a positive int")
        name = node.loop_var.name
        if decision is None:
            factors = ([node.extent] if n == 1 else
                       sample_tile(self.rng, node.extent, n, max_innermost_factor))
        else:
            factors = check_tile(decision, node.extent, n, max_innermost_factor, name)
        self._decision = tuple(factors)
        return [self._new(IntRV, f) for f in factors]

    @instruction("sample_categorical", ("candidates", "probs"), sampling=True)
    def sample_categorical(self, candidates: Sequence[int], probs: Sequence[float],
                           decision: int | None = None) -> IntRV:
        """One of `candidates`, drawn with `probs`; the decision is the chosen index."""
        check(len(candidates) >= 1 and len(candidates) == len(probs),
              f"sample_categorical: {len(candidates)} candidates with {len(probs)} probabilities")
        check(all(p >= 0 for p in probs) and sum(probs) > 0,
              "sample_categorical: probabilities must be non-negative with a positive sum")
        if decision is None:
            decision = self.rng.choices(range(len(candidates)), weights=probs)[0]
        check(isinstance(decision, int) and 0 <= decision < len(candidates),
              f"sample_categorical: decision {decision!r} is not an index into "
              f"{len(candidates)} candidates")
        self._decision = decision
        return self._new(IntRV, candidates[decision])
