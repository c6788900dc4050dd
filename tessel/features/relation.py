"""Context-relation features (AutoTVM section 4, appendix A.2.2): the transferable ones.

Take the loop-context matrix Z of the loops on the longest loop chain (rows: loops; columns:
touch count, reuse ratio, top-down product, all log2(1 + x)) for each buffer touched at the
innermost loop of the chain. For log2-spaced thresholds b_t,

    R_t(i, j) = max { Z[k, i] : Z[k, j] < b_t }        (0 when no loop qualifies)

for the pairs (i, j) = (reuse, touch count), (touch count, reuse), (top-down, touch count),
(touch count, top-down): how much reuse (or how many outer iterations) a loop level offers
while its touched data still fits under a given size. The vector does not depend on the
depth of the nest or on which loop is which, so it carries over between operators.

The relations alone cannot see loop annotations, which decide CPU performance as much as
reuse does, so the vector ends with an equally invariant annotation summary over the chain:
for parallel, vectorized, unrolled and thread-bound loops, the log product of their lengths
and the log bottom-up product at the innermost of them; and the log auto-unroll step.
"""
from __future__ import annotations

import numpy as np

from tessel.features.analysis import KIND_INDEX, Nest
from tessel.features.loop_context import MAX_BUFFERS, chain_slots, log2p
from tessel.features.walker import analyze
from tessel.ir import PrimFunc

THRESHOLDS = 1.5 + 2.0 * np.arange(16)  # log2 of b_t: about 2^1.5 ... 2^31.5
COUNT, REUSE, TOP_DOWN = 0, 1, 2
PAIRS = ((REUSE, COUNT), (COUNT, REUSE), (TOP_DOWN, COUNT), (COUNT, TOP_DOWN))
ANNOTATED = ("parallel", "vectorized", "unrolled", "thread_binding")
SUMMARY_WIDTH = 2 * len(ANNOTATED) + 1


def width(max_buffers: int = MAX_BUFFERS) -> int:
    return max_buffers * len(PAIRS) * len(THRESHOLDS) + SUMMARY_WIDTH


def annotation_summary(nest: Nest, chain: list[int]) -> np.ndarray:
    """Per annotated kind: log product of lengths, log bottom-up at the innermost; then the
    log auto-unroll step, over the loops of `chain`."""
    out = np.zeros(SUMMARY_WIDTH)
    if not chain:
        return out
    kinds = nest.kinds[chain]
    for a, kind in enumerate(ANNOTATED):
        where = np.flatnonzero(kinds == KIND_INDEX[kind])
        if len(where):
            loops = [chain[w] for w in where]
            out[2 * a] = log2p(np.prod(nest.extents[loops]))
            out[2 * a + 1] = log2p(nest.bottom_up[loops[-1]])
    out[-1] = log2p(nest.unroll_steps[chain].max())
    return out


def relation(z: np.ndarray, i: int, j: int, thresholds: np.ndarray = THRESHOLDS) -> np.ndarray:
    """R_t(i, j) for every threshold, for z of shape [buffers, loops, columns]."""
    below = z[:, None, :, j] < thresholds[None, :, None]            # [buf, t, loop]
    return np.where(below, z[:, None, :, i], 0.0).max(axis=2, initial=0.0)


def curve(func: PrimFunc, max_buffers: int = MAX_BUFFERS) -> np.ndarray:
    """The relation features of `func` as one vector of `width(max_buffers)` floats."""
    nest = analyze(func)
    chain = list(nest.longest_chain)
    out = np.zeros((max_buffers, len(PAIRS), len(THRESHOLDS)))
    slots = chain_slots(nest, tuple(chain))[:max_buffers]
    summary = annotation_summary(nest, chain)
    if len(slots) == 0:
        return np.concatenate([out.ravel(), summary])
    count, reuse, _ = nest.touch
    z = np.empty((len(slots), len(chain), 3))
    z[:, :, COUNT] = log2p(count[np.ix_(chain, slots)]).T
    z[:, :, REUSE] = log2p(reuse[np.ix_(chain, slots)]).T
    z[:, :, TOP_DOWN] = log2p(nest.top_down[chain])[None, :]
    for p, (i, j) in enumerate(PAIRS):
        out[:len(slots), p] = relation(z, i, j)
    return np.concatenate([out.ravel(), summary])
