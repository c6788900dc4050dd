"""Blocked channel layouts as a graph decision: convolutions in NCHW[b]c, the layout carried
through the operators between them, conversions only at the network's boundaries.

    graph = block_layouts(simplify(from_onnx("mobilenet_v2.onnx")), lanes=16)

A convolution in a blocked layout (tessel.graph.opdefs.blocked) keeps b output channels of
a pixel next to each other: its register tile is rows of pixels by one vector of channels,
its stores and its depthwise taps are whole vectors, its stride-2 windows step over vectors.
Vendor libraries (oneDNN, ONNX Runtime's NCHWc transformer) run CNNs this way; a plain NCHW
depthwise convolution vectorizes along a row of pixels, where a stride-2 window is a gather.

The pass walks the nodes in order and decides each value's layout:

- a 2-d convolution with groups=1 writes blocked output when its output channels divide
  into blocks (b = the target's float lanes, else half of them, at least 4); it reads a
  blocked input as it is and a plain one as NCHW[1]c (a reshape, no copy), so a network's
  first convolution needs no conversion. Depthwise convolutions (groups = channels) read
  and write the same blocks. The weight becomes a constant in the order the kernel reads it
  (the plain one is dropped): a weight is stored only in the layout its kernel reads.
- unary elementwise operators, binary ones whose operands are blocked alike or constants
  that broadcast along the channel axis (blocked with them), max pooling, the global
  average pool and joins along the channels (whole blocks side by side: SqueezeNet's fire
  modules) carry the layout through;
- every other reader of a blocked value (a reshape, a dense layer, a softmax, a model
  output) gets it converted back once (`from_blocked`; a reshape when the spatial size is
  1x1, as after the global pool).

Outputs are the same values as the plain graph's (the layout test runs the zoo both ways).
Convolutions whose channels do not divide into blocks of at least 4 (3, 5, 18, ...), grouped
convolutions other than depthwise, 1-d and 3-d convolutions stay plain.
"""
from __future__ import annotations

from tessel.graph.fold import prune
from tessel.graph.ir import Graph, Node, check, unique_name
from tessel.graph.opdefs.blocked import block_array, block_weight
from tessel.graph.winograd import winograd_convs
from tessel.graph.ops import OPS

LAYOUTS = ("blocked", "winograd", "plain")
DEFAULT_LAYOUT = "winograd"  # blocked; the same wherever no 3x3 convolution qualifies
MIN_BLOCK = 4


def block_layouts(graph: Graph, lanes: int) -> Graph:
    """`graph` (simplified: batch norms folded) with its convolutions in blocked channel
    layouts of `lanes` (or lanes / 2) channels; a new Graph, outputs and inputs unchanged."""
    check(isinstance(lanes, int) and lanes >= 1, f"block_layouts: lanes must be a positive "
                                                 f"int, got {lanes!r}")
    return _Blocking(graph, lanes).run()


def apply_layout(graph: Graph, layout: str, lanes: int) -> Graph:
    """The graph in `layout`, as compile_model and tune_model run it: "blocked", "winograd"
    (blocked, and the 3x3 convolutions over many tiles as Winograd F(4x4, 3x3):
    tessel.graph.winograd) or "plain"."""
    check(layout in LAYOUTS, f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "plain":
        return graph
    blocked = block_layouts(graph, lanes)
    return winograd_convs(blocked) if layout == "winograd" else blocked


class _Blocking:
    def __init__(self, graph: Graph, lanes: int) -> None:
        self.old = graph
        self.new = Graph(graph.name)
        for v in graph.inputs:
            self.new.add_input(v, graph.types[v].shape, graph.types[v].dtype)
        for name, value in graph.constants.items():
            self.new.add_constant(name, value)
        self.blocks = [b for b in (lanes, lanes // 2) if b >= MIN_BLOCK]
        self.block: dict[str, int] = {}  # new blocked value -> its block
        self.plain_of: dict[str, str] = {}  # blocked value -> its plain conversion
        self.blocked_of: dict[tuple[str, int], str] = {}  # (plain value, block) -> blocked

    def run(self) -> Graph:
        renamed: dict[str, str] = {}
        for node in self.old.nodes:
            inputs = [renamed.get(v, v) for v in node.inputs]
            out = self.rewrite(node, inputs)
            if out is None:
                out = self.new.add_node(node.op, [self.plain(v) for v in inputs],
                                        name=node.name, output=node.output, **dict(node.attrs))
            renamed[node.output] = out
        self.new.set_outputs([self.plain(renamed[v], name=v) for v in self.old.outputs])
        return prune(self.new)

    # ---- decisions ----

    def rewrite(self, node: Node, inputs: list[str]) -> str | None:
        """The blocked value computing `node`, or None to copy it plain."""
        op = OPS[node.op]
        if node.op == "conv":
            return self.conv(node, inputs)
        if not any(v in self.block for v in inputs):
            return None
        x = inputs[0]
        if node.op == "max_pool" and len(self.new.types[x].shape) == 5:
            return self.add("max_pool_blocked", [x], node, self.block[x], **node.attrs)
        if node.op == "global_avg_pool" and len(self.new.types[x].shape) == 5:
            return self.add("reduce_mean", [x], node, self.block[x], axes=(2, 3),
                            keepdims=True)
        if op.kind == "elemwise" and op.n_inputs == (1, 1):
            return self.add(node.op, [x], node, self.block[x], **node.attrs)
        if op.kind == "elemwise" and op.layout == "broadcast":
            return self.binary(node, inputs)
        if node.op == "concat" and node.attrs["axis"] == 1:
            return self.concat(node, inputs)
        return None

    def conv(self, node: Node, inputs: list[str]) -> str | None:
        x, w, *bias = inputs
        data = self.plain_shape(x)
        if len(data) != 4 or w not in self.new.constants:
            return None
        weight = self.new.constants[w]
        groups, (n, c, h, wd), o = node.attrs["groups"], data, weight.shape[0]
        if groups == 1:
            out_block = self.choose(o)
            if out_block is None:
                return None
            in_block = self.block.get(x, 1)
            if x not in self.block:  # NCHW is NCHW[1]c as it lies: a view
                x = self.add("reshape", [x], node, None, shape=(n, c, h, wd, 1))
            packed = block_weight(weight, in_block, out_block)
        elif groups == c == o and weight.shape[1] == 1:  # depthwise: same blocks in and out
            out_block = self.block.get(x) or self.choose(c)
            if out_block is None:
                return None
            x = self.blocked(x, out_block)
            packed = block_weight(weight, 1, out_block)
        else:
            return None
        w_blocked = self.new.add_constant(self.fresh(f"{w}_blocked"), packed)
        return self.add("conv_blocked", [x, w_blocked, *bias], node, out_block,
                        **node.attrs)

    def binary(self, node: Node, inputs: list[str]) -> str | None:
        """Operands blocked alike, constants along the channels (blocked with them), scalars,
        and values of the output's channels that broadcast over its pixels (a squeeze-and-
        excitation gate (N, C, 1, 1): blocked too, it broadcasts against (N, C/b, H, W, b))."""
        block = next(self.block[v] for v in inputs if v in self.block)
        out = self.old.types[node.output].shape
        if len(out) != 4:
            return None
        operands = []
        for v in inputs:
            shape = self.plain_shape(v)
            if v in self.new.constants and self.new.constants[v].size == 1:
                operands.append(v)
            elif not _per_channel(shape, out):
                return None
            elif v in self.block:
                if self.block[v] != block:
                    return None
                operands.append(v)
            elif v in self.new.constants:
                value = self.new.constants[v].reshape((1,) * (4 - len(shape)) + shape)
                operands.append(self.new.add_constant(self.fresh(f"{v}_blocked"),
                                                      block_array(value, block)))
            else:
                operands.append(self.blocked(v, block))
        return self.add(node.op, operands, node, block, **node.attrs)

    def concat(self, node: Node, inputs: list[str]) -> str | None:
        """A join along the channels of inputs that divide into the first blocked one's
        blocks: whole blocks side by side."""
        block = next(self.block[v] for v in inputs if v in self.block)
        shapes = [self.plain_shape(v) for v in inputs]
        if any(len(s) != 4 or s[1] % block for s in shapes):
            return None
        return self.add("concat", [self.blocked(v, block) for v in inputs], node, block,
                        axis=1)

    def choose(self, channels: int) -> int | None:
        return next((b for b in self.blocks if channels % b == 0), None)

    # ---- building ----

    def add(self, op: str, inputs: list[str], node: Node, block: int | None,
            **attrs) -> str:
        out = self.new.add_node(op, inputs, name=node.name,
                                output=self.fresh(f"{node.output}_{op}"), **dict(attrs))
        if block is not None:
            self.block[out] = block
        return out

    def plain(self, value: str, name: str | None = None) -> str:
        """`value` in the plain layout (converted once; named `name`, for model outputs)."""
        if value not in self.block:
            return value
        if value in self.plain_of and name in (None, self.plain_of[value]):
            return self.plain_of[value]
        shape = self.plain_shape(value)
        out = name or self.fresh(f"{value}_plain")
        if all(n == 1 for n in shape[2:]):  # (N, C/b, 1, 1, b) lies as (N, C, 1, 1)
            self.new.add_node("reshape", [value], output=out, shape=shape)
        else:
            self.new.add_node("from_blocked", [value], output=out)
        self.plain_of.setdefault(value, out)
        return out

    def blocked(self, value: str, block: int) -> str:
        """`value` (plain or blocked) in blocks of `block` channels."""
        if self.block.get(value) == block:
            return value
        plain = self.plain(value)
        key = (plain, block)
        if key not in self.blocked_of:
            out = self.new.add_node("to_blocked", [plain], output=self.fresh(f"{plain}_b{block}"),
                                    block=block)
            self.block[out] = block
            self.blocked_of[key] = out
        return self.blocked_of[key]

    def plain_shape(self, value: str) -> tuple[int, ...]:
        shape = self.new.types[value].shape
        if value not in self.block:
            return shape
        n, cb, *sp, b = shape
        return (n, cb * b, *sp)

    def fresh(self, base: str) -> str:
        return unique_name(base, lambda v: v in self.new.types or v in self.old.types)


def _per_channel(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether a value of `shape` broadcasts against NCHW `out` keeping its channel axis: 4-d
    (or fewer dims, numpy-aligned) with out's channels, every other dim out's or 1."""
    if len(shape) > 4:
        return False
    full = (1,) * (4 - len(shape)) + tuple(shape)
    return full[1] == out[1] and all(n in (1, m) for n, m in zip(full, out))


__all__ = ["block_layouts", "apply_layout", "LAYOUTS", "DEFAULT_LAYOUT"]
