"""The named workload suite: names, lazy cached mapping, documented shapes, exact flop counts,
reference dispatch; the cheap workloads are built and checked against numpy."""
import itertools
import math
from collections.abc import Mapping

import numpy as np
import pytest

import tessel
from tessel import ir, ops
from tessel.ops.suite import SUITE, SUITE_DESCRIPTIONS, SUITE_FACTORIES, Suite

R18 = [(224, 3, 64, 7, 2), (56, 64, 64, 3, 1), (56, 64, 64, 1, 1), (56, 64, 128, 3, 2),
       (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2), (28, 128, 256, 1, 2),
       (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)]


def _r18(hw, ic, oc, k, s):
    out = (hw + 2 * (k // 2) - k) // s + 1
    shapes = [(1, ic, hw, hw), (oc, ic, k, k), (1, oc, out, out)]
    return shapes, 2 * oc * out * out * ic * k * k


# name -> (parameter shapes, exact flops), written out from DESIGN.md's tables
EXPECTED = {
    "C1D": ([(1, 64, 256), (128, 64, 3), (1, 128, 128)], 2 * 128 * 128 * 64 * 3),
    "C2D": ([(1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 112, 112)], 2 * 64 * 112 * 112 * 3 * 49),
    "C3D": ([(1, 3, 16, 224, 224), (64, 3, 7, 7, 7), (1, 64, 8, 112, 112)],
            2 * 64 * 8 * 112 * 112 * 3 * 343),
    "DEP": ([(1, 32, 112, 112), (32, 1, 3, 3), (1, 32, 112, 112)], 2 * 32 * 112 * 112 * 9),
    "DIL": ([(1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 109, 109)], 2 * 64 * 109 * 109 * 3 * 49),
    "GMM": ([(128, 128)] * 3, 2 * 128 ** 3),
    "GMM-1024": ([(1024, 1024)] * 3, 2 * 1024 ** 3),
    "GRP": ([(1, 64, 56, 56), (128, 16, 3, 3), (1, 128, 28, 28)], 2 * 128 * 28 * 28 * 16 * 9),
    "T2D": ([(1, 512, 4, 4), (512, 256, 4, 4), (1, 256, 8, 8)], 2 * 256 * 8 * 8 * 512 * 16),
    "CBR": ([(1, 3, 224, 224), (64, 3, 7, 7)] + [(64,)] * 4 + [(1, 64, 112, 112)],
            2 * 64 * 112 * 112 * 3 * 49 + 7 * 64 * 112 * 112),
    "TBG": ([(1, 128, 12, 64), (1, 128, 12, 64), (1, 12, 128, 128)], 2 * 12 * 128 * 128 * 64),
    # per element: mean (+, *) 2; var ((x - m) * (x - m) * 1/N, +) 5; normalize (-, rsqrt, +,
    # *, *, +) 6
    "NRM": ([(256, 256), (256,), (256,), (256, 256)], (2 + 5 + 6) * 256 * 256),
    # max: 1, exp(x - max): 2, sum: 1, divide: 1
    "SFM": ([(256, 256), (256, 256)], 6 * 256 * 256),  # max, sub, floor, exp, sum, div
    **{f"R18-C{i}": _r18(*row) for i, row in enumerate(R18, start=1)},
}
CHEAP = ["C1D", "DEP", "GMM", "GRP", "TBG", "NRM", "SFM", "R18-C11", "R18-C12"]


def test_names_and_descriptions():
    assert list(SUITE) == list(EXPECTED)
    assert set(SUITE_DESCRIPTIONS) == set(SUITE) == set(SUITE_FACTORIES)
    assert all(isinstance(d, str) and d and "\n" not in d for d in SUITE_DESCRIPTIONS.values())
    assert ops.SUITE is SUITE and len(SUITE) == 25


def test_suite_is_a_lazy_read_only_cached_mapping():
    calls = []

    def make():
        calls.append(1)
        return ops.matmul(3, 4, 5)

    suite = Suite({"X": make})
    assert isinstance(suite, Mapping) and "X" in suite and "Y" not in suite
    assert calls == []
    first = suite["X"]
    assert suite["X"] is first and calls == [1]
    assert suite.factory("X") is make
    with pytest.raises(KeyError, match="unknown workload 'Y'"):
        suite["Y"]
    with pytest.raises(TypeError):
        suite["X"] = first
    assert SUITE["GMM"] is SUITE["GMM"]
    assert SUITE.factory("GMM")().structural_hash() == SUITE["GMM"].structural_hash()


@pytest.mark.parametrize("name", list(EXPECTED))
def test_workload_shapes_and_flops(name):
    func = SUITE[name]
    shapes, flops = EXPECTED[name]
    assert [p.shape for p in func.params] == shapes
    assert all(p.dtype == "float32" for p in func.params)
    assert ops.flops(func) == flops  # counted on the lowering
    attrs = func.attrs
    assert ops.OPS[attrs["op"]].factory(**attrs["args"]).structural_hash() == func.structural_hash()


def _conv(f, per_out):
    """2 * (output elements) * (multiply-adds per output element)."""
    return 2 * math.prod(f.params[-1].shape) * per_out


# the closed formulas that the counts on the lowering equal (a multiply-add counting 2)
FORMULAS = {
    "matmul": lambda f, a: 2 * a["M"] * a["N"] * a["K"],
    "batch_matmul": lambda f, a: 2 * a["B"] * a["M"] * a["N"] * a["K"],
    "dense": lambda f, a: 2 * a["M"] * a["N"] * a["K"] + (a["M"] * a["N"] if a["bias"] else 0),
    "transpose_batch_matmul": lambda f, a: 2 * a["batch"] * a["heads"] * a["seq"] ** 2 * a["dim"],
    "conv1d": lambda f, a: _conv(f, a["C"] // a["groups"] * a["K"]),
    "conv2d": lambda f, a: _conv(f, a["C"] // a["groups"] * a["KH"] * a["KW"]),
    "conv3d": lambda f, a: _conv(f, a["C"] // a["groups"] * a["KD"] * a["KH"] * a["KW"]),
    "depthwise_conv2d": lambda f, a: _conv(f, a["KH"] * a["KW"]),
    # direct convolution over the zero-inserted input, as computed (TVM's convention)
    "conv2d_transpose": lambda f, a: _conv(f, a["C"] // a["groups"] * a["KH"] * a["KW"]),
    # conv, then 7 ops per output: -, *, *, rsqrt, +, +, max
    "conv2d_bn_relu": lambda f, a: (_conv(f, a["C"] * a["KH"] * a["KW"])
                                    + 7 * math.prod(f.params[-1].shape)),
}
ODD = [dict(stride=s, padding=p, dilation=d, groups=g)
       for s, p, d, g in itertools.product((1, 3), (0, 2), (1, 2), (1, 3))]


@pytest.mark.parametrize("func", [
    *(f for kw in ODD for f in (ops.conv2d(2, 6, 11, 9, 6, 3, 2, **kw),
                                ops.conv1d(1, 6, 13, 6, 3, **kw))),
    *(ops.conv2d_transpose(1, 6, 5, 4, 6, 3, 4, output_padding=kw["stride"] - 1, **kw)
      for kw in ODD),
    ops.depthwise_conv2d(1, 6, 9, 7, 3, 2, stride=3, padding=2, dilation=2),
    ops.conv2d_bn_relu(2, 6, 9, 7, 5, 3, 3, stride=3, padding=2),
    ops.dense(3, 5, 7), ops.dense(3, 5, 7, bias=False), ops.batch_matmul(2, 3, 5, 7),
    ops.dense(13, 2, 9, dtype="int8", out_dtype="int32"), ops.transpose_batch_matmul(2, 3, 5, 7),
    ops.conv3d(1, 4, 5, 6, 7, 6, 2, 3, 2, stride=2, padding=1, dilation=(1, 2, 1), groups=2),
    ops.conv1d(2, 6, 11, 4, 3, groups=2), ops.depthwise_conv2d(1, 3, 7, 6, 3, 2, stride=2),
    ops.conv2d_transpose(1, 4, 5, 3, 6, 3, 4, stride=2, padding=1, output_padding=1, groups=2),
    ops.conv2d_bn_relu(1, 3, 9, 7, 4, 3, 3, padding=1),
    ops.matmul(3, 5, 7, dtype="int8", out_dtype="int32"),
], ids=lambda f: f.name)
def test_flops_count_on_the_lowering_equals_the_formula(func):
    assert ops.flops(func) == FORMULAS[func.attrs["op"]](func, func.attrs["args"]) > 0


def test_flops_of_any_program():
    assert ops.flops(ops.relu((3, 5))) == 15
    assert ops.flops(ops.max_pool2d(1, 2, 5, 5, 3)) == 2 * 1 * 1 * 9
    func = ops.matmul(4, 4, 4)
    bare = ir.PrimFunc(func.name, func.params, func.body, {})
    assert ops.flops(bare) == 2 * 4 ** 3


def test_reference_inputs_are_seeded_and_well_formed():
    func = SUITE["CBR"]
    a, b = ops.reference_inputs(func, seed=3), ops.reference_inputs(func, seed=3)
    c = ops.reference_inputs(func, seed=4)
    assert len(a) == len(func.inputs) == 6
    for x, y, buf in zip(a, b, func.inputs):
        assert x.shape == buf.shape and x.dtype == np.dtype(buf.dtype)
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])
    assert (a[5] > 0).all()  # var
    ints = ops.reference_inputs(ops.matmul(3, 4, 5, dtype="int8", out_dtype="int32"))
    assert all(x.dtype == np.int8 for x in ints)


def test_run_reference_checks_its_arguments():
    func = SUITE["GMM"]
    with pytest.raises(ValueError, match="expected 2 input arrays"):
        ops.run_reference(func, np.zeros((128, 128), np.float32))
    bare = ir.PrimFunc(func.name, func.params, func.body, {})
    with pytest.raises(ValueError, match="no numpy reference"):
        ops.reference_inputs(bare)


@pytest.mark.parametrize("name", ["GMM", "TBG", "NRM", "SFM", "T2D", "CBR"])
def test_run_reference_output(name):
    func = SUITE[name]
    inputs = ops.reference_inputs(func, seed=0)
    out = ops.run_reference(func, *inputs)
    assert out.shape == func.outputs[0].shape and out.dtype == np.float32
    assert np.isfinite(out).all()


@pytest.mark.parametrize("name", CHEAP)
def test_cheap_workloads_match_numpy(name):
    func = SUITE[name]
    inputs = ops.reference_inputs(func, seed=0)
    outs = ops.empty_outputs(func)
    tessel.build(func)(*inputs, *outs)
    np.testing.assert_allclose(outs[0], ops.run_reference(func, *inputs), rtol=1e-4, atol=1e-4)
