"""The torch importer's converters of nn.LSTM, nn.GRU and nn.RNN: `ATEN` maps the operators
torch.export leaves them as (aten.lstm.input, aten.gru.input, aten.rnn_tanh.input,
aten.rnn_relu.input: the whole stack of layers, with a flat list of weights) to layers
unrolled by `tessel.graph.frontend.recurrent`.

Every layer and direction, batch first or not, initial states given or zero (torch.export
folds the zeros nn.LSTM makes into a constant), an unbatched (2-d) input. Eval mode only
(dropout between layers is off); LSTM's proj_size is refused.
"""
from __future__ import annotations

from tessel.graph.frontend import recurrent
from tessel.graph.frontend.context import Value
from tessel.graph.frontend.recurrent import Cell, Direction
from tessel.graph.frontend.torch_context import Context, Converter

# kind, torch's gate order, activations (torch's GRU is ONNX's with linear_before_reset)
CELLS = {"aten.lstm.input": Cell("lstm", "ifco", ("sigmoid", "tanh", "tanh")),
         "aten.gru.input": Cell("gru", "rzh", ("sigmoid", "tanh"), linear_before_reset=True),
         "aten.rnn_tanh.input": Cell("rnn", "h", ("tanh",)),
         "aten.rnn_relu.input": Cell("rnn", "h", ("relu",))}


def _recurrent(c: Context, a: dict) -> tuple[Value, ...]:
    cell = CELLS[c.op_type]
    c.check(not a["train"], "training mode is not supported; export the module in eval mode")
    x, layers, dirs = a["input"], int(a["num_layers"]), 2 if a["bidirectional"] else 1
    unbatched = len(c.shape(x)) == 2
    if unbatched:
        x = c.reshape(x, (c.shape(x)[0], 1, c.shape(x)[1]))
    time_axis = 1 if a["batch_first"] and not unbatched else 0
    batch = c.shape(x)[1 - time_axis]
    params = _params(c, list(a["params"]), bool(a["has_biases"]), layers * dirs)
    h0, c0 = (a["hx"][0], a["hx"][1]) if cell.kind == "lstm" else (a["hx"], None)
    h0, c0 = (_states(c, v, layers * dirs, batch, unbatched) for v in (h0, c0))
    h_n, c_n = [], []
    for layer in range(layers):
        k = [layer * dirs + d for d in range(dirs)]
        directions = [Direction(cell, *params[i], h0=h0[i], c0=c0[i], reverse=d == 1)
                      for d, i in enumerate(k)]
        for d in directions:
            recurrent.check_direction(c, d, c.shape(x)[2], batch)
        out = recurrent.layer(c, x, time_axis, directions)
        hidden = c.shape(out.h_last[0])[1]
        piece = (1, batch, hidden) if time_axis == 0 else (batch, 1, hidden)
        x = recurrent.join(c, out.hs, piece, time_axis, 2)
        h_n += out.h_last
        c_n += out.c_last
    results = [x] + [recurrent.join(c, [[h] for h in hs], (1, batch, c.shape(hs[0])[1]), 0, 0)
                     for hs in ([h_n, c_n] if cell.kind == "lstm" else [h_n])]
    return tuple(_shaped(c, v, k) for k, v in enumerate(results))


def _params(c: Context, params: list, biases: bool, count: int
            ) -> list[tuple[Value, Value, Value | None, Value | None]]:
    """W, R and their biases for each layer and direction, in torch's order."""
    per = 4 if biases else 2
    c.check(len(params) == per * count, f"expected {per * count} weights ({per} per layer "
            f"and direction), got {len(params)}: LSTM's proj_size is not supported")
    groups = [params[k * per:(k + 1) * per] for k in range(count)]
    return [(g[0], g[1], g[2], g[3]) if biases else (g[0], g[1], None, None) for g in groups]


def _states(c: Context, v: Value | None, count: int, batch: int, unbatched: bool
            ) -> list[Value | None]:
    """An initial state (layers * dirs, batch, H) cut into each layer and direction's
    (batch, H); None for zeros."""
    if v is None:
        return [None] * count
    shape = c.shape(v)
    if unbatched:
        v, shape = c.reshape(v, (shape[0], 1, shape[1])), (shape[0], 1, shape[1])
    c.check(len(shape) == 3 and shape[:2] == (count, batch), f"an initial state must be "
            f"({count}, {batch}, hidden), got {shape}")
    return [recurrent.state(c.reshape(c.slice(v, [range(k, k + 1), range(batch),
                                                  range(shape[2])]), shape[1:]))
            for k in range(count)]


def _shaped(c: Context, v: Value, k: int) -> Value:
    """Output `k` in the shape torch recorded (an unbatched input's outputs lose the batch)."""
    return c.reshape(v, tuple(int(d) for d in c.node.meta["val"][k].shape))


ATEN: dict[str, Converter] = {name: _recurrent for name in CELLS}


__all__ = ["ATEN", "CELLS"]
