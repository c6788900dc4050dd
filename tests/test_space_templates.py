"""AutoTVM-style template spaces: knobs, config spaces, the built-in CPU templates."""
import random

import pytest

import tessel
from tessel import ir, ops
from tessel.space import ConfigSpace, Knob, SpaceError, TemplateSpace, make_space
from tessel.space.config import annotate_entities, reorder_entities, split_entities
from space_cases import distinct_programs, max_errors, small

# the built-in templates and the suite operators they apply to
CASES = [("matmul", "GMM"), ("batch_matmul", "TBG"), ("conv2d", "C2D"), ("conv2d", "DIL"),
         ("conv2d", "GRP"), ("conv2d", "T2D"), ("conv2d", "CBR"), ("depthwise_conv2d", "DEP")]


@pytest.mark.parametrize("template, name", CASES)
def test_template_gives_20_distinct_correct_programs_at_small_odd_shapes(template, name):
    func = small(name)
    found = distinct_programs(make_space(template), func, 20, strict=False)
    assert len(found) >= 20
    assert max(max_errors(func, [p for _, p in found.values()])) < 1e-4


def test_templates_give_20_distinct_valid_programs_at_full_shape():
    for template, name in CASES:
        found = distinct_programs(make_space(template), ops.SUITE[name], 20, max_draws=60,
                                  strict=False)
        assert len(found) >= 20, (template, name)


def test_dense_template_folds_bias_add_and_matches():
    func = ops.dense(5, 7, 9)
    found = distinct_programs(make_space("dense"), func, 6, seed=2, strict=False)
    assert max(max_errors(func, [p for _, p in found.values()])) < 1e-4


def test_conv2d_space_has_billions_of_configs():
    space = make_space("conv2d").config_space(ops.SUITE["C2D"])
    assert space.size > 10**9
    assert space.dims == [len(k) for k in space.knobs.values()]


@pytest.mark.parametrize("template, name", [("matmul", "GMM"), ("conv2d", "C2D")])
def test_config_and_trace_correspond(template, name):
    func = small(name)
    space = make_space(template)
    cs = space.config_space(func)
    rng = random.Random(5)
    for _ in range(4):
        config = cs.random(rng)
        assert cs.get(cs.index_of(config.choices)) == config
        sch = space.apply_config(func, config)
        assert space.config_of(func, sch.trace) == config
        again = tessel.Trace.from_json(sch.trace.to_json()).apply(tessel.Schedule(func))
        assert ir.structural_equal(again.func, sch.func)
        assert ir.structural_equal(space.replay(func, sch.trace).func, sch.func)


def test_template_changes_its_program_with_a_categorical_knob():
    func = small("GMM")
    space = make_space("matmul")
    cs = space.config_space(func)
    base = cs.get(0)
    names = list(cs.knobs)
    choices = list(base.choices)
    choices[names.index("write_cache")] = 1
    other = space.apply_config(func, cs.from_choices(choices))
    scopes = {b.scope for b in other.func.body.block.alloc_buffers}
    assert "local" in scopes
    assert not ir.structural_equal(other.func, space.apply_config(func, base).func)


def test_knob_entities():
    assert split_entities(12, 2, "factors", None, "t")[0] == (12, 1)
    assert len(split_entities(12, 3, "factors", None, "t")) == 18
    assert all(f is None or f <= 4 for e in split_entities(12, 3, "factors", 4, "t")
               for f in e[1:])
    assert split_entities(10, 2, "power2", None, "t") == ((None, 1), (None, 2), (None, 4),
                                                         (None, 8))
    assert len(reorder_entities(4, "all", None, None, "r")) == 24
    assert len(reorder_entities(4, "interval", None, (1, 3), "r")) == 2
    assert reorder_entities(3, "candidate", [[2, 1, 0]], None, "r") == ((2, 1, 0),)
    assert len(annotate_entities(3, "try_unroll", "a")) == 8
    assert len(annotate_entities(3, "try_vec", "a")) == 2
    assert len(annotate_entities(2, "try_unroll_vec", "a")) == 6


def test_config_space_index_round_trip():
    cs = ConfigSpace([Knob("a", "other", (1, 2, 3)), Knob("b", "other", ("x", "y"))])
    assert cs.size == len(cs) == 6 and cs.dims == [3, 2]
    assert [cs.index_of(cs.get(i).choices) for i in range(6)] == list(range(6))
    assert cs.get(4)["a"] == 2 and cs.get(4)["b"] == "y"


def test_power2_split_and_custom_template_replay():
    def template(cfg, sch):
        i, j, k = sch.get_loops(sch.get_block("C"))
        cfg.define_split("tile_j", j, num_outputs=2, policy="power2")
        cfg.define_reorder("order", [i, j], policy="candidate", candidates=[[0, 1], [j, i]])
        j0, j1 = cfg.apply_split("tile_j", j)
        cfg.define_annotate("ann", [j1], policy="try_vec")
        cfg.apply_annotate("ann", [j1])

    func = small("GMM")  # N = 5: power-of-two tiles leave a remainder
    space = make_space(template)
    cs = space.config_space(func)
    assert cs.dims == [3, 2, 2]
    for index in range(cs.size):
        sch = space.apply_config(func, cs.get(index))
        assert space.config_of(func, sch.trace).index == index
    programs = [space.apply_config(func, cs.get(i)).func for i in range(cs.size)]
    assert max(max_errors(func, programs[:4])) < 1e-4


def test_template_errors_are_clear():
    func = small("GMM")
    with pytest.raises(SpaceError, match="declares no knobs"):
        TemplateSpace(lambda cfg, sch: None, "empty").config_space(func)
    with pytest.raises(SpaceError, match="knob 'unroll': the knob has no values"):
        TemplateSpace(lambda cfg, sch: cfg.define_knob("unroll", []), "t").config_space(func)
    with pytest.raises(SpaceError, match="expected 4 spatial and 3 reduce"):
        make_space("conv2d").config_space(func)
    with pytest.raises(SpaceError, match="is defined twice"):
        TemplateSpace(lambda cfg, sch: [cfg.define_knob("a", [1]), cfg.define_knob("a", [2])],
                      "t").config_space(func)
