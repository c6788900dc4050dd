"""LocalBuilder: a batch of candidates -> artifacts or error results, in order, in a process pool."""
import stat
from pathlib import Path

import numpy as np
import pytest

from measure_kernels import source, workload
from tessel import Schedule, Target, ops
from tessel.codegen import Module
from tessel.measure import LocalBuilder, MeasureCandidate
from tessel.measure.builder import Artifact, BuildResult, ParamSpec, build_source, param_specs


@pytest.fixture(scope="module")
def target():
    return Target("host")


@pytest.fixture(scope="module")
def builder(target, tmp_path_factory):
    with LocalBuilder(target, max_workers=2, cache_dir=tmp_path_factory.mktemp("kernels")) as b:
        yield b


def split_candidate(func, factor, bind=False):
    sch = Schedule(func)
    i, j, _ = sch.get_loops(sch.get_block("C"))
    sch.split(j, factors=[None, factor])
    if bind:
        sch.bind(i, "blockIdx.x")  # a GPU binding: no C code for it
    return MeasureCandidate(func, sch.func, sch.trace)


def test_batch_builds_in_order_and_artifacts_compute_matmul(builder, target):
    func = ops.matmul(13, 22, 7)
    cands = [split_candidate(func, f) for f in (2, 5, 22, 3)]
    builds = builder.build(cands)
    assert [b.ok for b in builds] == [True] * 4
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((13, 7), np.float32), rng.standard_normal((7, 22), np.float32)
    for cand, build in zip(cands, builds):
        art = build.artifact
        assert Path(art.lib_path).is_file() and "tessel_entry" in art.source
        assert art.params == param_specs(func) and art.build_secs > 0
        c = np.zeros((13, 22), np.float32)
        Module(cand.func, target, art.source, Path(art.lib_path))(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    assert len({b.artifact.source for b in builds}) == 4


def test_invalid_program_and_good_ones_keep_their_places(builder):
    func = ops.matmul(9, 8, 5)
    cands = [split_candidate(func, 4), split_candidate(func, 2, bind=True),
             split_candidate(func, 8)]
    builds = builder.build(cands)
    assert [b.ok for b in builds] == [True, False, True]
    err = builds[1].error
    assert err.error_kind == "invalid_schedule" and "blockIdx.x" in err.error_msg
    assert "CodegenError" in err.error_msg


def test_syntax_error_is_compile_error_with_compiler_message(target, tmp_path):
    func = workload()
    build = build_source(source("syntax"), param_specs(func), target, cache_dir=tmp_path)
    assert not build.ok and build.error.error_kind == "compile_error"
    assert "error" in build.error.error_msg and "expected" in build.error.error_msg
    assert build.error.build_secs > 0


def test_hanging_compiler_is_a_timeout(tmp_path):
    compiler = tmp_path / "slowcc"
    compiler.write_text("#!/bin/sh\nsleep 30\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IEXEC)
    slow = Target("x86_64-avx2", compiler=str(compiler), compiler_version="slowcc 1.0")
    with LocalBuilder(slow, max_workers=1, timeout_s=1.0, cache_dir=tmp_path) as builder:
        (build,) = builder.build([split_candidate(ops.matmul(4, 4, 4), 2)])
    assert build.error.error_kind == "timeout" and "timed out" in build.error.error_msg


def test_empty_batch_and_bad_arguments(builder):
    assert builder.build([]) == []
    with pytest.raises(ValueError, match="timeout_s"):
        LocalBuilder(Target("x86_64-avx2"), timeout_s=0)
    with pytest.raises(ValueError, match="artifact or an error"):
        BuildResult()


def test_param_specs_describe_inputs_then_output():
    specs = param_specs(ops.matmul(3, 5, 7))
    assert specs == (ParamSpec("A", (3, 7), "float32", False),
                     ParamSpec("B", (7, 5), "float32", False),
                     ParamSpec("C", (3, 5), "float32", True))
    assert isinstance(Artifact("x.so", "", specs), Artifact)


def test_c_past_the_source_budget_is_never_compiled(target, tmp_path):
    """A candidate whose C passes max_source_chars is a compile_error at once; the same
    candidate builds without the budget."""
    cand = split_candidate(ops.matmul(16, 16, 16), 4)
    with LocalBuilder(target, max_workers=1, cache_dir=tmp_path, max_source_chars=500) as b:
        (small,) = b.build([cand])
    assert small.error.error_kind == "compile_error"
    assert "passed its budget of 500 characters" in small.error.error_msg
    assert not list(tmp_path.rglob("*.so")) and not list(tmp_path.rglob("*.c"))
    with LocalBuilder(target, max_workers=1, cache_dir=tmp_path, max_source_chars=None) as b:
        (built,) = b.build([cand])
    assert built.ok and len(built.artifact.source) > 500
