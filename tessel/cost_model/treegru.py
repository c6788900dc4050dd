"""TreeGRU cost model (AutoTVM section 3.1 and 4): a neural model over the loop tree.

PyTorch is optional (`pip install torch`, or tessel[torch]); it is imported when a model is
made, with a clear error if missing. The network is in `treegru_net.py`. Training restarts
from a seeded initialization on every update and runs `epochs` passes of Adam over batches
drawn within one workload, with the pairwise rank loss (default) or squared error on
normalized throughput. Defaults are small (embedding and hidden size 32, 8 memory slots)
so a few hundred records train in about a second on a CPU; the paper used 128. Torch runs
on one thread while the model trains or predicts: the batches are tiny, and with the
measurement worker on the other core, more threads only wait on each other (20x slower).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

from tessel import features
from tessel.cost_model.base import CostModel, check, no_margin, normalize
from tessel.extras import require
from tessel.measure import MeasureCandidate


def import_net():
    require("torch", "the treegru cost model")
    from tessel.cost_model import treegru_net
    return treegru_net


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    import torch
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class TreeGRUModel(CostModel):
    """Context-encoded TreeGRU over `features.loop_tree`; see treegru_net.py."""

    def __init__(self, objective: str = "rank", epochs: int = 30, batch_size: int = 64,
                 lr: float = 1e-2, emb_dim: int = 32, hidden: int = 32, slots: int = 8,
                 seed: int = 0) -> None:
        super().__init__()
        check(objective in ("rank", "reg"), f"unknown objective {objective!r}; use 'rank' or "
                                            "'reg'")
        import_net()
        self.objective, self.epochs, self.batch_size, self.lr = objective, epochs, batch_size, lr
        self.dims = (emb_dim, hidden, slots)
        self.seed = seed
        self.net = None

    def encode(self, candidates: Sequence[MeasureCandidate]) -> list[Any]:
        return [features.loop_tree(c.func) for c in candidates]

    def _batches(self, keys: list[str], rng: np.random.Generator) -> list[np.ndarray]:
        """Shuffled index batches, each within one workload."""
        keys_arr = np.asarray(keys)
        out = []
        for key in np.unique(keys_arr):
            idx = rng.permutation(np.flatnonzero(keys_arr == key))
            out += [idx[i:i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        return [out[i] for i in rng.permutation(len(out))]

    def fit(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray,
            base_margin: np.ndarray | None = None) -> None:
        no_margin(self, base_margin)
        import torch
        with one_thread(), torch.random.fork_rng(devices=[]):  # leave global torch RNG alone
            torch.manual_seed(self.seed)
            self._train(inputs, keys, throughputs)

    def _train(self, inputs: list[Any], keys: list[str], throughputs: np.ndarray) -> None:
        net_mod = import_net()
        import torch
        rng = np.random.default_rng(self.seed)
        self.net = net_mod.TreeGRUNet(inputs[0][0].shape[1], *self.dims)
        opt = torch.optim.Adam(self.net.parameters(), lr=self.lr)
        y_all = torch.from_numpy(normalize(keys, throughputs)).float()
        self.net.train()
        for _ in range(self.epochs):
            for idx in self._batches(keys, rng):
                pred = self.net(net_mod.make_batch([inputs[i] for i in idx]))
                y = y_all[torch.from_numpy(idx)]
                loss = (net_mod.pairwise_rank_loss(pred, y) if self.objective == "rank"
                        else torch.mean((pred - y) ** 2))
                opt.zero_grad()
                loss.backward()
                opt.step()
        self.net.eval()

    def score(self, inputs: list[Any], base_margin: np.ndarray | None = None) -> np.ndarray:
        """Network outputs; zeros before any training."""
        no_margin(self, base_margin)
        if self.net is None:
            return np.zeros(len(inputs))
        net_mod = import_net()
        import torch
        out = []
        with torch.no_grad(), one_thread():
            for i in range(0, len(inputs), 512):
                out.append(self.net(net_mod.make_batch(inputs[i:i + 512])).numpy())
        return np.concatenate(out).astype(np.float64)
