"""The models of issue 40's suite, built from their libraries' own configs with random weights.

    module, inputs = build("bert_base")              # eval mode, seeded, no download
    module, inputs = build("gpt2", small=True)       # 2 layers: a quick check of the same code

`SUITE` maps a name to a builder `(small) -> (module, example_inputs)`: Hugging Face
transformers (BERT-base from token ids and an attention mask, GPT-2 small without its cache,
ViT-B/16), torchvision (ResNet-50, Inception-v1 = GoogLeNet, EfficientNet-B0, ConvNeXt-T,
MobileNet-v3 large), the AutoTVM paper's 2-layer LSTM language model (650 hidden units), and
tessel's own zoo (tessel.graph.frontend.models). `small` shrinks the transformers to 2 layers
(the CNNs and the LSTM are built whole). Weights come from torch's global generator seeded
with SEED before each build, inputs from a generator of their own; nothing is downloaded
(`weights=None`, configs built in code). The torchvision models' batch norms are calibrated on
the example input and ConvNeXt's layer scales raised from 1e-6 to 0.5, so that every layer
shows in the output (`calibrate`). Needs the `models` extra; `torchvision_ready` lets its
PyPI build import beside the CPU build of torch.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any, Callable

import torch

from tessel.graph.frontend import models as zoo

SEED = 0
SEQ = 128  # tokens of the language models
Builder = Callable[[bool], tuple[Any, tuple[Any, ...]]]


class Tensors(torch.nn.Module):
    """A Hugging Face model whose output object is returned as its tuple of tensors, so that
    torch.export and the ONNX exporter see plain outputs; `names` are its forward's inputs."""

    def __init__(self, model: Any, names: tuple[str, ...], **fixed: Any) -> None:
        super().__init__()
        self.model, self.names, self.fixed = model, names, fixed

    def forward(self, *inputs: Any) -> tuple[Any, ...]:
        out = self.model(**dict(zip(self.names, inputs)), **self.fixed)
        return tuple(v for v in out.to_tuple() if isinstance(v, torch.Tensor))


def _token_ids(vocab: int, seq: int = SEQ) -> Any:
    gen = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, vocab, (1, seq), generator=gen)


def _image(size: int = 224, seed: int = SEED + 1) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 3, size, size, generator=gen),)


def bert_base(small: bool) -> tuple[Any, tuple[Any, ...]]:
    """BERT-base (12 layers, 768 hidden, seq 128) from token ids and an attention mask whose
    last 16 tokens are padding."""
    from transformers import BertConfig, BertModel
    config = BertConfig(num_hidden_layers=2 if small else 12)
    ids = _token_ids(config.vocab_size)
    mask = torch.ones_like(ids)
    mask[:, -16:] = 0
    return Tensors(BertModel(config), ("input_ids", "attention_mask")).eval(), (ids, mask)


def gpt2(small: bool) -> tuple[Any, tuple[Any, ...]]:
    """GPT-2 small (12 layers, 768 hidden) over 128 token ids, without its key/value cache."""
    from transformers import GPT2Config, GPT2Model
    config = GPT2Config(n_layer=2 if small else 12)
    module = Tensors(GPT2Model(config), ("input_ids",), use_cache=False)
    return module.eval(), (_token_ids(config.vocab_size),)


def vit_b16(small: bool) -> tuple[Any, tuple[Any, ...]]:
    """ViT-B/16 (12 layers, 224x224 image in 16x16 patches) with its pooler."""
    from transformers import ViTConfig, ViTModel
    config = ViTConfig(num_hidden_layers=2 if small else 12)
    return Tensors(ViTModel(config), ("pixel_values",)).eval(), _image()


_STUBS: list[Any] = []  # the torch.library fragment torchvision_ready defined, kept alive


def torchvision_ready() -> None:
    """Let torchvision's models import where its C++ operators do not load: PyPI's
    torchvision wheels link CUDA torch, and with the CPU build (2.13.0+cpu) `_C.so` fails, after
    which `import torchvision` stops at registering a fake kernel for `torchvision::nms`. Then
    the two operator schemas it registers unconditionally (nms, qnms; detection only) are
    defined here, without kernels; the classification models need none of its operators."""
    spec = importlib.util.find_spec("torchvision")
    if _STUBS or spec is None or "torchvision" in sys.modules:
        return  # (without torchvision, its import raises ModuleNotFoundError naming it)
    try:
        for lib in Path(spec.submodule_search_locations[0]).glob("_C*.so"):
            torch.ops.load_library(str(lib))
        return
    except OSError:
        pass
    fragment = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        fragment.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _STUBS.append(fragment)


def _torchvision(name: str, **kwargs: Any) -> Builder:
    def builder(small: bool) -> tuple[Any, tuple[Any, ...]]:
        torchvision_ready()
        from torchvision import models as tv
        module, inputs = getattr(tv, name)(weights=None, **kwargs), _image()
        with torch.no_grad():
            for key, param in module.named_parameters():
                if key.endswith("layer_scale"):  # ConvNeXt's 1e-6: its blocks would not count
                    param.fill_(0.5)
        return calibrate(module, inputs), inputs
    builder.__doc__ = f"torchvision's {name}, random weights, batch norms calibrated"
    return builder


def calibrate(module: Any, inputs: tuple[Any, ...]) -> Any:
    """`module` in eval mode with each batch norm's running statistics those of its input on
    `inputs` (one pass in training mode), so that every normalization sees mean 0, variance 1:
    with the libraries' initializations activations fade through the layers (GoogLeNet's and
    EfficientNet-B0's logits came out as the classifier's bias, which any wrong kernel
    before it would have matched)."""
    norms = [m for m in module.modules()
             if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d))]
    module.eval()
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # (a cumulative average: after one pass, that pass's statistics)
        norm.train()
    with torch.no_grad():
        module(*inputs)
    return module.eval()


class LSTMLanguageModel(torch.nn.Module):
    """The AutoTVM paper's LSTM language model: embedding, 2 LSTM layers of 650 units, a
    linear decoder to the vocabulary (Zaremba et al.'s medium PTB model)."""

    def __init__(self, vocab: int = 10000, hidden: int = 650, layers: int = 2) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.lstm = torch.nn.LSTM(hidden, hidden, layers, batch_first=True)
        self.decode = torch.nn.Linear(hidden, vocab)

    def forward(self, ids: Any) -> Any:
        out, _ = self.lstm(self.embed(ids))
        return self.decode(out)


def lstm_lm(small: bool) -> tuple[Any, tuple[Any, ...]]:
    """The 2-layer, 650-unit LSTM language model over 35 token ids (vocabulary 10000)."""
    return LSTMLanguageModel().eval(), (_token_ids(10000, seq=35),)


def _zoo(name: str) -> Builder:
    def builder(small: bool) -> tuple[Any, tuple[Any, ...]]:
        return zoo.build(name)
    builder.__doc__ = zoo.MODELS[name].__doc__
    return builder


SUITE: dict[str, Builder] = {
    "bert_base": bert_base,
    "gpt2": gpt2,
    "vit_b16": vit_b16,
    "resnet50": _torchvision("resnet50"),
    "googlenet": _torchvision("googlenet", aux_logits=False, init_weights=True),
    "efficientnet_b0": _torchvision("efficientnet_b0"),
    "convnext_tiny": _torchvision("convnext_tiny"),
    "mobilenet_v3": _torchvision("mobilenet_v3_large"),
    "lstm_lm": lstm_lm,
    **{f"zoo_{name}": _zoo(name) for name in zoo.MODELS},
}


def build(name: str, small: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """Model `name` of SUITE in eval mode with its example inputs, weights seeded with SEED."""
    if name not in SUITE:
        raise KeyError(f"unknown model {name!r}; the suite has {', '.join(SUITE)}")
    torch.manual_seed(SEED)
    module, inputs = SUITE[name](small)
    return module.eval(), inputs


torchvision_ready()  # before transformers and timm, which import torchvision too

__all__ = ["SEED", "SUITE", "LSTMLanguageModel", "Tensors", "build", "calibrate",
           "torchvision_ready"]
