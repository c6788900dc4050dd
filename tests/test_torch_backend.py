"""`torch.compile(model, backend="tessel")` (tessel.graph.torch_backend): every zoo model and a
module mixing supported and unsupported operators give eager's outputs; a new input shape,
a changed weight and the grad mode recompile or refuse as documented; options are checked."""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from tessel.graph import GraphError  # noqa: E402
from tessel.graph.frontend.models import build  # noqa: E402
from zoo_cases import ZOO_SMALL as SMALL  # noqa: E402
from tessel.graph.torch_backend import (BackendOptions, TesselGraph,  # noqa: E402
                                        TorchFallbackWarning, tessel_backend)

FAST = {"fallback": "unscheduled"}  # compiles in a fraction of the priors' time


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def assert_same(got, want, rtol=1e-4, atol=1e-4):
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=rtol, atol=atol)


def compiled_warnings(fn, *args):
    """fn(*args) with the tessel backend's messages recorded."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught if issubclass(w.category, TorchFallbackWarning)]


def test_registered_under_its_name():
    """The entry point makes the name known without importing tessel first."""
    assert "tessel" in torch._dynamo.list_backends(exclude_tags=())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_zoo_model_gives_eager_outputs(name):
    module, inputs = build(name, **SMALL[name])
    fast = torch.compile(module, backend="tessel", options=FAST)
    with torch.no_grad():
        got, said = compiled_warnings(fast, *inputs)
        want = module(*inputs)
    assert_same(got, want)
    assert said == []  # every operator ran in tessel


class Mixed(nn.Module):
    """Supported layers around operators tessel does not translate (cummax, sort)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1)
        self.fc = nn.Linear(5 * 7 * 6, 10)

    def forward(self, x):
        y = torch.relu(self.conv(x))
        y = torch.cummax(y, dim=3)[0] * 0.25 + y
        z = self.fc(y.flatten(1))
        ranked, _ = torch.sort(z, dim=1)
        return torch.tanh(ranked) + z.mean(), y.sum()


def test_unsupported_operators_stay_in_torch_and_are_named_once():
    module, x = Mixed().eval(), randn(2, 3, 7, 6)
    fast = torch.compile(module, backend="tessel", options=FAST, dynamic=False)
    with torch.no_grad():
        got, said = compiled_warnings(fast, x)
        assert_same(got, module(x))
        again, said_again = compiled_warnings(fast, x)  # compiled: nothing to say
    assert_same(again, got, rtol=0, atol=0)
    assert len(said) == 1 and said_again == []
    assert "aten.cummax.default" in said[0] and "aten.sort.default" in said[0]
    assert "2 operator(s) run in PyTorch" in said[0]


def test_writes_through_views_run_in_tessel():
    """x[..] = v on a computed tensor (a write through a view, read afterwards) compiles
    from the graph's functional form: in tessel, and not lost."""
    from test_graph_torch import Fn, writes_into_slices
    module, x = Fn(writes_into_slices), randn(2, 5, 7)
    fast = torch.compile(module, backend="tessel", options=FAST, dynamic=False)
    with torch.no_grad():
        got, said = compiled_warnings(fast, x)
        assert_same(got, module(x))
    assert said == []


def test_einsum_swapaxes_reshape_as_run_in_tessel():
    """Dynamo's graphs keep torch.einsum, swapaxes (MaxViT's attention) and reshape_as
    (LeViT's), which export's decomposition would have spelled out."""
    from test_graph_torch import Fn

    def fn(q, k):
        scores = torch.einsum("bhid,bhjd->bhij", q, k).softmax(-1).swapaxes(1, 2)
        return scores.reshape_as(q.new_empty(2, 15, 6)) * 2
    module, q, k = Fn(fn), randn(2, 3, 5, 7), randn(2, 3, 6, 7)
    fast = torch.compile(module, backend="tessel", options=FAST, dynamic=False)
    with torch.no_grad():
        got, said = compiled_warnings(fast, q, k)
        assert_same(got, module(q, k))
    assert said == []


def test_a_new_input_shape_recompiles():
    module = Mixed().eval()
    module.fc = nn.Identity()  # any spatial size
    for dynamic in (False, None):  # static recompiles; Dynamo's automatic dynamic shapes
        torch._dynamo.reset()
        fast = torch.compile(module, backend="tessel", options=FAST, dynamic=dynamic)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", TorchFallbackWarning)
            for shape in [(1, 3, 7, 6), (3, 3, 5, 9), (1, 3, 7, 6), (2, 3, 4, 4)]:
                x = randn(*shape, seed=sum(shape))
                assert_same(fast(x), module(x))


def test_dynamic_graph_is_compiled_per_shape_and_says_so(monkeypatch):
    compiled = []
    original = TesselGraph.compile
    monkeypatch.setattr(TesselGraph, "compile",
                        lambda self, args: compiled.append(batch_of(args)) or original(self, args))
    module, _ = build("dqn")
    fast = torch.compile(module, backend="tessel", options=FAST, dynamic=True)
    said = []
    with torch.no_grad():
        for batch in (2, 3, 2):
            x = randn(batch, 4, 84, 84, seed=batch)
            got, now = compiled_warnings(fast, x)
            assert_same(got, module(x))
            said += now
    assert compiled == [2, 3]  # batch 2 again: kept
    assert len(said) == 1 and "dynamic shapes" in said[0] and "each input shape" in said[0]


def batch_of(args):
    (image,) = [a for a in args if hasattr(a, "shape") and tuple(a.shape[1:]) == (4, 84, 84)]
    return image.shape[0]


def test_weights_changed_in_place_are_seen():
    module, x = Mixed().eval(), randn(2, 3, 7, 6)
    fast = torch.compile(module, backend="tessel", options=FAST)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", TorchFallbackWarning)
        before = fast(x)
        module.conv.weight.mul_(-2.0)  # in place: same storage, a new version
        module.fc.bias.copy_(randn(10, seed=3))
        after = fast(x)
        assert_same(after, module(x))
    assert not torch.allclose(before[0], after[0])


def test_gradients_are_refused_with_the_way_out():
    module = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    fast = torch.compile(module, backend="tessel", options=FAST)
    with pytest.raises(Exception, match=r"inference only.*torch.no_grad\(\)"):
        fast(randn(2, 4))
    with torch.inference_mode():  # and without gradients it runs
        assert_same(fast(randn(2, 4)), module(randn(2, 4)))


def test_non_contiguous_inputs():
    module = nn.Sequential(nn.Linear(6, 5), nn.GELU())
    fast = torch.compile(module, backend="tessel", options=FAST)
    x = randn(6, 4).t()  # a transposed view
    assert not x.is_contiguous()
    with torch.no_grad():
        assert_same(fast(x), module(x))


@pytest.mark.parametrize("options,match", [
    ({"trials": 3}, r"unknown option\(s\) \['trials'\].*'tune'"),
    ({"tune": -1}, r"tune must be an int >= 0"),
    ({"tune": 2.5}, r"tune must be an int >= 0"),
    ({"fallback": "torch"}, r"fallback must be one of \('prior', 'unscheduled'\)"),
    ({"layout": "NHWC"}, r"layout must be one of"),
    ({"strict": "yes"}, r"strict must be True or False"),
    ({"database": "/nonexistent/t.db"}, r"database /nonexistent/t.db does not exist"),
    ({"target": "riscv"}, r"riscv"),
])
def test_bad_options_are_named(options, match):
    with pytest.raises(GraphError if "target" not in options else Exception, match=match):
        BackendOptions.parse(options)


def test_modes_are_refused():
    gm = torch.fx.symbolic_trace(nn.ReLU())
    with pytest.raises(GraphError, match="has no modes"):
        tessel_backend(gm, [randn(2)], mode="max-autotune")


def test_database_defaults_to_the_commands_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert BackendOptions.parse(None).database is None
    assert BackendOptions.parse({"tune": 16}).database == "tessel.db"
    (tmp_path / "tessel.db").touch()
    assert BackendOptions.parse({}).database == "tessel.db"


def test_strict_names_the_tasks_without_records(tmp_path):
    from tessel import Database
    db = tmp_path / "empty.db"
    Database(db).close()
    module = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    fast = torch.compile(module, backend="tessel",
                         options={"database": str(db), "strict": True})
    with torch.no_grad(), pytest.raises(Exception, match=r"strict.*no record in .*empty.db.*"
                                                         r"tune them"):
        fast(randn(2, 8))


def test_tune_fills_the_database_and_strict_then_holds(tmp_path):
    from tessel import Database
    db = tmp_path / "t.db"
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    x = randn(4, 16)
    fast = torch.compile(module, backend="tessel",
                         options={"database": str(db), "tune": 32})
    with torch.no_grad():
        assert_same(fast(x), module(x))
    with Database(db) as d:
        assert d.count() >= 32
    torch._dynamo.reset()
    strict = torch.compile(module, backend="tessel", options={"database": str(db),
                                                              "strict": True})
    with torch.no_grad():
        assert_same(strict(x), module(x))


class Refused(nn.Module):
    """A translated operator whose converter refuses this use (a bitwise and of integers)
    between layers tessel runs."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 3), nn.Linear(3, 2)

    def forward(self, x):
        bits = (torch.relu(self.a(x)) * 4.0).to(torch.int32)
        bits = torch.bitwise_and(bits, bits + 1)
        return self.b(bits.to(torch.float32) * 2.0)


def test_a_refused_node_alone_runs_in_torch_with_the_reason(monkeypatch):
    pieces = []
    from tessel.graph.torch_backend import split
    original = split.compile_pieces
    monkeypatch.setattr(split, "compile_pieces",
                        lambda graphs, options: pieces.extend(graphs) or original(graphs, options))
    module, x = Refused().eval(), randn(1, 3)
    fast = torch.compile(module, backend="tessel", options=FAST)
    with torch.no_grad():
        got, said = compiled_warnings(fast, x)
        assert_same(got, module(x))
    assert len(said) == 1 and "1 operator(s) run in PyTorch: aten.bitwise_and.Tensor" in said[0]
    assert "bitwise operators on int32 tensors are not supported" in said[0]
    assert len(pieces) == 2  # the layers before and after it still run in tessel


def test_other_dtypes_run_in_torch_and_say_why():
    module = nn.Sequential(nn.Linear(8, 4), nn.ReLU()).double()
    x = randn(3, 8).double()
    fast = torch.compile(module, backend="tessel", options=FAST)
    with torch.no_grad():
        got, said = compiled_warnings(fast, x)
        assert_same(got, module(x))
    assert len(said) == 1 and "2 operator(s) run in PyTorch" in said[0]
    assert "aten.linear.default" in said[0] and "aten.relu.default" in said[0]
    assert "float64 tensors are not supported" in said[0]


class BufferOutputs(nn.Module):
    """Hugging Face BERT's shape: a piece whose output is a buffer expanded (a constant at
    import: blocking it raised KeyError), a tensor made in forward (torch.export lifts it to
    an input Dynamo does not pass), and an output changed in place by the caller."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("table", torch.arange(4.0).reshape(1, 4))

    def forward(self, x):
        return torch.relu(self.lin(x)) + torch.tensor([1.0, 2.0, 3.0, 4.0]), \
            self.table.expand(3, 4) * 2.0


def test_constant_outputs_and_lifted_tensors_compile():
    module, x = BufferOutputs().eval(), randn(3, 4)
    fast = torch.compile(module, backend="tessel", options=FAST)
    with torch.no_grad():
        got, said = compiled_warnings(fast, x)
        assert_same(got, module(x))
    assert not any("could not compile" in s for s in said), said
    assert not got[0]._is_view()
    got[0].detach_()  # (a view cannot be detached in place: GPT-2's cache does this)


def test_a_graph_tessel_fails_on_runs_in_torch_unless_strict(monkeypatch):
    """Where eager runs, torch.compile(backend="tessel") runs: a failure inside tessel leaves
    the graph to PyTorch, said in one line; strict=True raises it."""
    from tessel.graph.torch_backend import split

    def broken(graphs, options):
        raise KeyError("a tessel bug")
    monkeypatch.setattr(split, "compile_pieces", broken)
    module, x = nn.Sequential(nn.Linear(3, 2), nn.ReLU()).eval(), randn(4, 3)
    with torch.no_grad():
        got, said = compiled_warnings(torch.compile(module, backend="tessel", options=FAST), x)
        assert_same(got, module(x))
        assert len(said) == 1 and "could not compile graph" in said[0]
        assert "KeyError: 'a tessel bug'" in said[0] and said[0].endswith("runs in PyTorch")
        torch._dynamo.reset()
        strict = torch.compile(module, backend="tessel", options={**FAST, "strict": True})
        with pytest.raises(Exception, match="a tessel bug"):
            strict(x)


def test_split_and_slices_run_in_tessel():
    """A fused qkv projection split in three and slices of computed tensors: no operator is
    left to PyTorch (aten.split ran there before)."""
    lin = nn.Linear(4, 12).eval()
    module = lambda x: tuple(torch.relu(p[:, 1:]) for p in lin(x).split(4, dim=-1))  # noqa: E731
    x = randn(3, 4)
    with torch.no_grad():
        got, said = compiled_warnings(torch.compile(module, backend="tessel", options=FAST), x)
        assert_same(got, module(x))
    assert said == []


class ShapeMasks(nn.Module):
    """Hugging Face's mask making in small: positions from torch.arange, a causal mask
    compared from them, a cumsum of their diff (operators tessel does not translate, on
    values known at import), applied to a computed tensor."""

    def forward(self, x):
        pos = torch.arange(x.shape[-1])
        causal = pos[None, :] <= pos[:, None]
        restarts = torch.cumsum(torch.diff(pos) != 1, dim=0)  # (no packed sequences: zeros)
        return torch.where(causal, torch.relu(x), -1.0) + restarts.sum() + pos


def test_values_known_at_import_run_in_tessel():
    """arange, diff, cumsum on shapes: torch computes them when tessel imports the graph,
    so nothing is left to PyTorch (they were, named as untranslated: GPT-2's masks)."""
    module, x = ShapeMasks(), randn(3, 5, 5)
    with torch.no_grad():
        got, said = compiled_warnings(torch.compile(module, backend="tessel", options=FAST), x)
        assert_same(got, module(x))
    assert said == []
