"""ONNX converters of the recurrent layers LSTM, GRU and RNN (`RNN`, merged into
`onnx_import.CONVERTERS`), unrolled over time by `tessel.graph.frontend.recurrent`.

Forward, reverse and bidirectional; layout 0 (time first) and 1 (batch first); initial
states given or zero; GRU's linear_before_reset; LSTM peepholes and input_forget; clip; the
activations Sigmoid, Tanh and Relu. sequence_lens, when given, must be the sequence length
for every batch entry: the unrolled steps are the same for all of them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tessel.graph.frontend import recurrent
from tessel.graph.frontend.context import Value
from tessel.graph.frontend.recurrent import Cell, Direction

if TYPE_CHECKING:
    from tessel.graph.frontend.onnx_import import Converter, Importer

GATE_ORDER = {"lstm": "iofc", "gru": "zrh", "rnn": "h"}
ACTIVATIONS = {"sigmoid": "sigmoid", "tanh": "tanh", "relu": "relu"}  # ONNX's, lower case
DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}


def _recurrent(kind: str) -> Converter:
    def convert(ctx: Importer, ins: list, attrs: dict) -> list[Value]:
        ins = ins + [None] * (8 - len(ins))
        layout = int(attrs.get("layout", 0))
        ctx.check(layout in (0, 1), f"layout must be 0 or 1, got {layout}")
        shape = ctx.shape(ins[0])
        ctx.check(len(shape) == 3, f"X must be 3-d, got {shape}")
        seq, batch = shape[layout], shape[1 - layout]
        direction = attrs.get("direction", "forward")
        ctx.check(direction in DIRECTIONS, f"direction must be one of {sorted(DIRECTIONS)}, "
                                           f"got {direction!r}")
        _check_lengths(ctx, ins, seq)
        reverses = DIRECTIONS[direction]
        cells = _cells(ctx, kind, attrs, len(reverses))
        dirs = [_direction(ctx, ins, cell, k, layout, rev)
                for k, (cell, rev) in enumerate(zip(cells, reverses))]
        hidden = {recurrent.check_direction(ctx, d, shape[2], batch) for d in dirs}.pop()
        ctx.check(attrs.get("hidden_size", hidden) == hidden, f"hidden_size "
                  f"{attrs.get('hidden_size')} disagrees with R's shape {ctx.shape(ins[2])}")
        out = recurrent.layer(ctx, ins[0], layout, dirs)
        return _outputs(ctx, kind, out, layout, batch, hidden)
    return convert


def _check_lengths(ctx: Importer, ins: list, seq: int) -> None:
    """sequence_lens (input 4), when given, must be known at import and all `seq`."""
    if ins[4] is None:
        return
    array = ctx.const(ins, 4, "sequence_lens")
    ctx.check(np.all(array == seq), f"sequence_lens {array.tolist()} are not all the sequence "
              f"length {seq}: tessel unrolls every step for every batch entry")


def _cells(ctx: Importer, kind: str, attrs: dict, n_dirs: int) -> list[Cell]:
    """Each direction's cell: its activations (the attribute gives them all, or one
    direction's set for both) and the attributes every direction shares."""
    per = len(recurrent.ACTIVATIONS[kind])
    names = [a.decode() if isinstance(a, bytes) else str(a)
             for a in attrs.get("activations", [])]
    ctx.check(len(names) in (0, per, per * n_dirs), f"activations {names}: expected {per} per "
                                                    f"direction")
    for name in names:
        ctx.check(name.lower() in ACTIVATIONS, f"activation {name!r} is not supported; tessel "
                  f"has {', '.join(a.capitalize() for a in ACTIVATIONS)}")
    acts = [ACTIVATIONS[n.lower()] for n in names] or list(recurrent.ACTIVATIONS[kind])
    acts = acts * (per * n_dirs // len(acts))
    clip = attrs.get("clip")
    return [Cell(kind, GATE_ORDER[kind], tuple(acts[k * per:(k + 1) * per]),
                 None if clip is None else float(clip),
                 bool(attrs.get("linear_before_reset", 0)), bool(attrs.get("input_forget", 0)))
            for k in range(n_dirs)]


def _direction(ctx: Importer, ins: list, cell: Cell, k: int, layout: int,
               reverse: bool) -> Direction:
    """Direction `k`'s weights and states, cut out of the node's inputs X, W, R, B,
    sequence_lens, initial_h[, initial_c, P]."""
    b = _pick(ctx, ins[3], 0, k)
    w_bias, r_bias = (None, None) if b is None else ctx.split(b, 0, [ctx.shape(b)[0] // 2] * 2)
    return Direction(cell, _pick(ctx, ins[1], 0, k), _pick(ctx, ins[2], 0, k), w_bias, r_bias,
                     _pick(ctx, ins[7], 0, k), recurrent.state(_pick(ctx, ins[5], layout, k)),
                     recurrent.state(_pick(ctx, ins[6], layout, k)), reverse)


def _pick(ctx: Importer, v: Value | None, axis: int, k: int) -> Value | None:
    """Entry `k` of `v`'s direction axis `axis`, without that axis (None stays None)."""
    if v is None:
        return None
    shape = ctx.shape(v)
    ctx.check(axis < len(shape) and k < shape[axis], f"an input of shape {shape} has no "
                                                     f"direction {k} on axis {axis}")
    ranges = [range(k, k + 1) if a == axis else range(n) for a, n in enumerate(shape)]
    return ctx.reshape(ctx.slice(v, ranges), shape[:axis] + shape[axis + 1:])


def _outputs(ctx: Importer, kind: str, out: recurrent.LayerOutput, layout: int, batch: int,
             hidden: int) -> list[Value]:
    """Y (seq, dirs, batch, H) and Y_h, Y_c (dirs, batch, H); batch first with layout 1."""
    piece = (1, 1, batch, hidden) if layout == 0 else (batch, 1, 1, hidden)
    y = recurrent.join(ctx, out.hs, piece, layout, layout + 1, final=bool(ctx.out_name))
    last = (1, batch, hidden) if layout == 0 else (batch, 1, hidden)
    outs = [y, recurrent.join(ctx, [[h] for h in out.h_last], last, layout, layout)]
    if kind == "lstm":
        outs.append(recurrent.join(ctx, [[c] for c in out.c_last], last, layout, layout))
    return outs


RNN: dict[str, Converter] = {"LSTM": _recurrent("lstm"), "GRU": _recurrent("gru"),
                             "RNN": _recurrent("rnn")}
