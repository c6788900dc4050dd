"""tessel.ops factories: parameter shapes and order, attrs, stages, argument validation, and
built kernels checked against tessel.ops.reference (and torch where it is installed)."""
import json

import numpy as np
import pytest

from tessel import ir, ops
from tessel.ops import reference as ref
from tessel.ops.registry import define
from tessel.space.templates import TEMPLATES

# (factory, args, kwargs, expected parameter shapes in order: inputs then output)
SHAPES = [
    (ops.matmul, (7, 13, 5), {}, [(7, 5), (5, 13), (7, 13)]),
    (ops.batch_matmul, (3, 7, 13, 5), {}, [(3, 7, 5), (3, 5, 13), (3, 7, 13)]),
    (ops.dense, (7, 13, 5), {}, [(7, 5), (13, 5), (13,), (7, 13)]),
    (ops.dense, (7, 13, 5), {"bias": False}, [(7, 5), (13, 5), (7, 13)]),
    (ops.transpose_batch_matmul, (2, 7, 3, 5), {}, [(2, 7, 3, 5), (2, 7, 3, 5), (2, 3, 7, 7)]),
    (ops.conv1d, (1, 5, 17, 7, 3), {"stride": 2, "padding": 1},
     [(1, 5, 17), (7, 5, 3), (1, 7, 9)]),
    (ops.conv2d, (1, 5, 13, 11, 7, 3, 3), {"stride": 2, "padding": 1, "dilation": 2},
     [(1, 5, 13, 11), (7, 5, 3, 3), (1, 7, 6, 5)]),
    (ops.conv2d, (2, 6, 9, 8, 4, 3, 2), {"stride": (2, 1), "padding": (0, 1), "groups": 2},
     [(2, 6, 9, 8), (4, 3, 3, 2), (2, 4, 4, 9)]),
    (ops.conv3d, (1, 2, 5, 7, 6, 3, 3, 2, 3), {"stride": (1, 2, 2), "padding": 1},
     [(1, 2, 5, 7, 6), (3, 2, 3, 2, 3), (1, 3, 5, 4, 3)]),
    (ops.depthwise_conv2d, (1, 6, 11, 9, 3, 5), {"stride": 2, "padding": (1, 2)},
     [(1, 6, 11, 9), (6, 1, 3, 5), (1, 6, 6, 5)]),
    (ops.conv2d_transpose, (1, 4, 5, 3, 6, 3, 4),
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2},
     [(1, 4, 5, 3), (4, 3, 3, 4), (1, 6, 10, 7)]),
    (ops.conv2d_bn_relu, (1, 3, 11, 9, 5, 3, 3), {"stride": 2, "padding": 1},
     [(1, 3, 11, 9), (5, 3, 3, 3), (5,), (5,), (5,), (5,), (1, 5, 6, 5)]),
    (ops.max_pool2d, (1, 3, 11, 8, 3), {"stride": 2, "padding": 1}, [(1, 3, 11, 8), (1, 3, 6, 4)]),
    (ops.avg_pool2d, (2, 3, 7, 7, (3, 2)), {}, [(2, 3, 7, 7), (2, 3, 2, 3)]),
    (ops.global_avg_pool2d, (2, 3, 7, 5), {}, [(2, 3, 7, 5), (2, 3, 1, 1)]),
    (ops.relu, ((3, 5),), {}, [(3, 5), (3, 5)]),
    (ops.sigmoid, ((3, 5),), {}, [(3, 5), (3, 5)]),
    (ops.tanh, (4,), {}, [(4,), (4,)]),
    (ops.gelu, (7,), {}, [(7,), (7,)]),
    (ops.add, ((2, 3, 4),), {}, [(2, 3, 4)] * 3),
    (ops.multiply, ((2, 3),), {}, [(2, 3)] * 3),
    (ops.bias_add, ((2, 3, 4),), {}, [(2, 3, 4), (3,), (2, 3, 4)]),
    (ops.bias_add, ((2, 3, 4),), {"axis": -1}, [(2, 3, 4), (4,), (2, 3, 4)]),
    (ops.batch_norm, (2, 3, 4, 5), {}, [(2, 3, 4, 5)] + [(3,)] * 4 + [(2, 3, 4, 5)]),
    (ops.pad, ((3, 4), (1, 2), (0, 3)), {}, [(3, 4), (4, 9)]),
    (ops.layer_norm, (7, 13), {}, [(7, 13), (13,), (13,), (7, 13)]),
    (ops.softmax, (7, 13), {}, [(7, 13), (7, 13)]),
]


def _id(case):
    return case[0].__name__


@pytest.mark.parametrize("factory, args, kwargs, shapes", SHAPES, ids=[_id(c) for c in SHAPES])
def test_param_shapes_and_attrs(factory, args, kwargs, shapes):
    func = factory(*args, **kwargs)
    assert [p.shape for p in func.params] == shapes
    assert func.name == factory.__name__ and func.attrs["op"] == factory.__name__
    assert func.outputs == func.params[-1:]
    # attrs are JSON-safe and rebuild the same program
    attrs = json.loads(json.dumps(func.attrs))
    assert attrs == func.attrs
    again = ops.OPS[attrs["op"]].factory(**attrs["args"])
    assert again.structural_hash() == func.structural_hash()
    assert again.attrs == func.attrs


def test_registry():
    """Every registered operator has a case above; every template names one; a name is
    registered once."""
    assert set(ops.OPS) == {case[0].__name__ for case in SHAPES}
    assert all(op.name == name and getattr(ops, name) is op.factory
               for name, op in ops.OPS.items())
    assert set(TEMPLATES) <= set(ops.OPS)
    with pytest.raises(ops.OpError, match="operator matmul is defined twice"):
        define(ref.matmul)(ops.matmul)


def _blocks(func):
    return [b.name for b in ir.blocks(func.body) if b is not func.root]


@pytest.mark.parametrize("factory, args, padded_kw, unpadded_kw", [
    (ops.conv1d, (1, 3, 9, 4, 3), {"padding": 1}, {}),
    (ops.conv2d, (1, 3, 9, 9, 4, 3, 3), {"padding": (0, 1)}, {"padding": 0}),
    (ops.conv3d, (1, 2, 5, 5, 5, 2, 3, 3, 3), {"padding": 1}, {}),
    (ops.depthwise_conv2d, (1, 3, 9, 9, 3, 3), {"padding": 1}, {}),
    (ops.max_pool2d, (1, 3, 9, 9, 3), {"padding": 1}, {}),
    (ops.avg_pool2d, (1, 3, 9, 9, 3), {"padding": 1}, {}),
    (ops.conv2d_bn_relu, (1, 3, 9, 9, 4, 3, 3), {"padding": 1}, {}),
    (ops.conv2d_transpose, (1, 3, 5, 5, 4, 3, 3), {"stride": 2}, {"padding": 2}),
])
def test_pad_stage_only_when_padding(factory, args, padded_kw, unpadded_kw):
    padded, unpadded = factory(*args, **padded_kw), factory(*args, **unpadded_kw)
    assert _blocks(padded)[0] == "pad" and "pad" in [b.name for b in padded.root.alloc_buffers]
    assert "pad" not in _blocks(unpadded)


def _eval(e, env):
    """Evaluate an integer/boolean index expression (floor semantics, as in the IR)."""
    if isinstance(e, ir.IntImm):
        return e.value
    if isinstance(e, ir.Var):
        return env[e]
    if isinstance(e, ir.Not):
        return not _eval(e.a, env)
    a, b = _eval(e.a, env), _eval(e.b, env)
    return {"+": a + b, "-": a - b, "*": a * b, "//": a // b if b else 0, "%": a % b if b else 0,
            "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b,
            "and": a and b, "or": a or b, "min": min(a, b), "max": max(a, b)}[e.op]


@pytest.mark.parametrize("func", [
    ops.conv2d(1, 2, 5, 4, 3, 3, 3, stride=2, padding=(2, 1)),
    ops.conv2d_transpose(1, 2, 4, 3, 3, 3, 2, stride=(2, 3), padding=(1, 2), output_padding=1),
    ops.conv2d_transpose(1, 2, 4, 3, 3, 2, 2, stride=2, padding=(3, 2), dilation=2),
    ops.max_pool2d(1, 2, 5, 4, 3, stride=2, padding=1),
    ops.pad((3, 4), (2, 0), (1, 3)),
], ids=lambda f: f.name)
def test_pad_reads_stay_in_bounds(func):
    """Wherever the pad stage reads its input, the indices are inside the input."""
    block = [b for b in ir.blocks(func.body) if b.name == "pad"][0]
    select = ir.collect(block.body, ir.Select)[0]
    load = ir.collect(select.true_value, ir.BufferLoad)[0]
    ivars = [iv.var for iv in block.iter_vars]
    read = []
    for point in np.ndindex(*[iv.extent for iv in block.iter_vars]):
        env = dict(zip(ivars, point))
        if _eval(select.cond, env):
            idx = tuple(_eval(i, env) for i in load.indices)
            assert all(0 <= i < n for i, n in zip(idx, load.buffer.shape)), (point, idx)
            read.append(idx)
    assert len(set(read)) == len(read) > 0  # each input element lands at most once
    if func.name != "conv2d_transpose":  # (a transposed conv may crop: padding > kernel span)
        assert len(read) == load.buffer.size


def test_stage_names():
    assert _blocks(ops.matmul(3, 4, 5)) == ["C"]
    assert _blocks(ops.dense(3, 4, 5)) == ["dense", "bias_add"]
    assert _blocks(ops.transpose_batch_matmul(1, 4, 2, 3)) == ["q_T", "k_T", "C"]
    assert _blocks(ops.conv2d_bn_relu(1, 3, 9, 9, 4, 3, 3, padding=1)) == [
        "pad", "conv2d", "bn_relu"]
    assert _blocks(ops.layer_norm(4, 5)) == ["mean", "var", "layer_norm"]
    assert _blocks(ops.softmax(4, 5)) == ["maxelem", "exp", "expsum", "softmax"]
    assert _blocks(ops.avg_pool2d(1, 2, 5, 5, 2)) == ["pool_sum", "avg_pool2d"]


def test_reduction_kinds():
    block = [b for b in ir.blocks(ops.conv2d(1, 4, 7, 7, 6, 3, 3, groups=2).body)
             if b.name == "conv2d"][0]
    assert [iv.kind for iv in block.iter_vars] == ["spatial"] * 4 + ["reduce"] * 3
    dep = [b for b in ir.blocks(ops.depthwise_conv2d(1, 4, 7, 7, 3, 3).body)
           if b.name == "depthwise_conv2d"][0]
    assert [iv.extent for iv in dep.iter_vars] == [1, 4, 5, 5, 3, 3]


def test_int8_accumulates_in_int32():
    func = ops.matmul(4, 5, 6, dtype="int8", out_dtype="int32")
    assert [p.dtype for p in func.params] == ["int8", "int8", "int32"]
    conv = ops.conv2d(1, 3, 5, 5, 2, 3, 3, dtype="int8", out_dtype="int32")
    assert [p.dtype for p in conv.params] == ["int8", "int8", "int32"]


@pytest.mark.parametrize("call, match", [
    (lambda: ops.matmul(0, 4, 4), "matmul: M must be a positive int"),
    (lambda: ops.matmul(4, 4.0, 4), "N must be a positive int"),
    (lambda: ops.matmul(4, 4, 4, dtype="float7"), "unknown dtype"),
    (lambda: ops.matmul(4, 4, 4, dtype="int8", out_dtype="float32"), "out_dtype"),
    (lambda: ops.matmul(4, 4, 4, dtype="int32", out_dtype="int8"), "at least as wide"),
    (lambda: ops.conv2d(1, 6, 8, 8, 4, 3, 3, groups=4), "C=6 not divisible by groups=4"),
    (lambda: ops.conv2d(1, 8, 8, 8, 6, 3, 3, groups=4), "O=6 not divisible by groups=4"),
    (lambda: ops.conv2d(1, 3, 4, 8, 4, 7, 3), "kernel larger than padded input along H"),
    (lambda: ops.conv2d(1, 3, 8, 8, 4, 3, 3, dilation=4), "kernel larger than padded input"),
    (lambda: ops.conv2d(1, 3, 8, 8, 4, 3, 3, stride=0), "stride must be >= 1"),
    (lambda: ops.conv2d(1, 3, 8, 8, 4, 3, 3, padding=-1), "padding must be >= 0"),
    (lambda: ops.conv2d(1, 3, 8, 8, 4, 3, 3, stride=(1, 2, 3)), "stride must be an int or"),
    (lambda: ops.conv1d(1, 3, 2, 4, 5), "along L"),
    (lambda: ops.conv3d(1, 3, 2, 8, 8, 4, 3, 3, 3), "along D"),
    (lambda: ops.depthwise_conv2d(1, 3, 2, 2, 3, 3), "kernel larger than padded input"),
    (lambda: ops.conv2d_transpose(1, 4, 5, 5, 4, 3, 3, stride=2, output_padding=2),
     "output_padding 2 along H must be smaller than stride 2"),
    (lambda: ops.conv2d_transpose(1, 4, 2, 2, 4, 1, 1, padding=1), "output size would be"),
    (lambda: ops.conv2d_transpose(1, 6, 5, 5, 4, 3, 3, groups=4), "not divisible by groups"),
    (lambda: ops.conv2d_bn_relu(1, 3, 8, 8, 4, 3, 3, eps=-1.0), "eps must be"),
    (lambda: ops.max_pool2d(1, 3, 8, 8, 2, padding=2), "at most half the kernel"),
    (lambda: ops.max_pool2d(1, 3, 2, 8, 3), "kernel larger than padded input along H"),
    (lambda: ops.avg_pool2d(1, 3, 8, 8, 2, dtype="int8"), "floating-point"),
    (lambda: ops.sigmoid((3, 0)), "shape must be"),
    (lambda: ops.bias_add((2, 3), axis=2), "axis 2 out of range"),
    (lambda: ops.pad((2, 3), (1, 1, 1)), "pad_before must be an int or a sequence of 2"),
    (lambda: ops.pad((2, 3), 1, value=0.5, dtype="int32"), "not representable"),
    (lambda: ops.layer_norm(4, 0), "N must be a positive int"),
    (lambda: ops.softmax(4, 4, dtype="int32"), "floating-point"),
])
def test_validation_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
    with pytest.raises(ops.OpError):
        call()


# ---- built kernels against the references ------------------------------------------------

# (factory, args, kwargs): odd, prime and non-square shapes; strides that do not divide
CASES = [
    (ops.matmul, (7, 13, 5), {}),
    (ops.matmul, (1, 1, 1), {}),
    (ops.batch_matmul, (3, 7, 11, 5), {}),
    (ops.dense, (7, 13, 5), {}),
    (ops.dense, (3, 2, 9), {"bias": False}),
    (ops.transpose_batch_matmul, (2, 7, 3, 5), {}),
    (ops.conv1d, (2, 5, 17, 7, 3), {"stride": 2, "padding": 1}),
    (ops.conv1d, (1, 6, 13, 4, 4), {"stride": 3, "padding": 2, "dilation": 2, "groups": 2}),
    (ops.conv2d, (1, 5, 13, 11, 7, 3, 3), {"stride": 2, "padding": 1, "dilation": 2}),
    (ops.conv2d, (2, 6, 9, 8, 4, 3, 2), {"stride": (2, 1), "padding": (0, 1), "groups": 2}),
    (ops.conv2d, (1, 3, 7, 10, 5, 1, 1), {"stride": 3}),
    (ops.conv2d, (1, 4, 6, 6, 4, 3, 3), {"groups": 4, "padding": 2}),
    (ops.conv3d, (1, 2, 5, 7, 6, 3, 3, 2, 3), {"stride": (1, 2, 2), "padding": 1}),
    (ops.conv3d, (1, 4, 4, 5, 5, 2, 2, 3, 3), {"groups": 2, "dilation": (1, 2, 1)}),
    (ops.depthwise_conv2d, (1, 6, 11, 9, 3, 5), {"stride": 2, "padding": (1, 2)}),
    (ops.depthwise_conv2d, (2, 3, 7, 7, 3, 3), {"dilation": 2, "padding": 2}),
    (ops.conv2d_transpose, (1, 4, 5, 3, 6, 3, 4),
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    (ops.conv2d_transpose, (2, 3, 4, 5, 5, 4, 4), {"stride": 3, "padding": 2}),
    (ops.conv2d_transpose, (1, 3, 5, 4, 2, 3, 2),
     {"stride": (2, 3), "padding": (3, 0), "dilation": 2, "output_padding": (1, 2)}),
    (ops.conv2d_transpose, (1, 2, 3, 3, 3, 3, 3), {}),
    (ops.conv2d_transpose, (1, 2, 6, 6, 3, 3, 3), {"padding": 2}),
    (ops.conv2d_bn_relu, (1, 3, 11, 9, 5, 3, 3), {"stride": 2, "padding": 1}),
    (ops.max_pool2d, (1, 3, 11, 8, 3), {"stride": 2, "padding": 1}),
    (ops.max_pool2d, (2, 2, 7, 7, (2, 3)), {"stride": (3, 1)}),
    (ops.avg_pool2d, (1, 3, 11, 8, 3), {"stride": 2, "padding": 1}),
    (ops.avg_pool2d, (2, 3, 7, 7, (3, 2)), {}),
    (ops.global_avg_pool2d, (2, 3, 7, 5), {}),
    (ops.relu, ((3, 5),), {}),
    (ops.sigmoid, ((4, 7),), {}),
    (ops.tanh, (11,), {}),
    (ops.gelu, ((2, 3, 5),), {}),
    (ops.add, ((2, 3, 5),), {}),
    (ops.multiply, ((7, 3),), {}),
    (ops.bias_add, ((2, 3, 5),), {}),
    (ops.bias_add, ((2, 3, 5),), {"axis": 2}),
    (ops.batch_norm, (2, 3, 4, 5), {"eps": 1e-3}),
    (ops.pad, ((3, 4), (1, 2), (0, 3)), {"value": -1.5}),
    (ops.pad, ((2, 3, 2), 1), {}),
    (ops.layer_norm, (7, 13), {}),
    (ops.softmax, (7, 13), {}),
    (ops.matmul, (7, 13, 5), {"dtype": "int8", "out_dtype": "int32"}),
    (ops.conv2d, (1, 3, 7, 6, 4, 3, 3), {"padding": 1, "dtype": "int8", "out_dtype": "int32"}),
]


def _case_id(case):
    factory, args, kwargs = case
    extra = ",".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{factory.__name__}{args}{extra}".replace(" ", "")


@pytest.fixture(scope="module")
def build():
    from tessel.codegen import build
    return build


def run_func(build, func, inputs):
    outs = ops.empty_outputs(func)
    build(func)(*inputs, *outs)
    return outs[0]


@pytest.mark.parametrize("factory, args, kwargs", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_reference(build, factory, args, kwargs):
    func = factory(*args, **kwargs)
    inputs = ops.reference_inputs(func, seed=1)
    got = run_func(build, func, inputs)
    expected = ops.run_reference(func, *inputs)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    if np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


# ---- torch, for the layouts and the trickiest index math ----------------------------------

def _torch_cases():
    return [
        ("conv2d", ops.conv2d(1, 5, 13, 11, 7, 3, 3, stride=2, padding=1, dilation=2),
         lambda F, x, w: F.conv2d(x, w, stride=2, padding=1, dilation=2)),
        ("conv2d_groups", ops.conv2d(2, 6, 9, 8, 4, 3, 2, stride=(2, 1), padding=(0, 1), groups=2),
         lambda F, x, w: F.conv2d(x, w, stride=(2, 1), padding=(0, 1), groups=2)),
        ("conv1d", ops.conv1d(1, 4, 15, 6, 3, stride=2, padding=2, groups=2),
         lambda F, x, w: F.conv1d(x, w, stride=2, padding=2, groups=2)),
        ("conv3d", ops.conv3d(1, 2, 5, 7, 6, 3, 3, 2, 3, stride=(1, 2, 2), padding=1),
         lambda F, x, w: F.conv3d(x, w, stride=(1, 2, 2), padding=1)),
        ("conv2d_transpose", ops.conv2d_transpose(1, 4, 5, 3, 6, 3, 4, stride=2, padding=1,
                                                  output_padding=1, groups=2),
         lambda F, x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1,
                                            groups=2)),
        ("conv2d_transpose_dilated", ops.conv2d_transpose(
            1, 3, 5, 4, 2, 3, 2, stride=(2, 3), padding=(3, 0), dilation=2,
            output_padding=(1, 2)),
         lambda F, x, w: F.conv_transpose2d(x, w, stride=(2, 3), padding=(3, 0), dilation=2,
                                            output_padding=(1, 2))),
        ("max_pool2d", ops.max_pool2d(1, 3, 11, 8, 3, stride=2, padding=1),
         lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1)),
        ("avg_pool2d", ops.avg_pool2d(1, 3, 11, 8, 3, stride=2, padding=1),
         lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=True)),
        ("layer_norm", ops.layer_norm(7, 13),
         lambda F, x, g, b: F.layer_norm(x, (13,), g, b, eps=1e-5)),
        ("softmax", ops.softmax(7, 13), lambda F, x: F.softmax(x, dim=-1)),
        ("gelu", ops.gelu((3, 7)), lambda F, x: F.gelu(x)),
        ("dense", ops.dense(7, 13, 5), lambda F, x, w, b: F.linear(x, w, b)),
    ]


@pytest.mark.parametrize("index", range(len(_torch_cases())),
                         ids=[c[0] for c in _torch_cases()])
def test_matches_torch(build, index):
    torch = pytest.importorskip("torch")
    _, func, fn = _torch_cases()[index]
    inputs = ops.reference_inputs(func, seed=2)
    got = run_func(build, func, inputs)
    expected = fn(torch.nn.functional, *(torch.from_numpy(a.astype(np.float64)) for a in inputs))
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)


def _random_transpose_configs(count, seed=0):
    rng = np.random.default_rng(seed)
    configs = []
    while len(configs) < count:
        g = int(rng.choice([1, 2, 3]))
        stride, dilation = rng.integers(1, 4, 2), rng.integers(1, 3, 2)
        kw = dict(stride=tuple(map(int, stride)), padding=tuple(map(int, rng.integers(0, 3, 2))),
                  output_padding=tuple(int(rng.integers(0, max(s, d))) for s, d
                                       in zip(stride, dilation)),
                  dilation=tuple(map(int, dilation)), groups=g)
        args = (1, g * int(rng.integers(1, 3)), *map(int, rng.integers(1, 6, 2)),
                g * int(rng.integers(1, 3)), *map(int, rng.integers(1, 4, 2)))
        try:
            ops.conv2d_transpose(*args, **kw)
        except ValueError:
            continue
        configs.append((args, kw))
    return configs


@pytest.mark.parametrize("args, kwargs", _random_transpose_configs(6))
def test_conv2d_transpose_random_configs_match_torch(build, args, kwargs):
    torch = pytest.importorskip("torch")
    func = ops.conv2d_transpose(*args, **kwargs)
    inputs = ops.reference_inputs(func, seed=3)
    got = run_func(build, func, inputs)
    x, w = (torch.from_numpy(a.astype(np.float64)) for a in inputs)
    expected = torch.nn.functional.conv_transpose2d(x, w, **kwargs)
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-5)


def test_reference_module_is_exported():
    assert ops.reference is ref
