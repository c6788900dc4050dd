"""AArch64: Target("aarch64-neon") built with Debian's cross gcc and, on a host of another
architecture, run under qemu-user (tessel.codegen.emulate). The auto space's programs at odd
shapes and a zoo model match numpy and PyTorch; vector math falls back to libm's scalar
functions, which the cross C library has; nothing emulated is timed."""
import contextlib
import random
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import tessel
import tessel.runtime as rt
from tessel import intrin, ir, ops
from tessel.codegen import emulate
from tessel.space import default_postprocs, make_space, postprocess
from tessel.target import Target, TargetError, host_arch

from intrin_cases import dims, operands, tensorized

NEEDS = "qemu-user, gcc-aarch64-linux-gnu and libc6-dev-arm64-cross (Debian packages)"
AARCH64 = Target("aarch64-neon", cores=2)  # parallel loops: libgomp threads under qemu
EMULATED = host_arch() != "aarch64"
_MISSING = EMULATED and (emulate.emulator("aarch64") is None
                         or not AARCH64.compiler.endswith("aarch64-linux-gnu-gcc")
                         or not Path("/usr/aarch64-linux-gnu/lib/libc.so.6").exists())
pytestmark = pytest.mark.skipif(_MISSING, reason=f"AArch64 under emulation needs {NEEDS}")

# odd shapes: primes and sizes that no 4-lane vector or register tile divides
WORKLOADS = {
    "matmul": lambda: ops.matmul(13, 19, 23),
    "conv2d": lambda: ops.conv2d(1, 3, 11, 13, 7, 3, 3, padding=1),
    "depthwise": lambda: ops.depthwise_conv2d(1, 5, 11, 13, 3, 3, stride=2, padding=1),
    "softmax": lambda: ops.softmax(7, 19),
    "layer_norm": lambda: ops.layer_norm(5, 23),
    "tanh": lambda: ops.tanh((7, 19)),
    "sigmoid": lambda: ops.sigmoid((5, 23)),
    "max_pool": lambda: ops.max_pool2d(1, 3, 11, 13, 3, stride=2),
}
PROGRAMS = 6  # per workload: each a cross compile of a tenth of a second or so


def _programs(func: ir.PrimFunc, n: int, seed: int) -> list[ir.PrimFunc]:
    """n structurally distinct postprocessed programs of the aarch64 auto space."""
    space, posts = make_space("auto", AARCH64), default_postprocs(AARCH64)
    rng, found = random.Random(seed), {}
    for _ in range(200):
        final = postprocess(space.sample(func, rng), posts)
        if final is not None:
            found.setdefault(ir.structural_hash(final.func), final.func)
        if len(found) == n:
            break
    return list(found.values())


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_auto_space_programs_at_odd_shapes_match_numpy(name):
    func = WORKLOADS[name]()
    inputs = ops.reference_inputs(func, seed=1)
    expected = ops.run_reference(func, *inputs)
    programs = _programs(func, PROGRAMS, seed=sorted(WORKLOADS).index(name))
    assert len(programs) >= 4  # (an elementwise space holds no more)
    for program in programs:
        mod = tessel.build(program, AARCH64)
        assert isinstance(mod, emulate.EmulatedModule) == EMULATED
        out = np.full(program.outputs[0].shape, np.nan, program.outputs[0].dtype)
        mod(*inputs, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name, call", [("tanh", "tanhf("), ("sigmoid", "tessel_f32x4_sigmoid("),
                                        ("softmax", "expf(")])
def test_vector_math_on_aarch64(name, call):
    """No libmvec entry (_ZGV...: x86-64's vector function ABI) in AArch64 code: tanh's lanes,
    and the softmax's exp in a loop this program leaves scalar, each call libm, which the
    cross C library has (the library loads and runs above); a vector float32 sigmoid is
    tessel's own NEON code."""
    (program,) = _programs(WORKLOADS[name](), 1, seed=0)
    source = tessel.build(program, AARCH64).source
    assert "_ZGV" not in source and call in source


def test_matmul_program_is_neon_code():
    """A register-blocked matmul of the auto space compiles to NEON FMAs on 4 lanes."""
    (program,) = _programs(ops.matmul(13, 19, 23), 1, seed=2)
    asm = tessel.build(program, AARCH64).asm()
    assert "fmla\tv" in asm and ".4s" in asm


def test_zoo_model_matches_pytorch():
    """The DQN at an odd image size (convolutions in blocked layouts on expert priors,
    weights packed at compile time by emulated kernels, a flatten that aliases its input),
    its kernels run in one emulated process per call."""
    torch = pytest.importorskip("torch")
    from tessel.graph.frontend import models
    module, example = models.build("dqn", image=52)
    model = tessel.compile_model(module, AARCH64, example_inputs=example)
    assert {s.how for s in model.statuses} == {"prior"}
    for seed in (0, 1):  # the second call through the same planned buffers
        x = torch.randn(example[0].shape, generator=torch.Generator().manual_seed(seed))
        with torch.inference_mode():
            want = module(x).numpy()
        (got,) = model(x.numpy())
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    if EMULATED:
        for timed in (model.latency, model.profile):
            with pytest.raises(emulate.EmulationError, match="model .* cannot be timed under "
                                                             "emulation"):
                timed()


@pytest.mark.skipif(not EMULATED, reason="this host runs AArch64 code natively")
def test_emulated_module_checks_arguments_and_refuses_to_be_timed():
    func = ops.matmul(3, 5, 7)
    mod = tessel.build(func, AARCH64)
    a, b = ops.reference_inputs(func)
    c = np.zeros((3, 5), "float32")
    with pytest.raises(tessel.TesselError, match="takes 3 arrays"):
        mod(a, b)
    with pytest.raises(tessel.TesselError, match="must have dtype float32"):
        mod(a.astype("float64"), b, c)
    message = ("kernel matmul cannot be timed under emulation: qemu-user's timings say "
               "nothing about an AArch64 CPU")
    for timed in (mod.time, mod.time_all):
        with pytest.raises(emulate.EmulationError, match=message):
            timed(a, b, c)
    assert not c.any()  # nothing ran


@pytest.mark.skipif(not EMULATED, reason="this host runs AArch64 code natively")
def test_emulated_calls_keep_overlapping_arguments_in_one_block():
    """Two calls on slices of one array (as a model's concat inputs are): the second reads
    what the first wrote, through the same emulated memory."""
    func = ops.add((2, 7))
    mod = tessel.build(func, AARCH64)
    buf = np.arange(4 * 14, dtype="float32").reshape(4, 2, 7)
    x, y, first, second = buf[0], buf[1], buf[2], buf[3]
    spans = [mod.spans(mod._pack(args)) for args in ((x, y, first), (first, y, second))]
    status, failed = emulate.run_calls([(mod.lib_path, s) for s in spans], AARCH64, None,
                                       "test")
    assert (status, failed) == (0, -1)
    np.testing.assert_array_equal(first, buf[0] + buf[1])
    np.testing.assert_array_equal(second, buf[0] + 2 * buf[1])


@pytest.mark.skipif(not EMULATED, reason="this host runs AArch64 code natively")
def test_a_kernel_crashing_under_emulation_is_one_line_and_python_goes_on(tmp_path):
    from tessel.codegen.compiler import compile_shared
    func = ops.add((2, 3))
    source = "int tessel_entry(void** args) { *(volatile int*)0 = 1; return 0; }"
    mod = emulate.EmulatedModule(func, AARCH64, source,
                                 compile_shared(source, AARCH64, cache_dir=tmp_path), tmp_path)
    x = np.ones((2, 3), "float32")
    with pytest.raises(emulate.EmulationError, match=r"^kernel add failed under qemu-aarch64 "
                                                     r"\(exit -11\): .*Segmentation fault"):
        mod(x, x.copy(), np.empty_like(x))


@pytest.mark.skipif(not EMULATED, reason="this host runs AArch64 code natively")
def test_foreign_build_without_cross_compiler_or_emulator_says_what_to_install(monkeypatch):
    func = ops.matmul(3, 5, 7)
    host_cc = Target("aarch64-neon", compiler=shutil.which("cc") or "gcc")
    with pytest.raises(TargetError, match=r"aarch64-neon builds need a C compiler for aarch64, "
                                          r".* install qemu-user gcc-aarch64-linux-gnu "
                                          r"libc6-dev-arm64-cross \(Debian\)") as err:
        tessel.build(func, host_cc)
    assert "\n" not in str(err.value)
    monkeypatch.setattr(emulate, "emulator", lambda arch: None)
    with pytest.raises(TargetError, match="cannot run it: install qemu-user"):
        tessel.build(func, AARCH64)


def test_cross_compiler_is_the_default_for_another_architecture():
    if EMULATED:
        assert AARCH64.compiler.endswith("aarch64-linux-gnu-gcc")
        assert "aarch64-linux-gnu-gcc" not in Target("host").compiler
    else:
        assert AARCH64.compiler == Target("host").compiler


def test_an_aarch64_export_runs_from_c_under_emulation(tmp_path):
    """`export` for another architecture: the cross compiler builds the library (its weights,
    its baseline entry points), the C example is cross-compiled against tessel_runtime.h,
    and qemu-user runs them on the compiled model's inputs: the same numbers."""
    pytest.importorskip("onnx")
    from test_export import EXAMPLE, feeds, two_input_model
    model = tessel.compile_model(str(two_input_model(tmp_path / "m.onnx")), target=AARCH64)
    want = model(*feeds())
    model.export(tmp_path / "m.so")
    assert rt.read_meta(tmp_path / "m.so")["arch"] == "aarch64"
    with pytest.raises(rt.LoadError, match="built for aarch64") if EMULATED else \
            contextlib.nullcontext():
        rt.load(tmp_path / "m.so")
    files = []
    for k, array in enumerate(feeds()):
        files.append(tmp_path / f"in{k}.bin")
        array.tofile(files[-1])
    binary = tmp_path / "run_model"
    subprocess.run([AARCH64.compiler, "-O2", "-I", str(rt.header_path().parent), str(EXAMPLE),
                    "-o", str(binary), "-ldl"], check=True, capture_output=True)
    runner = emulate.emulator("aarch64") if EMULATED else ()
    proc = subprocess.run([*runner, str(binary), str(tmp_path / "m.so"), *map(str, files),
                           "--out", str(tmp_path / "out_")], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    for k, w in enumerate(want):
        np.testing.assert_array_equal(
            np.fromfile(tmp_path / f"out_{k}.bin", w.dtype).reshape(w.shape), w)


@pytest.mark.parametrize("name", ["dot_s8s8_4x4_sdot", "dot_u8s8_4x4_usdot"])
@pytest.mark.parametrize("extreme", [False, True], ids=["random", "extreme"])
def test_int8_dot_product_intrinsics_match_numpy(name, extreme):
    """sdot (dotprod) and usdot (i8mm) in a tensorized matmul of odd rows, for a target with
    their features (qemu-user's default CPU has both)."""
    spec = intrin.get(name)
    target = Target("aarch64-neon", cores=2, features=["neon", "asimd", *spec.features])
    lanes, group = dims(spec)
    M, N, K = 5, 3 * lanes, (300 if extreme else 7) * group
    a, b = operands(spec, M, N, K, extreme)
    c = np.zeros((M, N), np.int32)
    mod = tessel.build(tensorized(spec, M, N, K, mr=5).func, target)
    mod(a, b, c)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ b.astype(np.int64))
    assert f"\t{name.split('_')[-1]}\t" in mod.asm()  # the instruction itself


@pytest.mark.parametrize("fn", ["floor", "ceil", "round"])
def test_floor_and_ceil_are_neon_rounding_instructions(fn):
    """vrndmq / vrndpq / vrndnq on 4 float lanes: numpy's values at halves (round: ties to
    even), infinities, NaN, -0."""
    from test_codegen_simd import EDGES, vector_map
    n = len(EDGES)
    func = vector_map(n, lambda A, i: ir.call(fn, A[i]))
    a = np.concatenate([EDGES, np.zeros(8, np.float32)])
    out = np.zeros(n, np.float32)
    mod = tessel.build(func, AARCH64)
    mod(a, out)
    np.testing.assert_array_equal(out, getattr(np, fn)(a[:n]))
    assert f"vrnd{dict(floor='m', ceil='p', round='n')[fn]}q_f32" in mod.source
