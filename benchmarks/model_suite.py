"""The models of issue 40's suite, built from their libraries' own configs with random weights.

    module, inputs = build("bert_base")              # eval mode, seeded, no download
    module, inputs = build("gpt2", small=True)       # 2 layers: a quick check of the same code

`SUITE` maps a name to a builder `(small) -> (module, example_inputs)`: Hugging Face
transformers (BERT-base from token ids and an attention mask, GPT-2 small without its cache,
ViT-B/16), torchvision (ResNet-50, Inception-v1 = GoogLeNet, EfficientNet-B0, ConvNeXt-T,
MobileNet-v3 large), the AutoTVM paper's 2-layer LSTM language model (650 hidden units), and
tessel's own zoo (tessel.graph.frontend.models). `small` shrinks the transformers to 2 layers
(the CNNs and the LSTM are built whole).

`HELD_OUT` holds 40 more (transformers' DistilBERT, RoBERTa, ALBERT, ELECTRA, T5's encoder,
OPT, BLOOM, Llama, CLIP's vision tower, Swin, wav2vec 2.0, Whisper's encoder; torchvision's
DenseNet, ShuffleNet, SqueezeNet, RegNet, MnasNet, ResNeXt, Swin-T, ViT, MaxViT,
EfficientNetV2, AlexNet, VGG; timm's DeiT, MLP-Mixer, PoolFormer, MobileViT, LeViT, GhostNet,
TF-EfficientNet, RepVGG, DLA, ReXNet, EdgeNeXt, HRNet, CSPDarkNet, NFNet, CoAtNet,
EfficientFormer), for the models a user brings: tessel was not developed against them, and
the decoder-style ones are cut to 4 layers (2 for Whisper) to keep a run short.

Weights come from torch's global generator seeded with SEED before each build, inputs from a
generator of their own; nothing is downloaded (`weights=None`, configs built in code). The
torchvision and timm models' batch norms are calibrated on the example input, ConvNeXt's layer
scales raised from 1e-6 to 0.5 and the weights initialized to zero (classifier heads) drawn at
random (the held-out models'), so that every layer shows in the output (`calibrate`,
`_no_zero_layers`). Needs the `models` extra; `torchvision_ready` lets its PyPI build import
beside the CPU build of torch.
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


def _torchvision(name: str, held_out: bool = False, **kwargs: Any) -> Builder:
    def builder(small: bool) -> tuple[Any, tuple[Any, ...]]:
        torchvision_ready()
        from torchvision import models as tv
        module, inputs = getattr(tv, name)(weights=None, **kwargs), _image()
        if held_out:
            _no_zero_layers(module)
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


# ---- held out: models tessel was never developed against ----

def _hf(model: str, config: str, inputs: str, **settings: Any) -> Builder:
    """A Hugging Face model from its config class with `settings` (fewer layers where the
    default is big): "ids" token ids and a mask (the last 16 tokens padding), "ids_only",
    "image" (224 x 224), "audio" (one second at 16 kHz), "features" (the encoder alone, on
    log-mel features of its full window)."""
    def builder(small: bool) -> tuple[Any, tuple[Any, ...]]:
        import transformers
        cfg = getattr(transformers, config)(**settings)
        module = getattr(transformers, model)(cfg)
        gen = torch.Generator().manual_seed(SEED + 1)
        if inputs == "ids":
            ids = _token_ids(cfg.vocab_size)
            mask = torch.ones_like(ids)
            mask[:, -16:] = 0
            return Tensors(module, ("input_ids", "attention_mask")), (ids, mask)
        if inputs == "ids_only":
            return Tensors(module, ("input_ids",), use_cache=False), (_token_ids(cfg.vocab_size),)
        if inputs == "image":
            return Tensors(module, ("pixel_values",)), _image()
        if inputs == "audio":
            return Tensors(module, ("input_values",)), (torch.randn(1, 16000, generator=gen),)
        features = torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions, generator=gen)
        return Tensors(module.encoder, ("input_features",)), (features,)
    builder.__doc__ = f"transformers' {model} from {config}({settings or ''}), random weights"
    return builder


def _timm(name: str, size: int = 224) -> Builder:
    def builder(small: bool) -> tuple[Any, tuple[Any, ...]]:
        import timm
        module, inputs = timm.create_model(name, pretrained=False), _image(size)
        _no_zero_layers(module)
        try:
            return calibrate(module, inputs), inputs
        except ValueError:  # a batch norm over one value per channel (LeViT's head) in training
            return module.eval(), inputs
    builder.__doc__ = f"timm's {name}, random weights, batch norms calibrated"
    return builder


def _no_zero_layers(module: Any) -> None:
    """Weights the library initializes to zero (ViT's and MLP-Mixer's classifier heads) drawn
    at random instead: an output of zeros matches any wrong kernel before it."""
    with torch.no_grad():
        for key, param in module.named_parameters():
            if key.endswith("weight") and param.dim() >= 2 and not param.any():
                param.normal_(0.0, 0.02)


HELD_OUT: dict[str, Builder] = {
    "distilbert": _hf("DistilBertModel", "DistilBertConfig", "ids"),
    "roberta": _hf("RobertaModel", "RobertaConfig", "ids", num_hidden_layers=4),
    "albert": _hf("AlbertModel", "AlbertConfig", "ids", hidden_size=768, num_attention_heads=12,
                  intermediate_size=3072),  # (ALBERT-base; the default config is xxlarge)
    "electra": _hf("ElectraModel", "ElectraConfig", "ids"),
    "t5_encoder": _hf("T5EncoderModel", "T5Config", "ids", num_layers=4),
    "opt": _hf("OPTModel", "OPTConfig", "ids", num_hidden_layers=4),
    "bloom": _hf("BloomModel", "BloomConfig", "ids", n_layer=4, hidden_size=512, n_head=8),
    "llama": _hf("LlamaModel", "LlamaConfig", "ids_only", hidden_size=512,
                 intermediate_size=1376, num_hidden_layers=4, num_attention_heads=8,
                 num_key_value_heads=4, vocab_size=8000),
    "clip_vision": _hf("CLIPVisionModel", "CLIPVisionConfig", "image", num_hidden_layers=4),
    "swin_hf": _hf("SwinModel", "SwinConfig", "image", depths=[2, 2, 2, 2]),
    "wav2vec2": _hf("Wav2Vec2Model", "Wav2Vec2Config", "audio", num_hidden_layers=4),
    "whisper_encoder": _hf("WhisperModel", "WhisperConfig", "features", encoder_layers=2,
                           d_model=384, encoder_attention_heads=6, encoder_ffn_dim=1536),
    **{name: _torchvision(arch, held_out=True) for name, arch in (
        ("densenet121", "densenet121"), ("shufflenet_v2", "shufflenet_v2_x1_0"),
        ("squeezenet", "squeezenet1_1"), ("regnet_y", "regnet_y_400mf"),
        ("mnasnet", "mnasnet1_0"), ("resnext50", "resnext50_32x4d"), ("swin_t", "swin_t"),
        ("vit_b16_tv", "vit_b_16"), ("maxvit", "maxvit_t"),
        ("efficientnet_v2_s", "efficientnet_v2_s"), ("alexnet", "alexnet"),
        ("vgg11_bn", "vgg11_bn"))},
    **{name: _timm(arch, size) for name, arch, size in (
        ("deit_tiny", "deit_tiny_patch16_224", 224), ("mixer_b16", "mixer_b16_224", 224),
        ("poolformer", "poolformer_s12", 224), ("mobilevit", "mobilevit_s", 256),
        ("levit", "levit_128", 224), ("ghostnet", "ghostnet_100", 224),
        ("tf_efficientnet_b0", "tf_efficientnet_b0", 224), ("repvgg", "repvgg_a0", 224),
        ("dla34", "dla34", 224), ("rexnet", "rexnet_100", 224),
        ("edgenext", "edgenext_small", 224), ("hrnet", "hrnet_w18_small", 224),
        ("cspdarknet", "cspdarknet53", 224), ("nfnet", "nfnet_f0", 224),
        ("coatnet", "coatnet_0_rw_224", 224), ("efficientformer", "efficientformer_l1", 224))},
}
MODELS: dict[str, Builder] = {**SUITE, **HELD_OUT}


def build(name: str, small: bool = False) -> tuple[Any, tuple[Any, ...]]:
    """Model `name` of SUITE or HELD_OUT in eval mode with its example inputs, weights seeded
    with SEED."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; the suite has {', '.join(SUITE)}, held out "
                       f"{', '.join(HELD_OUT)}")
    torch.manual_seed(SEED)
    module, inputs = MODELS[name](small)
    return module.eval(), inputs


torchvision_ready()  # before transformers and timm, which import torchvision too

__all__ = ["SEED", "SUITE", "HELD_OUT", "MODELS", "LSTMLanguageModel", "Tensors", "build",
           "calibrate", "torchvision_ready"]
