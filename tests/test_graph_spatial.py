"""The normalizations, pooling and spatial-layout operators of real exports (instance, group
and local response norm; dilated pooling; pad, tile, resize; depth/space shuffles): tiny torch
modules through torch.export against torch eager at odd shapes, with the graph operators each
ATen form translates to (some compiled by tessel.compile_model, the others run by the
reference interpreter); a U-Net-like block with its convolutions in blocked layouts; and,
through ONNX, what torch has no equal of (Resize's other coordinate rules, roundings and
kernels, Pad's modes, GroupNormalization-18) against ONNX's reference. Each operator's own
examples run in tests/test_graph_lowering.py, its ONNX node cases in
tests/test_onnx_conformance.py."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn
F = torch.nn.functional
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tessel  # noqa: E402
from tessel.graph.passes import simplify  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.graph.frontend.torch_import import Importer, from_torch  # noqa: E402
from tessel.graph.layout import apply_layout  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402
from tessel.target import Target  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5
COMPILED = {"instance_norm2d", "group_norm", "lrn", "2d_ceil", "crop_and_pad", "reflect",
            "circular", "repeat", "pixel_shuffle", "nearest_scales", "bilinear_x1.5", "bicubic"}


class Fn(nn.Module):
    """A module whose forward is `fn(x)`."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def check(module, x, ops, compiled=False):
    """`module` on `x` imports into exactly the operators `ops` (a set) and computes what torch
    eager computes: run by the reference interpreter, or `compiled` by tessel.compile_model
    (for a few cases: each operator's lowering is checked on its own examples)."""
    graph = from_torch(module, (x,))
    assert {n.op for n in graph.nodes} == ops
    if compiled:
        got, = tessel.compile_model(module, example_inputs=(x,))(x.numpy())
    else:
        got, = run_graph(graph, [x.numpy()])
    with torch.no_grad():
        want = module.eval()(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _affine(module, seed=1):
    """`module` with random weight and bias (the defaults are ones and zeros)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(randn(*p.shape, seed=seed))
            seed += 1
    return module


# ---- normalizations ----

@pytest.mark.parametrize("module, shape, ops", [
    (_affine(nn.InstanceNorm2d(3, affine=True)), (2, 3, 7, 5), {"instance_norm"}),
    (nn.InstanceNorm1d(4), (3, 4, 9), {"instance_norm"}),
    (_affine(nn.GroupNorm(3, 6, eps=1e-3)), (2, 6, 5, 3), {"group_norm"}),
    (nn.GroupNorm(2, 4, affine=False), (1, 4, 7), {"group_norm"}),
    (nn.LocalResponseNorm(3, alpha=0.1, beta=0.6, k=2.0), (2, 7, 5, 3),
     {"mul", "reshape", "pad", "avg_pool", "add", "pow", "div"}),
], ids=["instance_norm2d", "instance_norm1d", "group_norm", "group_norm_plain", "lrn"])
def test_norms(module, shape, ops, request):
    check(module, randn(*shape), ops, request.node.callspec.id in COMPILED)


def test_instance_norm_with_running_statistics_is_a_batch_norm():
    module = nn.InstanceNorm2d(3, track_running_stats=True)
    with torch.no_grad():
        module.running_mean.copy_(randn(3, seed=2))
        module.running_var.copy_(randn(3, seed=3).abs() + 0.5)
    check(module, randn(2, 3, 5, 7), {"batch_norm"})


def test_instance_norm_core_aten_decomposition():
    """run_decompositions() spells instance_norm as a batch norm with batch statistics over
    (1, N * C, ...): an instance norm of one sample."""
    module, x = _affine(nn.InstanceNorm2d(3, affine=True)), randn(2, 3, 5, 4)
    program = torch.export.export(module.eval(), (x,)).run_decompositions()
    graph = Importer.of_program(program, "decomposed").run()
    assert "instance_norm" in {n.op for n in graph.nodes}
    with torch.no_grad():
        np.testing.assert_allclose(run_graph(graph, [x.numpy()])[0], module(x).numpy(),
                                   rtol=RTOL, atol=ATOL)


# ---- pooling ----

@pytest.mark.parametrize("module, shape", [
    (nn.MaxPool2d(3, 2, 1, dilation=2), (1, 3, 11, 10)),
    (nn.MaxPool2d((3, 2), (1, 2), (1, 0), dilation=(2, 3), ceil_mode=True), (2, 2, 9, 13)),
    (nn.MaxPool1d(2, 3, dilation=4), (1, 3, 17)),
], ids=["2d", "2d_ceil", "1d"])
def test_dilated_max_pool(module, shape, request):
    check(module, randn(*shape), {"max_pool"}, request.node.callspec.id in COMPILED)


# ---- pads, repeats, shuffles ----

@pytest.mark.parametrize("fn, shape, ops", [
    (lambda x: F.pad(x, (1, 2, 0, 3), value=0.5), (2, 3, 5, 4), {"pad"}),
    (lambda x: F.pad(x, (-1, 2, 1, -2)), (1, 3, 6, 5), {"pad"}),
    (lambda x: F.pad(x, (-1, 0, 0, -2, -1, 0)), (2, 3, 6, 5), {"slice"}),
    (lambda x: F.pad(x, (2, 1, 3, 0), mode="reflect"), (1, 2, 5, 7), {"pad"}),
    (lambda x: F.pad(x, (2, 3), mode="reflect"), (2, 3, 5), {"pad"}),
    (lambda x: F.pad(x, (1, 4, 2, 1), mode="replicate"), (1, 3, 4, 5), {"pad"}),
    (lambda x: F.pad(x, (2, 1, 1, 3), mode="circular"), (1, 2, 5, 4), {"pad"}),
    (lambda x: F.pad(x, (1, 1, 0, 2, 2, 0), mode="replicate"), (1, 2, 3, 4, 5), {"pad"}),
    (lambda x: x.repeat(2, 1, 3), (3, 5, 2), {"tile"}),
    (lambda x: x.repeat(2, 1, 1, 2), (3, 5, 2), {"reshape", "tile"}),
    (lambda x: x.tile((3, 1)), (2, 3, 5), {"tile"}),
    (lambda x: F.pixel_shuffle(x, 2), (2, 12, 3, 5), {"reshape", "transpose"}),
    (lambda x: F.pixel_unshuffle(x, 3), (1, 2, 6, 9), {"reshape", "transpose"}),
], ids=["constant", "crop_and_pad", "crop", "reflect", "reflect1d", "replicate", "circular",
        "replicate3d", "repeat", "repeat_new_axis", "tile", "pixel_shuffle", "pixel_unshuffle"])
def test_layout(fn, shape, ops, request):
    check(Fn(fn), randn(*shape), ops, request.node.callspec.id in COMPILED)


# ---- upsampling ----

@pytest.mark.parametrize("fn, shape", [
    (lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), (1, 3, 4, 5)),
    (lambda x: F.interpolate(x, size=(7, 3), mode="nearest"), (2, 2, 5, 4)),
    (lambda x: F.interpolate(x, scale_factor=(1.5, 3), mode="nearest"), (1, 2, 5, 3)),
    (lambda x: F.interpolate(x, size=(11, 4), mode="nearest-exact"), (1, 2, 4, 7)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), (1, 3, 5, 4)),
    (lambda x: F.interpolate(x, size=(9, 7), mode="bilinear", align_corners=True), (2, 2, 4, 5)),
    (lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), (1, 2, 7, 5)),
    (lambda x: F.interpolate(x, size=(3, 2), mode="bilinear"), (1, 2, 7, 5)),
    (lambda x: F.interpolate(x, size=13, mode="linear"), (1, 3, 6)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="trilinear"), (1, 2, 3, 4, 3)),
    (lambda x: F.interpolate(x, size=(9, 5), mode="bicubic"), (1, 2, 5, 4)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True),
     (1, 1, 4, 3)),
    (nn.Upsample(scale_factor=3, mode="nearest"), (1, 2, 3, 2)),
], ids=["nearest_x2", "nearest_size", "nearest_scales", "nearest_exact", "bilinear_x2",
        "bilinear_corners", "bilinear_x1.5", "bilinear_down", "linear1d", "trilinear",
        "bicubic", "bicubic_corners", "module"])
def test_upsampling(fn, shape, request):
    module = fn if isinstance(fn, nn.Module) else Fn(fn)
    check(module, randn(*shape), {"resize"}, request.node.callspec.id in COMPILED)


# ---- with convolutions in blocked layouts ----

class _UNetBlock(nn.Module):
    """Convolutions (blocked by the layout pass) around every operator of this file."""

    def __init__(self):
        super().__init__()
        self.down = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.GroupNorm(4, 8)
        self.pool = nn.MaxPool2d(3, 2, 1, dilation=2)
        self.mid = nn.Conv2d(8, 16, 3)
        self.inorm = nn.InstanceNorm2d(16, affine=True)
        self.up = nn.Upsample(scale_factor=2, mode="bilinear")
        self.out = nn.Conv2d(16, 8, 3)
        self.lrn = nn.LocalResponseNorm(3)

    def forward(self, x):
        y = self.norm(self.pool(torch.relu(self.down(x))))
        y = self.up(self.inorm(self.mid(y)))
        y = self.out(F.pad(y, (1, 1, 2, 0), mode="reflect"))
        return F.pixel_shuffle(self.lrn(y), 2)


def test_a_unet_block_with_blocked_convolutions():
    """The pass blocks the convolutions and the dilated max pool between them (its blocked
    form), and converts back to NCHW before the other operators."""
    module, x = _affine(_UNetBlock(), seed=3), randn(1, 3, 19, 17)
    graph = apply_layout(simplify(from_torch(module, (x,))), "blocked",
                         Target("x86_64-avx2"))  # 8 lanes
    assert {"conv_blocked", "max_pool_blocked"} <= {n.op for n in graph.nodes}
    got, = tessel.compile_model(module, example_inputs=(x,), layout="blocked")(x.numpy())
    with torch.no_grad():
        want = module.eval()(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


# ---- through ONNX: what torch has no equal of, against ONNX's reference ----

def _onnx_model(nodes, inputs, inits, opset):
    """A model of `nodes` with float inputs {name: shape} and constants `inits`; its outputs
    are the nodes' outputs."""
    g = helper.make_graph(
        nodes, "spatial",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n.output[0], TensorProto.FLOAT, None) for n in nodes],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def check_onnx(model, feeds, ops):
    """`model` compiled by tessel computes what ONNX's reference computes, with `ops` (a set)
    among the graph's operators."""
    from onnx.reference import ReferenceEvaluator
    assert ops <= {n.op for n in from_onnx(model).nodes}
    got = tessel.compile_model(model)(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for node, g, w in zip(model.graph.node, got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=str(node.attribute))


def _resize(name, sizes=None, scales=None, roi=None, **attrs):
    ins = ["x", f"{name}_roi" if roi else "", f"{name}_scales" if scales else "",
           f"{name}_sizes" if sizes else ""]
    given = {f"{name}_roi": roi, f"{name}_scales": scales, f"{name}_sizes": sizes}
    inits = {k: np.asarray(v, np.int64 if k.endswith("sizes") else np.float32)
             for k, v in given.items() if v is not None}
    return helper.make_node("Resize", ins, [name], **attrs), inits


def test_onnx_resize_modes():
    """Coordinate rules, roundings and kernels torch's interpolate lacks, at odd sizes: one
    model, one kernel per Resize."""
    cases = [
        _resize("pytorch_half_pixel", sizes=[1, 2, 4, 5], mode="linear",
                coordinate_transformation_mode="pytorch_half_pixel"),
        _resize("float_scales", scales=[1, 1, 0.6, 1.7], nearest_mode="round_prefer_floor"),
        _resize("exclude_outside", sizes=[1, 2, 11, 4], mode="cubic", cubic_coeff_a=-0.5,
                exclude_outside=1),
        _resize("tf_crop", sizes=[1, 2, 6, 8], roi=[0, 0, 0.2, -0.1, 1, 1, 0.9, 1.3],
                mode="linear", coordinate_transformation_mode="tf_crop_and_resize",
                extrapolation_value=2.5),
        _resize("antialias_linear", sizes=[1, 2, 3, 4], mode="linear", antialias=1),
        _resize("antialias_cubic", scales=[1, 1, 0.6, 0.5], mode="cubic", antialias=1),
        _resize("symmetric", scales=[1, 1, 1.4, 0.8], mode="linear",
                coordinate_transformation_mode="half_pixel_symmetric"),
        _resize("aspect", sizes=[5, 5], axes=[3, 2], keep_aspect_ratio_policy="not_smaller",
                nearest_mode="ceil", coordinate_transformation_mode="align_corners"),
    ]
    model = _onnx_model([n for n, _ in cases], {"x": (1, 2, 7, 9)},
                        {k: v for _, inits in cases for k, v in inits.items()}, opset=19)
    check_onnx(model, {"x": randn(1, 2, 7, 9).numpy()}, {"resize"})


def test_onnx_pads_and_group_norm_18():
    """Pad: wrap further than the axis, edge on the axes input, a computed value;
    GroupNormalization-18: scale and bias per group, constant or computed."""
    pads = {"wrap_p": [0, 0, 9, 1, 0, 0, 2, 11], "edge_p": [3, 0, 1, 2], "edge_a": [3, -2],
            "value_p": [0, 1, 0, 2, 1, 0, 0, 1],
            "scale": randn(2, seed=4).numpy(), "bias": randn(2, seed=5).numpy()}
    nodes = [helper.make_node("Pad", ["x", "wrap_p"], ["wrap"], mode="wrap"),
             helper.make_node("Pad", ["x", "edge_p", "", "edge_a"], ["edge"], mode="edge"),
             helper.make_node("Pad", ["x", "value_p", "v"], ["value"]),
             helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["gn_const"],
                              num_groups=2, epsilon=1e-3),
             helper.make_node("GroupNormalization", ["x", "s", "b"], ["gn_computed"],
                              num_groups=2)]
    inits = {k: np.asarray(v, np.float32 if k in ("scale", "bias") else np.int64)
             for k, v in pads.items()}
    model = _onnx_model(nodes, {"x": (2, 4, 5, 3), "v": (), "s": (2,), "b": (2,)}, inits, 18)
    feeds = {"x": randn(2, 4, 5, 3).numpy(), "v": np.float32(0.75),
             "s": randn(2, seed=6).numpy(), "b": randn(2, seed=7).numpy()}
    check_onnx(model, feeds, {"pad", "group_norm"})


def test_onnx_pads_that_only_crop_are_a_slice():
    pads = np.array([0, 0, -1, -2, 0, -1, 0, 0], np.int64)
    model = _onnx_model([helper.make_node("Pad", ["x", "pads"], ["y"])], {"x": (2, 4, 5, 3)},
                        {"pads": pads}, 18)
    graph = from_onnx(model)
    x = randn(2, 4, 5, 3).numpy()
    assert [n.op for n in graph.nodes] == ["slice"]
    np.testing.assert_array_equal(run_graph(graph, [x])[0], x[:, :-1, 1:, 2:])
