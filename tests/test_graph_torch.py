"""torch.export import (tessel.graph.frontend.torch_import) and the model zoo
(tessel.graph.frontend.models):
every zoo model imports with the expected operators and computes what torch computes; each
ATen mapping is checked against torch at odd shapes; unsupported operators are named."""
import functools
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from tessel.graph import OPS, GraphError  # noqa: E402
from tessel.graph.frontend.models import MODELS, build, onnx_model, torch_graph  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402
from tessel.graph.frontend.torch_convert_math import UNARY  # noqa: E402
from tessel.graph.frontend.torch_import import (Importer, UnsupportedOpError,  # noqa: E402
                                                from_torch)
from zoo_cases import ZOO_SMALL as SMALL  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4


def check_matches(module, *inputs, rtol=RTOL, atol=ATOL):
    """Import `module`, run the graph with the reference interpreter, compare with torch."""
    graph = from_torch(module, inputs)
    assert_same_outputs(graph, module, inputs, rtol, atol)
    return graph


def assert_same_outputs(graph, module, inputs, rtol=RTOL, atol=ATOL):
    outs = run_graph(graph, [x.numpy() for x in inputs])
    with torch.no_grad():
        want = module.eval()(*inputs)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(outs) == len(want)
    for got, ref in zip(outs, want):
        ref = ref.numpy()
        assert got.size == ref.size and got.shape in (ref.shape, (1,) * ref.ndim or (1,))
        np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=rtol, atol=atol)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


class Fn(nn.Module):
    """A module whose forward is `fn(*inputs)`: one ATen mapping per test."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


# ---- the zoo ----

OP_COUNTS = {
    "resnet18": dict(conv=20, batch_norm=20, relu=17, add=8, max_pool=1, global_avg_pool=1,
                     reshape=1, dense=1),
    "mobilenet_v2": dict(conv=52, batch_norm=52, clip=35, add=10, global_avg_pool=1,
                         reshape=1, dense=1),
    "squeezenet": dict(conv=26, relu=26, max_pool=3, concat=8, global_avg_pool=1, reshape=1),
    "bert_layer": dict(dense=6, reshape=4, transpose=5, matmul=2, div=1, softmax=1, add=2,
                       layer_norm=2, gelu=1),
    "dqn": dict(conv=3, relu=4, reshape=1, dense=2),
    "dcgan_generator": dict(conv_transpose=5, batch_norm=4, relu=4, tanh=1),
}
SHAPES = {  # input shape, output shape
    "resnet18": ((1, 3, 32, 32), (1, 1000)),
    "mobilenet_v2": ((1, 3, 32, 32), (1, 1000)),
    "squeezenet": ((1, 3, 39, 39), (1, 1000)),
    "bert_layer": ((1, 8, 768), (1, 8, 768)),
    "dqn": ((1, 4, 84, 84), (1, 18)),
    "dcgan_generator": ((1, 100, 1, 1), (1, 3, 64, 64)),
}


@functools.lru_cache(maxsize=None)
def zoo(name):
    """A zoo model at its small test size, built once (the tests do not modify it)."""
    return build(name, **SMALL[name])


def test_zoo_lists_every_model():
    assert set(MODELS) == set(SMALL) == set(OP_COUNTS)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_zoo_model_imports_and_matches_torch(name):
    module, inputs = zoo(name)
    assert not module.training
    graph = from_torch(module, inputs, name=name)
    assert graph.name == name
    assert graph.op_counts() == OP_COUNTS[name]
    (x,), (y,) = graph.inputs, graph.outputs
    assert (graph.types[x].shape, graph.types[y].shape) == SHAPES[name]
    assert all(a.dtype == np.float32 for a in graph.constants.values())
    assert_same_outputs(graph, module, inputs)


@pytest.mark.parametrize("name", ["resnet18", "bert_layer"])
def test_core_aten_decomposition_imports_the_same_model(name):
    """The fallback path: addmm, view, expand, bmm, getitem of native batch/layer norm."""
    module, inputs = zoo(name)
    program = torch.export.export(module, inputs).run_decompositions()
    targets = {str(n.target) for n in program.graph.nodes if n.op == "call_function"}
    assert "aten.addmm.default" in targets
    graph = Importer.of_program(program, name).run()
    assert graph.op_counts()["dense"] == OP_COUNTS[name]["dense"]
    assert_same_outputs(graph, module, inputs)


def test_zoo_factories_are_deterministic():
    (a, xa), (b, xb) = build("dqn"), build("dqn")
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    assert torch.equal(xa[0], xb[0])


def test_zoo_batch_norm_statistics_are_randomized():
    module, _ = zoo("resnet18")
    bn = module[1]
    assert bn.running_mean.abs().max() > 0 and (bn.running_var - 1).abs().max() > 0


def test_zoo_activations_stay_order_one():
    for name in ("resnet18", "mobilenet_v2"):
        module, inputs = zoo(name)
        with torch.no_grad():
            std = float(module(*inputs).std())
        assert 0.1 < std < 10, (name, std)


def test_torch_graph_and_unknown_model():
    graph = torch_graph("dqn")
    assert graph.name == "dqn" and graph.op_counts()["conv"] == 3
    with pytest.raises(GraphError, match="unknown model 'vgg'.*resnet18"):
        build("vgg")
    with pytest.raises(GraphError, match=r"bert_layer takes \['seq'.*not \['image'\]"):
        build("bert_layer", image=32)


@pytest.mark.parametrize("name", ["dqn", "dcgan_generator"])
def test_onnx_model_matches_torch(name):
    ort = pytest.importorskip("onnxruntime")
    proto = onnx_model(name, **SMALL[name])
    module, inputs = zoo(name)
    session = ort.InferenceSession(proto.SerializeToString())
    (got,) = session.run(None, {"input": inputs[0].numpy()})
    with torch.no_grad():
        np.testing.assert_allclose(got, module(*inputs).numpy(), rtol=RTOL, atol=ATOL)


def test_tessel_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import tessel.graph.frontend.torch_import, tessel.graph.frontend.models\n"
            "from tessel.graph.frontend.models import MODELS; assert 'resnet18' in MODELS")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- ATen mappings, one small module each ----

def test_hardtanh_and_relu6_become_clip():
    g = check_matches(Fn(lambda x: F.hardtanh(x, -0.7, 1.3) + F.relu6(x * 4)), randn(2, 3, 5))
    clips = [n.attrs for n in g.nodes if n.op == "clip"]
    assert [(a["min"], a["max"]) for a in clips] == [(-0.7, 1.3), (0.0, 6.0)]


def test_clamp_variants_become_clip():
    fn = lambda x: x.clamp(-0.5, 0.5) + x.clamp(min=0.1) + x.clamp(max=-0.2)  # noqa: E731
    g = check_matches(Fn(fn), randn(3, 1, 4))
    assert g.op_counts()["clip"] == 3


@pytest.mark.parametrize("fn", [
    lambda x: x + 2, lambda x: 3 - x, lambda x: x * 0.5, lambda x: x / 3, lambda x: 2 / x,
    lambda x: x - 1.5, lambda x: torch.sub(x, 1.5, alpha=2), lambda x: x ** 2,
    lambda x: 2 ** x, lambda x: torch.rsub(x, 1.0, alpha=3), lambda x: x.add(1, alpha=4),
])
def test_scalar_variants(fn):
    check_matches(Fn(fn), randn(2, 3, 1, 5) + 3)


def test_tensor_variants_with_alpha_and_broadcast():
    fn = lambda x, y: torch.add(x, y, alpha=2) - torch.sub(y, x, alpha=0.5) * x / (y + 3)  # noqa
    check_matches(Fn(fn), randn(2, 1, 5), randn(3, 1, seed=1))


def test_maximum_minimum_pow_tensor():
    fn = lambda x, y: torch.maximum(x, y) + torch.minimum(x, y) + x.abs() ** y  # noqa: E731
    check_matches(Fn(fn), randn(4, 3), randn(3, seed=1))


@pytest.mark.parametrize("name", sorted({*UNARY, "silu", "hardswish", "hardsigmoid", "rsqrt",
                                          "reciprocal"}))
def test_unary(name):
    """Every aten operator the importer maps onto one canonical unary operator (a new entry is
    tested here without a line in this file), and those it decomposes."""
    positive = name in ("rsqrt", "reciprocal") or \
        name in OPS and OPS[name].domains.get(0) == "positive"
    fn = getattr(torch, name, None) or getattr(F, name)
    check_matches(Fn(lambda x: fn(x.abs() + 0.5 if positive else x)), randn(2, 7, 3))


def test_gelu_and_leaky_relu_attributes():
    fn = lambda x: F.gelu(x, approximate="tanh") + F.gelu(x) + F.leaky_relu(x, 0.3)  # noqa
    g = check_matches(Fn(fn), randn(3, 5))
    attrs = {n.op: n.attrs for n in g.nodes if n.op in ("leaky_relu",)}
    assert [n.attrs["approximate"] for n in g.nodes if n.op == "gelu"] == ["tanh", "none"]
    assert attrs["leaky_relu"]["alpha"] == pytest.approx(0.3)


def test_inplace_ops_rebind_their_value():
    def fn(x):
        x.relu_()
        y = x * 2
        y.add_(1)
        return x + y
    check_matches(Fn(fn), randn(2, 6))


def test_transposed_conv_with_output_padding_groups_dilation():
    conv = nn.ConvTranspose2d(6, 4, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2),
                              groups=2, dilation=(1, 2))
    g = check_matches(conv, randn(1, 6, 5, 4))
    (node,) = g.nodes
    assert node.op == "conv_transpose" and node.attrs["output_padding"] == (1, 2)
    assert node.attrs["pads"] == (1, 0, 1, 0) and node.attrs["groups"] == 2


def test_transposed_conv_1d_and_3d():
    check_matches(nn.ConvTranspose1d(3, 5, 4, stride=3, padding=2, output_padding=1, bias=False),
                  randn(2, 3, 7))
    check_matches(nn.ConvTranspose3d(2, 2, 3, stride=2, padding=1), randn(1, 2, 3, 4, 2))


def test_conv_variants():
    check_matches(nn.Conv2d(3, 6, (3, 4), padding="same", dilation=2, groups=3), randn(1, 3, 7, 9))
    check_matches(nn.Conv1d(4, 2, 3, stride=2, padding=1), randn(4, 11))  # unbatched
    check_matches(nn.Conv3d(2, 3, 2, stride=(1, 2, 1), padding=(1, 0, 0)), randn(1, 2, 3, 5, 4))
    g = check_matches(nn.Conv2d(3, 6, 3, padding="valid", bias=False), randn(2, 3, 5, 6))
    assert g.nodes[0].attrs["pads"] == (0, 0, 0, 0) and len(g.nodes[0].inputs) == 2


def test_adaptive_avg_pool():
    g = check_matches(nn.AdaptiveAvgPool2d((1, 1)), randn(2, 3, 5, 7))
    assert g.op_counts() == {"global_avg_pool": 1}
    g = check_matches(nn.AdaptiveAvgPool2d((2, 3)), randn(1, 2, 6, 9))
    assert g.nodes[0].op == "avg_pool" and g.nodes[0].attrs["kernel"] == (3, 3)
    g = check_matches(nn.AdaptiveAvgPool2d((None, 1)), randn(1, 2, 4, 5))
    assert g.nodes[0].attrs["kernel"] == (1, 5)
    with pytest.raises(GraphError, match=r"adaptive_avg_pool2d.*\(6, 9\) to \(4, 4\)"):
        from_torch(nn.AdaptiveAvgPool2d(4), (randn(1, 2, 6, 9),))


def test_pools_with_ceil_mode_and_padding():
    check_matches(nn.MaxPool2d(3, 2, 1, ceil_mode=True), randn(1, 2, 6, 7))
    check_matches(nn.AvgPool2d((3, 2), (2, 1), (1, 0), ceil_mode=True, count_include_pad=False),
                  randn(2, 3, 6, 5))
    check_matches(nn.AvgPool1d(3, 2, 1), randn(3, 2, 8))
    g = check_matches(nn.MaxPool2d(2), randn(3, 4, 5))  # unbatched
    assert g.types[g.outputs[0]].shape == (3, 2, 2)


def test_pool_indices_output_is_refused():
    pool = nn.MaxPool2d(2, return_indices=True)
    g = check_matches(Fn(lambda x: pool(x)[0]), randn(1, 1, 4, 4))
    assert g.op_counts() == {"max_pool": 1}
    with pytest.raises(GraphError, match="pooling indices"):
        from_torch(Fn(lambda x: pool(x)[1].float()), (randn(1, 1, 4, 4),))


def test_batch_norm_folds_parameters_and_handles_no_affine():
    bn = nn.BatchNorm1d(5, affine=False, eps=1e-3)
    bn.running_mean.copy_(randn(5, seed=2))
    bn.running_var.copy_(randn(5, seed=3).abs() + 0.5)
    g = check_matches(bn, randn(4, 5))
    assert g.nodes[0].op == "batch_norm" and g.nodes[0].attrs["epsilon"] == 1e-3
    check_matches(bn, randn(2, 5, 3))


def test_layer_norm_over_two_axes_and_without_affine():
    ln = nn.LayerNorm((3, 4), eps=1e-6)
    with torch.no_grad():
        ln.weight.copy_(randn(3, 4, seed=4))
    g = check_matches(ln, randn(2, 3, 4))
    assert g.nodes[0].attrs["axis"] == 1
    check_matches(nn.LayerNorm(4, elementwise_affine=False), randn(2, 3, 4))


def test_linear_matmul_family():
    check_matches(nn.Linear(5, 3), randn(2, 4, 5))
    check_matches(nn.Linear(5, 3, bias=False), randn(5))
    check_matches(Fn(lambda a, b: a @ b), randn(2, 3, 4), randn(4))
    check_matches(Fn(lambda a, b: a @ b), randn(4), randn(2, 4, 3))
    check_matches(Fn(lambda a, b: torch.bmm(a, b)), randn(2, 3, 4), randn(2, 4, 5))
    check_matches(Fn(lambda a, b: torch.mm(a, b.t())), randn(3, 4), randn(5, 4))
    check_matches(Fn(lambda a, b, c: torch.addmm(c, a, b, beta=0.5, alpha=2)),
                  randn(3, 4), randn(4, 2), randn(3, 2))
    for beta in (1.0, 0.0):  # BLOOM's ALiBi scores; beta 0 ignores self
        check_matches(Fn(lambda a, b, c: torch.baddbmm(c, a, b, beta=beta, alpha=0.25)),
                      randn(2, 3, 4), randn(2, 4, 5), randn(2, 1, 5))


def test_constant_weights_are_folded():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(randn(6, 4))
            self.register_buffer("unused", torch.zeros(5))
            self.register_buffer("shift", randn(6, seed=1), persistent=False)
            self.scale = torch.tensor(1.5)  # a lifted tensor constant

        def forward(self, x):
            mask = torch.ones(3, 6).triu() * self.scale
            return (x @ self.w.t()) * mask + self.shift

    g = check_matches(Model(), randn(2, 3, 4))
    assert g.op_counts() == {"matmul": 1, "mul": 1, "add": 1}
    assert sorted(a.shape for a in g.constants.values()) == [(3, 6), (4, 6), (6,)]


def test_softmax_log_softmax_mean_sum():
    check_matches(Fn(lambda x: x.softmax(1) + F.log_softmax(x, dim=-1)), randn(2, 3, 5))
    g = check_matches(Fn(lambda x: x.mean((1, -1)) + x.sum(1).mean()), randn(2, 3, 5))
    assert g.op_counts()["reduce_mean"] == 3
    g = check_matches(Fn(lambda x: x.mean((-1, -2), keepdim=True)), randn(2, 3, 5, 4))
    assert g.op_counts() == {"global_avg_pool": 1}


def test_layout_ops():
    fn = lambda x: torch.cat([x.flatten(1), x.reshape(2, -1)], 1).unsqueeze(0).squeeze()  # noqa
    check_matches(Fn(fn), randn(2, 3, 4))
    fn = lambda x: torch.stack([x, x.transpose(0, 1).contiguous().t()], 1).unflatten(0, (1, 2))
    check_matches(Fn(fn), randn(2, 3))
    check_matches(Fn(lambda x: x.permute(2, 0, 1).clone().expand(1, 4, 2, 3)), randn(2, 3, 4))


def test_expand_that_broadcasts():
    g = check_matches(Fn(lambda x: x.expand(4, 2, 3) * 2), randn(2, 1))
    assert g.op_counts() == {"expand": 1, "mul": 1}


def test_dropout_is_a_pass_through_in_eval_mode():
    g = check_matches(nn.Sequential(nn.Dropout(0.5), nn.ReLU()), randn(2, 8))
    assert g.op_counts() == {"relu": 1}
    # in place, as torchvision's EfficientNet classifier calls it: aten.dropout_ (translated,
    # not only gone after decomposition: torch.compile's split asks the table)
    inplace = Fn(lambda x: nn.functional.dropout(x.relu(), 0.5, False, True) * 2.0)
    x = randn(3, 5)
    graph = Importer.of_program(torch.export.export(inplace, (x,)), "dropout_").run()
    assert_same_outputs(graph, inplace, (x,))
    assert graph.op_counts() == {"relu": 1, "mul": 1}


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa
    g = check_matches(Fn(fn), randn(1, 2, 5, 4), randn(1, 2, 5, 4, seed=1),
                      randn(1, 2, 5, 3, seed=2))
    assert g.op_counts()["softmax"] == 1 and g.op_counts()["matmul"] == 2


def test_scaled_dot_product_attention_with_masks():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("keep", randn(4, 6) > -0.5)

        def forward(self, q, k, v, bias):
            return (F.scaled_dot_product_attention(q, k, v, attn_mask=self.keep, scale=0.3)
                    + F.scaled_dot_product_attention(q, k, v, attn_mask=bias))

    check_matches(Model(), randn(2, 4, 3), randn(2, 6, 3, seed=1), randn(2, 6, 5, seed=2),
                  randn(4, 6, seed=3))


def test_unsupported_op_is_named_with_its_node():
    with pytest.raises(UnsupportedOpError, match=r"aten\.sort\.default \(FX node sort\)"):
        from_torch(Fn(lambda x: torch.sort(x, 1)[0]), (randn(3, 4),))
    with pytest.raises(GraphError, match=r"aten\.cummax\.default \(FX node cummax\)"):
        from_torch(Fn(lambda x: x.cummax(0)[0] + 1), (randn(3, 4),))


def test_unbind_and_roll_of_computed_tensors():
    """timm's `q, k, v = qkv.unbind(0)` and chunks; Swin's shifted windows (roll along two axes, a
    negative shift, a shift longer than the axis) and a roll of the flattened tensor."""
    def fn(x):
        q, k, v = (x * 2).unbind(0)
        a, b = (x + 3).chunk(2, -1)  # parts of 4 and 3
        return q + k * v, a[..., :3] * b, torch.roll(x + 1, (-2, 9), (2, 3)), torch.roll(x - 1, 4)
    g = check_matches(Fn(fn), randn(3, 2, 5, 7))
    assert g.op_counts()["concat"] == 3


def test_cumsum_tril_triu_of_computed_tensors():
    """RoBERTa's position ids (a cumulative sum of the int64 mask), a float cumsum, and
    triangles of a computed tensor."""
    def fn(x, mask):
        positions = torch.cumsum(mask, dim=1).type_as(mask) * mask + 1
        return positions, torch.tril(x, -1) + torch.triu(x * 2, 2), x.cumsum(-2)
    g = check_matches(Fn(fn), randn(2, 7, 9), (randn(2, 9, seed=1) > 0).long())
    assert g.op_counts()["cumsum"] == 2 and g.op_counts()["where"] == 2


def test_tensors_filled_whatever_the_input_holds_are_constants():
    """torchvision Swin's attention mask: new_zeros of a computed tensor, filled by slice
    assignment; zeros_like, full_like."""
    def fn(x):
        mask = x.new_zeros((5, 7))
        mask[1:3, 2:] = 2.0
        return x * mask + torch.full_like(x, 3.0) - torch.ones_like(x).cumsum(1)
    g = check_matches(Fn(fn), randn(2, 5, 7))
    assert "cumsum" not in g.op_counts()


def writes_into_slices(x):
    """Writes through views of a computed tensor whose storage is read afterwards."""
    y = torch.relu(x)
    y[:, 0] += 1.0
    y[:, 2:4] = 0.5
    y[..., -1].copy_(x[..., 0])
    return y * 2.0


def test_writes_through_views_import_in_functional_form():
    g = check_matches(Fn(writes_into_slices), randn(2, 5, 7))
    assert g.op_counts()["concat"] >= 3


def test_data_dependent_op_is_named_with_its_node():
    with pytest.raises(UnsupportedOpError, match=r"aten\.nonzero\.default \(FX node nonzero\)"):
        from_torch(Fn(lambda x: torch.nonzero(x).float().sum() + x), (randn(3, 4),))


def test_composite_ops_import_through_the_decomposition_fallback():
    fn = lambda a, b: torch.einsum("bij,bjk->bik", a, b) + F.mse_loss(a, a)  # noqa: E731
    check_matches(Fn(fn), randn(2, 3, 4), randn(2, 4, 5))


class FusedQKV(nn.Module):
    """A GPT-style attention whose fused qkv projection is split in three (aten.split), with
    slices of computed tensors (a stride, narrow, a slice to the end) among its outputs."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.qkv, self.o, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=-1))
        y = (torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1) @ v).transpose(1, 2)
        return self.o(y.reshape(b, t, d))[:, 1:7:2], torch.narrow(x, 2, 3, 5), x[:, 2:]


def test_split_and_slices_of_computed_tensors_import():
    module, x = FusedQKV().eval(), torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(0))
    graph = from_torch(module, (x,))
    assert sum(n.op == "slice" for n in graph.nodes) == 6  # three parts, three outputs
    with torch.no_grad():
        want = module(x)
    for got, w in zip(run_graph(graph, {graph.inputs[0]: x.numpy()}), want):
        np.testing.assert_allclose(got, w.numpy(), rtol=1e-4, atol=1e-5)
