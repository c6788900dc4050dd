"""NaN and infinities through ReLU, Max/Min, Clip, max pooling and max reductions (issue 38).

tessel's min and max of floats propagate NaN from either operand (tessel.ir.BinOp), as
torch.maximum, numpy.maximum and ONNX Runtime's Relu, Max, Min and Clip do. ONNX Runtime's
MaxPool, GlobalMaxPool and ReduceMax keep a NaN only at some window positions (its loops
compare `x > acc`: a NaN first in a ReduceMax stays, elsewhere it is dropped; MaxPool keeps
one only in some windows): no rule of the window's values gives that, so there tessel follows
torch (a NaN anywhere in the window gives NaN) and the tests check that every NaN onnxruntime
gives is one of tessel's and that NaN-free windows agree. Real numbers at odd shapes: ONNX
models and torch modules through compile_model and torch.compile, kernels through
tessel.build, programs of the auto space (priors and samples), and the x86 assembly of a
vectorized relu (one max, no compare) and max pool."""
from __future__ import annotations

import math
import random
import re

import numpy as np
import pytest

import tessel
from tessel import ir, ops, te
from tessel.arith import evaluate
from tessel.codegen import asm_for, generate_c
from tessel.ir import structural_hash
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.priors import prior_schedules
from tessel.target import Target
from isa import HOST, ISA_PRESETS, runs_here

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F = torch.nn.functional
NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernels")


def special(*shape, seed=0, every=5):
    """Normal numbers with NaN, +inf and -inf spread over every position class (first, last,
    vector tails): one in `every` elements, a third of each kind."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.permutation(flat.size)[: max(3, flat.size // every)]
    for k, value in enumerate((NAN, INF, -INF)):
        flat[picks[k::3]] = value
    flat[0], flat[-1] = NAN, NAN
    return x


def assert_same(got, want, rtol=0.0):
    """Equal arrays: NaN where `want` has NaN, infinities and (to `rtol`) numbers alike."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


# ---- the IR's meaning ----

@pytest.mark.parametrize("op", ["max", "min"])
def test_folded_and_evaluated_min_max_of_a_nan_is_nan(op):
    x = ir.Var("x", "float32")
    for a, b in ((NAN, 1.0), (1.0, NAN), (NAN, -INF), (INF, NAN)):
        assert math.isnan(ir.binop(op, ir.const(a), ir.const(b)).value)
        assert math.isnan(evaluate(ir.binop(op, x, ir.const(b)), {x: a}))
    assert ir.binop(op, ir.const(-INF), ir.const(2.0)).value == (2.0 if op == "max" else -INF)
    assert ir.binop(op, ir.const(3), ir.const(5)).value == (5 if op == "max" else 3)


def test_scalar_c_calls_nan_propagating_helpers_with_a_constant_first():
    A = te.placeholder((5,), name="A")
    Y = te.compute((5,), lambda i: te.min(te.max(A[i], 0.0), 6.0), name="Y")
    I = te.placeholder((5,), "int32", name="I")
    J = te.compute((5,), lambda i: te.max(I[i], 0), name="J")
    source = generate_c(te.create_func([A, I, Y, J]), Target("x86_64-avx2"))
    assert "Y[i] = tessel_min_f32(6.0f, tessel_max_f32(0.0f, A[i]));" in source
    assert "return a != a ? a : m;" in source  # a's NaN; `a > b ? a : b` passes b's
    assert "J[i_1] = (I[i_1] > 0 ? I[i_1] : 0);" in source  # integers have no NaN


# ---- kernels through tessel.build ----

def _targets():
    return [HOST] + [Target(n) for n in ("x86_64-avx2", "x86_64-avx512")
                     if runs_here(Target(n))]


def _elementwise_func(n):
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    outs = {
        "max_ab": lambda i: te.max(A[i], B[i]), "max_ba": lambda i: te.max(B[i], A[i]),
        "min_ab": lambda i: te.min(A[i], B[i]), "min_ba": lambda i: te.min(B[i], A[i]),
        "relu": lambda i: te.max(A[i], 0.0), "relu_zero_first": lambda i: te.max(0.0, A[i]),
        "clip": lambda i: te.min(te.max(A[i], -0.5), 0.5),
    }
    tensors = [te.compute((n,), fn, name=name) for name, fn in outs.items()]
    return te.create_func([A, B, *tensors], name="minmax"), list(outs)


@pytest.mark.parametrize("target", _targets(), ids=lambda t: t.name)
def test_elementwise_min_max_relu_clip_kernels_propagate_nan(cache_dir, target):
    """Both operand orders, NaN in either operand or both, at 37 elements (vector tails);
    scheduled with a vectorized inner loop and unscheduled."""
    n = 37
    func, names = _elementwise_func(n)
    a, b = special(n, seed=1), special(n, seed=2, every=3)
    b[:4] = [NAN, 1.0, INF, NAN]
    a[:4] = [2.0, NAN, NAN, -INF]
    want = {"max_ab": np.maximum(a, b), "max_ba": np.maximum(b, a), "min_ab": np.minimum(a, b),
            "min_ba": np.minimum(b, a), "relu": np.maximum(a, 0), "relu_zero_first":
            np.maximum(0, a), "clip": np.minimum(np.maximum(a, -0.5), 0.5)}
    sch = tessel.Schedule(func)
    for name in names:
        (loop,) = sch.get_loops(sch.get_block(name))
        _, inner = sch.split(loop, [None, target.vector_lanes("float32")])
        sch.vectorize(inner)
    for program in (func, sch.func):
        mod = tessel.build(program, target, cache_dir=cache_dir)
        outs = [np.zeros(n, np.float32) for _ in names]
        mod(a, b, *outs)
        for name, out in zip(names, outs):
            assert_same(out, want[name])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_max_and_min_reductions_propagate_a_nan_at_any_position(cache_dir, dtype):
    """Rows of 41 (vector accumulators, then the lanes, then a tail): the NaN first, in the
    vector part, in a lane of the last vector, in the tail; all -inf; +inf with a NaN."""
    n = 41
    X = te.placeholder((8, n), dtype, name="X")
    k, k2 = te.reduce_axis(n, name="k"), te.reduce_axis(n, name="k2")
    hi = te.compute((8,), lambda i: te.max(X[i, k], axis=k), name="hi")
    lo = te.compute((8,), lambda i: te.min(X[i, k2], axis=k2), name="lo")
    func = te.create_func([X, hi, lo])
    x = np.random.default_rng(3).standard_normal((8, n)).astype(dtype)
    for row, col in enumerate((0, 5, 15, 31, 40)):
        x[row, col] = NAN
    x[5] = -INF
    x[6, 3], x[6, 30] = INF, NAN
    x[7, 7], x[7, 9] = INF, -INF
    for target in _targets():
        outs = np.zeros(8, dtype), np.zeros(8, dtype)
        tessel.build(func, target, cache_dir=cache_dir)(x, *outs)
        assert_same(outs[0], x.max(axis=1))
        assert_same(outs[1], x.min(axis=1))
    assert "hi_lanes" in generate_c(func, HOST)  # the vector accumulators were used


# ---- programs of the auto space ----

WORKLOADS = {
    "relu": lambda: ops.relu((7, 37)),
    "max_pool2d": lambda: ops.max_pool2d(1, 5, 11, 13, 3, stride=2, padding=1),
    "max_pool2d_s1": lambda: ops.max_pool2d(2, 3, 9, 19, 2, stride=1),
    "softmax": lambda: ops.softmax(5, 37),
}


def _programs(func, target, samples, seed):
    """The auto space's first prior (when it has one) and `samples` distinct sampled designs,
    postprocessed."""
    space, posts = make_space("auto", target), default_postprocs(target)
    found = {}
    for sch in prior_schedules(space, func, limit=1):
        final = postprocess(sch, posts)
        if final is not None:
            found[structural_hash(final.func)] = final.func
    rng, wanted = random.Random(seed), len(found) + samples
    for _ in range(100):
        final = postprocess(space.sample(func, rng), posts)
        if final is not None:
            found.setdefault(structural_hash(final.func), final.func)
        if len(found) == wanted:
            break
    return list(found.values())


@ISA_PRESETS
@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_auto_space_programs_keep_nan(cache_dir, target, name):
    """Tuned programs (a prior and sampled traces: split, vectorized, unrolled, cached) of
    relu, max pools and a softmax on inputs full of NaN and infinities match numpy."""
    func = WORKLOADS[name]()
    (x,) = ops.reference_inputs(func, seed=4)
    x = special(*x.shape, seed=4, every=9)
    with np.errstate(invalid="ignore", over="ignore"):
        want = ops.run_reference(func, x)
    assert np.isnan(want).any()
    programs = _programs(func, target, samples=3, seed=sorted(WORKLOADS).index(name))
    assert len(programs) >= 3
    for program in programs:
        source = generate_c(program, target)
        assert "tessel_max_f32(" in source or re.search(r"tessel_f32x\d+_max\(", source)
        if runs_here(target):
            out = np.zeros(want.shape, np.float32)
            tessel.build(program, target, cache_dir=cache_dir)(x, out)
            assert_same(out, want, rtol=2e-6 if name == "softmax" else 0.0)


# ---- the assembly ----

def _kernel_asm(program, target) -> str:
    """The instructions of `program`'s kernel (where the entry point inlines it, and its
    OpenMP bodies) for `target`, without the timing harness."""
    source = generate_c(program, target)
    kernel = re.search(r"^static int32_t (\w+)\(", source, re.M).group(1)
    asm = asm_for(source, target)
    parts = re.findall(rf"^(?:{kernel}|tessel_entry)(?:\._omp_fn\.\d+)?:\n(.*?)\n\s*\.size",
                       asm, re.S | re.M)
    return "\n".join(parts)


@ISA_PRESETS
def test_vectorized_relu_is_one_max_per_vector_and_a_pool_uses_max_instructions(target):
    """max(0, x) with the constant first: x86's max returns its second operand when either
    is NaN, so a NaN x passes with no compare. A max pool's general max is the max
    instruction plus an unordered compare for the accumulator's NaN."""
    lanes, reg = target.vector_lanes("float32"), {8: "ymm", 16: "zmm"}
    func = ops.relu((4, 8 * lanes))
    sch = tessel.Schedule(func)
    i0, i1 = sch.get_loops(sch.get_block("relu"))
    _, inner = sch.split(i1, [None, lanes])
    sch.vectorize(inner)
    asm = _kernel_asm(sch.func, target)
    assert re.search(rf"\bvmaxps\s+[^\n]*%{reg[lanes]}", asm)
    assert not re.search(r"\bv(?:p?cmp|p?blend|pand|andps|ucomis)", asm)

    pool = ops.max_pool2d(1, 2, 9, 8 * lanes + 2, 3, stride=1)
    sch = tessel.Schedule(pool)
    block = sch.get_block("max_pool2d")
    *_, x, ry, rx = sch.get_loops(block)
    sch.reorder(ry, rx, x)
    _, inner = sch.split(x, [None, lanes])
    sch.vectorize(inner)
    asm = _kernel_asm(sch.func, target)
    maxes = re.findall(rf"\bvmaxps\s+[^\n]*%{reg[lanes]}", asm)
    assert maxes and len(re.findall(r"\bvcmp\w*ps\b", asm)) <= len(maxes)


# ---- ONNX models through compile_model, against onnxruntime ----

def onnx_model(nodes, inputs, inits=None, outputs=("y",)):
    g = helper.make_graph(
        nodes, "nan",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v, np.float32), k)
         for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def run_both(m, feeds, layout="blocked"):
    """(tessel's outputs, onnxruntime's outputs) of `m` on `feeds`."""
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = tessel.compile_model(m, layout=layout)(*feeds.values())
    return list(got), want


S = (3, 5, 7)  # odd: no vector width divides a row
ELEMENTWISE = {
    "relu": ([node("Relu", ["x"])], {}),
    "clip": ([node("Clip", ["x", "lo", "hi"])], {"lo": -0.5, "hi": 0.75}),
    # an absent bound is float32's largest: Clip(inf, min=0) is 3.4e38 (torch: inf)
    "clip_min_only": ([node("Clip", ["x", "lo"])], {"lo": 0.0}),
    "clip_max_only": ([node("Clip", ["x", "", "hi"])], {"hi": 0.5}),
    "max": ([node("Max", ["x", "x2"])], {}),
    "max_reversed": ([node("Max", ["x2", "x"])], {}),
    "min": ([node("Min", ["x", "x2"])], {}),
    "max_of_three": ([node("Max", ["x", "one", "x2"])], {"one": 1.0}),
    "max_constant_first": ([node("Max", ["one", "x"])], {"one": 1.0}),
    "min_constant_last": ([node("Min", ["x", "one"])], {"one": 1.0}),
    "hardswish": ([node("HardSwish", ["x"])], {}),
    "leaky_relu": ([node("LeakyRelu", ["x"], alpha=0.1)], {}),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_onnx_elementwise_max_like_ops_match_onnxruntime(name):
    nodes, inits = ELEMENTWISE[name]
    uses_x2 = any("x2" in n.input for n in nodes)
    inputs = {"x": S, **({"x2": S} if uses_x2 else {})}
    feeds = {"x": special(*S, seed=5)}
    if uses_x2:
        feeds["x2"] = special(*S, seed=6, every=4)
    got, want = run_both(onnx_model(nodes, inputs, inits), feeds)
    assert np.isnan(want[0]).any()
    assert_same(got[0], want[0], rtol=1e-6 if name == "hardswish" else 0.0)


def test_onnx_relu_keeps_the_sign_of_a_negative_zero_as_onnxruntime():
    x = np.array([[-0.0, 0.0, -1.0, NAN, 2.0] * 7], np.float32)
    got, want = run_both(onnx_model([node("Relu", ["x"])], {"x": x.shape}), {"x": x})
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(want[0]))


def test_onnx_matmul_relu_keeps_nan_as_onnxruntime():
    """The issue's model: a NaN in a row of x makes that row NaN after MatMul and Relu."""
    w = np.random.default_rng(7).standard_normal((9, 13)).astype(np.float32)
    m = onnx_model([node("MatMul", ["x", "w"], ["h"]), node("Relu", ["h"])], {"x": (5, 9)},
                   {"w": w})
    x = np.random.default_rng(8).standard_normal((5, 9)).astype(np.float32)
    x[1, 2], x[3, 8], x[4, 0] = NAN, INF, -INF
    got, want = run_both(m, {"x": x})
    assert np.isnan(want[0][1]).all()
    assert_same(got[0], want[0], rtol=1e-5)


def _window_nan(x, k, s, p):
    """Whether each max pool window of x (N, C, H, W) holds a NaN."""
    t = torch.from_numpy(np.isnan(x).astype(np.float32))
    return F.max_pool2d(t, k, s, p).numpy() > 0


def _check_pool(got, want_ort, x, k, s, p):
    """tessel's pool is torch's; onnxruntime's NaNs are among tessel's, and windows without
    a NaN agree with onnxruntime."""
    assert_same(got, F.max_pool2d(torch.from_numpy(x), k, s, p).numpy())
    assert not (np.isnan(want_ort) & ~np.isnan(got)).any()
    clean = ~_window_nan(x, k, s, p)
    np.testing.assert_array_equal(got[clean], want_ort[clean])


@pytest.mark.parametrize("k, s, p", [(3, 2, 1), (2, 1, 0), (3, 1, 1)])
def test_onnx_max_pool_gives_nan_for_a_window_holding_one(k, s, p):
    """NaN first, inside and last in a window, on the padding border, in every channel."""
    x = special(2, 3, 9, 11, seed=9, every=17)
    x[0, 0, 0, 0], x[0, 1, 4, 5], x[1, 2, 8, 10], x[1, 0, 3, 0] = NAN, NAN, NAN, NAN
    m = onnx_model([node("MaxPool", ["x"], kernel_shape=[k, k], strides=[s, s],
                         pads=[p] * 4)], {"x": x.shape})
    got, want = run_both(m, {"x": x})
    _check_pool(got[0], want[0], x, k, s, p)


@pytest.mark.parametrize("layout", ["plain", "blocked"])
def test_onnx_conv_then_max_pool_in_blocked_channels_keeps_nan(layout):
    """A 1x1 identity convolution (16 channels: whole channel blocks) feeding a max pool: the
    pool runs in blocked channels (max_pool_blocked) or plain; a NaN or infinity at a pixel
    makes it NaN in every channel (0 * inf)."""
    eye = np.eye(16, dtype=np.float32).reshape(16, 16, 1, 1)
    m = onnx_model([node("Conv", ["x", "w"], ["c"]),
                    node("MaxPool", ["c"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)],
                   {"x": (1, 16, 9, 11)}, {"w": eye})
    x = np.random.default_rng(10).standard_normal((1, 16, 9, 11)).astype(np.float32)
    x[0, 3, 0, 0], x[0, 7, 4, 5], x[0, 15, 8, 10], x[0, 0, 2, 7] = NAN, NAN, INF, -INF
    got, want = run_both(m, {"x": x}, layout=layout)
    conv = F.conv2d(torch.from_numpy(x), torch.from_numpy(eye)).numpy()
    _check_pool(got[0], want[0], conv, 3, 2, 1)


def test_onnx_global_max_pool_gives_nan_for_a_channel_holding_one():
    """onnxruntime drops these NaNs (its pooling loop); torch.amax keeps them, as tessel."""
    x = np.random.default_rng(11).standard_normal((2, 5, 7, 9)).astype(np.float32)
    x[0, 1, 0, 0], x[0, 2, 3, 4], x[1, 4, 6, 8], x[1, 0, 2, 2] = NAN, NAN, NAN, INF
    got, want = run_both(onnx_model([node("GlobalMaxPool", ["x"])], {"x": x.shape}), {"x": x})
    assert_same(got[0], np.amax(x, axis=(2, 3), keepdims=True))
    nan_channel = np.isnan(x).any(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(got[0][~nan_channel], want[0][~nan_channel])


# ---- torch modules through compile_model and torch.compile ----

class MaxLike(torch.nn.Module):
    def forward(self, x, y):
        return (torch.relu(x), torch.clamp(x, -1.0, 2.0), torch.clamp(x, min=0.5),
                x.clamp(max=0.25), F.hardtanh(x), F.relu6(x), torch.maximum(x, y),
                torch.minimum(y, x), F.max_pool2d(x, 3, 2, 1))


def test_torch_module_max_like_ops_match_eager():
    """compile_model of a torch module: torch's semantics (clamp(inf, min=0.5) is inf)."""
    x, y = special(2, 3, 9, 11, seed=12), special(2, 3, 9, 11, seed=13, every=7)
    module = MaxLike().eval()
    want = module(torch.from_numpy(x), torch.from_numpy(y))
    got = tessel.compile_model(module, example_inputs=(torch.from_numpy(x),
                                                        torch.from_numpy(y)))(x, y)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_same(g, w.numpy())


def test_torch_compile_linear_relu_keeps_nan():
    """The issue's torch.compile(backend="tessel") case: Linear + ReLU + max pool."""
    torch._dynamo.reset()
    net = torch.nn.Sequential(torch.nn.Linear(9, 12), torch.nn.ReLU(),
                              torch.nn.Unflatten(1, (1, 3, 4)), torch.nn.MaxPool2d(2)).eval()
    x = torch.from_numpy(np.random.default_rng(14).standard_normal((5, 9)).astype(np.float32))
    x[1, 2], x[3, 0], x[4, 4] = NAN, INF, -INF
    try:
        with torch.no_grad():
            want = net(x)
            got = torch.compile(net, backend="tessel")(x)
    finally:
        torch._dynamo.reset()
    assert torch.isnan(want[1]).all()
    assert_same(got.numpy(), want.numpy(), rtol=1e-5)
