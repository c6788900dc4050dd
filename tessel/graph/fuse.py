"""Operator fusion: partition a graph's nodes into groups that each become one kernel.

As TVM's FuseOps, by operator kind (tessel.graph.ops): an elementwise node joins the group
that produces one of its inputs when that value has no other consumer and is not a model
output, so conv + bias + batch norm + residual add + ReLU is one kernel and the intermediate
tensors never reach memory. Anchors (conv, dense, matmul) and reductions (pools, softmax,
layer norm) start groups and take elementwise consumers; injective nodes (transpose) join
elementwise or injective groups. A batched matmul of two activations (attention's scores and
weighted sum; OpDef.folds_transposes) also takes the transposes that feed it, as a prologue the
search space inlines into its reads, and one transpose of its result, folded into its stores
(a weight's layout is the packing's business, not fusion's): BERT's head splits and merge
stop being kernels of their own. Reshapes are views: a group of their own that the
runtime runs as a buffer alias, not a kernel. So is a concat along the leading non-unit axis
whose inputs are kernel results read by nothing else (SqueezeNet's fire modules): its
producers write into slices of its output and it does not run at all (`in_place`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from tessel.graph.ir import Graph, Node
from tessel.graph.ops import OPS

MAX_GROUP_NODES = 32  # a QDQ residual block's conv, requantization and add: 22
# kind of the group -> kinds of the nodes that may join it
_JOINS = {"anchor": {"elemwise"}, "reduce": {"elemwise"},
          "elemwise": {"elemwise", "injective"}, "injective": {"elemwise", "injective"}}


@dataclass
class FusedGroup:
    """Nodes that run as one kernel (or one view), in order; the last one's output is the
    group's only value used outside it."""
    nodes: list[Node] = field(default_factory=list)
    in_place: bool = False  # a concat whose inputs are written straight into its output

    @property
    def output(self) -> str:
        return self.nodes[-1].output

    @property
    def kind(self) -> str:
        """Its anchor's or reduction's kind when it has one (a prologue may come first), else
        its first node's."""
        kinds = [OPS[n.op].kind for n in self.nodes]
        return next((k for k in ("anchor", "reduce") if k in kinds), kinds[0])

    @property
    def anchor(self) -> Node | None:
        return next((n for n in self.nodes if OPS[n.op].kind == "anchor"), None)

    @property
    def is_view(self) -> bool:
        return self.kind == "view"

    @property
    def name(self) -> str:
        ops = "_".join(dict.fromkeys(n.op for n in self.nodes))
        return f"fused_{ops}" if len(self.nodes) > 1 else ops

    def external_inputs(self) -> list[str]:
        """Values read by the group and produced outside it, in order of first use."""
        inside = {n.output for n in self.nodes}
        return list(dict.fromkeys(v for n in self.nodes for v in n.inputs if v not in inside))


def fuse(graph: Graph) -> list[FusedGroup]:
    """The graph's nodes in groups, listed in an order that runs every group after the groups
    it reads from."""
    users = graph.consumers()
    owner: dict[str, FusedGroup] = {}
    groups: list[FusedGroup] = []
    for node in graph.nodes:
        group = _host(graph, node, owner, users)
        if group is not None:
            _take_siblings(graph, node, group, owner, users, groups)
        if group is None and OPS[node.op].folds_transposes:
            group = _prologue(graph, node, owner, users, groups)
        if group is None:
            group = FusedGroup()
            groups.append(group)
        group.nodes.append(node)
        owner[node.output] = group
    # a group runs when its last node may: after every producer of its external inputs
    position = {n.output: k for k, n in enumerate(graph.nodes)}
    groups = sorted(groups, key=lambda g: position[g.output])
    for group in groups:
        group.in_place = _concat_in_place(graph, group, owner, users)
    return groups


def _concat_in_place(graph: Graph, group: FusedGroup, owner: dict[str, FusedGroup],
                     users: dict[str, list[Node]]) -> bool:
    """Whether `group` is a lone concat whose inputs can be written by their producers
    straight into slices of its output: every axis before the concatenated one has extent 1
    (each input is then one contiguous run of the output: channels of a batch-1 NCHW or
    blocked tensor), and each input is a distinct kernel's result read by nothing else."""
    if len(group.nodes) != 1 or OPS[group.nodes[0].op].layout != "concat":  # (a join)
        return False
    node = group.nodes[0]
    shape = graph.types[node.output].shape
    if math.prod(shape[:node.attrs["axis"] % len(shape)]) != 1 or \
            len(set(node.inputs)) != len(node.inputs):
        return False
    return all(v in owner and not owner[v].is_view and not owner[v].in_place
               and _sole_use(graph, owner[v], v, users) for v in node.inputs)


def _host(graph: Graph, node: Node, owner: dict[str, FusedGroup],
          users: dict[str, list[Node]]) -> FusedGroup | None:
    """The group `node` joins, or None when it starts its own."""
    kind = OPS[node.op].kind
    for v in node.inputs:
        group = owner.get(v)
        if group is None or not _sole_use(graph, group, v, users):
            continue
        joins = _JOINS.get(group.kind, set())
        if group.kind == "anchor" and OPS[group.anchor.op].folds_transposes and all(
                OPS[n.op].kind != "injective"
                for n in group.nodes[group.nodes.index(group.anchor) + 1:]):
            joins = joins | {"injective"}  # one transpose of the product, after its epilogue
        if kind in joins:
            return group
    return None


def _take_siblings(graph: Graph, node: Node, host: FusedGroup, owner: dict[str, FusedGroup],
                   users: dict[str, list[Node]], groups: list[FusedGroup]) -> None:
    """An elementwise `node` joining an elementwise or injective `host` also takes the other
    such groups whose result only it reads: an LSTM step's c = f * c + i * g reads three
    gates, each a slice of the gate product and an activation, and ran as four kernels (a
    group's values other than its result are read inside it only, so another group that
    reads just `node`'s inputs depends on nothing of `host`'s). Joining an anchor's
    epilogue, it takes elementwise groups of its own shape (a prologue of the kernel)."""
    if OPS[node.op].kind != "elemwise" or host.kind not in ("elemwise", "injective", "anchor"):
        return
    shape = graph.types[node.output].shape
    for v in dict.fromkeys(node.inputs):
        other = owner.get(v)
        if other is None or other is host or other.kind not in ("elemwise", "injective") or \
                other.in_place or not _sole_use(graph, other, v, users) or \
                len(host.nodes) + len(other.nodes) >= MAX_GROUP_NODES:
            continue
        if host.kind == "anchor" and (other.kind != "elemwise" or
                                      graph.types[v].shape != shape):
            # an epilogue takes an elementwise input of its own shape (a quantized residual's
            # dequantization: a kernel and a float tensor in memory less), not one it would
            # recompute at every element it broadcasts to (a squeeze-excite gate)
            continue
        host.nodes[:0] = other.nodes
        groups.remove(other)
        for n in other.nodes:
            owner[n.output] = host


def _sole_use(graph: Graph, group: FusedGroup, v: str, users: dict[str, list[Node]]) -> bool:
    """Whether `v` is `group`'s result, read only by one node and not a model output, and the
    group has room for another node."""
    return (group.output == v and len(users[v]) == 1 and v not in graph.outputs
            and len(group.nodes) < MAX_GROUP_NODES)


def _prologue(graph: Graph, node: Node, owner: dict[str, FusedGroup],
              users: dict[str, list[Node]], groups: list[FusedGroup]) -> FusedGroup | None:
    """The groups of index remappings (and elementwise ops) that only feed `node`, merged into
    one for `node` to join; None when there are none."""
    feeding = []
    for v in dict.fromkeys(node.inputs):
        group = owner.get(v)
        if group is not None and group.kind in ("injective", "elemwise") and \
                any(OPS[n.op].kind == "injective" for n in group.nodes) and \
                _sole_use(graph, group, v, users) and group not in feeding:
            feeding.append(group)
    if not feeding or sum(len(g.nodes) for g in feeding) >= MAX_GROUP_NODES:
        return None
    merged = feeding[0]
    for other in feeding[1:]:
        merged.nodes.extend(other.nodes)
        groups.remove(other)
        for n in other.nodes:
            owner[n.output] = merged
    return merged


__all__ = ["FusedGroup", "fuse", "MAX_GROUP_NODES"]
