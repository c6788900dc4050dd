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
  first convolution needs no conversion. An 8-bit convolution (conv_integer: a quantized
  model's) does the same in conv_integer_blocked, its uint8 activations blocked between
  kernels; its plain input (the image) goes into blocks of 4 channels, zero-padded (3 -> 4),
  since the dot-product instructions sum 4 channels of a pixel. Depthwise convolutions
  (groups = channels) read and write the same blocks. The weight becomes a constant in the
  order the kernel reads it (the plain one is dropped): a weight is stored only in the
  layout its kernel reads.
- channels that whole vectors miss by at most a third (24 of 32, 1000 of 1008 with 16
  lanes) are padded up to them, as ONNX Runtime's NCHWc transformer does: the weight and
  bias get zero rows, so the extra channels come out 0 (or finite: a bias-free consumer
  reads them with zero weights), and the convolutions run full-width vectors where blocks
  of 8 would run half-width ones (MobileNet-v2's 56x56 layers on the Zen 5, 32 trials each,
  each call timed with its buffers flushed from the caches: the 96->24 projection 102 -> 57
  us, 144->24 with its residual add 169 -> 144 us, the 24->144 expansion 93 -> 85 us). Only
  operators that keep finite values finite (OpDef.finite) carry padded channels (clip, relu,
  sigmoid, +, -, *, ...; no exp, log, sqrt, pow); a value leaves the blocks without them
  (`from_blocked`'s channels).
- unary elementwise operators, binary ones whose operands are blocked alike or constants
  that broadcast along the channel axis (blocked with them), max pooling, the global
  average pool and joins along the channels (whole blocks side by side: SqueezeNet's fire
  modules) carry the layout through;
- every other reader of a blocked value (a reshape, a dense layer, a softmax, a model
  output) gets it converted back once (`from_blocked`; a reshape when the spatial size is
  1x1, as after the global pool).

Outputs are the same values as the plain graph's (the layout test runs the zoo both ways).
- a grouped convolution whose groups read and write whole blocks (NFNet's 6 groups of 128
  channels) runs blocked as it is; groups of g channels in and out that a block does not hold
  whole (ResNeXt's 32 groups of 4, RegNet's of 8) are merged m at a time into groups of one
  block b = m g (m <= MERGE_LIMIT), their weight block-diagonal: m times the multiply-adds in
  whole vectors, where the plain kernel ran one scalar chain per group.

- a 1-d convolution is a 2-d one of height 1 (convs_1d_as_2d), between views.

Convolutions whose channels neither divide into blocks of at least 4 nor pad to whole
vectors (3, 5, 18, ... with 16 lanes), grouped convolutions of unequal or larger groups
that no block holds, and 3-d convolutions stay plain.
"""
from __future__ import annotations

import math

import numpy as np

from tessel import ir
from tessel.graph.fold import fresh_name, prune, rebuild
from tessel.graph.ir import Graph, Node, check, unique_name
from tessel.graph.opdefs.blocked import block_array, block_weight, pad_channels
from tessel.graph.winograd import winograd_convs
from tessel.graph.ops import OPS

LAYOUTS = ("blocked", "winograd", "plain")
DEFAULT_LAYOUT = "winograd"  # blocked; the same wherever no 3x3 convolution qualifies
MIN_BLOCK = 4
INT_GROUP = 4  # input channels per block of an 8-bit conv's plain data (intrinsics' group)
PAD_LIMIT = 4 / 3  # channels padded to whole vectors when that adds at most a third of them
MERGE_LIMIT = 4  # small groups merged into whole blocks at most 4 at a time (4x the work)


def block_layouts(graph: Graph, lanes: int, pad: bool = True, whole_int8: int = 0) -> Graph:
    """`graph` (simplified: batch norms folded) with its convolutions in blocked channel
    layouts of `lanes` (or lanes / 2) channels, with `pad` channel counts padded to whole
    vectors where that adds at most a third; with `whole_int8`, an 8-bit convolution whose
    output channels are a multiple of it keeps them all in one block (NHWC), and reads its
    input so when the input channels are too (int8_rows); a new Graph, outputs and inputs
    unchanged."""
    check(isinstance(lanes, int) and lanes >= 1, f"block_layouts: lanes must be a positive "
                                                 f"int, got {lanes!r}")
    check(isinstance(whole_int8, int) and whole_int8 >= 0,
          f"block_layouts: whole_int8 must be an int >= 0, got {whole_int8!r}")
    return _Blocking(convs_1d_as_2d(graph), lanes, pad, whole_int8).run()


def convs_1d_as_2d(graph: Graph) -> Graph:
    """Each float 1-d convolution with a constant weight as a 2-d one of height 1 between two
    views, (N, C, L) -> (N, C, 1, L) -> (N, O, 1, L') -> (N, O, L'), so that it runs blocked
    (wav2vec 2.0's feature encoder and 128-tap positional convolution, Whisper's stem). A
    unary elementwise operator on such a view runs on the 2-d value, and a convolution that
    reads one reads the 2-d value: between two convolutions (Whisper's conv, GELU, conv) the
    activation stays 2-d and blocked (the GELU the first one's epilogue), where the view had
    it converted back to plain channels and the second convolution read single-channel
    blocks."""
    flat: dict[str, str] = {}  # an (N, C, L) view made here -> the (N, C, 1, L) value

    def view(new: Graph, value: str, output: str) -> str:
        out = new.add_node("reshape", [value], output=output, shape=graph.types[output].shape)
        flat[out] = value
        return out

    def rewrite(new: Graph, node: Node, inputs: list[str]) -> str | None:
        op = OPS[node.op]
        if op.kind == "elemwise" and op.n_inputs == (1, 1) and inputs[0] in flat:
            y = new.add_node(node.op, [flat[inputs[0]]], name=node.name,
                             output=fresh_name(graph, new, f"{node.output}_2d"), **node.attrs)
            return view(new, y, node.output)
        if node.op != "conv":
            return None
        x, w, *bias = inputs
        if len(new.types[x].shape) != 3 or w not in new.constants or \
                new.types[x].dtype != "float32":
            return None
        (n, c, length), a = new.types[x].shape, node.attrs
        x2 = flat.get(x) or new.add_node("reshape", [x], output=fresh_name(graph, new, f"{x}_2d"),
                                         shape=(n, c, 1, length))
        w2 = new.add_constant(fresh_name(graph, new, f"{w}_2d"), new.constants[w][:, :, None, :])
        y = new.add_node("conv", [x2, w2, *bias], name=node.name,
                         output=fresh_name(graph, new, f"{node.output}_2d"),
                         strides=(1, *a["strides"]), dilations=(1, *a["dilations"]),
                         pads=(0, a["pads"][0], 0, a["pads"][1]), groups=a["groups"])
        return view(new, y, node.output)

    return rebuild(graph, rewrite)


def int8_rows(target) -> int:
    """The channel multiple at which `target`'s 8-bit convolutions hold all their channels in
    one block (NHWC), 0 for none: 64 where the target multiplies int8 matrices in AMX tiles,
    whose rows are 64 consecutive bytes of the reduction (a pixel's channels, and its next
    pixels' for the window's columns: tessel.intrin.amx's taps intrinsic), where blocks of 16
    channels are only 16."""
    return 64 if target.has("amx_int8") else 0


def apply_layout(graph: Graph, layout: str, target) -> Graph:
    """The graph in `layout`, as compile_model and tune_model run it on `target` (its float32
    lanes make the blocks, int8_rows its 8-bit convolutions' whole blocks): "blocked",
    "winograd" (blocked, and the 3x3 convolutions over many tiles as Winograd F(4x4, 3x3):
    tessel.graph.winograd) or "plain"."""
    check(layout in LAYOUTS, f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "plain":
        return graph
    blocked = block_layouts(graph, target.vector_lanes("float32"),
                            whole_int8=int8_rows(target))
    return winograd_convs(blocked) if layout == "winograd" else blocked


class _Blocking:
    def __init__(self, graph: Graph, lanes: int, pad: bool = True, whole_int8: int = 0
                 ) -> None:
        self.old = graph
        self.old_producer, self.old_users = graph.producer(), graph.consumers()
        self.new = Graph(graph.name)
        for v in graph.inputs:
            self.new.add_input(v, graph.types[v].shape, graph.types[v].dtype)
        for name, value in graph.constants.items():
            self.new.add_constant(name, value)
        self.blocks = [b for b in (lanes, lanes // 2) if b >= MIN_BLOCK]
        self.pad = pad
        self.whole_int8 = whole_int8
        self.block: dict[str, int] = {}  # new blocked value -> its block
        self.channels: dict[str, int] = {}  # new blocked value -> its channels (unpadded)
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
        self.new.set_outputs([self.plain(renamed.get(v, v), name=v) for v in self.old.outputs])
        return prune(self.new)

    # ---- decisions ----

    def rewrite(self, node: Node, inputs: list[str]) -> str | None:
        """The blocked value computing `node` (its OpDef's layout rule), or None: plain."""
        op = OPS[node.op]
        if op.layout == "anchor":
            return self.conv(node, inputs)
        if not any(v in self.block for v in inputs):
            return None
        x = inputs[0]
        if op.blocked and len(self.new.types[x].shape) == 5:  # pools: their blocked forms
            return self.add(op.blocked[0], [x], node, self.block[x],
                            **{**node.attrs, **op.blocked[1]})
        if op.kind == "elemwise" and op.n_inputs == (1, 1):
            if self.padded(x) and not op.finite:
                return None
            return self.add(node.op, [x], node, self.block[x], **node.attrs)
        if op.kind == "elemwise" and op.layout == "broadcast":
            return self.binary(node, inputs)
        if op.layout == "concat" and node.attrs["axis"] == 1:
            return self.concat(node, inputs)
        return None

    def conv(self, node: Node, inputs: list[str]) -> str | None:
        """An anchor with a blocked form (a convolution), its weight packed as that reads it."""
        blocked = OPS[node.op].blocked
        x, w, *bias = inputs
        data = self.plain_shape(x)
        if blocked is None or len(data) != 4 or w not in self.new.constants:
            return None
        weight = self.new.constants[w]
        groups, (n, c, h, wd), o = node.attrs["groups"], data, weight.shape[0]
        attrs = {**node.attrs, **blocked[1]}
        whole = self.whole_int8 if ir.is_int(self.new.types[x].dtype) else 0
        if groups == 1:
            chosen = (o, o) if whole and o % whole == 0 else self.choose(o)
            if chosen is None:
                return None
            out_block, width = chosen
            if whole and c % whole == 0 and o % whole == 0:
                x = self.blocked(x, c)  # NHWC: the reduction's rows are a pixel's channels
            in_block = self.block.get(x, 1)
            if x not in self.block and ir.is_int(self.new.types[x].dtype):
                # an 8-bit conv's dot-product instructions sum groups of 4 input channels of
                # a pixel: its plain data (a network's 3-channel image) padded to blocks of 4
                in_block = INT_GROUP
                x = self.blocked(x, in_block)
            elif x not in self.block:  # NCHW is NCHW[1]c as it lies: a view
                x = self.add("reshape", [x], node, None, shape=(n, c, h, wd, 1))
            weight = pad_channels(weight, self.new.types[x].shape[1] * in_block)
        elif groups == c == o and weight.shape[1] == 1:  # depthwise: same blocks in and out
            chosen = (self.block[x], self.width(x)) if x in self.block else self.choose(c)
            if chosen is None:
                return None
            (out_block, width), in_block = chosen, 1
            x = self.blocked(x, out_block)
            attrs["groups"] = width
        else:  # grouped: each group whole blocks in and out, small groups merged
            padding = self.width(x) - c if self.padded(x) else 0
            regrouped = None if whole else self.regroup(weight, groups, padding)
            if regrouped is None or (padding and regrouped[2] != self.block[x]):
                return None
            weight, attrs["groups"], out_block = regrouped
            in_block, width = out_block, weight.shape[0]
            x = self.blocked(x, out_block)
        if width != o and bias:
            if bias[0] not in self.new.constants:
                return None  # (a computed bias: not padded here)
            bias = [self.new.add_constant(self.fresh(f"{bias[0]}_padded"), pad_channels(
                self.new.constants[bias[0]][None], width)[0])]
        packed = block_weight(pad_channels(weight.swapaxes(0, 1), width).swapaxes(0, 1),
                              in_block, out_block)
        w_blocked = self.new.add_constant(self.fresh(f"{w}_blocked"), packed)
        if groups == 1:
            x, w_blocked = self.ungate(node, x, w_blocked)
        return self.add(blocked[0], [x, w_blocked, *bias], node, out_block, **attrs)

    def regroup(self, weight: np.ndarray, groups: int, padding: int = 0
                ) -> tuple[np.ndarray, int, int] | None:
        """(weight, groups, block) of a grouped convolution in blocks: a block (whole or half
        vectors) that its groups' input and output channels divide into; else groups of g
        channels in and out merged m at a time into groups of one block, b = m g, their
        weight block-diagonal (ResNeXt's 32 groups of 4, RegNet's of 8 or 16): m times the
        multiply-adds, at most MERGE_LIMIT, in whole vectors. An input padded with `padding`
        zero channels (RegNet's 104 as 112) gets groups of its own for them, their outputs 0
        (zero weights): groups of g in and g out only. None: stays plain."""
        o, per_in = weight.shape[:2]
        per_out = o // groups
        if padding:
            if per_in != per_out or padding % per_in:
                return None
            weight = np.concatenate([weight, np.zeros((padding, *weight.shape[1:]),
                                                      weight.dtype)])
            o, groups = o + padding, groups + padding // per_in
        for b in self.blocks:  # whole vectors first, merged if need be; then half vectors
            if per_in % b == 0 and per_out % b == 0:
                return weight, groups, b
            m = b // per_in
            if per_in == per_out and b % per_in == 0 and groups % m == 0 and m <= MERGE_LIMIT:
                merged = np.zeros((o, m, per_in, *weight.shape[2:]), weight.dtype)
                merged[np.arange(o), np.arange(o) // per_in % m] = weight
                return merged.reshape(o, b, *weight.shape[2:]), groups // m, b
        return None

    def ungate(self, node: Node, x: str, weight: str) -> tuple[str, str]:
        """(data, weight) of convolution `node` reading `x`: when `x` is a batch-1 value
        times a gate per input channel (squeeze-and-excitation's x * sigmoid(...), blocked
        (1, C/b, 1, 1, b)) that only this convolution reads, the gate scales the weight's
        input channels instead, conv(x * g, w) = conv(x, w * g), when the weight is the
        smaller of the two: EfficientNet-B0's 112 x 112 x 32 gated activation was a kernel of
        its own, read and written whole to feed a 32 -> 16 projection."""
        old = self.old_producer.get(node.inputs[0])
        shape = self.new.types[x].shape
        if old is None or old.op != "mul" or len(self.old_users[old.output]) != 1 or \
                old.output in self.old.outputs or shape[0] != 1 or \
                math.prod(self.new.types[weight].shape) >= math.prod(shape):
            return x, weight
        gate = next(n for n in reversed(self.new.nodes) if n.output == x)
        if gate.op != "mul" or len(gate.inputs) != 2:  # x was re-laid out (a reshape)
            return x, weight
        gated = (1, shape[1], 1, 1, shape[-1])
        for data, g in (gate.inputs, gate.inputs[::-1]):
            if gate.op == "mul" and self.new.types[data].shape == shape and \
                    self.new.types[g].shape == gated:
                per_input = self.new.add_node("reshape", [g], output=self.fresh(f"{g}_in"),
                                              shape=(*gated, 1))
                return data, self.new.add_node("mul", [weight, per_input],
                                               output=self.fresh(f"{weight}_gated"))
        return x, weight

    def binary(self, node: Node, inputs: list[str]) -> str | None:
        """Operands blocked alike, constants along the channels (blocked with them), scalars,
        and values of the output's channels that broadcast over its pixels (a squeeze-and-
        excitation gate (N, C, 1, 1): blocked too, it broadcasts against (N, C/b, H, W, b))."""
        op = OPS[node.op]
        first = next(v for v in inputs if v in self.block)  # the others agree or stay plain
        block, width = self.block[first], self.width(first)
        out = self.old.types[node.output].shape
        if len(out) != 4:
            return None
        if any(self.padded(v) for v in inputs) and (
                not op.finite or any(inputs[k] not in self.new.constants for k in op.domains)):
            return None  # (a padded 0 may leave an input's domain: constants there pad with 1)
        operands = []
        for k, v in enumerate(inputs):
            shape = self.plain_shape(v)
            if v in self.new.constants and self.new.constants[v].size == 1:
                operands.append(v)
            elif not _per_channel(shape, out):
                return None
            elif v in self.block:
                if self.block[v] != block or self.width(v) != width:
                    return None
                operands.append(v)
            elif v in self.new.constants:
                value = self.new.constants[v].reshape((1,) * (4 - len(shape)) + shape)
                fill = 1.0 if k in op.domains else 0.0  # (a divisor: no 0)
                operands.append(self.new.add_constant(self.fresh(f"{v}_blocked"), block_array(
                    pad_channels(value, width, fill), block)))
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

    def choose(self, channels: int) -> tuple[int, int] | None:
        """(block, channels padded to whole blocks) of a convolution's output channels: whole
        vectors when they divide in, or pad to them adding at most a third, else half
        vectors when they divide in; None: plain."""
        if not self.blocks:
            return None
        full = -(-channels // self.blocks[0]) * self.blocks[0]
        if full == channels or (self.pad and full <= channels * PAD_LIMIT):
            return self.blocks[0], full
        return next(((b, channels) for b in self.blocks[1:] if channels % b == 0), None)

    def width(self, value: str) -> int:
        """The channels a blocked value holds, padding included."""
        shape = self.new.types[value].shape
        return shape[1] * shape[-1]

    def padded(self, value: str) -> bool:
        return value in self.block and self.width(value) != self.channels[value]

    # ---- building ----

    def add(self, op: str, inputs: list[str], node: Node, block: int | None,
            **attrs) -> str:
        out = self.new.add_node(op, inputs, name=node.name,
                                output=self.fresh(f"{node.output}_{op}"), **dict(attrs))
        if block is not None:
            self.block[out] = block
            self.channels[out] = self.old.types[node.output].shape[1]
        return out

    def plain(self, value: str, name: str | None = None) -> str:
        """`value` in the plain layout (converted once; named `name`, for model outputs)."""
        if value not in self.block:
            return value
        if value in self.plain_of and name in (None, self.plain_of[value]):
            return self.plain_of[value]
        shape = self.plain_shape(value)
        out = name or self.fresh(f"{value}_plain")
        if self.padded(value):
            self.new.add_node("from_blocked", [value], output=out, channels=shape[1])
        elif all(n == 1 for n in shape[2:]):
            self.new.add_node("reshape", [value], output=out, shape=shape)  # (N, C, 1, 1) as is
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
            self.channels[out] = self.new.types[plain].shape[1]
            self.blocked_of[key] = out
        return self.blocked_of[key]

    def plain_shape(self, value: str) -> tuple[int, ...]:
        shape = self.new.types[value].shape
        if value not in self.block:
            return shape
        n, _, *sp, _ = shape
        return (n, self.channels[value], *sp)

    def fresh(self, base: str) -> str:
        return unique_name(base, lambda v: v in self.new.types or v in self.old.types)


def _per_channel(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether a value of `shape` broadcasts against NCHW `out` keeping its channel axis: 4-d
    (or fewer dims, numpy-aligned) with out's channels, every other dim out's or 1."""
    if len(shape) > 4:
        return False
    full = (1,) * (4 - len(shape)) + tuple(shape)
    return full[1] == out[1] and all(n in (1, m) for n, m in zip(full, out))


__all__ = ["block_layouts", "apply_layout", "int8_rows", "LAYOUTS", "DEFAULT_LAYOUT"]
