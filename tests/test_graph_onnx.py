"""tessel.graph.frontend.onnx_import: small ONNX models (odd shapes: 7x9 images, 5 channels, primes)
imported, run by the graph reference interpreter and compared with onnxruntime; the
translation's structure (op counts) where it matters; and the errors."""
from __future__ import annotations

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tessel.graph import OPS, GraphError  # noqa: E402
from tessel.graph.frontend.onnx_convert_math import UNARY  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402

IR_VERSION = {11: 7, 13: 7, 17: 8, 18: 8, 20: 9, 21: 10}


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def model(nodes, inputs, outputs, inits=None, opset=17):
    """An ONNX model of `nodes`; inputs maps names to shapes (a str dim is dynamic)."""
    g = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = IR_VERSION.get(opset, 7)
    return m


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"{op}_{outs[0]}", **attrs)


def check_ort(m, input_shapes=None, seed=0):
    """Import `m`, run it on random feeds with the reference and onnxruntime, compare."""
    graph = from_onnx(m, input_shapes)
    feeds = {v: rand(*graph.type_of(v).shape, seed=seed) for v in graph.inputs}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, feeds)
    got = run_graph(graph, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
    return graph


X = {"x": (2, 5, 7, 9)}
# a 0-d result (ONNX scalar) comes back from the graph reference as shape (1,)


# ---- convolutions ----

@pytest.mark.parametrize("attrs", [
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 3]),
    dict(auto_pad="VALID"),
    dict(pads=[1, 0, 2, 1], dilations=[2, 1]),
    dict(group=5, pads=[1, 1, 1, 1]),
])
def test_conv(attrs):
    cin = 1 if attrs.get("group") else 5
    inits = {"w": rand(3 if cin == 5 else 5, cin, 3, 4, seed=1), "b": rand(3 if cin == 5 else 5)}
    g = check_ort(model([node("Conv", ["x", "w", "b"], **attrs)], X, ["y"], inits))
    assert g.op_counts() == {"conv": 1}


def test_conv_1d_without_bias():
    check_ort(model([node("Conv", ["x", "w"], pads=[2, 1])], {"x": (1, 5, 11)}, ["y"],
                    {"w": rand(7, 5, 3)}))


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 2], pads=[1, 0, 0, 1]),
    dict(strides=[2, 2], output_shape=[14, 18]),
    dict(strides=[2, 3], output_shape=[15, 27]),  # larger than the unpadded output
    dict(strides=[2, 2], output_padding=[1, 0], group=5),
    dict(strides=[2, 2], auto_pad="SAME_UPPER"),
])
def test_conv_transpose(attrs):
    w = rand(5, 1 if attrs.get("group") else 3, 3, 3, seed=1)
    check_ort(model([node("ConvTranspose", ["x", "w", "b"], **attrs)], X, ["y"],
                    {"w": w, "b": rand(w.shape[1] * attrs.get("group", 1))}))


# ---- Gemm and MatMul ----

@pytest.mark.parametrize("attrs,b_shape,c_shape", [
    (dict(transB=0, alpha=0.5), (7, 11), (11,)),
    (dict(transB=1), (11, 7), (1, 11)),
    (dict(transA=1, transB=0, alpha=2.0, beta=0.5), (7, 11), (3, 11)),
    (dict(transB=0, beta=3.0), (7, 11), ()),
    (dict(transB=0), (7, 11), None),
])
def test_gemm(attrs, b_shape, c_shape):
    a = (7, 3) if attrs.get("transA") else (3, 7)
    inits = {"b": rand(*b_shape, seed=1)}
    if c_shape is not None:
        inits["c"] = rand(*c_shape, seed=2)
    ins = ["a", "b", "c"] if c_shape is not None else ["a", "b"]
    g = check_ort(model([node("Gemm", ins, **attrs)], {"a": a}, ["y"], inits))
    assert g.op_counts()["dense"] == 1
    assert g.op_counts().get("transpose", 0) == attrs.get("transA", 0)  # B: numpy at import


def test_gemm_computed_b_gets_transpose_node():
    nodes = [node("Gemm", ["a", "b"], alpha=0.25)]
    g = check_ort(model(nodes, {"a": (3, 7), "b": (7, 11)}, ["y"]))
    assert g.op_counts() == {"transpose": 1, "dense": 1, "mul": 1}


@pytest.mark.parametrize("a,b,const_b,ops", [
    ((2, 3, 7), (7, 5), True, {"dense": 1}),
    ((2, 3, 7), (2, 7, 5), False, {"matmul": 1}),
    ((2, 1, 3, 7), (5, 7, 11), False, {"matmul": 1}),
    ((7,), (2, 7, 5), False, {"reshape": 2, "matmul": 1}),
    ((2, 3, 7), (7,), True, {"matmul": 1, "reshape": 1}),
    pytest.param((7,), (7,), False, {"reshape": 3, "matmul": 1}),
])
def test_matmul(a, b, const_b, ops):
    inits = {"b": rand(*b, seed=1)} if const_b else {}
    inputs = {"a": a} if const_b else {"a": a, "b": b}
    g = check_ort(model([node("MatMul", ["a", "b"])], inputs, ["y"], inits))
    assert g.op_counts() == ops


@pytest.mark.parametrize("equation, shapes, const, ops", [
    ("bhid,bhjd->bhij", [(2, 3, 5, 7), (2, 3, 6, 7)], False, {"matmul": 1, "transpose": 1}),
    ("ij,jk", [(5, 7), (7, 3)], True, {"dense": 1}),
    ("...ij,...jk->...ik", [(2, 5, 7), (2, 7, 3)], False, {"matmul": 1}),
    ("bij->bji", [(2, 5, 7)], False, {"transpose": 1}),
    ("ijk->i", [(3, 5, 7)], False, {"reduce_sum": 1}),
    ("i,j->ij", [(5,), (7,)], False, {"matmul": 1, "reshape": 2}),
    ("bnd,bmd,dk->bnk", [(2, 3, 5), (2, 4, 5), (5, 6)], False, None),
    ("b i d , b j d -> b i j", [(3, 5, 7), (3, 6, 7)], False, None),
])
def test_einsum(equation, shapes, const, ops):
    """Einsum against onnxruntime: batched (attention's), implicit result, ellipsis, a
    constant right operand (a dense layer), one operand, an outer product, three operands."""
    names = [f"x{k}" for k in range(len(shapes))]
    inits = {names[-1]: rand(*shapes[-1], seed=1)} if const else {}
    inputs = {n: s for n, s in zip(names, shapes) if n not in inits}
    g = check_ort(model([node("Einsum", names, equation=equation)], inputs, ["y"], inits))
    if ops is not None:
        assert g.op_counts() == ops


@pytest.mark.parametrize("equation, match", [
    ("ii->i", "a letter repeated in one operand"), ("ij,jk->ik", "names 2 operands"),
    ("ijk->i", "term 'ijk' for an operand of shape"), ("ij->ix", "a letter no operand has")])
def test_einsum_errors(equation, match):
    with pytest.raises(GraphError, match=match):
        from_onnx(model([node("Einsum", ["x"], equation=equation)], {"x": (5, 5)}, ["y"]))


@pytest.mark.parametrize("attrs", [{}, dict(exclusive=1), dict(reverse=1),
                                   dict(exclusive=1, reverse=1)])
def test_cumsum(attrs):
    g = check_ort(model([node("CumSum", ["x", "axis"], **attrs)], {"x": (3, 11, 5)}, ["y"],
                        {"axis": np.array(-2, np.int64)}))
    assert g.op_counts() == {"cumsum": 1}


@pytest.mark.parametrize("upper, k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu(upper, k):
    g = check_ort(model([node("Trilu", ["x", "k"], upper=upper)], {"x": (2, 5, 7)}, ["y"],
                        {"k": np.array(k, np.int64)}))
    assert g.op_counts() == {"where": 1}


# ---- elementwise ----

@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
def test_binary_with_broadcast_constant(op):
    c = np.abs(rand(5, 1, 1, seed=1)) + 0.5
    g = check_ort(model([node(op, ["x", "c"])], X, ["y"], {"c": c}))
    assert len(g.constants) == 1  # the constant stays a constant


def test_binary_computed_and_variadic():
    nodes = [node("Pow", ["a", "two"], ["p"]), node("Sum", ["a", "p", "b"], ["s"]),
             node("Max", ["s", "a", "b"], ["y"])]
    g = check_ort(model(nodes, {"a": (3, 1, 7), "b": (5, 7)}, ["y"], {"two": np.float32(2)}))
    assert g.op_counts() == {"pow": 1, "add": 2, "maximum": 2}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    """Every ONNX operator the importer maps onto one canonical unary operator (a new entry
    is tested here without a line in this file); positive inputs where its domain asks."""
    if OPS[UNARY[op]].domains.get(0) == "positive":
        nodes = [node("Abs", ["x"], ["a"]), node("Add", ["a", "half"], ["p"]), node(op, ["p"])]
        check_ort(model(nodes, X, ["y"], {"half": np.float32(0.5)}))
    else:
        check_ort(model([node(op, ["x"])], X, ["y"]))


@pytest.mark.parametrize("op,attrs", [("LeakyRelu", {"alpha": 0.3}), ("LeakyRelu", {})])
def test_unary_attributes(op, attrs):
    check_ort(model([node(op, ["x"], **attrs)], X, ["y"]))


def test_reciprocal():
    nodes = [node("Abs", ["x"], ["a"]), node("Reciprocal", ["a"])]
    check_ort(model(nodes, X, ["y"]))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    g = check_ort(model([node("Gelu", ["x"], approximate=approximate)], X, ["y"], opset=20))
    assert g.nodes[0].attrs["approximate"] == approximate


def test_clip_opset6_attributes():
    g = check_ort(model([node("Clip", ["x"], min=-0.5, max=0.7)], X, ["y"], opset=6))
    assert g.nodes[0].attrs == {"min": -0.5, "max": pytest.approx(0.7)}


def test_clip_opset13_inputs():
    nodes = [node("Clip", ["x", "", "hi"], ["c"]), node("Clip", ["c", "lo"], ["y"])]
    g = check_ort(model(nodes, X, ["y"], {"lo": np.float32(-0.2), "hi": np.float32(0.6)},
                        opset=13))
    largest = float(np.finfo(np.float32).max)  # an absent bound, as the spec has it
    assert [n.attrs for n in g.nodes] == [{"min": -largest, "max": pytest.approx(0.6)},
                                          {"min": pytest.approx(-0.2), "max": largest}]


def test_batch_norm():
    inits = {"s": rand(5, seed=1), "b": rand(5, seed=2), "m": rand(5, seed=3),
             "v": np.abs(rand(5, seed=4)) + 0.1}
    g = check_ort(model([node("BatchNormalization", ["x", "s", "b", "m", "v"], epsilon=1e-3)],
                        X, ["y"], inits))
    assert g.op_counts() == {"batch_norm": 1}


# ---- pools and reductions ----

@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2])),
    ("MaxPool", dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1, pads=[1, 0, 1, 0])),
    ("MaxPool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)),
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_LOWER")),
])
def test_pool(op, attrs):
    check_ort(model([node(op, ["x"], **attrs)], X, ["y"]))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool(op):
    check_ort(model([node(op, ["x"])], X, ["y"]))


@pytest.mark.parametrize("opset,axes,keepdims", [
    (13, [1, -1], 1), (13, [2], 0), (18, [1, -1], 1), (18, [-2], 0), (13, None, 1),
    pytest.param(13, None, 0),
])
def test_reduce_mean(opset, axes, keepdims):
    if opset >= 18 and axes is not None:
        n = node("ReduceMean", ["x", "axes"], keepdims=keepdims)
        inits = {"axes": np.array(axes, np.int64)}
    else:
        kw = {} if axes is None else {"axes": axes}
        n, inits = node("ReduceMean", ["x"], keepdims=keepdims, **kw), {}
    check_ort(model([n], X, ["y"], inits, opset=opset))


# ---- layout ----

@pytest.mark.parametrize("axis", [0, 1, 2, -1, 4])
def test_flatten(axis):
    g = check_ort(model([node("Flatten", ["x"], axis=axis)], X, ["y"]))
    assert set(g.op_counts()) == {"reshape"}


@pytest.mark.parametrize("shape", [[0, -1, 9], [-1, 0, 63], [2, 0, 9, -1], [10, 63]])
def test_reshape_zero_and_minus_one(shape):
    inits = {"s": np.array(shape, np.int64)}
    g = check_ort(model([node("Reshape", ["x", "s"])], X, ["y"], inits))
    assert g.op_counts() == {"reshape": 1}


def test_reshape_allowzero_keeps_empty_dims_an_error():
    inits = {"s": np.array([0, 315], np.int64)}
    with pytest.raises(GraphError, match="Reshape"):
        from_onnx(model([node("Reshape", ["x", "s"], allowzero=1)], X, ["y"], inits, opset=14))


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze(opset):
    if opset < 13:
        nodes = [node("Unsqueeze", ["x"], ["u"], axes=[0, -1]),
                 node("Squeeze", ["u"], ["y"], axes=[0, 5])]
        inits = {}
    else:
        nodes = [node("Unsqueeze", ["x", "ua"], ["u"]), node("Squeeze", ["u", "sa"], ["y"])]
        inits = {"ua": np.array([0, -1], np.int64), "sa": np.array([0, 5], np.int64)}
    nodes.append(node("Squeeze", ["p"], ["z"]))
    g = check_ort(model(nodes, {**X, "p": (1, 7, 1)}, ["y", "u", "z"], inits, opset=opset))
    assert g.type_of(g.outputs[1]).shape == (1, 2, 5, 7, 9, 1)
    assert g.type_of(g.outputs[2]).shape == (7,)


def test_transpose_and_concat():
    nodes = [node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
             node("Transpose", ["t"], ["r"]),
             node("Concat", ["t", "c", "t"], ["y"], axis=-1)]
    g = check_ort(model(nodes, X, ["y", "r"], {"c": rand(2, 7, 9, 3)}))
    assert g.op_counts() == {"transpose": 2, "concat": 1}


@pytest.mark.parametrize("opset,axis,ops", [
    (11, 1, {"reshape": 2, "softmax": 1}),
    (11, 2, {"softmax": 1}),
    (11, -3, {"reshape": 2, "softmax": 1}),
    (13, 1, {"softmax": 1}),
])
def test_softmax(opset, axis, ops):
    g = check_ort(model([node("Softmax", ["x"], axis=axis)], {"x": (3, 5, 7)}, ["y"],
                        opset=opset))
    assert g.op_counts() == ops


def test_softmax_opset11_default_axis():
    check_ort(model([node("Softmax", ["x"])], X, ["y"], opset=11))


def test_layer_norm():
    inits = {"s": rand(7, 9, seed=1), "b": rand(7, 9, seed=2)}
    n = node("LayerNormalization", ["x", "s", "b"], ["y", "mean"], axis=-2, epsilon=1e-3)
    g = check_ort(model([n], X, ["y"], inits))
    assert g.op_counts() == {"layer_norm": 1}  # an output no one reads is not computed
    n = node("LayerNormalization", ["x", "s"], ["y", "mean", "inv_std"], axis=2)
    check_ort(model([n, node("Neg", ["mean"], ["z"])], X, ["y", "z", "inv_std"], inits))


def test_identity_dropout_cast_pass_through():
    nodes = [node("Identity", ["x"], ["i"]), node("Dropout", ["i"], ["d", "mask"]),
             node("Cast", ["d"], ["c"], to=TensorProto.FLOAT), node("Relu", ["c"], ["r"]),
             node("Identity", ["r"], ["y"])]
    g = check_ort(model(nodes, X, ["y"]))
    assert g.op_counts() == {"relu": 1}
    assert g.outputs == ["r"]  # the renamed output resolves to the value that holds it


# ---- shape arithmetic, evaluated at import ----

def _shape_chain(opset):
    """What exporters emit for x.reshape(x.size(0), x.size(1), -1)."""
    def unsq(i, o):
        if opset >= 13:
            return node("Unsqueeze", [i, "zero_axis"], [o])
        return node("Unsqueeze", [i], [o], axes=[0])
    return [
        node("Shape", ["x"], ["shape"]),
        node("Constant", [], ["i0"], value=numpy_helper.from_array(np.array(0, np.int64))),
        node("Constant", [], ["i1"], value=numpy_helper.from_array(np.array(1, np.int64))),
        node("Gather", ["shape", "i0"], ["d0"], axis=0),
        node("Gather", ["shape", "i1"], ["d1"], axis=0),
        unsq("d0", "u0"), unsq("d1", "u1"),
        node("Concat", ["u0", "u1", "minus_one"], ["target"], axis=0),
        node("Reshape", ["x", "target"], ["y"]),
    ]


@pytest.mark.parametrize("opset", [11, 13])
def test_shape_gather_concat_reshape_chain(opset):
    inits = {"minus_one": np.array([-1], np.int64), "zero_axis": np.array([0], np.int64)}
    g = check_ort(model(_shape_chain(opset), X, ["y"], inits, opset=opset))
    assert g.op_counts() == {"reshape": 1}
    assert g.type_of(g.outputs[0]).shape == (2, 5, 63)
    assert not g.constants  # the shape arithmetic left nothing behind


def test_constant_folding_of_int_and_float_ops():
    """Slice, Div, Mul, Cast, ConstantOfShape, Range, Expand on constants; the result feeds
    computed tensors."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Slice", ["s", "st", "en"], ["hw"]),                 # (7, 9)
        node("Div", ["hw", "two"], ["half"]),                      # (3, 4): truncates
        node("Mul", ["half", "two"], ["even"]),                    # (6, 8)
        node("ConstantOfShape", ["even"], ["ones"],
             value=numpy_helper.from_array(np.array([1.5], np.float32))),
        node("Range", ["r0", "r1", "r2"], ["rng"]),
        node("Cast", ["rng"], ["rngf"], to=TensorProto.FLOAT),     # (8,) floats
        node("Expand", ["rngf", "even"], ["grid"]),                # (6, 8)
        node("Mul", ["ones", "grid"], ["w"]),
        node("Add", ["x", "w"], ["y"]),
    ]
    inits = {"st": i64(0), "en": i64(2), "two": i64(2), "r0": np.int64(0), "r1": np.int64(8),
             "r2": np.int64(1)}
    m = model(nodes, {"x": (6, 8)}, ["y"], inits)
    g = check_ort(m)
    assert g.op_counts() == {"add": 1}
    np.testing.assert_array_equal(g.constants["w"], 1.5 * np.tile(np.arange(8), (6, 1)))


def test_window_padding_arithmetic_folds():
    """Pads computed from the input's shape through Mod, Sub and Clip (Swin's window padding,
    timm's "same" padding) fold to constants, so Pad sees them."""
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    nodes = [
        node("Shape", ["x"], ["s"]),
        node("Slice", ["s", "st", "en"], ["hw"]),                  # (7, 9)
        node("Mod", ["hw", "win"], ["rem"]),                       # (3, 1)
        node("Sub", ["win", "rem"], ["gap"]),                      # (1, 3)
        node("Mod", ["gap", "win"], ["pad"]),                      # (1, 3)
        node("Clip", ["pad", "lo", "hi"], ["padc"]),               # (1, 2)
        node("Concat", ["zeros", "padc"], ["pads"], axis=0),
        node("Pad", ["x", "pads"], ["y"]),
    ]
    inits = {"st": i64(2), "en": i64(4), "win": i64(4), "lo": np.int64(0), "hi": np.int64(2),
             "zeros": i64(0, 0, 0, 0, 0, 0)}
    g = check_ort(model(nodes, X, ["y"], inits))
    assert g.op_counts() == {"pad": 1}
    assert g.type_of("y").shape == (2, 5, 8, 11)


def test_expand_of_computed_tensor():
    nodes = [node("Expand", ["x", "shape"], ["y"])]
    g = check_ort(model(nodes, {"x": (5, 1, 9)}, ["y"], {"shape": np.array([2, 5, 7, 1],
                                                                              np.int64)}))
    assert g.op_counts() == {"expand": 1}


def test_folded_output_keeps_its_dtype():
    nodes = [node("Shape", ["x"], ["s"]), node("Relu", ["x"], ["y"])]
    g = from_onnx(model(nodes, X, ["y", "s"]))
    assert g.outputs == ["y", "s"]
    np.testing.assert_array_equal(run_graph(g, {"x": rand(*X["x"])})[1], [2, 5, 7, 9])
    assert g.constants["s"].dtype == np.int64


def test_constant_output_and_size():
    nodes = [node("Size", ["x"], ["n"]), node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             node("Mul", ["x", "nf"], ["y"])]
    g = check_ort(model(nodes, X, ["y"]))
    assert g.constants["nf"].reshape(-1)[0] == 630.0


# ---- inputs, outputs, errors ----

def test_dynamic_dims_need_input_shapes():
    m = model([node("Relu", ["x"])], {"x": ("batch", 5, 7, 9)}, ["y"])
    with pytest.raises(GraphError, match=r"input x: dim 0 \(batch\) is dynamic"):
        from_onnx(m)
    g = check_ort(m, input_shapes={"x": (3, 5, 7, 9)})
    assert g.type_of("x").shape == (3, 5, 7, 9)
    with pytest.raises(GraphError, match="fixes dim 1 to 5"):
        from_onnx(m, {"x": (3, 4, 7, 9)})
    with pytest.raises(GraphError, match="not inputs of the model"):
        from_onnx(m, {"x": (3, 5, 7, 9), "z": (1,)})


def test_unsupported_operator_names_op_and_node():
    m = model([node("Relu", ["x"], ["r"]),
               helper.make_node("NonMaxSuppression", ["r", "x"], ["y"], name="nms_7")],
              X, ["y"])
    with pytest.raises(GraphError, match="NonMaxSuppression") as info:
        from_onnx(m)
    assert "nms_7" in str(info.value) and "Conv" in str(info.value)


def test_fold_only_operator_on_computed_tensor():
    g = helper.make_graph([node("ConstantOfShape", ["s"])], "t",
                          [helper.make_tensor_value_info("s", TensorProto.INT64, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(GraphError, match="'ConstantOfShape' is supported only on constant"):
        from_onnx(m)


@pytest.mark.parametrize("elem, match", [
    (TensorProto.FLOAT16, "input x: dtype FLOAT16 is not supported"),
    (TensorProto.INT64, r"node Relu_y \(relu\): int64 tensors are not supported here")])
def test_dtype_tessel_lacks_or_an_operator_does_not_take(elem, match):
    g = helper.make_graph([node("Relu", ["x"])], "t",
                          [helper.make_tensor_value_info("x", elem, [3])],
                          [helper.make_tensor_value_info("y", elem, None)])
    with pytest.raises(GraphError, match=match):
        from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_used_extra_output_is_an_error():
    """BatchNormalization-9's statistics of a training graph are not translated."""
    n = node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean"])
    inits = {k: np.ones(5, np.float32) for k in "sbmv"}
    m = model([n, node("Neg", ["mean"], ["z"])], X, ["y", "z"], inits, opset=9)
    with pytest.raises(GraphError, match="BatchNormalization_y .BatchNormalization.: output 1"):
        from_onnx(m)


def test_load_from_path_and_name(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(model([node("Relu", ["x"])], X, ["y"]), path)
    g = from_onnx(str(path), name="tiny")
    assert g.name == "tiny" and g.inputs == ["x"] and g.outputs == ["y"]


# ---- exported from torch ----

def _export(module, args, **options):
    torch = pytest.importorskip("torch")
    f = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(module.eval(), args, f, dynamo=False, opset_version=17, **options)
    return onnx.load_from_string(f.getvalue())


def _torch_cnn():
    import torch.nn as nn
    return nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.BatchNorm2d(5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(5 * 3 * 4, 11))


@pytest.mark.parametrize("folding", [True, False])  # without folding, BatchNormalization stays
def test_torch_cnn_export(folding):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = _torch_cnn()
    net[1].running_mean.uniform_(-1, 1)
    net[1].running_var.uniform_(0.5, 2)
    g = check_ort(_export(net, (torch.randn(2, 3, 7, 9),), do_constant_folding=folding))
    assert g.op_counts() == {"conv": 1, **({} if folding else {"batch_norm": 1}), "relu": 1,
                             "max_pool": 1, "reshape": 1, "dense": 1}


def test_torch_attention_export():
    torch = pytest.importorskip("torch")
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm, self.proj = nn.LayerNorm(16), nn.Linear(16, 16)

        def forward(self, x):
            h = nn.functional.gelu(self.proj(self.norm(x)))
            attn = torch.softmax(h @ h.transpose(1, 2) / 4.0, dim=-1)
            return attn @ x

    torch.manual_seed(0)
    g = check_ort(_export(Block(), (torch.randn(1, 5, 16),)))
    counts = g.op_counts()
    assert counts["layer_norm"] == 1 and counts["softmax"] == 1 and counts["matmul"] == 2
