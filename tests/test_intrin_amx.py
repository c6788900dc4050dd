"""AMX's memory intrinsic (tessel.intrin.amx): matching with free strides and a free
reduction extent, the call in the generated C, numbers against numpy on a host with AMX, and
the auto space choosing it (on a target that names AMX, whatever the host)."""
import random

import numpy as np
import pytest

import tessel
from tessel import intrin, ir, ops, te
from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared
from tessel.schedule import Schedule, ScheduleError
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.rules.base import AUTO_TENSORIZE
from tessel.target import Target, host_arch

from intrin_cases import amx_tensorized, operands

HOST = Target("host")
AMX = [s for s in intrin.REGISTRY.values() if s.memory]
# AVX-512 with VNNI and AMX: a Sapphire Rapids class CPU, named so on any host
AMX_TARGET = Target("x86_64-avx512", features=[*Target("x86_64-avx512").features,
                                               "avx512_vnni", "amx_tile", "amx_int8"])


def runs_here(spec):
    return spec.arch == HOST.arch and not spec.missing(HOST)


def test_the_amx_intrinsics_are_memory_intrinsics_with_free_strides():
    assert {s.name for s in AMX} == {"amx_u8s8_32x32", "amx_s8s8_32x32"}
    spec = intrin.get("amx_u8s8_32x32")
    assert spec.free_strides == (("A", 0), ("B", 0), ("C", 0)) and spec.free_extents == ("kq",)
    assert spec.c_signature({"uint8": "uint8_t", "int8": "int8_t", "int32": "int32_t"}) == (
        "const uint8_t* a, const int8_t* b, int32_t* c, int64_t lda, int64_t ldb, "
        "int64_t ldc, int64_t n_kq, int zero")
    # the preferred intrinsic where the target has AMX, absent where it does not
    assert intrin.for_target(AMX_TARGET)[0].name == "amx_u8s8_32x32"
    assert not any(s.memory for s in intrin.for_target(Target("x86_64-avx512")))


def test_a_binding_gives_the_programs_strides_and_the_reduction_count():
    """K 640 in chunks of 128 (two steps of 64 in each call): A's rows are K apart, C's N
    (the local accumulator has the output's shape until code generation compacts it), B's
    column tiles K * 16 bytes apart."""
    spec = intrin.get("amx_u8s8_32x32")
    sch = amx_tensorized(spec, 64, 96, 640, chunk=128)
    outer = next(b for b in ir.blocks(sch.func.body) if intrin.ANNOTATION in b.annotations)
    bound = intrin.bind(outer, spec)
    assert [o.param.name for o in bound.operands] == ["A", "B", "C"]
    assert bound.strides == (640, 640 * 16, 96) and bound.counts == (2,)


def test_a_block_whose_rows_are_not_consecutive_k_is_refused_naming_the_operand():
    """A read transposed (A[k, i]): its reduction elements are M apart, not consecutive (four
    k of one step of k_1: 256 elements)."""
    spec = intrin.get("amx_u8s8_32x32")
    A = te.placeholder((64, 64), "uint8", name="A")
    B = te.placeholder((64, 64), "int8", name="B")
    r = te.reduce_axis(64, name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(
        te.cast("int32", A[r, i]) * te.cast("int32", B[r, j]), axis=r), name="C")
    sch = Schedule(te.create_func([A, B, C], name="matmul_at"))
    c = sch.get_block("C")
    sch.cache_read(c, 1, "global")
    sch.transform_layout(c, 1, "read", "lambda k, j: (j // 16, k // 4, j % 16, k % 4)")
    i, j, k = sch.get_loops(c)
    i0, i1 = sch.split(i, [None, 32])
    j0, j1, j2 = sch.split(j, [None, 2, 16])
    k0, k1, k2 = sch.split(k, [None, 16, 4])
    sch.reorder(i0, j0, k0, i1, j1, j2, k1, k2)
    sch.decompose_reduction(c, k0)
    with pytest.raises(ScheduleError, match=r"tensorize amx_u8s8_32x32: block C_o: A's element "
                                            r"offset moves by 256 with loop k_1, where the "
                                            r"intrinsic's A moves by 4"):
        sch.tensorize(i1, spec.name)


@pytest.mark.parametrize("spec", AMX, ids=lambda s: s.name)
def test_the_amx_call_compiles_for_a_target_with_amx(spec):
    """The kernel calls the intrinsic once per 32 x 32 block and chunk: its zero flag is the
    first chunk of the reduction, the tiles configured and released inside the call."""
    if host_arch() != "x86_64":
        pytest.skip("x86-64 intrinsics are compiled by this host's x86-64 compiler")
    src = generate_c(amx_tensorized(spec, 64, 64, 256, 128, decompose=False).func, AMX_TARGET)
    assert src.count(f"{spec.c_name}(&") == 1
    assert "k_0 == 0" in src.split(f"{spec.c_name}(&")[1].split(";")[0]
    assert "_tile_loadconfig" in src and "_tile_release" in src
    assert compile_shared(src, AMX_TARGET).exists()


@pytest.mark.parametrize("spec", AMX, ids=lambda s: s.name)
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
@pytest.mark.parametrize("K, chunk, decompose", [(192, 64, True), (1088, 64, False),
                                                 (1024, 512, False)])
def test_the_amx_intrinsics_match_numpy(spec, extreme, K, chunk, decompose):
    """Random and extreme operands (255 or -128 times -128, K past 1000: sums near -2^25);
    one call per chunk (the accumulator loaded back between calls) or the whole K; zeroed by
    a block of its own or by the first call."""
    if not runs_here(spec):
        pytest.skip(f"this host ({HOST}) lacks {', '.join(spec.missing(HOST))}")
    M, N = 96, 64
    a, b = operands(spec, M, N, K, extreme)
    c = np.full((M, N), 7, np.int32)  # the init zeroes: what the output held is unread
    tessel.build(amx_tensorized(spec, M, N, K, chunk, decompose).func, HOST)(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("shape, expected", [
    ((64, 96, 128), "amx_u8s8_32x32"),
    ((24, 64, 128), "dot_u8s8_16x4_vnni"),  # 24 rows: not a whole AMX block
], ids=["amx", "vnni"])
def test_the_auto_space_tiles_with_amx_where_the_block_fits(shape, expected):
    M, N, K = shape
    func = ops.matmul(M, N, K, dtype="uint8", b_dtype="int8", out_dtype="int32")
    space = make_space("auto", AMX_TARGET)
    names = {dict(i.args).get("value") for d in space.designs(func) for i in d.instructions
             if i.kind == "annotate" and dict(i.args)["key"] == AUTO_TENSORIZE}
    assert names == {expected}
    rng = random.Random(0)
    runs = runs_here(intrin.get(expected))
    for _ in range(3):
        final = postprocess(space.sample(func, rng), default_postprocs(AMX_TARGET), strict=True)
        done = [b.annotations.get(intrin.ANNOTATION) for b in ir.blocks(final.func.body)]
        assert expected in done
        if runs:
            a, b = operands(intrin.get(expected), M, N, K, seed=2)
            c = np.zeros((M, N), np.int32)
            tessel.build(final.func, HOST)(a, b, c)
            np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
