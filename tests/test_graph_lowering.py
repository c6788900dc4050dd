"""Graph lowering (tessel.graph.lowering) and the numpy interpreter (tessel.graph.reference).

Every operator of OPS, alone in a graph, in its attribute variants and at small odd shapes:
the built kernel of its lowering, the reference and torch agree. Fused chains build as one
PrimFunc; a lone anchor lowers to the very workload of tessel.ops; run_graph matches a torch
model and names bad feeds.
"""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tessel
from tessel import ir, ops, te
from tessel.graph import OPS, Graph, GraphError, Node
from tessel.graph.lowering import LOWERINGS, lower
from tessel.graph.reference import EVALUATORS, evaluate, run_graph

TOL = dict(rtol=1e-4, atol=1e-5)
X3 = (3, 5, 7)
BN = [(5,)] * 4

# (op, inputs, attrs): an input is a shape (a graph input; a placeholder) or a float (a scalar
# constant of shape (); lowered as an immediate)
CASES = [
    # convolutions: bias, groups, depthwise, dilation, strides, asymmetric pads, 1-3 d
    ("conv", [(1, 3, 9, 7), (5, 3, 3, 3), (5,)], dict(pads=(1, 1, 1, 1))),
    ("conv", [(1, 6, 11, 9), (9, 2, 3, 3)], dict(strides=(2, 2), dilations=(2, 2), groups=3)),
    ("conv", [(1, 3, 9, 7), (5, 3, 2, 3)], dict(strides=(2, 1), pads=(0, 1, 2, 1))),
    ("conv", [(2, 5, 9, 7), (5, 1, 3, 3), (5,)], dict(pads=(1, 1, 1, 1), groups=5)),
    ("conv", [(1, 3, 7, 9), (5, 3, 1, 1)], {}),
    ("conv", [(2, 3, 13), (5, 3, 3)], dict(strides=(2,), pads=(1, 2), dilations=(2,))),
    ("conv", [(1, 3, 5, 7, 6), (5, 3, 3, 2, 3), (5,)],
     dict(strides=(1, 2, 2), pads=(1, 0, 1, 1, 1, 0))),
    ("conv_transpose", [(1, 3, 5, 7), (3, 5, 3, 3), (5,)],
     dict(strides=(2, 2), pads=(1, 1, 1, 1), output_padding=(1, 0))),
    ("conv_transpose", [(1, 4, 5, 3), (4, 3, 3, 2)],
     dict(strides=(2, 3), pads=(1, 0, 0, 2), dilations=(2, 1), groups=2)),
    ("conv_transpose", [(2, 3, 7), (3, 5, 3)], dict(strides=(3,), pads=(2, 1))),
    ("conv_transpose", [(1, 2, 3, 5, 4), (2, 3, 3, 3, 2)],
     dict(strides=(1, 2, 2), pads=(1, 0, 1, 0, 1, 0), output_padding=(0, 1, 0))),
    # products
    ("dense", [(7, 5), (3, 5), (3,)], {}),
    ("dense", [(2, 3, 5), (7, 5)], {}),
    ("dense", [(5,), (3, 5), (3,)], {}),
    ("matmul", [(7, 5), (5, 3)], {}),
    ("matmul", [(2, 7, 5), (5, 3)], {}),
    ("matmul", [(2, 1, 7, 5), (3, 5, 11)], {}),
    ("matmul", [(7, 5), (3, 5, 2)], {}),
    # binary: same shapes, broadcasting (rank-1, size-1 dims, rank 0), scalar floats
    ("add", [X3, X3], {}),
    ("add", [X3, (5, 1)], {}),
    ("add", [X3, ()], {}),
    ("sub", [(7,), X3], {}),
    ("sub", [1.0, X3], {}),
    ("mul", [(2, 3, 5, 7), (3, 1, 1)], {}),
    ("mul", [0.5, X3], {}),
    ("div", [X3, 8.0], {}),
    ("div", [X3, (1, 5, 1)], {}),
    ("div", [3.0, X3], {}),
    ("pow", [X3, X3], {}),
    ("pow", [X3, 2.0], {}),
    ("pow", [X3, 3.0], {}),
    ("pow", [X3, 0.5], {}),
    ("pow", [X3, -0.5], {}),
    ("pow", [X3, 1.7], {}),
    ("pow", [2.0, X3], {}),
    ("maximum", [X3, (1, 7)], {}),
    ("maximum", [X3, 0.25], {}),
    ("minimum", [(5, 1), X3], {}),
    ("minimum", [-0.5, X3], {}),
    # unary
    *[(op, [X3], {}) for op in ("relu", "sigmoid", "tanh", "erf", "exp", "log", "sqrt", "neg",
                                "abs", "gelu")],
    ("gelu", [X3], dict(approximate="tanh")),
    ("clip", [X3], dict(min=-0.5, max=0.5)),
    ("clip", [X3], dict(max=0.3)),
    ("clip", [X3], dict(min=0.1)),
    ("leaky_relu", [X3], {}),
    ("leaky_relu", [X3], dict(alpha=0.2)),
    ("batch_norm", [(2, 5, 3, 7), *BN], dict(epsilon=1e-3)),
    ("batch_norm", [(3, 5, 7), *BN], {}),
    ("batch_norm", [(3, 5), *BN], {}),
    # pools: padding, strides, ceil_mode (incl. a dropped last window), count_include_pad
    ("max_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    ("max_pool", [(1, 3, 11, 13)], dict(kernel=(3, 2), strides=(2, 2), pads=(1, 1, 1, 1),
                                        ceil_mode=True)),
    ("max_pool", [(2, 3, 7, 9)], dict(kernel=(2, 3), pads=(0, 1, 1, 0))),
    ("max_pool", [(1, 3, 13)], dict(kernel=(3,), strides=(2,), ceil_mode=True)),
    ("max_pool", [(1, 2, 5, 7, 6)], dict(kernel=(2, 3, 2), strides=(1, 2, 2), pads=(0, 1, 1) * 2)),
    ("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))),
    ("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1),
                                      count_include_pad=True)),
    ("avg_pool", [(2, 3, 7, 9)], dict(kernel=(3, 2))),
    ("avg_pool", [(1, 3, 11, 13)], dict(kernel=(3, 2), strides=(2, 2), pads=(1, 1, 1, 1),
                                        ceil_mode=True, count_include_pad=True)),
    ("avg_pool", [(1, 3, 11, 13)], dict(kernel=(3, 3), strides=(2, 2), ceil_mode=True)),
    ("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2), pads=(0, 1, 2, 1))),
    ("avg_pool", [(1, 3, 7, 9)], dict(kernel=(3, 3), strides=(2, 2), pads=(0, 1, 2, 1),
                                      count_include_pad=True)),
    ("avg_pool", [(1, 3, 13)], dict(kernel=(3,), strides=(2,), pads=(1, 1), ceil_mode=True)),
    ("avg_pool", [(1, 2, 5, 7, 6)], dict(kernel=(2, 3, 3), strides=(1, 2, 2), pads=(1,) * 6)),
    ("global_avg_pool", [(2, 3, 7, 9)], {}),
    ("global_avg_pool", [(2, 3, 7)], {}),
    ("global_avg_pool", [(1, 3, 5, 7, 3)], {}),
    # reductions and normalizations
    ("reduce_mean", [X3], dict(axes=(1,))),
    ("reduce_mean", [X3], dict(axes=(0, 2), keepdims=False)),
    ("reduce_mean", [X3], dict(axes=(0, 1, 2), keepdims=False)),
    ("reduce_mean", [(2, 3, 5, 7)], dict(axes=(-1, -2))),
    ("softmax", [(7, 13)], {}),
    ("softmax", [X3], dict(axis=1)),
    ("softmax", [(11,)], {}),
    ("layer_norm", [(7, 13), (13,), (13,)], {}),
    ("layer_norm", [X3, (5, 7)], dict(axis=1, epsilon=1e-3)),
    ("layer_norm", [(2, 3, 5), (2, 3, 5), (2, 3, 5)], dict(axis=0)),
    # layout
    ("reshape", [X3], dict(shape=(5, 21))),
    ("reshape", [(2, 3, 5)], dict(shape=(30,))),
    ("reshape", [(2, 15)], dict(shape=(2, 3, 5))),
    ("transpose", [X3], dict(perm=(2, 0, 1))),
    ("transpose", [(2, 3, 5, 7)], dict(perm=(0, 2, 3, 1))),
    ("concat", [(2, 3, 5), (2, 1, 5), (2, 4, 5)], dict(axis=1)),
    ("concat", [(3, 5), (2, 5)], dict(axis=0)),
    ("concat", [(3, 2), (3, 5)], dict(axis=-1)),
]

# which inputs need positive values (or values away from 0, for "nonzero")
DOMAIN = {("log", 0): "positive", ("sqrt", 0): "positive", ("pow", 0): "positive",
          ("div", 1): "nonzero", ("batch_norm", 4): "positive"}


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
            else _random(rng, s, DOMAIN.get((op, i))) for i, s in enumerate(inputs)]


def _run(func, arrays):
    """Build `func` and run it on `arrays` (its input params); its one output."""
    out = np.zeros(func.params[-1].shape, "float32")
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

def _torch_pads(pads):
    """ONNX pads (begins, then ends) as F.pad's list (last axis first)."""
    nd = len(pads) // 2
    return [p for d in reversed(range(nd)) for p in (pads[d], pads[d + nd])]


def _t_conv(x, w, b=None, *, strides, pads, dilations, groups):
    conv = getattr(F, f"conv{x.dim() - 2}d")
    return conv(F.pad(x, _torch_pads(pads)), w, b, strides, 0, dilations, groups)


def _t_conv_transpose(x, w, b=None, *, strides, pads, output_padding, dilations, groups):
    nd = x.dim() - 2
    full = getattr(F, f"conv_transpose{nd}d")(x, w, b, strides, 0, output_padding, groups,
                                              dilations)
    crop = [slice(pads[d], full.shape[2 + d] - pads[d + nd]) for d in range(nd)]
    return full[(slice(None), slice(None), *crop)]


def _t_sum_pool(x, kernel, strides, ceil_mode):
    """Window sums (avg_pool with divisor 1; 1-d pools run as 2-d ones)."""
    if x.dim() == 3:
        return _t_sum_pool(x.unsqueeze(2), (1, *kernel), (1, *strides), ceil_mode).squeeze(2)
    pool = getattr(F, f"avg_pool{x.dim() - 2}d")
    return pool(x, kernel, strides, 0, ceil_mode, True, divisor_override=1)


def _t_pool(x, *, kernel, strides, pads, ceil_mode, count_include_pad=None):
    nd = x.dim() - 2
    before, after = pads[:nd], pads[nd:]
    kind = "max" if count_include_pad is None else "avg"
    pool = getattr(F, f"{kind}_pool{nd}d")
    if before == after and kind == "max":
        return pool(x, kernel, strides, before, ceil_mode=ceil_mode)
    if before == after:
        return pool(x, kernel, strides, before, ceil_mode, count_include_pad)
    if kind == "max":
        padded = F.pad(x, _torch_pads(pads), value=-math.inf)
        return pool(padded, kernel, strides, 0, ceil_mode=ceil_mode)
    # asymmetric average: sums over the padded input / counts of the elements that count
    sums = _t_sum_pool(F.pad(x, _torch_pads(pads)), kernel, strides, ceil_mode)
    ones = F.pad(torch.ones_like(x), _torch_pads(pads), value=float(count_include_pad))
    return sums / _t_sum_pool(ones, kernel, strides, ceil_mode)


def _t_reduce_mean(x, *, axes, keepdims):
    out = torch.mean(x, dim=axes, keepdim=keepdims)
    return out.reshape(1) if out.dim() == 0 else out


def _t_layer_norm(x, scale, bias=None, *, axis, epsilon):
    return F.layer_norm(x, x.shape[axis:], scale, bias, epsilon)


TORCH = {
    "conv": _t_conv, "conv_transpose": _t_conv_transpose,
    "dense": lambda x, w, b=None: F.linear(x, w, b), "matmul": torch.matmul,
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum,
    "relu": F.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "erf": torch.erf,
    "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "neg": torch.neg, "abs": torch.abs,
    "gelu": lambda x, approximate: F.gelu(x, approximate=approximate),
    "clip": lambda x, min, max: torch.clamp(x, min, max),
    "leaky_relu": lambda x, alpha: F.leaky_relu(x, alpha),
    "batch_norm": lambda x, s, b, m, v, epsilon: F.batch_norm(x, m, v, s, b, False, 0.0,
                                                              epsilon),
    "max_pool": _t_pool, "avg_pool": _t_pool,
    "global_avg_pool": lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True),
    "reduce_mean": _t_reduce_mean, "softmax": lambda x, axis: torch.softmax(x, axis),
    "layer_norm": _t_layer_norm, "reshape": lambda x, shape: x.reshape(shape),
    "transpose": lambda x, perm: x.permute(perm), "concat": lambda *xs, axis: torch.cat(xs, axis),
}


def _torch(node, arrays):
    tensors = [torch.from_numpy(a.astype("float64")) for a in arrays]
    return TORCH[node.op](*tensors, **node.attrs).numpy().astype("float32")


# ---- every operator, alone -------------------------------------------------------------------

def test_every_operator_is_lowered_evaluated_and_tested():
    assert set(LOWERINGS) == set(OPS) == set(EVALUATORS) == set(TORCH)
    assert {op for op, _, _ in CASES} == set(OPS)


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


def test_scalar_args_become_immediates():
    """div(x, 8.0) reads one buffer and divides by the constant; pow(x, 2.0) is x * x."""
    x = te.placeholder(X3, name="x")
    div = lower(Node("div", ("x", "c"), "y"), [x, 8.0], "y")
    assert isinstance(div.op.body, ir.BinOp) and div.op.body.op == "/"
    assert isinstance(div.op.body.b, ir.FloatImm) and div.op.body.b.value == 8.0
    square = lower(Node("pow", ("x", "c"), "y"), [x, 2.0], "y").op.body
    assert square.op == "*" and not ir.collect(square, ir.Call)


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
    (Node("add", ("a", "b"), "y"), ["x", "text"], "must be a te.Tensor or a float"),
    (Node("gather", ("a",), "y"), ["x"], "unsupported operator 'gather'"),
    (Node("softmax", ("a",), "y", dict(axis=4)), ["x"], "axis 4 out of range"),
])
def test_lower_errors(node, args, match):
    x = te.placeholder((1, 3, 5, 5), name="x")
    with pytest.raises(GraphError, match=match):
        lower(node, [x if a == "x" else a for a in args], "y")
