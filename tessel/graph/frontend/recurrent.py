"""Recurrent layers (LSTM, GRU, the plain RNN) unrolled over time into canonical operators,
for both front ends: `Cell`, `Direction`, `layer`, `join`.

Shapes are static, so a recurrence is a chain of steps built at import. The input
projection of every step of a direction is one dense (x W^T + b, one GEMM of seq * batch
rows); each step gathers its rows (a gather at a constant index tensor, the same kernel for
every step, where a slice would be one kernel per offset), adds the hidden projection (a
dense of h with R: the add is its epilogue) and computes the gates elementwise. Steps are
alike, so a model of any length has a handful of distinct kernels (tuning tasks). A zero
initial state (None) drops the first step's hidden projection.

The equations are ONNX's (LSTM, GRU, RNN of the ONNX operator spec); gates sit in the
weights' row blocks in the order the `Cell` names (ONNX's "iofc" and "zrh", torch's "ifco"
and "rzh"). A torch GRU is ONNX's with linear_before_reset.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tessel.graph.frontend.context import Const, GraphBuilder, Value

GATES = {"lstm": 4, "gru": 3, "rnn": 1}  # row blocks of W and R per kind
ACTIVATIONS = {"lstm": ("sigmoid", "tanh", "tanh"), "gru": ("sigmoid", "tanh"),
               "rnn": ("tanh",)}  # the defaults: f, g[, h] of the spec


@dataclass(frozen=True)
class Cell:
    """What one step of a direction computes: the `kind` ("lstm", "gru", "rnn"), the order of
    the gates' row blocks in W and R (one letter each: LSTM i, o, f, c; GRU z, r, h; RNN h),
    the activations f, g[, h] (tessel unary operators), the clip of every activation's input
    (None: none), GRU's linear_before_reset and LSTM's input_forget (f = 1 - i)."""
    kind: str
    gates: str
    activations: tuple[str, ...]
    clip: float | None = None
    linear_before_reset: bool = False
    input_forget: bool = False


@dataclass(frozen=True)
class Direction:
    """One direction of a layer: its cell, weights W (G*H, I) and R (G*H, H), biases of W and
    R (G*H,) or None, LSTM peepholes (3H,: i, o, f) or None, initial h and c (batch, H) or
    None for zeros, and whether it runs from the last step to the first."""
    cell: Cell
    w: Value
    r: Value
    w_bias: Value | None = None
    r_bias: Value | None = None
    peephole: Value | None = None
    h0: Value | None = None
    c0: Value | None = None
    reverse: bool = False


@dataclass
class LayerOutput:
    """Per direction: the hidden state after each step in time order, the last h and c."""
    hs: list[list[Value]]
    h_last: list[Value]
    c_last: list[Value | None]


def layer(ctx: GraphBuilder, x: Value, time_axis: int, dirs: Sequence[Direction]
          ) -> LayerOutput:
    """Unroll the directions `dirs` of one layer over the 3-d input `x` ((seq, batch, I) when
    `time_axis` is 0, (batch, seq, I) when 1)."""
    shape = ctx.shape(x)
    ctx.check(len(shape) == 3 and time_axis in (0, 1), f"input must be 3-d, got {shape}")
    seq = shape[time_axis]
    steps = [ctx.value(ctx.new_const(np.asarray(t, np.int64), "step"), keep_dtype=True)
             for t in range(seq)]
    out = LayerOutput([], [], [])
    for d in dirs:
        proj = _input_projection(ctx, x, d)
        h, c, hs = d.h0, d.c0, [None] * seq
        for t in (reversed(range(seq)) if d.reverse else range(seq)):
            # step t's rows: a gather at index t (a tensor): one kernel for every step
            xp = ctx.emit("gather", [proj, steps[t]], axis=time_axis)
            h, c = STEPS[d.cell.kind](ctx, d, xp, h, c)
            hs[t] = h
        out.hs.append(hs)
        out.h_last.append(h)
        out.c_last.append(c)
    return out


def check_direction(ctx: GraphBuilder, d: Direction, inputs: int, batch: int) -> int:
    """The hidden size of `d`, after checking its weights' and states' shapes."""
    rows, hidden = (ctx.shape(d.r) + (0, 0))[:2]
    gates = GATES[d.cell.kind]
    ctx.check(len(ctx.shape(d.r)) == 2 and rows == gates * hidden and hidden >= 1,
              f"R must be ({gates} * hidden, hidden), got {ctx.shape(d.r)}")
    ctx.check(ctx.shape(d.w) == (rows, inputs), f"W must be ({rows}, {inputs}), got "
                                                f"{ctx.shape(d.w)}")
    for what, v, n in (("W bias", d.w_bias, rows), ("R bias", d.r_bias, rows),
                       ("peepholes", d.peephole, 3 * hidden)):
        ctx.check(v is None or ctx.shape(v) == (n,), f"{what} must be ({n},), got "
                                                     f"{ctx.shape(v)}")
    for what, v in (("initial h", d.h0), ("initial c", d.c0)):
        ctx.check(v is None or ctx.shape(v) == (batch, hidden), f"{what} must be ({batch}, "
                                                                f"{hidden}), got {ctx.shape(v)}")
    return hidden


def state(v: Value | None) -> Value | None:
    """An initial state as `layer` takes it: None for a constant of zeros."""
    return None if isinstance(v, Const) and not v.array.any() else v


# ---- the projections ----

def _input_projection(ctx: GraphBuilder, x: Value, d: Direction) -> Value:
    """x W^T + b of every step: one dense, in x's leading axes."""
    shape = ctx.shape(x)
    bias = _input_bias(ctx, d)
    flat = ctx.reshape(x, (shape[0] * shape[1], shape[2]))
    proj = ctx.emit("dense", [flat, d.w] + ([] if bias is None else [bias]))
    return ctx.reshape(proj, (shape[0], shape[1], ctx.shape(d.w)[0]))


def _input_bias(ctx: GraphBuilder, d: Direction) -> Value | None:
    """The W bias plus the R bias where it adds outside the gates (all of it but GRU's h gate
    with linear_before_reset, which `_hidden_bias` keeps); None when there is none."""
    keep = _hidden_bias_mask(ctx, d)
    r_bias = d.r_bias if keep is None else arith(ctx, "mul", d.r_bias, 1.0 - keep)
    return arith(ctx, "add", d.w_bias, r_bias)


def _hidden_bias_mask(ctx: GraphBuilder, d: Direction) -> np.ndarray | None:
    """1 on the rows of R's bias that stay in the hidden projection (GRU's h gate with
    linear_before_reset), or None when all of it joins the input projection."""
    if d.r_bias is None or d.cell.kind != "gru" or not d.cell.linear_before_reset:
        return None
    hidden = ctx.shape(d.r)[1]
    mask = np.zeros((3, hidden), np.float32)
    mask[d.cell.gates.index("h")] = 1.0
    return mask.reshape(-1)


def _hidden_bias(ctx: GraphBuilder, d: Direction) -> Value | None:
    """The rows of R's bias that the hidden projection adds (None: none)."""
    keep = _hidden_bias_mask(ctx, d)
    return None if keep is None else arith(ctx, "mul", d.r_bias, keep)


def _hidden(ctx: GraphBuilder, h: Value | None, r: Value, bias: Value | None) -> Value | None:
    """h R^T + bias (None when h and bias are: zero)."""
    if h is None:
        return bias
    return ctx.emit("dense", [h, r] + ([] if bias is None else [bias]))


def _act(ctx: GraphBuilder, d: Direction, k: int, v: Value) -> Value:
    """Activation `k` (0: f, 1: g, 2: h) of `v`, its input clipped as the cell says."""
    if d.cell.clip is not None:
        v = ctx.emit("clip", [v], min=-d.cell.clip, max=d.cell.clip)
    return ctx.emit(d.cell.activations[k], [v])


# ---- the steps: (h, c) -> (h, c) ----

def _lstm_step(ctx: GraphBuilder, d: Direction, xp: Value, h: Value | None,
               c: Value | None) -> tuple[Value, Value]:
    g = _cut(ctx, arith(ctx, "add", _hidden(ctx, h, d.r, None), xp), d.cell.gates)
    hidden = ctx.shape(xp)[1] // 4
    p = [None] * 3 if d.peephole is None else ctx.split(d.peephole, 0, [hidden] * 3)
    i = _act(ctx, d, 0, arith(ctx, "add", g["i"], arith(ctx, "mul", p[0], c)))
    if d.cell.input_forget:
        f = ctx.emit("sub", [1.0, i])
    else:
        f = _act(ctx, d, 0, arith(ctx, "add", g["f"], arith(ctx, "mul", p[2], c)))
    c = arith(ctx, "add", arith(ctx, "mul", f, c), ctx.emit("mul", [i, _act(ctx, d, 1, g["c"])]))
    o = _act(ctx, d, 0, arith(ctx, "add", g["o"], arith(ctx, "mul", p[1], c)))
    return ctx.emit("mul", [o, ctx.emit(d.cell.activations[2], [c])]), c


def _gru_step(ctx: GraphBuilder, d: Direction, xp: Value, h: Value | None,
              c: None) -> tuple[Value, None]:
    hidden = ctx.shape(xp)[1] // 3
    g = _cut(ctx, xp, d.cell.gates)
    if d.cell.linear_before_reset:  # h gate: g(x W + r (h R + Rb))
        hg = _cut(ctx, _hidden(ctx, h, d.r, _hidden_bias(ctx, d)), d.cell.gates)
        z, r = (_act(ctx, d, 0, arith(ctx, "add", g[k], hg[k])) for k in "zr")
        hh = arith(ctx, "mul", r, hg["h"])
    else:  # h gate: g(x W + (r h) R)
        ctx.check(d.cell.gates.endswith("h"), f"GRU gate order {d.cell.gates!r} must end "
                                              f"with h")
        r_zr, r_h = ctx.split(d.r, 0, [2 * hidden, hidden])
        hg = _cut(ctx, _hidden(ctx, h, r_zr, None), d.cell.gates[:2])
        z, r = (_act(ctx, d, 0, arith(ctx, "add", g[k], hg[k])) for k in "zr")
        hh = _hidden(ctx, arith(ctx, "mul", r, h), r_h, None)
    n = _act(ctx, d, 1, arith(ctx, "add", g["h"], hh))
    if h is None:  # (1 - z) n
        return ctx.emit("sub", [n, ctx.emit("mul", [z, n])]), None
    # (1 - z) n + z h, as n + z (h - n)
    return ctx.emit("add", [n, ctx.emit("mul", [z, ctx.emit("sub", [h, n])])]), None


def _cut(ctx: GraphBuilder, v: Value | None, letters: str) -> dict[str, Value | None]:
    """`v` cut along its last axis into equal parts named by `letters` (None: all None)."""
    if v is None:
        return dict.fromkeys(letters)
    shape = ctx.shape(v)
    parts = ctx.split(v, len(shape) - 1, [shape[-1] // len(letters)] * len(letters))
    return dict(zip(letters, parts))


def _rnn_step(ctx: GraphBuilder, d: Direction, xp: Value, h: Value | None,
              c: None) -> tuple[Value, None]:
    return _act(ctx, d, 0, arith(ctx, "add", _hidden(ctx, h, d.r, None), xp)), None


STEPS = {"lstm": _lstm_step, "gru": _gru_step, "rnn": _rnn_step}


# ---- values that may be zero (None) or known at import ----

_NUMPY = {"add": np.add, "sub": np.subtract, "mul": np.multiply}


def arith(ctx: GraphBuilder, op: str, a: Any, b: Any) -> Any:
    """a op b for add, sub and mul, where None (or a constant of zeros) is zero; computed at
    import when both are constants (a numpy array counts as one)."""
    a, b = (None if isinstance(v, Const) and not v.array.any() else v for v in (a, b))
    if a is None or b is None:
        if op == "mul":
            return None
        return a if b is None else (b if op == "add" else ctx.emit("neg", [b]))
    if all(isinstance(v, (Const, np.ndarray)) for v in (a, b)):
        a, b = (v.array if isinstance(v, Const) else v for v in (a, b))
        return ctx.new_const(_NUMPY[op](a, b).astype(np.float32), op)
    return ctx.emit(op, [v if not isinstance(v, np.ndarray) else ctx.new_const(v, "const")
                         for v in (a, b)])


def concat(ctx: GraphBuilder, values: Sequence[Value], axis: int,
           final: bool = False) -> Value:
    """`values` joined along `axis` (constants at import; one value is itself)."""
    if len(values) == 1 and not final:
        return values[0]
    if all(isinstance(v, Const) for v in values):
        return ctx.new_const(np.concatenate([v.array for v in values], axis), "concat")
    return (ctx.out if final else ctx.emit)("concat", list(values), axis=axis)


def join(ctx: GraphBuilder, hs: Sequence[Sequence[Value]], piece: Sequence[int],
         time_axis: int, dir_axis: int, final: bool = False) -> Value:
    """Step outputs `hs[direction][step]`, each reshaped to `piece`, joined along `time_axis`,
    then the directions along `dir_axis`."""
    per_dir = [concat(ctx, [ctx.reshape(h, piece) for h in steps], time_axis) for steps in hs]
    return concat(ctx, per_dir, dir_axis, final)


__all__ = ["Cell", "Direction", "LayerOutput", "layer", "check_direction", "state",
           "arith", "concat", "join", "GATES", "ACTIVATIONS"]
