"""Random valid schedules of a workload's main reduction block, made of real primitives.

Used by the feature-speed and cost-model benchmarks and by the transfer fixture script:

    sch = random_schedule(ops.matmul(1024, 1024, 1024), seed=3)   # a tessel.Schedule

Multi-level tiling in the style of MetaSchedule's "SSRSRS" structure: every spatial loop is
split into 4 levels with sample_perfect_tile, every reduction loop into 2, the levels are
reordered S0 S1 R0 S2 R1 S3; then, each with some probability, a local write cache
computed at the last S1 loop, the fused S0 loops parallel, the innermost spatial loop
vectorized, the innermost reduction loop unrolled, and an auto-unroll annotation sampled
from {0, 16, 64, 512}. A padding stage is inlined half of the time.
"""
from __future__ import annotations

import random

from tessel import ir
from tessel.schedule import Schedule, ScheduleError


def main_block(func: ir.PrimFunc) -> str:
    """The name of the block with the most iteration variables (the reduction, usually)."""
    blocks = [b for b in ir.blocks(func.body) if b.iter_vars]
    return max(blocks, key=lambda b: (b.is_reduction, len(b.iter_vars))).name


def _tile(sch: Schedule, loops, kinds, rnd: random.Random):
    levels: dict[str, list[list]] = {"spatial": [[], [], [], []], "reduce": [[], []]}
    for loop, kind in zip(loops, kinds):
        n = len(levels[kind])
        factors = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=rnd.choice([4, 8, 16]))
        for level, part in zip(levels[kind], sch.split(loop, factors)):
            level.append(part)
    s, r = levels["spatial"], levels["reduce"]
    sch.reorder(*s[0], *s[1], *r[0], *s[2], *r[1], *s[3])
    return s, r


def _annotate(sch: Schedule, block, s, r, rnd: random.Random) -> None:
    if rnd.random() < 0.5:
        cache = sch.cache_write(block, 0, "local")
        sch.reverse_compute_at(cache, s[1][-1])
    if rnd.random() < 0.8:
        sch.parallel(sch.fuse(*s[0]) if len(s[0]) > 1 else s[0][0])
    if rnd.random() < 0.8:
        sch.vectorize(s[3][-1])
    if r[1] and rnd.random() < 0.3:
        sch.unroll(r[1][-1])
    if rnd.random() < 0.6:
        step = sch.sample_categorical([0, 16, 64, 512], [0.25, 0.25, 0.25, 0.25])
        sch.annotate(sch.get_loops(block)[0], "pragma_auto_unroll_max_step", step)


def random_schedule(func: ir.PrimFunc, seed: int) -> Schedule:
    """A random multi-level-tiled schedule of `func` (deterministic in `seed`)."""
    rnd = random.Random(seed)
    sch = Schedule(func, seed=seed)
    name = main_block(func)
    for b in ir.blocks(func.body):
        if b.name not in (name, "root") and rnd.random() < 0.5:
            try:
                sch.compute_inline(sch.get_block(b.name))
            except ScheduleError:
                pass
    block = sch.get_block(name)
    kinds = [iv.kind for iv in next(b for b in ir.blocks(func.body) if b.name == name).iter_vars]
    s, r = _tile(sch, sch.get_loops(block)[-len(kinds):], kinds, rnd)
    _annotate(sch, block, s, r, rnd)
    return sch


def random_schedules(func: ir.PrimFunc, n: int, seed: int = 0) -> list[Schedule]:
    """n schedules with distinct programs (seeds seed, seed+1, ...; duplicates skipped)."""
    out, seen, k = [], set(), seed
    while len(out) < n and k < seed + 50 * n:
        sch = random_schedule(func, k)
        k += 1
        key = ir.structural_hash(sch.func)
        if key not in seen:
            seen.add(key)
            out.append(sch)
    return out


__all__ = ["main_block", "random_schedule", "random_schedules"]
