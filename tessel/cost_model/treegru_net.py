"""The TreeGRU network (PyTorch; imported only by `treegru.py` when a model is made).

A program is its loop tree; each loop's input is its loop-context row (the GBT features of
that loop, so the model carries over to unseen loop variables: the paper's "context encoded
TreeGRU"). Nodes are encoded bottom-up with a child-sum GRU cell, h = GRU(embed(x), sum of
the children's h). Every node's h is then softly scattered into m memory slots,
out_i = softmax(W^T h)_i * h, the scattered vectors of all loops of a program are summed,
and a linear layer maps the m*hidden embedding to the score. Trees are batched level by
level (all nodes of one height in one GRU call), so a batch costs one call per tree height.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

INPUT_SCALE = 0.1  # context rows are log2 magnitudes up to ~30


@dataclass(frozen=True)
class TreeBatch:
    x: torch.Tensor        # [nodes, features]
    parent: torch.Tensor   # [nodes] parent node, or `nodes` (a sink row) at top level
    program: torch.Tensor  # [nodes] which program of the batch
    levels: tuple[torch.Tensor, ...]  # node indices by height, leaves first
    size: int              # programs in the batch


def heights(parents: np.ndarray) -> np.ndarray:
    """Height of each node (leaves 0) for parents given in pre-order."""
    h = np.zeros(len(parents), dtype=np.int64)
    for i in range(len(parents) - 1, -1, -1):
        if parents[i] >= 0:
            h[parents[i]] = max(h[parents[i]], h[i] + 1)
    return h


def make_batch(trees: list[tuple[np.ndarray, np.ndarray]]) -> TreeBatch:
    """Batch (rows, parents) trees; a program without loops becomes one zero node."""
    xs, parents, programs, hs, offset = [], [], [], [], 0
    for k, (rows, par) in enumerate(trees):
        if len(rows) == 0:
            rows, par = np.zeros((1, rows.shape[1])), np.array([-1])
        xs.append(rows)
        parents.append(np.where(par >= 0, par + offset, -1))
        programs.append(np.full(len(rows), k))
        hs.append(heights(par))
        offset += len(rows)
    parent = np.concatenate(parents)
    parent = np.where(parent >= 0, parent, offset)
    h = np.concatenate(hs)
    levels = tuple(torch.from_numpy(np.flatnonzero(h == lv)) for lv in range(h.max() + 1))
    x = torch.from_numpy(np.concatenate(xs) * INPUT_SCALE).float()
    return TreeBatch(x, torch.from_numpy(parent), torch.from_numpy(np.concatenate(programs)),
                     levels, len(trees))


class TreeGRUNet(nn.Module):
    def __init__(self, in_dim: int, emb_dim: int, hidden: int, slots: int) -> None:
        super().__init__()
        self.hidden, self.slots = hidden, slots
        self.embed = nn.Linear(in_dim, emb_dim)
        self.cell = nn.GRUCell(emb_dim, hidden)
        self.scatter = nn.Linear(hidden, slots, bias=False)
        self.head = nn.Linear(slots * hidden, 1)

    def encode(self, b: TreeBatch) -> torch.Tensor:
        """h of every node, computed bottom-up."""
        n = b.x.shape[0]
        e = torch.tanh(self.embed(b.x))
        child_sum = torch.zeros(n + 1, self.hidden)
        h_all = torch.zeros(n, self.hidden)
        for idx in b.levels:
            h = self.cell(e[idx], child_sum[idx])
            h_all = h_all.index_copy(0, idx, h)
            child_sum = child_sum.index_add(0, b.parent[idx], h)
        return h_all

    def forward(self, b: TreeBatch) -> torch.Tensor:
        h = self.encode(b)
        w = torch.softmax(self.scatter(h), dim=1)                     # [nodes, slots]
        scattered = (w.unsqueeze(2) * h.unsqueeze(1)).flatten(1)      # [nodes, slots*hidden]
        emb = torch.zeros(b.size, self.slots * self.hidden).index_add(0, b.program, scattered)
        return self.head(emb).squeeze(1)


def pairwise_rank_loss(pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean of log(1 + exp(-sign(y_i - y_j) (pred_i - pred_j))) over pairs with y_i != y_j."""
    sign = torch.sign(y.unsqueeze(1) - y.unsqueeze(0))
    diff = pred.unsqueeze(1) - pred.unsqueeze(0)
    mask = sign != 0
    if not mask.any():
        return pred.sum() * 0.0
    return nn.functional.softplus(-sign[mask] * diff[mask]).mean()
