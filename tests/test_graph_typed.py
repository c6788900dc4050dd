"""Integer and boolean tensors in whole models: token ids into embeddings, attention masks,
comparisons, where, casts, torch's type promotion and advanced indexing, through ONNX and
torch.export, against onnxruntime and torch (integers exactly), and their kernels tuned."""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tessel  # noqa: E402
from tessel.graph.ir import Graph, GraphError  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402


class Embed(torch.nn.Module):
    """A transformer's front: token and position embeddings, an additive mask from an int64
    attention mask, a projection, and integer outputs computed from the ids."""

    def __init__(self, vocab=37, seq=11, dim=13):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, dim)
        self.positions = torch.nn.Embedding(seq, dim)
        self.proj = torch.nn.Linear(dim, 5)

    def forward(self, ids, mask):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.tokens(ids) + self.positions(pos)
        bias = (1.0 - mask[:, :, None].to(torch.float32)) * -10000.0
        y = self.proj(x + bias)
        keep = (ids > 3) & (mask != 0)
        y = y.masked_fill(~keep[:, :, None], 0.5)
        rows = torch.where(keep, ids, -ids) // 3 + ids % 4
        return y, rows, (ids * 2 + 1).to(torch.int32)  # (any: an int ReduceSum in ONNX)


def _feeds(seed=0, batch=3, seq=11, vocab=37):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, vocab, (batch, seq)).astype(np.int64),
            rng.integers(0, 2, (batch, seq)).astype(np.int64))


def _check(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
        else:
            np.testing.assert_array_equal(g, w)


def test_token_ids_through_torch_export():
    module = Embed().eval()
    ids, mask = _feeds()
    compiled = tessel.compile_model(module, example_inputs=(torch.from_numpy(ids),
                                                            torch.from_numpy(mask)),
                                    fallback="unscheduled")
    assert compiled.graph.types[compiled.input_names[0]].dtype == "int64"
    with torch.no_grad():
        want = [t.numpy() for t in module(torch.from_numpy(ids), torch.from_numpy(mask))]
    _check(compiled(ids, mask), want)


def test_token_ids_through_onnx_against_onnxruntime():
    module = Embed().eval()
    ids, mask = _feeds(seed=1)
    f = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(ids), torch.from_numpy(mask)), f,
                      input_names=["ids", "mask"], opset_version=17, dynamo=False)
    session = ort.InferenceSession(f.getvalue(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"ids": ids, "mask": mask})
    compiled = tessel.compile_model(onnx.load_from_string(f.getvalue()), fallback="unscheduled")
    _check(compiled(ids=ids, mask=mask), want)


@pytest.mark.parametrize("index", [
    lambda x, i, j: x[i, :, j],  # non-adjacent: the broadcast index axes come first
    lambda x, i, j: x[:, i, j],  # adjacent: they stay in place
    lambda x, i, j: x[i],
    lambda x, i, j: x.select(1, -2) + x[:, 0],
])
def test_advanced_indexing(index):
    class Index(torch.nn.Module):
        def forward(self, x, i, j):
            return index(x, i, j) * 2.0
    x = torch.randn(4, 5, 6)
    i = torch.tensor([[0, -1, 3], [2, 1, 0]])
    j = torch.tensor([5, -6, 2])
    compiled = tessel.compile_model(Index(), example_inputs=(x, i, j), fallback="unscheduled")
    with torch.no_grad():
        want = Index()(x, i, j).numpy()
    _check(compiled(x.numpy(), i.numpy(), j.numpy()), [want])


def test_integer_kernels_tune_and_stay_exact(tmp_path):
    """A gather, a where on a bool mask and integer arithmetic go through the search space
    (sampled schedules, vectorized on the host), and the tuned model matches the reference."""
    rng = np.random.default_rng(0)
    g = Graph("typed")
    ids = g.add_input("ids", (2, 37), "int64")
    mask = g.add_input("mask", (2, 37), "bool")
    rows = g.add_node("gather", [g.add_constant("table", rng.standard_normal((50, 48))
                                                .astype("float32")), ids], axis=0)
    hidden = g.add_node("add", [rows, g.add_constant("pos", rng.standard_normal((37, 48))
                                                     .astype("float32"))])
    masked = g.add_node("where", [g.add_node("reshape", [mask], shape=(2, 37, 1)),
                                  hidden, g.add_constant("fill", np.float32(-1e4))])
    count = g.add_node("add", [g.add_node("cast", [mask], to="int32"),
                               g.add_node("cast", [ids], to="int32")])
    g.set_outputs([masked, g.add_node("mod", [count, g.add_constant("k", np.int32(7))])])
    feeds = {"ids": rng.integers(-60, 60, (2, 37)).astype(np.int64),
             "mask": rng.integers(0, 2, (2, 37)).astype(bool)}
    db = str(tmp_path / "t.db")
    tessel.tune_model(g, trials=8, database=db)
    _check(tessel.compile_model(g, database=db)(**feeds), run_graph(g, feeds))


def test_a_wrong_dtype_feed_is_one_clear_line():
    g = Graph("ids")
    ids = g.add_input("ids", (4,), "int64")
    g.set_outputs([g.add_node("gather", [g.add_constant("t", np.ones((3, 2), np.float32)), ids])])
    compiled = tessel.compile_model(g, fallback="unscheduled")
    with pytest.raises(GraphError, match="dtype int32, expected int64"):
        compiled(np.zeros(4, np.int32))
    out, = compiled(np.array([0, -1, 7, -9]))  # out of range: the nearest row, never outside
    np.testing.assert_array_equal(out, np.ones((4, 2), np.float32))
