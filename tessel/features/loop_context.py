"""Loop-context features (AutoTVM, appendix Table 2) and their flattened forms.

Each loop gets a context row:

    [log length, one-hot kind (serial, parallel, vectorized, unrolled, thread axis),
     log top-down product, log bottom-up product, log auto-unroll step,
     then per buffer slot: log touch count, log reuse ratio, signed log stride]

All magnitudes are log2(1 + x) (a stride keeps its sign), so a missing buffer or loop is 0.
Buffer slots follow first access in program order (a store's buffer before its loads), so
slot k means the same thing for candidates of one workload whatever the names.

- `itervar(func)`: the rows of every loop in program order, padded/truncated to
  `max_loops` and flattened (AutoTVM's "itervar" feature).
- `flat(func)`: the rows of the loops on the longest loop chain only, innermost first, so
  innermost loops line up across nests of different depth ("flattened loop context").
- `loop_tree(func)`: (rows, parents) of every loop, the TreeGRU's input.
"""
from __future__ import annotations

import numpy as np

from tessel.features.analysis import KINDS, Nest
from tessel.features.walker import analyze
from tessel.ir import PrimFunc

MAX_LOOPS = 20
FLAT_LOOPS = 12
MAX_BUFFERS = 5
BASE_WIDTH = 1 + len(KINDS) + 3
PER_BUFFER = 3


def row_width(max_buffers: int = MAX_BUFFERS) -> int:
    return BASE_WIDTH + PER_BUFFER * max_buffers


def log2p(x: np.ndarray) -> np.ndarray:
    return np.log2(1.0 + np.abs(x)) * np.sign(x)


def loop_rows(nest: Nest, max_buffers: int = MAX_BUFFERS,
              slots: np.ndarray | None = None) -> np.ndarray:
    """[n_loops, row_width] context rows; `slots` picks and orders the buffer slots."""
    n = nest.n_loops
    out = np.zeros((n, row_width(max_buffers)))
    if n == 0:
        return out
    out[:, 0] = log2p(nest.extents)
    out[np.arange(n), 1 + nest.kinds] = 1.0
    k = 1 + len(KINDS)
    out[:, k] = log2p(nest.top_down)
    out[:, k + 1] = log2p(nest.bottom_up)
    out[:, k + 2] = log2p(nest.unroll_steps)
    count, reuse, stride = nest.touch
    if slots is None:
        slots = np.arange(min(nest.n_buffers, max_buffers))
    slots = slots[:max_buffers]
    m = len(slots)
    buf = out[:, BASE_WIDTH:].reshape(n, max_buffers, PER_BUFFER)
    buf[:, :m, 0] = log2p(count[:, slots])
    buf[:, :m, 1] = log2p(reuse[:, slots])
    buf[:, :m, 2] = log2p(stride[:, slots])
    return out


def pad_rows(rows: np.ndarray, max_rows: int) -> np.ndarray:
    out = np.zeros((max_rows, rows.shape[1]))
    k = min(max_rows, len(rows))
    out[:k] = rows[:k]
    return out.ravel()


def chain_slots(nest: Nest, chain: tuple[int, ...]) -> np.ndarray:
    """Buffer slots touched at the innermost loop of `chain`, in slot order."""
    if not chain:
        return np.zeros(0, dtype=np.int64)
    count = nest.touch[0][chain[-1]]
    return np.flatnonzero(count > 0)


def itervar(func: PrimFunc, max_loops: int = MAX_LOOPS,
            max_buffers: int = MAX_BUFFERS) -> np.ndarray:
    """Context rows of all loops in program order, flattened."""
    return pad_rows(loop_rows(analyze(func), max_buffers), max_loops)


def flat(func: PrimFunc, max_loops: int = FLAT_LOOPS, max_buffers: int = MAX_BUFFERS) -> np.ndarray:
    """Context rows along the longest loop chain, innermost loop first, flattened."""
    nest = analyze(func)
    chain = nest.longest_chain
    rows = loop_rows(nest, max_buffers, chain_slots(nest, chain))
    return pad_rows(rows[list(chain[::-1])], max_loops)


def loop_tree(func: PrimFunc, max_buffers: int = MAX_BUFFERS) -> tuple[np.ndarray, np.ndarray]:
    """(context rows [n_loops, width], parent index per loop or -1) of every loop."""
    nest = analyze(func)
    return loop_rows(nest, max_buffers), nest.parents.copy()
