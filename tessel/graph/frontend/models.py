"""The model zoo: small PyTorch models written out in code, with seeded random weights.

    module, args = MODELS["resnet18"](image=64)
    graph = torch_graph("resnet18", image=64)       # through tessel.graph.frontend.torch_import
    proto = onnx_model("bert_layer", seq=32)        # an onnx.ModelProto of the same module

No downloads and no torchvision: each architecture is a few `torch.nn` modules below. Every
factory returns `(module_in_eval_mode, example_inputs)` and is deterministic: weights, biases
and batch-norm running statistics are drawn from one seeded `torch.Generator`, with
kaiming-like scales so activations stay O(1) through the deep nets (and randomized running
statistics, so batch-norm folding has something to fold). torch is an optional extra:
importing this module does not import it; calling a factory does.
"""
from __future__ import annotations

import inspect
import io
import math
import warnings
from typing import Any, Callable

from tessel.extras import require
from tessel.graph.ir import Graph, check

SEED = 0
Factory = Callable[..., tuple[Any, tuple[Any, ...]]]


# ---- building blocks (defined on first use, so tessel imports without torch) ----

def _nn() -> Any:
    return require("torch.nn", "the model zoo")


RESIDUAL_DAMPING = 0.3


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             relu: str | None = "relu", damping: float = 1.0) -> Any:
    nn = _nn()
    norm = nn.BatchNorm2d(cout)
    norm.damping = damping  # read by _randomize_layer
    layers = [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), norm]
    if relu == "relu":
        layers.append(nn.ReLU(inplace=True))
    elif relu == "relu6":
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


def _randomize(module: Any, seed: int = SEED) -> Any:
    """Seeded kaiming-like weights, small biases, running statistics near (0, 1); eval mode."""
    torch = require("torch", "the model zoo")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            _randomize_layer(m, gen)
    return module.eval()


def _randomize_layer(m: Any, gen: Any) -> None:
    nn = _nn()
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)):
        _randomize_batch_norm(m, gen, getattr(m, "damping", 1.0))
    elif isinstance(m, nn.LayerNorm):
        _fill_normal(m.weight, 0.1, gen, mean=1.0)
        _fill_normal(m.bias, 0.1, gen)
    elif isinstance(m, (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, nn.ConvTranspose1d,
                        nn.ConvTranspose2d, nn.ConvTranspose3d)):
        _fill_normal(m.weight, _init_std(m), gen)
        if m.bias is not None:
            _fill_normal(m.bias, 0.05, gen)


def _init_std(m: Any) -> float:
    """Kaiming: variance 2 / fan-in for convolutions (a ReLU follows), 1 / fan-in for linear
    layers; a transposed convolution's fan-in is in_channels * taps / stride**nd."""
    nn = _nn()
    if isinstance(m, nn.Linear):
        return math.sqrt(1.0 / m.in_features)
    if isinstance(m, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        fan_in = m.weight.shape[0] * m.weight[0, 0].numel() / math.prod(m.stride)
        return math.sqrt(2.0 / fan_in)
    return math.sqrt(2.0 / m.weight[0].numel())


def _fill_normal(param: Any, std: float, gen: Any, mean: float = 0.0) -> None:
    torch = require("torch", "the model zoo")
    param.copy_(mean + std * torch.randn(param.shape, generator=gen))


def _randomize_batch_norm(m: Any, gen: Any, damping: float) -> None:
    """`damping` scales the output (the last norm of a residual branch, so that the sum of
    branch and shortcut keeps its variance through a deep net)."""
    _fill_normal(m.weight, 0.1 * damping, gen, mean=damping)
    _fill_normal(m.bias, 0.1, gen)
    _fill_normal(m.running_mean, 0.1, gen)
    _fill_normal(m.running_var, 0.1, gen, mean=1.1)


def _example(shape: tuple[int, ...], seed: int = SEED) -> tuple[Any, ...]:
    torch = require("torch", "the model zoo")
    gen = torch.Generator().manual_seed(seed + 1)
    return (torch.randn(shape, generator=gen),)


# ---- ResNet-18 ----

def _basic_block(cin: int, cout: int, stride: int) -> Any:
    nn = _nn()

    class BasicBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(_conv_bn(cin, cout, 3, stride),
                                      _conv_bn(cout, cout, 3, relu=None,
                                               damping=RESIDUAL_DAMPING))
            self.down = (_conv_bn(cin, cout, 1, stride, relu=None)
                         if stride != 1 or cin != cout else nn.Identity())
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + self.down(x))

    return BasicBlock()


def resnet18(image: int = 224, classes: int = 1000) -> tuple[Any, tuple[Any, ...]]:
    """ResNet-18 (He et al. 2016): 20 convolutions, each followed by batch norm."""
    nn = _nn()
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_basic_block(cin, cout, stride), _basic_block(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(512, classes)]
    return _randomize(nn.Sequential(*layers)), _example((1, 3, image, image))


# ---- MobileNetV2 ----

def _inverted_residual(cin: int, cout: int, stride: int, expand: int) -> Any:
    nn = _nn()
    hidden = cin * expand
    layers = [_conv_bn(cin, hidden, 1, relu="relu6")] if expand != 1 else []
    residual = stride == 1 and cin == cout
    layers += [_conv_bn(hidden, hidden, 3, stride, groups=hidden, relu="relu6"),
               _conv_bn(hidden, cout, 1, relu=None,
                        damping=RESIDUAL_DAMPING if residual else 1.0)]

    class InvertedResidual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = nn.Sequential(*layers)
            self.residual = residual

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    return InvertedResidual()


MOBILENET_V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))  # (t, c, n, s)


def mobilenet_v2(image: int = 224, classes: int = 1000) -> tuple[Any, tuple[Any, ...]]:
    """MobileNetV2 (Sandler et al. 2018), width 1.0: 52 convolutions, ReLU6 as clip."""
    nn = _nn()
    layers, cin = [_conv_bn(3, 32, 3, 2, relu="relu6")], 32
    for t, c, n, s in MOBILENET_V2_STAGES:
        for i in range(n):
            layers.append(_inverted_residual(cin, c, s if i == 0 else 1, t))
            cin = c
    layers += [_conv_bn(cin, 1280, 1, relu="relu6"), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Dropout(0.2), nn.Linear(1280, classes)]
    return _randomize(nn.Sequential(*layers)), _example((1, 3, image, image))


# ---- SqueezeNet 1.1 ----

def _fire(cin: int, squeeze: int, expand: int) -> Any:
    nn = _nn()
    torch = require("torch", "the model zoo")

    class Fire(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU(inplace=True))
            self.left = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU(inplace=True))
            self.right = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1),
                                       nn.ReLU(inplace=True))

        def forward(self, x: Any) -> Any:
            x = self.squeeze(x)
            return torch.cat([self.left(x), self.right(x)], 1)

    return Fire()


def squeezenet(image: int = 224, classes: int = 1000) -> tuple[Any, tuple[Any, ...]]:
    """SqueezeNet 1.1 (Iandola et al. 2016): fire modules, whose two expand convolutions are
    joined along the channels (concat), max pooling with ceil_mode, a convolutional head."""
    nn = _nn()
    pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
    layers = [nn.Conv2d(3, 64, 3, 2), nn.ReLU(inplace=True), pool(),
              _fire(64, 16, 64), _fire(128, 16, 64), pool(),
              _fire(128, 32, 128), _fire(256, 32, 128), pool(),
              _fire(256, 48, 192), _fire(384, 48, 192), _fire(384, 64, 256),
              _fire(512, 64, 256),
              nn.Dropout(0.5), nn.Conv2d(512, classes, 1), nn.ReLU(inplace=True),
              nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return _randomize(nn.Sequential(*layers)), _example((1, 3, image, image))


# ---- one BERT-base encoder layer ----

def _bert_layer_module(hidden: int, heads: int, ffn: int) -> Any:
    nn = _nn()
    check(hidden % heads == 0, f"bert_layer: hidden {hidden} is not divisible by heads {heads}")

    class BertLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.out = nn.Linear(hidden, hidden)
            self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
            self.up, self.down = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.act = nn.GELU()

        def heads(self, x: Any) -> Any:  # (b, s, h) -> (b, heads, s, h / heads)
            b, s, _ = x.shape
            return x.reshape(b, s, heads, hidden // heads).permute(0, 2, 1, 3)

        def forward(self, x: Any) -> Any:
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = q.matmul(k.transpose(-1, -2)) / math.sqrt(hidden // heads)
            ctx = scores.softmax(dim=-1).matmul(v).permute(0, 2, 1, 3).reshape(x.shape)
            x = self.ln1(x + self.out(ctx))
            return self.ln2(x + self.down(self.act(self.up(x))))

    return BertLayer()


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12,
               ffn: int = 3072) -> tuple[Any, tuple[Any, ...]]:
    """One BERT-base encoder layer (Devlin et al. 2019), batch 1, explicit q/k/v projections."""
    return _randomize(_bert_layer_module(hidden, heads, ffn)), _example((1, seq, hidden))


# ---- Nature DQN ----

def dqn(actions: int = 18, image: int = 84) -> tuple[Any, tuple[Any, ...]]:
    """The Nature DQN (Mnih et al. 2015): 4 stacked 84x84 frames -> one Q-value per action."""
    nn = _nn()
    convs = [nn.Conv2d(4, 32, 8, 4), nn.ReLU(), nn.Conv2d(32, 64, 4, 2), nn.ReLU(),
             nn.Conv2d(64, 64, 3, 1), nn.ReLU(), nn.Flatten()]
    side = ((image - 8) // 4 + 1 - 4) // 2 + 1 - 2
    check(side >= 1, f"dqn: image {image} is too small for the three convolutions")
    module = nn.Sequential(*convs, nn.Linear(64 * side * side, 512), nn.ReLU(),
                           nn.Linear(512, actions))
    return _randomize(module), _example((1, 4, image, image))


# ---- DCGAN generator ----

def dcgan_generator(latent: int = 100, width: int = 64) -> tuple[Any, tuple[Any, ...]]:
    """The DCGAN generator (Radford et al. 2016): z (latent x 1 x 1) -> a 3 x 64 x 64 image."""
    nn = _nn()
    chans = (width * 8, width * 4, width * 2, width)
    layers = [nn.ConvTranspose2d(latent, chans[0], 4, 1, 0, bias=False),
              nn.BatchNorm2d(chans[0]), nn.ReLU(True)]
    for cin, cout in zip(chans, chans[1:]):
        layers += [nn.ConvTranspose2d(cin, cout, 4, 2, 1, bias=False), nn.BatchNorm2d(cout),
                   nn.ReLU(True)]
    layers += [nn.ConvTranspose2d(chans[-1], 3, 4, 2, 1, bias=False), nn.Tanh()]
    return _randomize(nn.Sequential(*layers)), _example((1, latent, 1, 1))


MODELS: dict[str, Factory] = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "squeezenet": squeezenet,
    "bert_layer": bert_layer,
    "dqn": dqn,
    "dcgan_generator": dcgan_generator,
}


# ---- exports ----

def build(name: str, **kwargs: Any) -> tuple[Any, tuple[Any, ...]]:
    """`MODELS[name](**kwargs)`; an unknown name or keyword raises `GraphError` listing the
    choices."""
    check(name in MODELS, f"unknown model {name!r}; the zoo has {sorted(MODELS)}")
    params = list(inspect.signature(MODELS[name]).parameters)
    unknown = sorted(set(kwargs) - set(params))
    check(not unknown, f"model {name} takes {params}, not {unknown}")
    return MODELS[name](**kwargs)


def torch_graph(name: str, **kwargs: Any) -> Graph:
    """The zoo model `name` imported through `torch.export` into tessel's graph IR."""
    from tessel.graph.frontend.torch_import import from_torch
    module, args = build(name, **kwargs)
    return from_torch(module, args, name=name)


def onnx_model(name: str, opset: int = 17, **kwargs: Any) -> Any:
    """The zoo model `name` as an `onnx.ModelProto`, input "input" and output "output"."""
    module, args = build(name, **kwargs)
    try:
        return _onnx_legacy(module, args, opset)
    except (TypeError, RuntimeError, ImportError):  # the legacy exporter is gone or broken
        return _onnx_dynamo(module, args, opset, name)


def _onnx_legacy(module: Any, args: tuple[Any, ...], opset: int) -> Any:
    """The TorchScript exporter: well under a second per zoo model (dynamo takes ~9 s)."""
    onnx = require("onnx", "exporting a zoo model to ONNX")
    torch = require("torch", "the model zoo")
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # its deprecation notice: we choose it for speed
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=opset,
                          input_names=["input"], output_names=["output"])
    return onnx.load_from_string(buffer.getvalue())


def _onnx_dynamo(module: Any, args: tuple[Any, ...], opset: int, name: str) -> Any:
    torch = require("torch", "the model zoo")
    program = torch.onnx.export(module, args, dynamo=True, opset_version=opset,
                                input_names=["input"], output_names=["output"])
    check(program is not None, f"model {name}: torch.onnx.export produced no ONNX program")
    return program.model_proto


__all__ = ["MODELS", "build", "torch_graph", "onnx_model", "resnet18", "mobilenet_v2",
           "bert_layer", "dqn", "dcgan_generator"]
