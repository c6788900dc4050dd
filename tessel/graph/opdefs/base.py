"""`OpDef`: everything tessel knows about one graph operator, and the registry `OPS`.

An operator is defined once, in the file of its family (elementwise.py, nn.py, reduce.py,
shape.py), with `define(...)`: its attributes and their defaults, how many inputs it takes,
shape inference, its te lowering (the stages of `tessel.ops` where one exists, so the
search spaces' designs apply), its numpy reference (float64, PyTorch/ONNX semantics), its
fusion kind, how a blocked channel layout propagates through it, and the examples that the
registry test (tests/test_graph_lowering.py) runs it on, against torch where torch has the op.
Adding an operator is one `define` plus the importer lines that map foreign ops onto it.

Fusion kinds (as TVM's operator patterns): "anchor" (complex, fuses with elementwise
consumers), "reduce", "elemwise", "injective" (index remapping), "view" (a reshape: the
runtime aliases the buffer, no kernel).

Layout rules, for blocked channel layouts (NCHW[x]c, tessel.graph.layout): "channelwise" (per
channel, a blocked layout passes unchanged, through the op or its `blocked` form: unary math,
pools), "broadcast" (passes when every operand has the layout or broadcasts along the channel
axis), "anchor" (the op chooses its own layout: convolutions with a `blocked` form), "concat"
(a join along `axis`: passes when whole blocks join), "barrier" (needs the plain layout: dense,
matmul, reshape, transpose, softmax, the normalizations over trailing axes). Channels padded
to whole vectors pass only `finite` operators.

Dtypes: graph values are float32, the integer types of `INTS` (token ids, indices, shapes
computed at run time) or bool (masks). An operator's `dtype` rule checks its inputs' dtypes and
gives its output's: `floats` (float32 in and out: the default), `same` (one dtype, any, kept:
layout operators), `numbers` (one dtype, not bool: arithmetic), `compare` (one dtype in, bool
out), `logical` (bool in and out), or the operator's own (where, gather, cast).
"""
from __future__ import annotations

import math

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tessel import ir, ops, te
from tessel.graph.ir import GraphError, TensorType, check

REQUIRED = object()  # an attribute with no default
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
DTYPES = ("float32", *INTS, "bool")
KINDS = ("anchor", "reduce", "elemwise", "injective", "view")
LAYOUTS = ("channelwise", "broadcast", "anchor", "concat", "barrier")
DOMAINS = ("any", "positive", "nonzero")

Attrs = dict[str, Any]
Arg = te.Tensor | float  # a float stands for a scalar constant of shape ()
Infer = Callable[[list[TensorType], Attrs, str], Sequence[int]]
Lower = Callable[[list[Arg], Attrs, str, TensorType], te.Tensor]
Reference = Callable[[list[np.ndarray], Attrs, TensorType], np.ndarray]
DTypeRule = Callable[[list[TensorType], Attrs, str], str]  # (inputs, attrs, label) -> dtype


def _dtypes_of(inputs: list[TensorType], label: str, allowed: Sequence[str]) -> str:
    """The one dtype all `inputs` share, which must be among `allowed`."""
    dtypes = sorted({t.dtype for t in inputs}, key=lambda d: (d not in DTYPES, d))
    check(len(dtypes) == 1, f"node {label}: inputs of different dtypes {dtypes}; the importer "
                            f"casts them to one")
    check(dtypes[0] in allowed, f"node {label}: {dtypes[0]} tensors are not supported here; "
                                f"it takes {', '.join(allowed)}")
    return dtypes[0]


def floats(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    return _dtypes_of(inputs, label, ("float32",))


def same(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    return _dtypes_of(inputs, label, DTYPES)


def numbers(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    return _dtypes_of(inputs, label, DTYPES[:-1])


def compare(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    _dtypes_of(inputs, label, DTYPES)
    return "bool"


def logical(inputs: list[TensorType], attrs: Attrs, label: str) -> str:
    return _dtypes_of(inputs, label, ("bool",))


@dataclass(frozen=True)
class Example:
    """Inputs (a shape per tensor input, a float per scalar constant), attributes, and the
    tensor inputs' dtypes (float32 where not given)."""

    inputs: tuple[tuple[int, ...] | float, ...]
    attrs: Attrs = field(default_factory=dict)
    dtypes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    infer: Infer  # output shape; may normalize attributes in place (defaults, negative axes)
    lower: Lower  # the te stages, the last one named `name`
    reference: Reference  # numpy (float64 inside for floats); cast to the output's dtype
    attrs: Attrs  # attribute -> default (REQUIRED: none)
    n_inputs: tuple[int, int]  # (min, max); max -1 = any
    layout: str
    examples: tuple[Example, ...]
    torch: Callable[..., Any] | None = None  # (torch, *tensors, **attrs) -> tensor: an oracle
    domains: dict[int, str] = field(default_factory=dict)  # input -> values tests draw
    scalars: bool = False  # inputs may be floats (binary elementwise operators)
    dtype: DTypeRule = floats  # the inputs' dtypes checked, the output's given
    finite: bool = False  # finite in, finite out: padded channels pass (domain inputs: constants)
    blocked: tuple[str, Attrs] | None = None  # the op (and attributes it adds) on NCHW[b]c data
    folds_transposes: bool = False  # an anchor of two activations: transposes fold into it
    param_names: tuple[str, ...] = ()  # its inputs as kernel parameters (measured "var" > 0)

    def flops(self, inputs: Sequence[TensorType], attrs: Attrs | None = None) -> int:
        """Arithmetic operations of one run as tessel computes it (a multiply-add counting 2):
        counted on the te lowering, so fused groups and the suite agree."""
        attrs = dict(attrs or {})
        out = infer_type(self.name, list(inputs), attrs, self.name)
        holders = [te.placeholder(t.shape, t.dtype, name=f"x{i}") for i, t in enumerate(inputs)]
        stage = self.lower(list(holders), attrs, "out", out)
        return ops.flops(te.create_func([*holders, stage], name=self.name))


OPS: dict[str, OpDef] = {}


def define(name: str, kind: str, infer: Infer, lower: Lower, reference: Reference, *,
           layout: str, examples: Sequence[Example], attrs: Attrs | None = None,
           inputs: tuple[int, int] = (1, 1), **extra: Any) -> OpDef:
    """Register operator `name` (see OpDef for the fields)."""
    check(name not in OPS, f"operator {name} is defined twice")
    check(kind in KINDS, f"operator {name}: kind {kind!r} is not one of {KINDS}")
    check(layout in LAYOUTS, f"operator {name}: layout rule {layout!r} is not one of {LAYOUTS}")
    check(bool(examples), f"operator {name}: needs at least one example for its tests")
    op = OpDef(name, kind, infer, lower, reference, dict(attrs or {}), inputs, layout,
               tuple(examples), **extra)
    check(all(d in DOMAINS for d in op.domains.values()),
          f"operator {name}: input domains {op.domains} must be among {DOMAINS}")
    OPS[name] = op
    return op


def infer_type(op: str, inputs: list[TensorType], attrs: Attrs, label: str) -> TensorType:
    """The output type of `op` on `inputs`; fills defaulted attributes into `attrs`."""
    check(op in OPS, f"node {label}: unsupported operator {op!r}; tessel's graph IR has "
                     f"{sorted(OPS)}")
    d = OPS[op]
    lo, hi = d.n_inputs
    check(len(inputs) >= lo and (hi < 0 or len(inputs) <= hi),
          f"node {label} ({op}): takes {lo}{'' if hi == lo else '+' if hi < 0 else f'-{hi}'} "
          f"inputs, got {len(inputs)}")
    for key in attrs:
        check(key in d.attrs, f"node {label} ({op}): unknown attribute {key!r}; "
                              f"expected {sorted(d.attrs)}")
    for key, default in d.attrs.items():
        if key not in attrs:
            check(default is not REQUIRED, f"node {label} ({op}): missing attribute {key!r}")
            attrs[key] = default
    dtype = d.dtype(inputs, attrs, f"{label} ({op})")
    shape = d.infer(inputs, attrs, label)
    check(all(n >= 1 for n in shape), f"node {label} ({op}): empty output shape {shape}")
    return TensorType(tuple(int(n) for n in shape), dtype)


# ---- helpers the families share ----

def ints(label: str, op: str, name: str, value: Any, n: int) -> tuple[int, ...]:
    values = tuple(int(v) for v in value)
    check(len(values) == n, f"node {label} ({op}): {name} needs {n} values, got {list(value)}")
    return values


def axis_of(label: str, op: str, axis: int, rank: int) -> int:
    check(-rank <= axis < rank, f"node {label} ({op}): axis {axis} out of range for rank {rank}")
    return axis % rank


def broadcast_shape(shapes: Sequence[tuple[int, ...]], label: str) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"node {label}: shapes {list(shapes)} do not broadcast") from None


def same_shape(inputs: list[TensorType], attrs: Attrs, label: str) -> tuple[int, ...]:
    return inputs[0].shape


def split_pads(pads: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    nd = len(pads) // 2
    return tuple(pads[:nd]), tuple(pads[nd:])


Index = tuple[ir.Expr, ...]


def unravel(flat: ir.Expr, shape: tuple[int, ...]) -> Index:
    """The index into `shape` of row-major position `flat`."""
    strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    return tuple(flat // st if d == 0 else (flat // st) % n
                 for d, (n, st) in enumerate(zip(shape, strides)))


def ravel(idx: Index, shape: tuple[int, ...]) -> ir.Expr:
    """The row-major position of index `idx` into `shape`."""
    flat: ir.Expr | int = 0
    for v, n in zip(idx, shape):
        flat = flat * n + v
    return ir.convert(flat)


def elementwise(shape: tuple[int, ...], fn: Callable[[Index], ir.Expr], name: str) -> te.Tensor:
    return te.compute(shape, lambda *i: fn(tuple(i)), name=name)


def bcast(idx: Index, shape: tuple[int, ...], out: tuple[int, ...]) -> Index:
    """The index into a tensor of `shape` that numpy broadcasting reads at output index idx."""
    lead = len(out) - len(shape)
    return tuple(ir.const(0) if n == 1 and out[lead + d] != 1 else idx[lead + d]
                 for d, n in enumerate(shape))


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def exact(x: np.ndarray) -> np.ndarray:
    """A reference's operand: float64 for floats, integers and bools as they are."""
    x = np.asarray(x)
    return x if x.dtype.kind in "biu" else f64(x)
