"""The named workload suite (DESIGN.md "Workloads"): PrimFuncs of tessel.ops factories.

    func = SUITE["C2D"]                        # built on first access, then cached
    make = SUITE.factory("C2D")                # the zero-arg factory (also SUITE_FACTORIES)
    SUITE_DESCRIPTIONS["C2D"]                  # one line for `tessel ops`
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Callable, Iterator

from tessel import ir
from tessel.ops import linalg, nn, norm

_P = functools.partial
# ResNet-18 conv2d layers: (H=W, in, out, kernel, stride); padding 3 for K=7, 1 for K=3, 0 for 1
_R18 = [(224, 3, 64, 7, 2), (56, 64, 64, 3, 1), (56, 64, 64, 1, 1), (56, 64, 128, 3, 2),
        (56, 64, 128, 1, 2), (28, 128, 128, 3, 1), (28, 128, 256, 3, 2), (28, 128, 256, 1, 2),
        (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)]

SUITE_FACTORIES: dict[str, Callable[[], ir.PrimFunc]] = {
    "C1D": _P(nn.conv1d, 1, 64, 256, 128, 3, stride=2, padding=1),
    "C2D": _P(nn.conv2d, 1, 3, 224, 224, 64, 7, 7, stride=2, padding=3),
    "C3D": _P(nn.conv3d, 1, 3, 16, 224, 224, 64, 7, 7, 7, stride=2, padding=3),
    "DEP": _P(nn.depthwise_conv2d, 1, 32, 112, 112, 3, 3, stride=1, padding=1),
    "DIL": _P(nn.conv2d, 1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, dilation=2),
    "GMM": _P(linalg.matmul, 128, 128, 128),
    "GMM-1024": _P(linalg.matmul, 1024, 1024, 1024),
    "GRP": _P(nn.conv2d, 1, 64, 56, 56, 128, 3, 3, stride=2, padding=1, groups=4),
    "T2D": _P(nn.conv2d_transpose, 1, 512, 4, 4, 256, 4, 4, stride=2, padding=1),
    "CBR": _P(nn.conv2d_bn_relu, 1, 3, 224, 224, 64, 7, 7, stride=2, padding=3),
    "TBG": _P(linalg.transpose_batch_matmul, 1, 128, 12, 64),
    "NRM": _P(norm.layer_norm, 256, 256),
    "SFM": _P(norm.softmax, 256, 256),
}
SUITE_FACTORIES.update({
    f"R18-C{i}": _P(nn.conv2d, 1, ic, hw, hw, oc, k, k, stride=s, padding=k // 2)
    for i, (hw, ic, oc, k, s) in enumerate(_R18, start=1)})

SUITE_DESCRIPTIONS: dict[str, str] = {
    "C1D": "conv1d: length 256, in 64, out 128, kernel 3, stride 2, pad 1",
    "C2D": "conv2d: 224x224, in 3, out 64, kernel 7, stride 2, pad 3",
    "C3D": "conv3d: depth 16, 224x224, in 3, out 64, kernel 7, stride 2, pad 3",
    "DEP": "depthwise conv2d: 112x112, channels 32, kernel 3, stride 1, pad 1",
    "DIL": "dilated conv2d: 224x224, in 3, out 64, kernel 7, stride 2, pad 3, dilation 2",
    "GMM": "matmul: M=N=K=128",
    "GMM-1024": "matmul: M=N=K=1024",
    "GRP": "group conv2d: 56x56, in 64, out 128, kernel 3, stride 2, pad 1, groups 4",
    "T2D": "transposed conv2d: 4x4, in 512, out 256, kernel 4, stride 2, pad 1",
    "CBR": "conv2d + batch norm + ReLU: 224x224, in 3, out 64, kernel 7, stride 2, pad 3",
    "TBG": "transpose + batch matmul: seq 128, heads 12, dim 64",
    "NRM": "layer norm: 256x256",
    "SFM": "softmax: 256x256",
}
SUITE_DESCRIPTIONS.update({
    f"R18-C{i}": f"ResNet-18 conv2d: {hw}x{hw}, in {ic}, out {oc}, kernel {k}, stride {s}, "
                 f"pad {k // 2}"
    for i, (hw, ic, oc, k, s) in enumerate(_R18, start=1)})


class Suite(Mapping):
    """Read-only mapping from workload name to PrimFunc; each is built on first access."""

    def __init__(self, factories: Mapping[str, Callable[[], ir.PrimFunc]]) -> None:
        self._factories = dict(factories)
        self._cache: dict[str, ir.PrimFunc] = {}
        self._lock = threading.Lock()

    def factory(self, name: str) -> Callable[[], ir.PrimFunc]:
        if name not in self._factories:
            raise KeyError(f"unknown workload {name!r}; known: {', '.join(self._factories)}")
        return self._factories[name]

    def __getitem__(self, name: str) -> ir.PrimFunc:
        make = self.factory(name)
        with self._lock:
            if name not in self._cache:
                self._cache[name] = make()
            return self._cache[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def __repr__(self) -> str:
        return f"Suite({', '.join(self._factories)})"


SUITE = Suite(SUITE_FACTORIES)

__all__ = ["SUITE", "SUITE_FACTORIES", "SUITE_DESCRIPTIONS", "Suite"]
