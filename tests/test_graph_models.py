"""Every zoo model compiles untuned through both importers and computes what its runtime
computes: the ONNX path (tiled kernels on their expert prior, the default) against
onnxruntime, the torch.export path (unscheduled kernels) against PyTorch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import tessel  # noqa: E402
from tessel.graph.frontend import models  # noqa: E402

# small sizes keep the unscheduled kernels fast; odd where the architecture allows
SIZES = {
    "resnet18": dict(image=40),
    "mobilenet_v2": dict(image=36),
    "squeezenet": dict(image=39),
    "bert_layer": dict(seq=7, hidden=96, heads=4, ffn=160),
    "dqn": dict(image=52),
    "dcgan_generator": dict(latent=11, width=8),
}
RTOL, ATOL = 1e-4, 1e-4


def test_every_zoo_model_is_covered():
    assert sorted(SIZES) == sorted(models.MODELS)


def _assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(g.reshape(w.shape), w, rtol=RTOL, atol=ATOL * scale)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_onnx_path_matches_onnxruntime(name):
    proto = models.onnx_model(name, **SIZES[name])
    module, example = models.build(name, **SIZES[name])
    feeds = [x.numpy() for x in example]
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), feeds)})
    # MobileNet's 30-odd distinct kernels on priors cost the suite half a minute: unscheduled
    fallback = "unscheduled" if name == "mobilenet_v2" else "prior"
    model = tessel.compile_model(proto, fallback=fallback)
    assert model.statuses and not any(s.tuned for s in model.statuses)
    assert any(s.how == fallback for s in model.statuses)
    _assert_close(model(*feeds), want)


@pytest.mark.parametrize("name", sorted(SIZES))
def test_torch_path_matches_pytorch(name):
    module, example = models.build(name, **SIZES[name])
    model = tessel.compile_model(module, example_inputs=example, fallback="unscheduled")
    with torch.inference_mode():
        want = module(*example)
    want = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else (want,))]
    _assert_close(model(*(x.numpy() for x in example)), want)
    # a second input through the same planned buffers
    other = tuple(torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
                  for x in example)
    with torch.inference_mode():
        want = module(*other)
    _assert_close(model(*(x.numpy() for x in other)), [want.numpy()])


def test_fused_resnet_has_one_kernel_per_conv_and_shares_tasks():
    module, example = models.build("resnet18", image=40)
    model = tessel.compile_model(module, example_inputs=example, fallback="unscheduled")
    names = [k.func.name for k in model.kernels]
    assert sum("conv" in n for n in names) == 20  # batch norm, bias, add and relu fused in
    assert names.count("fused_conv_blocked_add_relu") == 8  # in blocked channel layouts
    assert len(model.tasks) < len(names) and sum(t.weight for t in model.tasks) == len(names)


def test_unsupported_operators_are_named():
    class Sorts(torch.nn.Module):
        def forward(self, x):
            return torch.sort(x, dim=-1).values + 1

    with pytest.raises(tessel.graph.GraphError, match="sort"):
        tessel.compile_model(Sorts(), example_inputs=(torch.randn(3, 5),))
    with pytest.raises(tessel.graph.GraphError, match="example_inputs"):
        tessel.compile_model(Sorts())
