"""Mutators: every mutator on every suite operator gives traces that replay, pass the
postprocessors and compute what numpy computes."""
import math
import random

import pytest

import tessel
from tessel import ir
from tessel import ops
from tessel.space import (MutateComputeLocation, MutateParallel, MutateRegisterTile,
                          MutateTileSize, MutateUnroll, make_space, postprocess)
from tessel.space.rules.parallel import PARALLEL
from space_cases import POSTPROCS, SUITE_NAMES, TARGET, max_errors, small

AUTO = make_space("auto", TARGET)
MUTATORS = [MutateTileSize(), MutateUnroll(), MutateParallel(), MutateComputeLocation()]
NO_PRODUCERS = {"GMM", "TBG"}  # nothing is left for RandomComputeLocation to place


def _samples(func: ir.PrimFunc, n: int, seed: int) -> list[tessel.Trace]:
    rng = random.Random(seed)
    return [AUTO.sample(func, rng).trace for _ in range(n)]


def _mutate(mutator, func, traces, rng):
    for trace in traces:
        new = mutator.apply(func, trace, rng, space=AUTO, postprocs=POSTPROCS)
        if new is not None:
            assert new.schedule.trace is not None and new.final is not None
            return trace, new.schedule.trace
    return None, None


@pytest.mark.parametrize("name", SUITE_NAMES)
def test_every_mutator_gives_valid_matching_traces(name):
    func = small(name)
    traces = _samples(func, 8, seed=11)
    rng = random.Random(0)
    programs = []
    for mutator in MUTATORS:
        old, new = _mutate(mutator, func, traces, rng)
        if isinstance(mutator, MutateComputeLocation) and name in NO_PRODUCERS:
            assert new is None
            continue
        assert new is not None, f"{mutator!r} found no valid neighbour on {name}"
        assert new != old
        replayed = tessel.Trace.from_json(new.to_json()).apply(tessel.Schedule(func))
        final = postprocess(replayed, POSTPROCS, strict=True)
        programs.append(final.func)
    assert max(max_errors(func, programs)) < 1e-4


def test_tile_size_mutation_keeps_the_product_and_the_innermost_limit():
    func = small("C2D")
    rng = random.Random(1)
    for trace in _samples(func, 6, seed=2):
        new = MutateTileSize().propose(func, trace, rng)
        changed = [i for i in trace.sampling_sites() if trace.decisions[i] != new.decisions[i]]
        assert len(changed) == 1
        old_f, new_f = trace.decisions[changed[0]], new.decisions[changed[0]]
        assert math.prod(old_f) == math.prod(new_f) and new_f[-1] <= 64
        assert sum(a != b for a, b in zip(old_f, new_f)) == 2


@pytest.mark.parametrize("func", [ops.matmul(48, 96, 40),
                                  ops.conv2d(1, 16, 9, 9, 32, 3, 3, padding=1)],
                         ids=["matmul", "conv2d"])
def test_register_tile_mutation_moves_rows_and_vector_width_together(func):
    rng = random.Random(3)
    mutator, seen = MutateRegisterTile(), 0
    for trace in _samples(func, 12, seed=5):
        new = mutator.propose(func, trace, rng)
        if new is None:
            continue
        changed = [i for i in trace.sampling_sites() if trace.decisions[i] != new.decisions[i]]
        assert len(changed) == 2  # the row tile and the vector tile, in one step
        old_area = math.prod(trace.decisions[i][-1] for i in changed)
        new_area = math.prod(new.decisions[i][-1] for i in changed)
        assert old_area / 2 <= new_area <= old_area * 2
        for i in changed:
            assert math.prod(new.decisions[i]) == math.prod(trace.decisions[i])
            assert new.decisions[i][-1] != trace.decisions[i][-1]
        final = postprocess(new.apply(tessel.Schedule(func)), POSTPROCS, strict=True)
        assert max(max_errors(func, [final.func])) < 1e-4
        seen += 1
    assert seen >= 3


def test_parallel_mutation_changes_the_fused_parallel_extent():
    func = small("GMM")
    trace, new = _mutate(MutateParallel(), func, _samples(func, 6, seed=4), random.Random(0))
    values = [dict(t.instructions[i].args)["value"] for t in (trace, new)
              for i in range(len(t.instructions))
              if t.instructions[i].kind == "annotate"
              and dict(t.instructions[i].args)["key"] == PARALLEL]
    assert len(values) == 2 and values[0] != values[1]


def test_unroll_mutation_draws_another_candidate():
    func = small("SFM")
    trace = _samples(func, 1, seed=4)[0]
    new = MutateUnroll().propose(func, trace, random.Random(0))
    changed = [i for i in trace.sampling_sites() if trace.decisions[i] != new.decisions[i]]
    assert len(changed) == 1
    assert trace.instructions[changed[0]].kind == "sample_categorical"


def test_mutators_without_sites_return_none():
    func = small("GMM")
    bare = tessel.Schedule(func).trace
    for mutator in MUTATORS:
        assert mutator.apply(func, bare, random.Random(0)) is None


def test_a_repeated_mutant_is_replayed_once():
    """A mutant equal to one proposed before (a third of an evolutionary search's are) comes
    from the space's memo; another workload starts a new memo."""
    func = small("GMM")
    space = make_space("auto", TARGET)
    replays = []
    replay = space.replay
    space.replay = lambda f, t: (replays.append(t), replay(f, t))[1]
    trace = space.sample(func, random.Random(3)).trace
    proposal = MutateTileSize().propose(func, trace, random.Random(0))
    assert proposal is not None

    class Fixed(MutateTileSize):
        def propose(self, func, trace, rng):
            return proposal

    first = Fixed().apply(func, trace, random.Random(1), space, POSTPROCS)
    again = Fixed().apply(func, trace, random.Random(2), space, POSTPROCS)
    assert first is not None and again is first and len(replays) == 1
    other = small("SFM")
    assert space.mutants(other, POSTPROCS) == {} and space.mutants(func, POSTPROCS) == {}
