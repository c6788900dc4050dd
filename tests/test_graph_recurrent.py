"""Recurrent layers (tessel.graph.frontend.recurrent): ONNX LSTM, GRU and RNN against
onnxruntime and torch's nn.LSTM, nn.GRU and nn.RNN against eager, at odd sizes (input 7,
hidden 13, seq 5, batch 3) in every direction, layout and option; most through the reference
interpreter (the import is what differs), a few compiled end to end. The ONNX node test cases
of the three run in tests/test_onnx_conformance.py."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tessel  # noqa: E402
from tessel.graph import GraphError  # noqa: E402
from tessel.graph.compiler.load import load_model  # noqa: E402
from tessel.graph.compiler.tasks import model_tasks  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.graph.frontend.torch_import import from_torch  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402
from tessel.target import Target  # noqa: E402

SEQ, BATCH, INPUT, HIDDEN = 5, 3, 7, 13
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
RTOL, ATOL = 1e-3, 1e-5


# ---- ONNX ----

BATCH_AXIS = {"X": 1, "initial_h": 1, "initial_c": 1, "Y": 2, "Y_h": 1, "Y_c": 1}  # layout 0


def onnx_layer(op, direction="forward", layout=0, bias=True, states=False, peepholes=False,
               weights_as_inputs=False, lengths=None, **attrs):
    """A model of one ONNX recurrent node with random weights (initializers, or inputs) and
    the feeds to run it on; every output is a model output. The same arguments but the
    layout give the same numbers."""
    rng = np.random.default_rng(len(op) + len(direction))
    dirs, g = 2 if direction == "bidirectional" else 1, GATES[op]
    arrays = {"X": rng.standard_normal((SEQ, BATCH, INPUT)),
              "W": rng.standard_normal((dirs, g * HIDDEN, INPUT)) * 0.4,
              "R": rng.standard_normal((dirs, g * HIDDEN, HIDDEN)) * 0.4,
              "B": rng.standard_normal((dirs, 2 * g * HIDDEN)) * 0.4 if bias else None,
              "sequence_lens": lengths,
              "initial_h": rng.standard_normal((dirs, BATCH, HIDDEN)) if states else None}
    if op == "LSTM":
        arrays["initial_c"] = rng.standard_normal((dirs, BATCH, HIDDEN)) if states else None
        arrays["P"] = rng.standard_normal((dirs, 3 * HIDDEN)) * 0.4 if peepholes else None
    arrays = {k: v if v is None or v.dtype.kind == "i" else v.astype(np.float32)
              for k, v in arrays.items()}
    if layout == 1:  # batch first
        arrays = {k: np.moveaxis(v, BATCH_AXIS[k], 0) if k in BATCH_AXIS and v is not None
                  else v for k, v in arrays.items()}
    computed = {"X", *(("W", "R", "B") if weights_as_inputs else ()), "initial_h", "initial_c"}
    names = [k if v is not None else "" for k, v in arrays.items()]
    while names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outs, hidden_size=HIDDEN, direction=direction,
                            layout=layout, **attrs)
    inputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape)
              for k, v in arrays.items() if v is not None and k in computed]
    inits = [numpy_helper.from_array(np.ascontiguousarray(v), k) for k, v in arrays.items()
             if v is not None and k not in computed]
    graph = helper.make_graph([node], "rnn", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                               for o in outs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, {i.name: np.ascontiguousarray(arrays[i.name]) for i in inputs}


def assert_matches_onnxruntime(model, feeds, got):
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


ONNX_CASES = [
    *[(op, dict(direction=d, layout=lay)) for op in GATES
      for d in ("forward", "reverse", "bidirectional") for lay in (0, 1)],
    ("LSTM", dict(direction="bidirectional", states=True, peepholes=True, clip=0.7)),
    ("LSTM", dict(layout=1, states=True, peepholes=True, weights_as_inputs=True)),
    ("LSTM", dict(bias=False, input_forget=1)),
    ("LSTM", dict(activations=["Relu", "Tanh", "Sigmoid"])),
    ("GRU", dict(direction="bidirectional", states=True, linear_before_reset=1, clip=0.5)),
    ("GRU", dict(direction="reverse", states=True, weights_as_inputs=True)),
    ("GRU", dict(layout=1, linear_before_reset=1, weights_as_inputs=True)),
    ("GRU", dict(direction="bidirectional", activations=["Sigmoid", "Relu"] * 2)),
    ("RNN", dict(direction="bidirectional", states=True, activations=["Relu", "Tanh"])),
]


@pytest.mark.parametrize("op,options", ONNX_CASES,
                         ids=[f"{op}-" + "-".join(f"{k}={v}" for k, v in o.items())
                              for op, o in ONNX_CASES])
def test_onnx_layer_matches_onnxruntime(op, options):
    model, feeds = onnx_layer(op, **options)
    got = run_graph(from_onnx(model), feeds)
    if options.get("layout") == 1:  # onnxruntime runs no layout 1: its layout-0 twin does
        model, feeds = onnx_layer(op, **{**options, "layout": 0})
        names = [o.name for o in model.graph.output]
        got = [np.moveaxis(v, 0, BATCH_AXIS[name]) for v, name in zip(got, names)]
    assert_matches_onnxruntime(model, feeds, got)


def test_onnx_lstm_export_compiles_and_matches_onnxruntime(tmp_path):
    """torch's ONNX export of a 2-layer LSTM (Shape, Gather, Expand feeding the zero states)."""
    torch.manual_seed(0)
    module = torch.nn.LSTM(INPUT, HIDDEN, num_layers=2).eval()
    x = torch.randn(SEQ, BATCH, INPUT)
    path = tmp_path / "lstm.onnx"
    torch.onnx.export(module, (x,), str(path), input_names=["x"], dynamo=False)
    model = onnx.load(str(path))
    assert sum(n.op_type == "LSTM" for n in model.graph.node) == 2
    got = tessel.compile_model(model, fallback="unscheduled")(x.numpy())
    assert_matches_onnxruntime(model, {"x": x.numpy()}, got)


def test_onnx_refusals_name_what_is_wrong():
    model, _ = onnx_layer("GRU", activations=["Sigmoid", "Elu"])
    with pytest.raises(GraphError, match="activation 'Elu' is not supported"):
        from_onnx(model)
    model, feeds = onnx_layer("LSTM", lengths=np.array([SEQ] * BATCH, np.int32))
    assert_matches_onnxruntime(model, feeds, run_graph(from_onnx(model), feeds))
    model, _ = onnx_layer("LSTM", lengths=np.array([SEQ, SEQ - 1, SEQ], np.int32))
    with pytest.raises(GraphError, match=r"sequence_lens \[5, 4, 5\] are not all"):
        from_onnx(model)


# ---- torch ----

class Flat(torch.nn.Module):
    """A recurrent module whose outputs are flat (y, h_n[, c_n]), taking initial states."""

    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x, *states):
        hx = None if not states else (states if len(states) == 2 else states[0])
        y, h = self.rnn(x, hx)
        return (y, *h) if isinstance(h, tuple) else (y, h)


def torch_case(cls, states=False, unbatched=False, **kw):
    torch.manual_seed(len(kw))
    module = Flat(cls(INPUT, HIDDEN, **kw)).eval()
    dirs = 2 if kw.get("bidirectional") else 1
    shape = ((SEQ, INPUT) if unbatched else (BATCH, SEQ, INPUT) if kw.get("batch_first")
             else (SEQ, BATCH, INPUT))
    inputs = [torch.randn(*shape)]
    if states:
        state = (kw.get("num_layers", 1) * dirs, *(() if unbatched else (BATCH,)), HIDDEN)
        inputs += [torch.randn(*state) for _ in range(2 if cls is torch.nn.LSTM else 1)]
    with torch.no_grad():
        want = [w.numpy() for w in module(*inputs)]
    return module, tuple(inputs), want


TORCH_CASES = [(cls, kw) for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN) for kw in (
    dict(), dict(num_layers=2, bidirectional=True, batch_first=True),
    dict(bidirectional=True, bias=False, states=True),
    dict(num_layers=2, unbatched=True, states=True))]
TORCH_CASES.append((torch.nn.RNN, dict(nonlinearity="relu", num_layers=2, states=True)))


@pytest.mark.parametrize("cls,options", TORCH_CASES,
                         ids=[f"{c.__name__}-" + "-".join(f"{k}={v}" for k, v in o.items())
                              for c, o in TORCH_CASES])
def test_torch_layer_matches_eager(cls, options):
    module, inputs, want = torch_case(cls, **options)
    got = run_graph(from_torch(module, inputs), [x.numpy() for x in inputs])
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_torch_lstm_compiles_and_matches_eager():
    module, inputs, want = torch_case(torch.nn.LSTM, states=True, num_layers=2,
                                      bidirectional=True, batch_first=True)
    compiled = tessel.compile_model(module, example_inputs=inputs, fallback="unscheduled")
    got = compiled(*[x.numpy() for x in inputs])
    assert [g.shape for g in got] == [w.shape for w in want] and len(want) == 3
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)


def test_torch_refuses_proj_size():
    module, inputs, _ = torch_case(torch.nn.LSTM, proj_size=5)
    with pytest.raises(GraphError, match="proj_size is not supported"):
        from_torch(module, inputs)


# ---- tasks ----

def test_every_step_is_the_same_kernels():
    """A longer sequence adds kernel calls, not tuning tasks."""
    counts = []
    for seq in (3, 6):
        module = torch.nn.LSTM(INPUT, HIDDEN, num_layers=2).eval()
        graph = load_model(module, example_inputs=(torch.randn(seq, 2, INPUT),))
        kernels, tasks = model_tasks(graph, Target("host"))
        counts.append((len(kernels), len(tasks)))
    (short_kernels, short_tasks), (long_kernels, long_tasks) = counts
    assert long_kernels >= short_kernels + 2 * 3 * 4  # >= 4 kernels a step, 2 layers
    assert long_tasks == short_tasks <= 12


def test_a_weight_every_step_reads_is_packed_once():
    """The recurrent weight of each layer, read by the dense of every step, is packed once for
    all of them (a copy per step made a 35-step LSTM language model 4x onnxruntime's memory
    and read 70 weights from DRAM where one per layer stays in cache)."""
    module = torch.nn.LSTM(INPUT, 24, num_layers=2).eval()  # (13 units pack nothing)
    x = torch.randn(6, 2, INPUT)
    model = tessel.compile_model(module, example_inputs=(x,))
    assert model.prepacked == 2 * 2, model.report()  # per layer: the input and the recurrent
    got = model(x.numpy())[0]
    with torch.no_grad():
        want = module(x)[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
