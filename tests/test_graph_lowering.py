"""Graph lowering (tessel.graph.lowering) and the numpy interpreter (tessel.graph.reference).

Every operator of OPS, alone in a graph, in its attribute variants and at small odd shapes:
the built kernel of its lowering, the reference and torch agree. Fused chains build as one
PrimFunc; a lone anchor lowers to the very workload of tessel.ops; run_graph matches a torch
model and names bad feeds.
"""

import numpy as np
import pytest
import torch

import tessel
from tessel import ir, ops, te
from tessel.graph import OPS, Graph, GraphError, Node, opdefs
from tessel.graph.ir import TensorType
from tessel.graph.fuse import fuse
from tessel.graph.lowering import lower
from tessel.graph.reference import evaluate, run_graph

TOL = dict(rtol=1e-4, atol=1e-5)
X3 = (3, 5, 7)
BN = [(5,)] * 4

# (op, inputs, attrs): an input is a shape (a graph input; a placeholder) or a float (a scalar
# constant of shape (); lowered as an immediate). Every operator's own examples
# (tessel.graph.opdefs): a new operator is tested here without a line in this file.
CASES = [(name, list(ex.inputs), dict(ex.attrs)) for name, op in OPS.items()
         for ex in op.examples if not ex.dtypes]
# the examples on integer and boolean tensors: (op, inputs, attrs, dtypes)
TYPED = [(name, list(ex.inputs), dict(ex.attrs), ex.dtypes) for name, op in OPS.items()
         for ex in op.examples if ex.dtypes]


def _case_id(case):
    op, inputs, attrs = case
    spec = ",".join(str(s).replace(" ", "") for s in inputs)
    extra = ",".join(f"{k}={v}" for k, v in attrs.items()).replace(" ", "")
    return f"{op}[{spec}]{extra}"


def _one_node(op, inputs, attrs):
    g = Graph(op)
    names = [g.add_constant(f"c{i}", np.float32(s)) if isinstance(s, float)
             else g.add_input(f"x{i}", s) for i, s in enumerate(inputs)]
    g.set_outputs([g.add_node(op, names, name=op, **attrs)])
    return g


def _random(rng, shape, domain):
    if domain == "positive":
        values = rng.uniform(0.2, 2.0, shape)
    elif domain == "nonzero":
        values = rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)
    else:
        values = rng.standard_normal(shape)
    return np.asarray(values, "float32")  # (an array also for shape ())


def _arrays(op, inputs, seed=0):
    rng = np.random.default_rng(seed)
    return [np.array(s, "float32") if isinstance(s, float)
            else _random(rng, s, OPS[op].domains.get(i)) for i, s in enumerate(inputs)]


def _run(func, arrays):
    """Build `func` and run it on `arrays` (its input params); its one output."""
    out = np.zeros(func.params[-1].shape, func.params[-1].dtype)
    tessel.build(func, tessel.Target("host"))(*arrays, out)
    return out


def _lower_graph(g):
    """The whole graph as one PrimFunc: params are the inputs and the non-scalar constants
    (placeholders, in that order), then the outputs; scalar constants become immediates."""
    env, params = {}, []
    for v in [*g.inputs, *g.constants]:
        const = g.constants.get(v)
        if const is not None and const.ndim == 0:
            env[v] = float(const)
        else:
            env[v] = te.placeholder(g.types[v].shape, g.types[v].dtype, name=v)
            params.append(v)
    for node in g.nodes:
        env[node.output] = lower(node, [env[v] for v in node.inputs], node.output)
    func = te.create_func([*(env[v] for v in params), *(env[v] for v in g.outputs)], g.name)
    return func, params


# ---- torch, the independent oracle -----------------------------------------------------------

def _torch(node, arrays):
    tensors = [torch.from_numpy(a.astype("float64")) for a in arrays]
    return OPS[node.op].torch(torch, *tensors, **node.attrs).numpy().astype("float32")


# ---- every operator, alone -------------------------------------------------------------------

def test_every_operator_is_defined_whole():
    """Each definition has every field, valid kinds and layout rules, and its own examples."""
    for name, op in OPS.items():
        assert op.name == name and op.kind in opdefs.base.KINDS, name
        assert op.layout in opdefs.base.LAYOUTS and op.examples, name
        assert callable(op.infer) and callable(op.lower) and callable(op.reference), name
        assert callable(op.torch), name  # the independent oracle of these tests
    assert {op for op, _, _ in CASES} | {op for op, *_ in TYPED} == set(OPS)
    assert OPS["conv"].layout == "anchor" and OPS["relu"].layout == "channelwise"
    assert OPS["add"].layout == "broadcast" and OPS["reshape"].layout == "barrier"


@pytest.mark.parametrize("name, changes, match", [
    ("relu", {}, "defined twice"), ("new_op", dict(kind="magic"), "kind 'magic'"),
    ("new_op", dict(layout="any"), "layout rule 'any'"),
    ("new_op", dict(examples=[]), "at least one example"),
    ("new_op", dict(domains={0: "odd"}), "input domains")])
def test_a_bad_definition_is_refused(name, changes, match):
    relu = OPS["relu"]
    fields = {"kind": relu.kind, "layout": relu.layout, "examples": relu.examples, **changes}
    with pytest.raises(GraphError, match=match):
        opdefs.define(name, fields.pop("kind"), relu.infer, relu.lower, relu.reference, **fields)
    assert "new_op" not in OPS


@pytest.mark.parametrize("op, inputs, attrs", [
    ("conv", [(1, 3, 9, 7), (5, 3, 3, 3)], dict(pads=(1, 1, 1, 1))),
    ("dense", [(7, 5), (3, 5), (3,)], {}), ("relu", [X3], {}), ("softmax", [(7, 13)], {})])
def test_flops_count_the_lowered_program(op, inputs, attrs):
    types = [TensorType(s) for s in inputs]
    flops = OPS[op].flops(types, attrs)
    expected = {"conv": 1 * 5 * 9 * 7 * 2 * 3 * 9, "dense": 7 * 3 * (2 * 5 + 1),
                "relu": 3 * 5 * 7}.get(op)
    assert flops > 0 and (expected is None or flops == expected)


@pytest.mark.parametrize("op, inputs, attrs", CASES, ids=[_case_id(c) for c in CASES])
def test_lowered_op_matches_reference_and_torch(op, inputs, attrs):
    g = _one_node(op, inputs, attrs)
    node, arrays = g.nodes[0], _arrays(op, inputs)
    expected = evaluate(node, arrays)
    assert expected.dtype == np.float32 and expected.shape == g.types[node.output].shape
    np.testing.assert_allclose(expected, _torch(node, arrays), **TOL)
    placeholders = [te.placeholder(s, name=f"x{i}") for i, s in enumerate(inputs)
                    if not isinstance(s, float)]
    it = iter(placeholders)
    out = lower(node, [s if isinstance(s, float) else next(it) for s in inputs], "out")
    func = te.create_func([*placeholders, out], name=f"lowered_{op}")
    got = _run(func, [a for a, s in zip(arrays, inputs) if not isinstance(s, float)])
    np.testing.assert_allclose(got, expected, **TOL)


def _typed(rng, shape, dtype, domain):
    """Small integers of either sign (valid rows of a gather from either end), 0/1 bools,
    floats of a few units (casts truncate them both ways); no zeros in a "nonzero" domain."""
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype != "float32":
        values = rng.integers(-3 if dtype.startswith("int") else 0, 4, shape)
        return np.where(values == 0, 2, values).astype(dtype) if domain == "nonzero" \
            else values.astype(dtype)
    return (rng.standard_normal(shape) * 3).astype("float32")


def _same(got, want):
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, **TOL)
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op, inputs, attrs, dtypes", TYPED,
                         ids=[f"{_case_id(c[:3])}:{','.join(c[3])}" for c in TYPED])
def test_typed_op_matches_reference_and_torch(op, inputs, attrs, dtypes):
    """The operators on integer and boolean tensors: reference, torch and the lowered kernel
    agree exactly (integers, bools) or within TOL (floats), in the output's dtype."""
    rng = np.random.default_rng(0)
    arrays = [_typed(rng, s, d, OPS[op].domains.get(i))
              for i, (s, d) in enumerate(zip(inputs, dtypes))]
    g = Graph(op)
    names = [g.add_input(f"x{i}", a.shape, str(a.dtype)) for i, a in enumerate(arrays)]
    g.set_outputs([g.add_node(op, names, name=op, **attrs)])
    node = g.nodes[0]
    expected = evaluate(node, arrays)
    assert expected.dtype == np.dtype(g.types[node.output].dtype)
    want = OPS[op].torch(torch, *(torch.from_numpy(a) for a in arrays), **node.attrs).numpy()
    _same(expected, want.astype(expected.dtype))
    placeholders = [te.placeholder(a.shape, str(a.dtype), name=f"x{i}")
                    for i, a in enumerate(arrays)]
    func = te.create_func([*placeholders, lower(node, placeholders, "out")], name=op)
    _same(_run(func, arrays), expected)


def test_scalar_args_become_immediates():
    """div(x, 8.0) reads one buffer and divides by the constant; pow(x, 2.0) is x * x."""
    x = te.placeholder(X3, name="x")
    div = lower(Node("div", ("x", "c"), "y"), [x, 8.0], "y")
    assert isinstance(div.op.body, ir.BinOp) and div.op.body.op == "/"
    assert isinstance(div.op.body.b, ir.FloatImm) and div.op.body.b.value == 8.0
    square = lower(Node("pow", ("x", "c"), "y"), [x, 2.0], "y").op.body
    assert square.op == "*" and not ir.collect(square, ir.Call)


def test_the_fields_graph_passes_ask_are_consistent():
    """A blocked form is an operator; a finite operator gives finite values on finite inputs
    (zeros and large ones: padded channels), those with a domain drawn in it."""
    for name, op in OPS.items():
        assert op.blocked is None or op.blocked[0] in OPS, name
        assert len(op.param_names) in (0, op.n_inputs[1]), name
        assert op.kind == "anchor" or not op.folds_transposes, name
    rng = np.random.default_rng(0)
    for op, inputs, attrs in [c for c in CASES if OPS[c[0]].finite]:
        arrays = _arrays(op, inputs)
        for i, a in enumerate(arrays):
            if a.ndim and i not in OPS[op].domains:
                a[:] = rng.choice([0.0, -100.0, 100.0], a.shape) * rng.uniform(0, 1, a.shape)
        g = _one_node(op, inputs, attrs)
        assert np.isfinite(evaluate(g.nodes[0], arrays)).all(), (op, inputs, attrs)


# ---- stage structure: the workloads of tessel.ops --------------------------------------------

# (op, input shapes, attrs, the tessel.ops factory call the lowering must equal structurally)
SAME_AS_OPS = [
    ("conv", [(1, 5, 13, 11), (7, 5, 3, 3)], dict(strides=(2, 2), pads=(1,) * 4,
                                                  dilations=(2, 2)),
     lambda: ops.conv2d(1, 5, 13, 11, 7, 3, 3, stride=2, padding=1, dilation=2)),
    ("conv", [(1, 6, 11, 9), (6, 1, 3, 5)], dict(strides=(2, 2), pads=(1, 2, 1, 2), groups=6),
     lambda: ops.depthwise_conv2d(1, 6, 11, 9, 3, 5, stride=2, padding=(1, 2))),
    ("conv", [(2, 5, 17), (7, 5, 3)], dict(strides=(2,), pads=(1, 1)),
     lambda: ops.conv1d(2, 5, 17, 7, 3, stride=2, padding=1)),
    ("conv", [(1, 2, 5, 7, 6), (3, 2, 3, 2, 3)], dict(strides=(1, 2, 2), pads=(1,) * 6),
     lambda: ops.conv3d(1, 2, 5, 7, 6, 3, 3, 2, 3, stride=(1, 2, 2), padding=1)),
    ("conv_transpose", [(1, 4, 5, 3), (4, 3, 3, 4)],
     dict(strides=(2, 2), pads=(1,) * 4, output_padding=(1, 1), groups=2),
     lambda: ops.conv2d_transpose(1, 4, 5, 3, 6, 3, 4, stride=2, padding=1, output_padding=1,
                                  groups=2)),
    ("dense", [(7, 5), (13, 5), (13,)], {}, lambda: ops.dense(7, 13, 5)),
    ("matmul", [(7, 5), (5, 13)], {}, lambda: ops.matmul(7, 13, 5)),
    ("matmul", [(3, 7, 5), (3, 5, 11)], {}, lambda: ops.batch_matmul(3, 7, 11, 5)),
    ("max_pool", [(1, 3, 11, 8)], dict(kernel=(3, 3), strides=(2, 2), pads=(1,) * 4),
     lambda: ops.max_pool2d(1, 3, 11, 8, 3, stride=2, padding=1)),
    ("avg_pool", [(1, 3, 11, 8)], dict(kernel=(3, 3), strides=(2, 2), pads=(1,) * 4,
                                       count_include_pad=True),
     lambda: ops.avg_pool2d(1, 3, 11, 8, 3, stride=2, padding=1)),
    ("global_avg_pool", [(2, 3, 7, 5)], {}, lambda: ops.global_avg_pool2d(2, 3, 7, 5)),
    ("batch_norm", [(2, 3, 4, 5)] + [(3,)] * 4, {}, lambda: ops.batch_norm(2, 3, 4, 5)),
    ("layer_norm", [(7, 13), (13,), (13,)], {}, lambda: ops.layer_norm(7, 13)),
    ("softmax", [(7, 13)], {}, lambda: ops.softmax(7, 13)),
    ("gelu", [(2, 3, 5)], {}, lambda: ops.gelu((2, 3, 5))),
    ("relu", [(3, 5)], {}, lambda: ops.relu((3, 5))),
    ("add", [(2, 3, 5)] * 2, {}, lambda: ops.add((2, 3, 5))),
]


@pytest.mark.parametrize("op, inputs, attrs, factory", SAME_AS_OPS,
                         ids=[_case_id(c[:3]) for c in SAME_AS_OPS])
def test_lone_operator_lowers_to_the_ops_workload(op, inputs, attrs, factory):
    func, _ = _lower_graph(_one_node(op, inputs, attrs))
    assert func.structural_hash() == factory().structural_hash()


def _block_names(func):
    return [b.name for b in ir.blocks(func.body) if b is not func.root]


@pytest.mark.parametrize("op, inputs, attrs, names", [
    ("conv", [(1, 3, 9, 7), (5, 3, 3, 3), (5,)], dict(pads=(1,) * 4), ["y_pad", "y_conv", "y"]),
    ("conv", [(1, 3, 9, 7), (5, 3, 3, 3)], {}, ["y"]),
    ("conv_transpose", [(1, 3, 5, 7), (3, 5, 3, 3), (5,)], dict(strides=(2, 2)),
     ["y_pad", "y_conv", "y"]),
    ("dense", [(7, 5), (3, 5), (3,)], {}, ["y_dense", "y"]),
    ("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), pads=(1,) * 4), ["y_pad", "y_sum", "y"]),
    ("reduce_mean", [X3], dict(axes=(1,)), ["y_sum", "y"]),
    ("softmax", [X3], dict(axis=0), ["y_maxelem", "y_exp", "y_expsum", "y"]),
    ("layer_norm", [X3, (7,)], {}, ["y_mean", "y_var", "y"]),
    ("batch_norm", [(2, 5, 3, 7), *BN], {}, ["y"]),
    ("reshape", [X3], dict(shape=(35, 3)), ["y"]),
])
def test_stage_names(op, inputs, attrs, names):
    g = _one_node(op, inputs, attrs)
    placeholders = [te.placeholder(s) for s in inputs]
    func = te.create_func([*placeholders, lower(g.nodes[0], placeholders, "y")])
    assert _block_names(func) == names


def test_avg_pool_divisor_is_constant_when_every_window_is_full():
    x = te.placeholder((1, 3, 7, 9))
    out = lower(_one_node("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2))).nodes[0],
                [x], "y")
    assert isinstance(out.op.body.b, ir.FloatImm) and out.op.body.b.value == 9.0


# ---- fused chains: many nodes, one PrimFunc ----------------------------------------------------

def _conv_bn_residual():
    rng = np.random.default_rng(3)
    g = Graph("conv_bn_residual")
    x, r = g.add_input("x", (1, 3, 9, 7)), g.add_input("r", (1, 5, 9, 7))
    w = g.add_constant("w", rng.standard_normal((5, 3, 3, 3)).astype("float32"))
    b = g.add_constant("b", rng.standard_normal(5).astype("float32"))
    bn = [g.add_constant(n, rng.uniform(0.5, 1.5, 5).astype("float32"))
          for n in ("scale", "shift", "mean", "var")]
    y = g.add_node("conv", [x, w, b], name="conv", pads=(1, 1, 1, 1))
    y = g.add_node("batch_norm", [y, *bn], name="bn")
    y = g.add_node("add", [y, r], name="residual")
    g.set_outputs([g.add_node("relu", [y], name="relu")])
    return g


def _attention():
    g = Graph("attention")
    q, k, v = (g.add_input(n, s) for n, s in (("q", (2, 7, 5)), ("k", (2, 5, 7)),
                                               ("v", (2, 7, 3))))
    eight = g.add_constant("eight", np.float32(8.0))
    s = g.add_node("div", [g.add_node("matmul", [q, k]), eight])
    p = g.add_node("softmax", [s], axis=-1)
    o = g.add_node("reshape", [g.add_node("matmul", [p, v])], shape=(2, 21))
    g.set_outputs([g.add_node("gelu", [o], approximate="tanh")])
    return g


@pytest.mark.parametrize("make, n_blocks", [(_conv_bn_residual, 6), (_attention, 9)],
                         ids=["conv_bn_residual", "attention"])
def test_fused_chain_matches_reference(make, n_blocks):
    g = make()
    func, params = _lower_graph(g)
    assert len(_block_names(func)) == n_blocks and func.params[-1].name == g.outputs[0]
    feeds = {v: np.random.default_rng(1).standard_normal(g.types[v].shape).astype("float32")
             for v in g.inputs}
    got = _run(func, [feeds[v] if v in feeds else g.constants[v] for v in params])
    expected, = run_graph(g, feeds)
    np.testing.assert_allclose(got, expected, **TOL)


UNARY_ELEMWISE = [n for n, op in OPS.items() if op.kind == "elemwise" and op.n_inputs == (1, 1)
                  and op.dtype in (opdefs.base.floats, opdefs.base.numbers)]


@pytest.mark.parametrize("op", UNARY_ELEMWISE)
def test_every_unary_elementwise_op_fuses_into_a_conv(op):
    """conv -> op is one fused group (one kernel), and that kernel matches the reference."""
    g = Graph(f"conv_{op}")
    x = g.add_input("x", (1, 3, 9, 7))
    w = g.add_constant("w", np.abs(_random(np.random.default_rng(2), (4, 3, 3, 3), None)))
    y = g.add_node("conv", [x, w], pads=(1, 1, 1, 1))
    g.set_outputs([g.add_node(op, [y], name="out")])
    assert [grp.name for grp in fuse(g)] == [f"fused_conv_{op}"]
    func, params = _lower_graph(g)
    feeds = {"x": np.abs(_random(np.random.default_rng(1), (1, 3, 9, 7), None)) + 0.1}
    got = _run(func, [feeds[v] if v in feeds else g.constants[v] for v in params])
    expected, = run_graph(g, feeds)
    np.testing.assert_allclose(got, expected, **TOL)


def test_conv_chain_block_names():
    func, _ = _lower_graph(_conv_bn_residual())
    assert _block_names(func) == ["conv_pad", "conv_conv", "conv", "bn", "residual", "relu"]


# ---- the interpreter: a small model against torch, and its checks --------------------------------

def _small_resnet():
    rng = np.random.default_rng(5)
    g = Graph("small_resnet")
    x = g.add_input("x", (2, 3, 17, 15))

    def const(name, shape, scale=0.3):
        return g.add_constant(name, (rng.standard_normal(shape) * scale).astype("float32"))

    def conv_bn(v, name, cin, cout, k, stride):
        w = const(f"{name}_w", (cout, cin, k, k))
        y = g.add_node("conv", [v, w], name=name, strides=(stride,) * 2, pads=(k // 2,) * 4)
        bn = [const(f"{name}_s", (cout,)), const(f"{name}_b", (cout,)),
              const(f"{name}_m", (cout,)),
              g.add_constant(f"{name}_v", rng.uniform(0.5, 2.0, cout).astype("float32"))]
        return g.add_node("batch_norm", [y, *bn])

    y = g.add_node("relu", [conv_bn(x, "stem", 3, 8, 3, 2)])
    y = g.add_node("max_pool", [y], kernel=(3, 3), strides=(2, 2), pads=(1,) * 4)
    z = g.add_node("relu", [conv_bn(y, "c1", 8, 8, 3, 1)])
    y = g.add_node("relu", [g.add_node("add", [conv_bn(z, "c2", 8, 8, 3, 1), y])])
    y = g.add_node("reshape", [g.add_node("global_avg_pool", [y])], shape=(2, 8))
    y = g.add_node("dense", [y, const("fc_w", (5, 8)), const("fc_b", (5,))])
    g.set_outputs([g.add_node("softmax", [y], axis=1)])
    return g


def _torch_model(g, feeds):
    """Run `g` node by node with the torch oracle (an interpreter independent of numpy's)."""
    env = {**g.constants, **feeds}
    for node in g.nodes:
        env[node.output] = _torch(node, [env[v] for v in node.inputs])
    return env[g.outputs[0]]


def test_run_graph_matches_torch_on_a_small_resnet():
    g = _small_resnet()
    x = np.random.default_rng(0).standard_normal((2, 3, 17, 15)).astype("float32")
    got, = run_graph(g, {"x": x})
    assert got.shape == (2, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, _torch_model(g, {"x": x}), **TOL)
    again, = run_graph(g, [x])  # feeds as a list, in input order
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("feeds, match", [
    ({}, r"no feed for input\(s\) \['x'\]"),
    ({"x": np.zeros((2, 3, 17, 15), "float32"), "y": np.zeros(1)}, r"feeds \['y'\] are not"),
    ({"x": np.zeros((2, 3, 15, 17), "float32")}, r"feed 'x' has shape \(2, 3, 15, 17\)"),
    ({"x": np.zeros((2, 3, 17, 15))}, "feed 'x' has dtype float64, the input is float32"),
    ([], "0 feeds given for 1 inputs"),
])
def test_run_graph_names_bad_feeds(feeds, match):
    with pytest.raises(GraphError, match=match):
        run_graph(_small_resnet(), feeds)


def test_evaluate_defaults_attributes_and_checks_shapes():
    x = np.ones((1, 4, 5, 5), "float32")
    out = evaluate(Node("conv", ("x", "w"), "y"), [x, np.ones((2, 4, 3, 3), "float32")])
    assert out.shape == (1, 2, 3, 3) and np.all(out == 36.0)
    with pytest.raises(GraphError, match="input channels do not fit"):
        evaluate(Node("conv", ("x", "w"), "y", name="c"), [x, np.ones((2, 3, 3, 3), "float32")])


@pytest.mark.parametrize("node, args, match", [
    (Node("conv", ("x", "w"), "y"), ["x", 2.0], "input 1 must be a tensor"),
    (Node("add", ("a", "b"), "y"), [2.0, 3.0], "both inputs are floats"),
    (Node("add", ("a", "b"), "y"), ["x", "text"], "must be a te.Tensor, a float or a literal"),
    (Node("scatter_nd", ("a",), "y"), ["x"], "unsupported operator 'scatter_nd'"),
    (Node("softmax", ("a",), "y", dict(axis=4)), ["x"], "axis 4 out of range"),
])
def test_lower_errors(node, args, match):
    x = te.placeholder((1, 3, 5, 5), name="x")
    with pytest.raises(GraphError, match=match):
        lower(node, [x if a == "x" else a for a in args], "y")
