"""Operator fusion: partition a graph's nodes into groups that each become one kernel.

As TVM's FuseOps, by operator kind (tessel.graph.ops): an elementwise node joins the group
that produces one of its inputs when that value has no other consumer and is not a model
output, so conv + bias + batch norm + residual add + ReLU is one kernel and the intermediate
tensors never reach memory. Anchors (conv, dense, matmul) and reductions (pools, softmax,
layer norm) start groups and take elementwise consumers; injective nodes (transpose) join
elementwise or injective groups. Reshapes are views: a group of their own that the executor
runs as a buffer alias, not a kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tessel.graph.ir import Graph, Node
from tessel.graph.ops import OPS

MAX_GROUP_NODES = 16
# kind of the group's first node -> kinds of the nodes that may join it
_JOINS = {"anchor": {"elemwise"}, "reduce": {"elemwise"},
          "elemwise": {"elemwise", "injective"}, "injective": {"elemwise", "injective"}}


@dataclass
class FusedGroup:
    """Nodes that run as one kernel (or one view), in order; the last one's output is the
    group's only value used outside it."""
    nodes: list[Node] = field(default_factory=list)

    @property
    def output(self) -> str:
        return self.nodes[-1].output

    @property
    def kind(self) -> str:
        return OPS[self.nodes[0].op].kind

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
        if group is None:
            group = FusedGroup()
            groups.append(group)
        group.nodes.append(node)
        owner[node.output] = group
    # a group runs when its last node may: after every producer of its external inputs
    position = {n.output: k for k, n in enumerate(graph.nodes)}
    return sorted(groups, key=lambda g: position[g.output])


def _host(graph: Graph, node: Node, owner: dict[str, FusedGroup],
          users: dict[str, list[Node]]) -> FusedGroup | None:
    """The group `node` joins, or None when it starts its own."""
    kind = OPS[node.op].kind
    for v in node.inputs:
        group = owner.get(v)
        if (group is not None and group.output == v and len(users[v]) == 1
                and v not in graph.outputs and kind in _JOINS.get(group.kind, ())
                and len(group.nodes) < MAX_GROUP_NODES):
            return group
    return None


__all__ = ["FusedGroup", "fuse", "MAX_GROUP_NODES"]
