"""Exporters' spellings of one operator, recognized before fusion: GELU written out in its erf
or tanh form, SiLU as x * sigmoid(x), and a linear layer whose input is flattened to rows
around its matrix product.

Each spelling keeps a chain out of its producer's kernel: the written-out activation reads x
two or three times, so it cannot join the kernel that makes x (EfficientNet-B0's SiLUs ran as
kernels of their own, a 112 x 112 x 96 one 0.25 ms after its 0.27 ms convolution), and the
reshapes around a flattened product separate it from its bias, residual and activation
(GPT-2's Conv1D: `addmm(b, x.view(-1, K), w).view(..., N)`: 24 residual adds and 12 GELUs of
GPT-2 small ran as kernels of their own).
Attention's scale is spelled in one more way: torch's ONNX export of scaled_dot_product_attention
multiplies q and k^T each by sqrt(scale) before their product. Inside the product's kernel a
scaled operand is a multiply at every load of it (ViT-B/16's q k^T: a multiply beside each
FMA); the product of the unscaled operands, scaled once, is the same up to rounding and its
scaling an epilogue of the product's kernel. TensorFlow's "same" padding comes as a Pad node
before a convolution: a padded copy of the input written and read again, where the
convolution pads inside its own loops.
Each pass returns a new Graph (tessel.graph.fold.rebuild) and keeps value names.
"""
from __future__ import annotations

import math

import numpy as np

from tessel import ir
from tessel.graph.fold import fresh_name, rebuild
from tessel.graph.ir import Graph, Node

TANH_SCALE = math.sqrt(2.0 / math.pi)  # GELU's tanh form: tanh(TANH_SCALE * (x + CUBE x^3))
CUBE = 0.044715


def recognize_activations(graph: Graph) -> Graph:
    """x * (1 + erf(x / sqrt(2))) * 0.5 and 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715
    x^3))), as exporters spell GELU, become one gelu node (approximate "none", "tanh"), and
    x * sigmoid(x) one silu node."""
    producer = graph.producer()

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        for approximate, match in (("none", _erf_gelu_input), ("tanh", _tanh_gelu_input)):
            x = match(graph, producer, node)
            if x is not None:
                return new.add_node("gelu", [x], name=node.name, output=node.output,
                                    approximate=approximate)
        x = _silu_input(producer, node)
        return None if x is None else new.add_node("silu", [x], name=node.name,
                                                   output=node.output)

    return rebuild(graph, rewrite)


def _silu_input(producer: dict[str, Node], node: Node) -> str | None:
    """x of x * sigmoid(x) (either order)."""
    if node.op != "mul":
        return None
    for x, s in (node.inputs, node.inputs[::-1]):
        gate = producer.get(s)
        if gate is not None and gate.op == "sigmoid" and gate.inputs[0] == x:
            return x
    return None


def unflatten_products(graph: Graph) -> Graph:
    """reshape(dense(reshape(x, (rows, K)), w, b), (*lead, N)), where rows = prod(lead),
    becomes dense(x', w, b) with x' = x seen as (*lead, K) (x itself when it is): the same
    numbers in the same order, with no view between the product and what reads its result."""
    producer, users = graph.producer(), graph.consumers()

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        dense = producer.get(node.inputs[0]) if node.op == "reshape" else None
        if dense is None or dense.op != "dense" or len(users.get(dense.output, ())) != 1:
            return None
        flat = producer.get(dense.inputs[0])
        if flat is None or flat.op != "reshape" or len(graph.types[flat.output].shape) != 2:
            return None
        rows, k = graph.types[flat.output].shape
        *lead, n = graph.types[node.output].shape
        if not lead or math.prod(lead) != rows or n != graph.types[dense.output].shape[-1]:
            return None
        # (values keep their names through this pass: x, the weight and the bias exist)
        x = flat.inputs[0]
        if graph.types[x].shape != (*lead, k):  # a name neither graph has
            x = new.add_node("reshape", [x], output=fresh_name(graph, new, f"{x}_rows"),
                             shape=(*lead, k))
        return new.add_node("dense", [x, *dense.inputs[1:]], name=dense.name,
                            output=node.output, **dict(dense.attrs))

    return rebuild(graph, rewrite)


def rows_before_unit_axis(graph: Graph) -> Graph:
    """dense(x) with x of shape (*lead, 1, K), prod(lead) > 1 (sequence-first layouts:
    torch's nn.MultiheadAttention and nn.LSTM inputs, (L, 1, E)) becomes
    reshape(dense(reshape(x, (*lead, K))), (*lead, 1, N)): a product's rows are its
    second-to-last axis, and over (197, 1, 768) it was 197 products of one row, each reading
    the whole weight (torchvision's ViT-B/16 ran its in-projections at a quarter of the
    Hugging Face ViT's speed). The reshapes are views."""
    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        if node.op != "dense":
            return None
        *lead, unit, k = new.types[inputs[0]].shape
        if unit != 1 or math.prod(lead) <= 1:
            return None
        x = new.add_node("reshape", [inputs[0]], output=fresh_name(graph, new, f"{inputs[0]}_rows"),
                         shape=(*lead, k))
        y = new.add_node("dense", [x, *inputs[1:]], name=node.name,
                         output=fresh_name(graph, new, f"{node.output}_rows"), **dict(node.attrs))
        return new.add_node("reshape", [y], output=node.output,
                            shape=graph.types[node.output].shape)

    return rebuild(graph, rewrite)


def pads_into_convs(graph: Graph) -> Graph:
    """conv(pad(x)) where the pad adds zeros on the spatial axes only (TensorFlow's "same"
    padding as an explicit Pad: timm's tf_ models, TF-exported ONNX) becomes conv(x) with the
    pad's widths added to its own: no padded copy of x written and read again."""
    producer = graph.producer()

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        pad = producer.get(node.inputs[0]) if node.op == "conv" else None
        if pad is None or pad.op != "pad" or len(pad.inputs) != 1 or \
                pad.attrs["mode"] != "constant" or pad.attrs["value"] != 0.0:
            return None
        rank, widths = len(graph.types[pad.output].shape), tuple(pad.attrs["pads"])
        begin, end = widths[:rank], widths[rank:]
        if begin[:2] != (0, 0) or end[:2] != (0, 0) or min(widths) < 0:
            return None
        pads = tuple(p + q for p, q in zip(node.attrs["pads"], (*begin[2:], *end[2:])))
        return new.add_node("conv", [pad.inputs[0], *inputs[1:]], name=node.name,
                            output=node.output, **{**dict(node.attrs), "pads": pads})

    return rebuild(graph, rewrite)


def scale_after_products(graph: Graph) -> Graph:
    """matmul(x * a, y * b), a and b one-element constants (either product may be absent, a
    division x / a counts as x * (1 / a)), each scaled operand read by the product alone,
    becomes matmul(x, y) * (a * b)."""
    producer, users = graph.producer(), graph.consumers()

    def unscaled(value: str) -> tuple[float, str]:
        node = producer.get(value)
        if node is None or node.op not in ("mul", "div") or len(users[value]) != 1 or \
                value in graph.outputs:
            return 1.0, value
        c, other = scalar_operand(graph, node)
        if node.op == "div" and (other != node.inputs[0] or c == 0.0):
            return 1.0, value  # (a constant divided by x, or a division by zero)
        if c is None or graph.types[other] != graph.types[value]:  # (no broadcast by it)
            return 1.0, value
        return (1.0 / c if node.op == "div" else c), other

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        dtype = graph.types[node.output].dtype
        if node.op != "matmul" or not ir.is_float(dtype):
            return None
        (a, x), (b, y) = unscaled(node.inputs[0]), unscaled(node.inputs[1])
        if (x, y) == tuple(node.inputs):
            return None

        product = new.add_node("matmul", [x, y], name=node.name, **dict(node.attrs),
                               output=fresh_name(graph, new, f"{node.output}_unscaled"))
        scale = new.add_constant(fresh_name(graph, new, f"{node.output}_scale"),
                                 np.asarray(a * b, dtype=ir.numpy_dtype(dtype)))
        return new.add_node("mul", [product, scale], output=node.output)

    return rebuild(graph, rewrite)


def scalar_operand(graph: Graph, node: Node) -> tuple[float | None, str]:
    """(the value of a one-element constant input, the other input) of a binary node."""
    a, b = node.inputs
    for c, other in ((b, a), (a, b)):
        if c in graph.constants and graph.constants[c].size == 1:
            return float(graph.constants[c].reshape(-1)[0]), other
    return None, a


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-6 * max(1.0, abs(want))


def _erf_gelu_input(graph: Graph, producer: dict[str, Node], node: Node) -> str | None:
    """x of 0.5 * x * (1 + erf(x / sqrt(2))) (or x * sqrt(0.5) inside the erf)."""
    for x, plus in _halves(graph, producer, node):
        scaled = _one_plus(graph, producer, plus, "erf")
        if scaled is not None and scaled.op in ("div", "mul"):
            c, operand = scalar_operand(graph, scaled)
            want = math.sqrt(2.0) if scaled.op == "div" else math.sqrt(0.5)
            if operand == x and _near(c, want):
                return x
    return None


def _tanh_gelu_input(graph: Graph, producer: dict[str, Node], node: Node) -> str | None:
    """x of 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))) (the cube as pow(x, 3)
    or x * x * x)."""
    for x, plus in _halves(graph, producer, node):
        scaled = _one_plus(graph, producer, plus, "tanh")
        if scaled is None or scaled.op != "mul" or \
                not _near(scalar_operand(graph, scaled)[0], TANH_SCALE):
            continue
        total = producer.get(scalar_operand(graph, scaled)[1])
        if total is not None and total.op == "add" and any(
                v == x and _is_cubic_term(graph, producer, c, x)
                for v, c in (total.inputs, total.inputs[::-1])):
            return x
    return None


def _halves(graph: Graph, producer: dict[str, Node], node: Node) -> list[tuple[str, Node | None]]:
    """The (x, producer of p) pairs of the spellings 0.5 * (x * p) and (0.5 * x) * p that
    the product `node` may be."""
    if node.op != "mul":
        return []
    pairs = []
    half, rest = scalar_operand(graph, node)
    if _near(half, 0.5) and (inner := producer.get(rest)) is not None and inner.op == "mul":
        pairs = [(x, producer.get(p)) for x, p in (inner.inputs, inner.inputs[::-1])]
    for h, p in (node.inputs, node.inputs[::-1]):
        m = producer.get(h)
        if m is not None and m.op == "mul" and _near(scalar_operand(graph, m)[0], 0.5):
            pairs.append((scalar_operand(graph, m)[1], producer.get(p)))
    return pairs


def _one_plus(graph: Graph, producer: dict[str, Node], plus: Node | None,
              op: str) -> Node | None:
    """The producer of f's argument where `plus` is 1 + f(argument), f the unary `op`."""
    if plus is None or plus.op != "add" or not _near(scalar_operand(graph, plus)[0], 1.0):
        return None
    f = producer.get(scalar_operand(graph, plus)[1])
    return producer.get(f.inputs[0]) if f is not None and f.op == op else None


def _is_cubic_term(graph: Graph, producer: dict[str, Node], value: str, x: str) -> bool:
    """Whether `value` is 0.044715 * x^3."""
    cubed = producer.get(value)
    return cubed is not None and cubed.op == "mul" and \
        _near(scalar_operand(graph, cubed)[0], CUBE) and \
        _is_cube(graph, producer, scalar_operand(graph, cubed)[1], x)


def _is_cube(graph: Graph, producer: dict[str, Node], value: str, x: str) -> bool:
    """Whether `value` is pow(x, 3), x * x * x or (x * x) * x."""
    node = producer.get(value)
    if node is None:
        return False
    if node.op == "pow":
        return node.inputs[0] == x and _near(scalar_operand(graph, node)[0], 3.0) and \
            scalar_operand(graph, node)[1] == x
    if node.op != "mul":
        return False
    a, b = node.inputs
    square = producer.get(a if b == x else b) if x in (a, b) else None
    return square is not None and square.op == "mul" and list(square.inputs) == [x, x]


__all__ = ["recognize_activations", "scale_after_products", "unflatten_products",
           "scalar_operand"]
