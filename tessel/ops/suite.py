"""The named workload suite (DESIGN.md "Workloads"), flop counts and numpy references.

    func = SUITE["C2D"]                        # built on first access, then cached
    make = SUITE.factory("C2D")                # the zero-arg factory (also SUITE_FACTORIES)
    flops(func)                                # multiply-adds count 2
    inputs = reference_inputs(func, seed=0)    # numpy arrays for the input params
    expected = run_reference(func, *inputs)    # what the output param should hold

`flops`, `reference_inputs` and `run_reference` work on any PrimFunc made by tessel.ops: they
dispatch on attrs["op"] and attrs["args"].
"""
from __future__ import annotations

import functools
import math
import threading
from collections.abc import Mapping
from typing import Any, Callable, Iterator

import numpy as np

from tessel import ir
from tessel.ops import linalg, nn, norm, reference

# ---- the workloads -------------------------------------------------------------------------

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

# ---- flop counts ---------------------------------------------------------------------------


def _conv_flops(func: ir.PrimFunc, per_out: int) -> int:
    """2 * (output elements) * (multiply-adds per output element)."""
    return math.prod(func.params[-1].shape) * (2 * per_out)


def _kernel(a: dict, keys: str) -> int:
    return math.prod(a[k] for k in keys)


_FLOPS: dict[str, Callable[[ir.PrimFunc, dict], int]] = {
    "matmul": lambda f, a: 2 * a["M"] * a["N"] * a["K"],
    "batch_matmul": lambda f, a: 2 * a["B"] * a["M"] * a["N"] * a["K"],
    "dense": lambda f, a: 2 * a["M"] * a["N"] * a["K"] + (a["M"] * a["N"] if a["bias"] else 0),
    "transpose_batch_matmul": lambda f, a: 2 * a["batch"] * a["heads"] * a["seq"] ** 2 * a["dim"],
    "conv1d": lambda f, a: _conv_flops(f, a["C"] // a["groups"] * a["K"]),
    "conv2d": lambda f, a: _conv_flops(f, a["C"] // a["groups"] * _kernel(a, ("KH", "KW"))),
    "conv3d": lambda f, a: _conv_flops(f, a["C"] // a["groups"]
                                       * _kernel(a, ("KD", "KH", "KW"))),
    "depthwise_conv2d": lambda f, a: _conv_flops(f, _kernel(a, ("KH", "KW"))),
    # direct convolution over the zero-inserted input, as computed (TVM's convention)
    "conv2d_transpose": lambda f, a: _conv_flops(f, a["C"] // a["groups"]
                                                 * _kernel(a, ("KH", "KW"))),
    # conv, then 7 ops per output: -, *, *, rsqrt, +, +, max
    "conv2d_bn_relu": lambda f, a: (_conv_flops(f, a["C"] * _kernel(a, ("KH", "KW")))
                                    + 7 * math.prod(f.params[-1].shape)),
}


def _expr_ops(e: ir.Expr) -> int:
    """Arithmetic operations in a stored value: index math and select conditions excluded;
    an if_then_else counts its costlier side (one side runs: Winograd's transforms choose one
    formula of six per element)."""
    if isinstance(e, ir.BufferLoad):
        return 0
    if isinstance(e, ir.Select):
        return max(_expr_ops(e.true_value), _expr_ops(e.false_value))
    if isinstance(e, ir.BinOp):
        own = 1 if e.op in ("+", "-", "*", "/", "//", "%", "min", "max") else 0
        return own + _expr_ops(e.a) + _expr_ops(e.b)
    if isinstance(e, ir.Call) and e.name == "if_then_else":
        return max(_expr_ops(x) for x in e.args[1:])
    if isinstance(e, ir.Call):
        return 1 + sum(_expr_ops(x) for x in e.args)
    if isinstance(e, ir.Cast):
        return _expr_ops(e.value)
    return 0


def count_ops(func: ir.PrimFunc) -> int:
    """Generic flop count from the IR: for each block, the product of its iteration extents
    times the arithmetic operations in what it stores (the reduction update included, the
    init excluded). Exact for the naive program that tessel.ops factories produce."""
    total = 0
    for block in ir.blocks(func.body):
        if block is func.root:
            continue
        iters = math.prod(iv.extent for iv in block.iter_vars)
        total += iters * sum(_expr_ops(s.value) for s in ir.collect(block.body, ir.BufferStore))
    return total


def flops(func: ir.PrimFunc) -> int:
    """Floating-point (or integer) operations of one run, a multiply-add counting 2: the op's
    exact formula when attrs name a known op, else counted from the IR (`count_ops`)."""
    op, args = func.attrs.get("op"), func.attrs.get("args")
    if op in _FLOPS and isinstance(args, dict):
        return int(_FLOPS[op](func, args))
    return count_ops(func)

# ---- numpy references ----------------------------------------------------------------------


def _conv_ref(fn: Callable, a: dict, x: tuple) -> np.ndarray:
    return fn(*x, a["stride"], a["padding"], a["dilation"], a.get("groups", 1))


def _pool_ref(fn: Callable, a: dict, x: tuple) -> np.ndarray:
    return fn(*x, a["kernel"], a["stride"], a["padding"])


_REFERENCE: dict[str, Callable[[dict, tuple], np.ndarray]] = {
    "matmul": lambda a, x: reference.matmul(*x),
    "batch_matmul": lambda a, x: reference.batch_matmul(*x),
    "dense": lambda a, x: reference.dense(*x),
    "transpose_batch_matmul": lambda a, x: reference.transpose_batch_matmul(*x),
    "conv1d": lambda a, x: _conv_ref(reference.conv1d, a, x),
    "conv2d": lambda a, x: _conv_ref(reference.conv2d, a, x),
    "conv3d": lambda a, x: _conv_ref(reference.conv3d, a, x),
    "depthwise_conv2d": lambda a, x: reference.depthwise_conv2d(
        *x, a["stride"], a["padding"], a["dilation"]),
    "conv2d_transpose": lambda a, x: reference.conv2d_transpose(
        *x, a["stride"], a["padding"], a["output_padding"], a["dilation"], a["groups"]),
    "conv2d_bn_relu": lambda a, x: reference.conv2d_bn_relu(
        *x, a["stride"], a["padding"], a["eps"]),
    "max_pool2d": lambda a, x: _pool_ref(reference.max_pool2d, a, x),
    "avg_pool2d": lambda a, x: _pool_ref(reference.avg_pool2d, a, x),
    "global_avg_pool2d": lambda a, x: reference.global_avg_pool2d(*x),
    "relu": lambda a, x: reference.relu(*x),
    "sigmoid": lambda a, x: reference.sigmoid(*x),
    "tanh": lambda a, x: reference.tanh(*x),
    "gelu": lambda a, x: reference.gelu(*x),
    "add": lambda a, x: reference.add(*x),
    "multiply": lambda a, x: reference.multiply(*x),
    "bias_add": lambda a, x: reference.bias_add(*x, a["axis"]),
    "batch_norm": lambda a, x: reference.batch_norm(*x, a["eps"]),
    "pad": lambda a, x: reference.pad(*x, a["pad_before"], a["pad_after"], a["value"]),
    "layer_norm": lambda a, x: reference.layer_norm(*x, a["eps"]),
    "softmax": lambda a, x: reference.softmax(*x),
}


def _op(func: ir.PrimFunc) -> tuple[str, dict[str, Any]]:
    op = func.attrs.get("op")
    if op not in _REFERENCE:
        raise ValueError(f"function {func.name!r} has attrs op={op!r}, which has no numpy "
                         f"reference; known: {sorted(_REFERENCE)}")
    return op, func.attrs["args"]


def _random(rng: np.random.Generator, buf: ir.Buffer) -> np.ndarray:
    if ir.is_int(buf.dtype):
        return rng.integers(-8, 9, size=buf.shape).astype(buf.dtype)
    if buf.name == "var":  # variances must be positive
        return rng.uniform(0.5, 1.5, size=buf.shape).astype(buf.dtype)
    return rng.uniform(-1.0, 1.0, size=buf.shape).astype(buf.dtype)


def reference_inputs(func: ir.PrimFunc, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Seeded random arrays for the input params, in order, of the right shape and dtype."""
    _op(func)
    rng = np.random.default_rng(seed)
    return tuple(_random(rng, buf) for buf in func.inputs)


def empty_outputs(func: ir.PrimFunc) -> tuple[np.ndarray, ...]:
    """Zeroed arrays for the output params, in order."""
    return tuple(np.zeros(buf.shape, buf.dtype) for buf in func.outputs)


def run_reference(func: ir.PrimFunc, *inputs: np.ndarray) -> np.ndarray:
    """The expected output of `func` on `inputs`, from tessel.ops.reference, in the output
    param's dtype."""
    op, args = _op(func)
    expected = len(func.inputs)
    if len(inputs) != expected:
        raise ValueError(f"{func.name}: expected {expected} input arrays "
                         f"({', '.join(b.name for b in func.inputs)}), got {len(inputs)}")
    out = np.asarray(_REFERENCE[op](args, tuple(inputs)))
    dtype = func.outputs[0].dtype
    if ir.is_int(dtype) and not np.issubdtype(out.dtype, np.integer):
        out = np.rint(out)
    return out.astype(dtype)


__all__ = ["SUITE", "SUITE_FACTORIES", "SUITE_DESCRIPTIONS", "Suite", "flops", "count_ops",
           "reference_inputs", "run_reference", "empty_outputs"]
