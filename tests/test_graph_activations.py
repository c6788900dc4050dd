"""Activations, rounding, prelu, log_softmax and the reductions beyond the mean
(tessel.graph.opdefs.activation and .reduce) through the front ends. The registry test
(test_graph_lowering.py) checks each operator alone; here: the ATen translations compiled by
tessel.compile_model against torch eager at odd shapes, the ONNX converters' attributes (alpha,
gamma, axes as attribute or input, keepdims, noop_with_empty_axes, computed Clip bounds,
LogSoftmax before opset 13) against onnxruntime, and the edge values of built kernels (round's
ties, softplus far from 0, products with zeros, logsumexp of infinities)."""
import math

import numpy as np
import pytest

import tessel
from tessel.graph import GraphError
from tessel.graph.reference import run_graph

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from tessel.graph.frontend.onnx_convert_math import REDUCE  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.graph.frontend.torch_import import from_torch  # noqa: E402
from test_graph_onnx import model  # noqa: E402

F = torch.nn.functional


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Fn(torch.nn.Module):
    """forward(*xs) = fn(self, *xs): the module's own parameters are in reach of `fn`."""

    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for name, module in modules.items():
            self.add_module(name, module)

    def forward(self, *xs):
        return self.fn(self, *xs)


def compiled_matches_eager(module, *inputs, rtol=1e-5, atol=1e-6, float64=False):
    """compile_model on the example inputs; its outputs are torch's (with `float64`, torch's
    on the inputs in float64), output by output. The compiled model's operators by count."""
    model = tessel.compile_model(module, example_inputs=inputs)
    got = model(*(x.numpy() for x in inputs))
    with torch.no_grad():
        want = module.eval()(*(x.double() if float64 else x for x in inputs))
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        w = w.numpy()
        assert g.size == w.size
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=rtol, atol=atol)
    return model.graph.op_counts()


# ---- ATen: torch.export -> tessel kernels, against eager ----

def _activations(m, x):
    """The activations weighted 1, 2, 3, ... and summed: one fused kernel to build, not 17."""
    parts = [F.elu(x, 0.7), F.selu(x), F.celu(x, 1.3), F.softplus(x, 2.0, 1.5), F.softplus(x),
             F.mish(x), F.softsign(x), F.hardsigmoid(x), m.prelu(x), m.prelu1(x),
             F.threshold(x, 0.3, 0.0), torch.sign(x), torch.floor(3 * x), torch.ceil(3 * x),
             torch.round(3 * x), torch.round(x, decimals=1), torch.round(50 * x, decimals=-1)]
    total = parts[0]
    for i, part in enumerate(parts[1:], 2):
        total = total + i * part
    return total, F.log_softmax(x, 1), torch.log_softmax(x, -1)


def test_aten_activations_compile_to_what_eager_computes():
    prelu, prelu1 = torch.nn.PReLU(5), torch.nn.PReLU()
    with torch.no_grad():
        prelu.weight.copy_(torch.linspace(-1.0, 2.0, 5))
        prelu1.weight.fill_(-0.3)
    module = Fn(_activations, prelu=prelu, prelu1=prelu1)
    ops = compiled_matches_eager(module, randn(2, 5, 3, 7))
    assert {"elu", "selu", "celu", "softplus", "mish", "hard_sigmoid", "prelu",
            "thresholded_relu", "sign", "floor", "ceil", "round", "log_softmax"} <= set(ops)
    assert "log" not in ops and "clip" not in ops  # one operator each, no decomposition


def _reductions(m, x):
    return (torch.amax(x, (0, 2)), x.amin(-1, keepdim=True), x.max(1).values,
            x.min(1, keepdim=True)[0], x.max(), (1 + 0.1 * x).prod(1), x.norm(dim=1),
            torch.linalg.vector_norm(x, 1, (0, 2)), torch.linalg.vector_norm(x, -math.inf),
            torch.linalg.vector_norm(x, 3, -1, keepdim=True), torch.logsumexp(x, (1, 2)))


def test_aten_reductions_compile_to_what_eager_computes():
    ops = compiled_matches_eager(Fn(_reductions), randn(3, 5, 7), rtol=2e-5)
    assert {"reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2",
            "reduce_log_sum_exp", "reduce_sum", "pow"} <= set(ops)


def test_reading_max_dim_indices_is_refused_by_name():
    module = Fn(lambda m, x: x.max(1).indices.float() + x.amax(1))
    with pytest.raises(GraphError, match="indices output"):
        from_torch(module, (randn(3, 5),))


@pytest.mark.parametrize("fn, match", [
    (lambda m, x: F.threshold(x, 0.1, 2.0), "threshold value"),
    (lambda m, x: torch.linalg.vector_norm(x, 0), "ord=0"),
    (lambda m, x: x.prod(1, dtype=torch.float64), "dtype")])
def test_unsupported_arguments_are_named(fn, match):
    with pytest.raises(GraphError, match=match):
        from_torch(Fn(fn), (randn(3, 5),))


# ---- ONNX: attributes, against onnxruntime ----

def onnx_model(nodes, inputs, outputs=("y",), inits=None, opset=18):
    return model(nodes, inputs, outputs, inits, opset)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), **attrs)


def matches_ort(model, feeds, rtol=1e-5, atol=1e-6):
    """Import `model`, run the graph's reference on `feeds`, compare with onnxruntime."""
    graph = from_onnx(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = run_graph(graph, feeds)
    for g, w in zip(got, want):
        assert g.size == w.size and (g.shape == w.shape or w.ndim == 0)
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=rtol, atol=atol)
    return graph


X = np.random.default_rng(0).standard_normal((2, 5, 3, 7)).astype(np.float32)


@pytest.mark.parametrize("op, attrs, op_attrs", [
    ("Elu", {}, dict(alpha=1.0)), ("Elu", dict(alpha=0.4), dict(alpha=0.4)),
    ("Selu", dict(alpha=1.2, gamma=2.5), dict(alpha=1.2, gamma=2.5)), ("Selu", {}, None),
    ("Celu", dict(alpha=0.7), dict(alpha=0.7)),
    ("HardSigmoid", {}, dict(alpha=0.2, beta=0.5)),
    ("HardSigmoid", dict(alpha=0.3, beta=0.6), dict(alpha=0.3, beta=0.6)),
    ("ThresholdedRelu", {}, dict(alpha=1.0)), ("ThresholdedRelu", dict(alpha=-0.2), None),
    ("Mish", {}, {}), ("Softplus", {}, None)])
def test_onnx_activation_attributes(op, attrs, op_attrs):
    g = matches_ort(onnx_model([node(op, ["x"], **attrs)], {"x": X.shape}), {"x": 3 * X})
    if op_attrs is not None:
        assert g.nodes[0].attrs == pytest.approx(op_attrs)


@pytest.mark.parametrize("slope_shape, constant", [((5, 1, 1), True), ((7,), False),
                                                   ((1,), True)])
def test_onnx_prelu_broadcasts_the_slope_onto_x(slope_shape, constant):
    slope = np.linspace(-1.0, 2.0, math.prod(slope_shape)).astype(np.float32).reshape(slope_shape)
    inputs, feeds = {"x": X.shape}, {"x": X}
    if not constant:
        inputs["s"], feeds["s"] = slope_shape, slope
    model = onnx_model([node("PRelu", ["x", "s"])], inputs, inits={"s": slope} if constant else {})
    assert matches_ort(model, feeds).op_counts() == {"prelu": 1}


@pytest.mark.parametrize("lo, hi", [(-0.3, 0.6), (0.4, -0.2), (None, 0.1), (-0.5, None)])
def test_onnx_clip_of_computed_bounds(lo, hi):
    """min(max(x, lo), hi): where lo > hi every value is hi, as the spec and ORT have it."""
    names = ["x", "" if lo is None else "lo", "" if hi is None else "hi"]
    inputs = {n: (X.shape if n == "x" else ()) for n in names if n}
    feeds = {"x": X, **{n: np.array(v, np.float32) for n, v in (("lo", lo), ("hi", hi))
                        if v is not None}}
    g = matches_ort(onnx_model([node("Clip", names)], inputs, opset=13), feeds)
    assert set(g.op_counts()) <= {"maximum", "minimum"}


@pytest.mark.parametrize("opset, axis", [(11, 1), (11, -1), (13, 1), (13, 0)])
def test_onnx_log_softmax_flattens_before_opset_13(opset, axis):
    g = matches_ort(onnx_model([node("LogSoftmax", ["x"], axis=axis)], {"x": X.shape},
                               opset=opset), {"x": 4 * X})
    assert ("reshape" in g.op_counts()) == (opset == 11 and axis == 1)


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("opset, axes, keepdims, noop", [
    (13, [1], 1, 0), (13, [-1, 0], 0, 0), (18, [2, -3], 1, 0), (18, [0, 1, 2, 3], 0, 0),
    (18, [], 0, 0), (18, [], 1, 1)])
def test_onnx_reduction_axes_keepdims_and_noop(op, opset, axes, keepdims, noop):
    """Axes an attribute before opset 18 (13 for ReduceSum), an input since; none: every axis,
    or with noop_with_empty_axes the input itself; keepdims=0 of every axis: a scalar."""
    as_input = opset >= 18 or op == "ReduceSum"
    attrs = dict(keepdims=keepdims, **({} if as_input else dict(axes=axes)))
    if noop:
        attrs["noop_with_empty_axes"] = 1
    ins, inits = (["x", "axes"], {"axes": np.array(axes, np.int64)}) if as_input and axes \
        else (["x"], {})
    x = np.abs(X) + 0.5 if op in ("ReduceLogSum", "ReduceProd") else X
    g = matches_ort(onnx_model([node(op, ins, **attrs)], {"x": X.shape}, inits=inits,
                               opset=opset), {"x": x}, rtol=2e-5)
    if not noop:
        assert g.op_counts() == {REDUCE[op]: 1, **({"reshape": 1} if not keepdims and len(
            axes) in (0, 4) else {})}
    else:  # what a reduction does to one element alone
        assert not any(n.op.startswith("reduce") for n in g.nodes)


# ---- edge values, on built kernels ----

def _edges(m, x, rows, products):
    return (torch.round(x), F.softplus(x), F.mish(x), F.elu(x), torch.sign(x[:-1]),
            torch.logsumexp(rows, 1), products.prod(1))


def test_edge_values_of_built_kernels():
    """Round half to even (ties, 0.49999997, 2**23 + 1, infinities, NaN), softplus and mish
    far from 0 (no overflow, no cancellation), elu near 0, sign (of all but NaN: torch's is 0,
    tessel's NaN as numpy's and onnxruntime's), logsumexp of rows of -inf and of +inf, the sign
    of products with zeros and negatives."""
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -0.49999997,
                      8388609.0, 1e30, -100.0, -30.0, -16.0, -1e-3, 0.0, 1e-3, 16.0, 30.0,
                      100.0, math.inf, -math.inf, math.nan])
    inf = math.inf
    rows = torch.tensor([[-inf, -inf, -inf], [1.0, inf, 2.0], [-inf, 3.0, -inf],
                         [700.0, 700.0, 0.0]])
    products = torch.tensor([[1.0, -2.0, 3.0, -4.0], [0.0, 5.0, -6.0, 7.0],
                             [-1.0, 2.0, 3.0, 4.0], [-0.5, -0.5, -0.5, 1.0]])
    # the reference in float64: mish(-100) = -100 * exp(-100) lies among float32's subnormals,
    # where exp(-100) itself keeps ~5 bits; torch's own float32 kernels differ there by ISA
    # (-3.92e-42 with AVX2 against -3.72e-42 exact), so the tolerance is a few subnormal steps
    compiled_matches_eager(Fn(_edges), x, rows, products, rtol=1e-6, atol=1e-43, float64=True)


def test_softplus_without_threshold_is_stable():
    """ONNX's Softplus, log(1 + exp(x)) with no threshold: exp overflows from x = 89 in
    float32, the kernel's max(x, 0) + log1p(exp(-|x|)) does not (torch's threshold hides it)."""
    x = np.array([-100, -30, -16, -1e-3, 0, 1e-3, 16, 30, 88, 89, 100, 1e30], np.float32)
    model = tessel.compile_model(onnx_model([node("Softplus", ["x"])], {"x": x.shape}))
    got, = model(x)
    want = np.logaddexp(0, x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-44)  # (float32's denormal step)
