"""Quantized ONNX models, made by onnxruntime's own tools, against onnxruntime: a dynamically
quantized MLP (DynamicQuantizeLinear, MatMulInteger with int8 weights) exactly where the
arithmetic is exact, a statically quantized (QDQ) convolution net within one quantization
step, and the int8 product tiled around the host's dot-product intrinsic."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tessel  # noqa: E402
from tessel import intrin  # noqa: E402
from tessel.graph.compiler.tasks import model_tasks  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.space import make_space  # noqa: E402
from tessel.space.priors import prior_schedules  # noqa: E402


def _mlp(path, rows=6, width=40, hidden=48, seed=0):
    """x (rows, width) -> MatMul -> Add -> Relu -> MatMul -> Add, float32 weights."""
    rng = np.random.default_rng(seed)
    w1, w2 = (rng.standard_normal(s).astype(np.float32) * 0.2 for s in ((width, hidden),
                                                                     (hidden, 24)))
    b1, b2 = (rng.standard_normal(n).astype(np.float32) for n in (hidden, 24))
    nodes = [helper.make_node(op, ins, [out]) for op, ins, out in (
        ("MatMul", ["x", "w1"], "h"), ("Add", ["h", "b1"], "hb"), ("Relu", ["hb"], "r"),
        ("MatMul", ["r", "w2"], "o"), ("Add", ["o", "b2"], "y"))]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b1, "b1"),
                                                        (b2, "b2"))]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [rows, width])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [rows, 24])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


# onnxruntime's uint8 x int8 kernels (MLAS) are exact only with a dot-product instruction: on an
# AVX2 host without VNNI they sum pairs of products in int16 (vpmaddubsw), which saturate when
# weights use all 8 bits (255 * -128 * 2); its quantization tools' reduce_range (7-bit weights) is
# what it advises there. Off VNNI hosts (a Zen 3) the tests quantize with it, or compare with an
# exact reference: tessel's own int8 kernels are exact on every host.
ORT_U8S8_EXACT = any(map(tessel.Target("host").has, ("avx512_vnni", "avx_vnni")))


def _ort(path, x):
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def test_dynamically_quantized_mlp_matches_onnxruntime(tmp_path):
    fp, qp = tmp_path / "mlp.onnx", tmp_path / "mlp_int8.onnx"
    _mlp(fp)
    quantization.quantize_dynamic(str(fp), str(qp), weight_type=quantization.QuantType.QInt8)
    ops_ = {n.op_type for n in onnx.load(qp).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops_
    x = np.random.default_rng(1).standard_normal((6, 40)).astype(np.float32)
    want = _ort(qp, x)
    got = tessel.compile_model(str(qp))(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert np.abs(got - _ort(fp, x)).max() > 1e-4  # it is the int8 model, not the float one


def test_int8_product_is_tiled_around_the_hosts_intrinsic(tmp_path):
    """The weights' MatMulInteger is matmul_integer on u8 x s8 (the zero point's correction
    fused after it): its expert priors tensorize it where the host has an intrinsic (the
    widest whose lanes divide the columns)."""
    fp, qp = tmp_path / "mlp.onnx", tmp_path / "mlp_int8.onnx"
    _mlp(fp, rows=16, width=64, hidden=64)
    quantization.quantize_dynamic(str(fp), str(qp), weight_type=quantization.QuantType.QInt8)
    host = tessel.Target("host")
    names = {s.name for s in intrin.for_target(host)
             if [p.dtype for p in s.desc.params[:2]] == ["uint8", "int8"]}
    if not names:
        pytest.skip(f"this host ({host}) has no u8 x s8 intrinsic")
    tasks = [t for t in model_tasks(from_onnx(str(qp)), host)[1]
             if "matmul_integer" in t.name]
    assert len(tasks) == 2  # 64 columns: 16 lanes on AVX-512; 24: 8 lanes
    for task in tasks:
        programs = prior_schedules(make_space("auto", host), task.workload, limit=2)
        assert programs and all(
            any(i.kind == "annotate" and dict(i.args)["value"] in names
                for i in p.trace.instructions) for p in programs)


def _convnet(path, seed=0):
    """x (1, 3, 12, 12) -> Conv 3x3 (8) -> Relu -> Conv 1x1 (5)."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    w2 = rng.standard_normal((5, 8, 1, 1)).astype(np.float32) * 0.3
    b1, b2 = rng.standard_normal(8).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Conv", ["r", "w2", "b2"],
                                                                      ["y"])]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (w2, "w2"), (b1, "b1"),
                                                        (b2, "b2"))]
    graph = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 12, 12])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 5, 12, 12])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


class _Batches(quantization.CalibrationDataReader):
    """Four random calibration batches of input x's `shape`."""

    def __init__(self, shape=(1, 3, 12, 12), seed=7):
        rng = np.random.default_rng(seed)
        self.batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)}
                             for _ in range(4)])

    def get_next(self):
        return next(self.batches, None)


def test_qdq_convnet_computes_in_int8_and_matches_onnxruntime_within_one_step(tmp_path):
    fp, qp = tmp_path / "convnet.onnx", tmp_path / "convnet_qdq.onnx"
    _convnet(fp)
    quantization.quantize_static(str(fp), str(qp), _Batches(),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 weight_type=quantization.QuantType.QInt8,
                                 reduce_range=not ORT_U8S8_EXACT)
    model = onnx.load(qp)
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in model.graph.node}
    # the output's quantization step: the scale of the last QuantizeLinear
    scales = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    last_q = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][-1]
    step = float(scales[last_q.input[1]])
    ops_ = [n.op for n in from_onnx(str(qp)).nodes]
    assert ops_.count("conv_integer") == 2 and "conv" not in ops_  # both compute in int8
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    want = _ort(qp, x)
    got = tessel.compile_model(str(qp))(x)[0]
    assert np.abs(got - want).max() <= step * 1.001
    assert np.mean(got == want) > 0.9  # almost every element exactly


def _residual_convnet(path, seed=0):
    """x (1, 3, 14, 14) -> Conv 3x3 (16) -> Relu -> MaxPool 3x3 = a; a -> Conv 3x3 -> Relu ->
    Conv 3x3, + a, Relu -> Conv 1x1 (8): ResNet's stem (3 channels), pool and residual block
    in small."""
    rng = np.random.default_rng(seed)
    shapes = {"w1": (16, 3, 3, 3), "w2": (16, 16, 3, 3), "w3": (16, 16, 3, 3), "w4": (8, 16, 1, 1)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.2, n)
             for n, s in shapes.items()]
    inits += [numpy_helper.from_array(rng.standard_normal(s[0]).astype(np.float32), f"b{n[1]}")
              for n, s in shapes.items()]
    pad = dict(pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **pad),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["a"], kernel_shape=[3, 3], **pad),
             helper.make_node("Conv", ["a", "w2", "b2"], ["c2"], **pad),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["c3"], **pad),
             helper.make_node("Add", ["c3", "a"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w4", "b4"], ["y"])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 14, 14])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 8, 14, 14])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_qdq_residual_net_runs_in_blocked_int8_layouts_and_matches_onnxruntime(tmp_path):
    """Every convolution of a QDQ net runs as conv_integer_blocked (uint8 activations in
    NCHW[b]c between the kernels, the 3-channel image padded to a block of 4, so the stem
    takes the dot-product instructions too), the max pool on the 8-bit data, the residual's
    requantizations fused into the epilogue without a scalar loop, and the output is
    onnxruntime's."""
    fp, qp = tmp_path / "residual.onnx", tmp_path / "residual_qdq.onnx"
    _residual_convnet(fp)
    quantization.quantize_static(str(fp), str(qp), _Batches((1, 3, 14, 14), seed=5),
                                 quant_format=quantization.QuantFormat.QDQ, per_channel=True,
                                 weight_type=quantization.QuantType.QInt8,
                                 reduce_range=not ORT_U8S8_EXACT)
    host = tessel.Target("host")
    kernels, tasks = model_tasks(from_onnx(str(qp)), host)
    convs = [k for k in kernels if "conv_integer_blocked" in k.func.name]
    assert len(convs) == 4 and not any("conv_integer_" not in k.func.name and "conv" in
                                       k.func.name for k in kernels)
    assert convs[0].func.params[0].shape == (1, 1, 14, 14, 4)  # 3 channels and a zero one
    pool = next(k for k in kernels if "max_pool" in k.func.name)
    assert pool.func.params[0].dtype in ("uint8", "int8")  # the stem's 8-bit output
    lanes = min(host.vector_lanes("float32"), 16)
    assert convs[1].func.params[0].shape == (1, 16 // lanes, 14, 14, lanes)
    model = tessel.compile_model(str(qp))
    sources = [call.module.source for call, kernel in zip(model.calls, model.kernels)
               if "conv_integer_blocked" in kernel.func.name]
    assert len(sources) == 4 and all("values have no vector form" not in s for s in sources)
    x = np.random.default_rng(3).standard_normal((1, 3, 14, 14)).astype(np.float32)
    want, got = _ort(qp, x), model(x)[0]
    scales = {i.name: numpy_helper.to_array(i) for i in onnx.load(qp).graph.initializer}
    last_q = [n for n in onnx.load(qp).graph.node if n.op_type == "QuantizeLinear"][-1]
    assert np.abs(got - want).max() <= float(scales[last_q.input[1]]) * 1.001
    assert np.mean(got == want) > 0.9


def _qlinear_conv_model(path, w_dtype, x_zp=119, seed=0):
    """QOperator form: QuantizeLinear -> QLinearConv (per-channel weight scales, int32 bias,
    stride 2, 13 -> 20 channels, 9 x 11 -> 5 x 6) -> DequantizeLinear."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(w_dtype)
    w = rng.integers(info.min, info.max + 1, (20, 13, 3, 3)).astype(w_dtype)
    w_zp = np.full(20, 0 if w_dtype == np.int8 else 131, w_dtype)
    tensors = {"xs": np.float32(0.02), "xzp": np.uint8(x_zp), "w": w,
               "ws": rng.uniform(0.001, 0.01, 20).astype(np.float32), "wzp": w_zp,
               "ys": np.float32(0.5), "yzp": np.uint8(100),
               "b": rng.integers(-3000, 3000, 20).astype(np.int32)}
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in tensors.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp",
                                              "b"], ["yq"], pads=[1, 0, 1, 2], strides=[2, 2]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    graph = helper.make_graph(nodes, "qlinear", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 13, 9, 11])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


@pytest.mark.parametrize("w_dtype", [np.int8, np.uint8], ids=["int8", "uint8-zp"])
def test_qlinear_conv_matches_onnxruntime(tmp_path, w_dtype):
    """QLinearConv: int8 weights on the 8-bit data (conv_integer, its zero point's correction
    a constant), uint8 weights with a per-channel zero point widened first; onnxruntime's
    result within one output step, almost everywhere exactly."""
    path = tmp_path / "qlinear.onnx"
    _qlinear_conv_model(path, w_dtype)
    ops_ = [n.op for n in from_onnx(str(path)).nodes]
    assert "conv_integer" in ops_ and "conv" not in ops_
    x = np.random.default_rng(1).uniform(-2, 3, (1, 13, 9, 11)).astype(np.float32)
    got = tessel.compile_model(str(path))(x)[0]
    want = _ort(path, x) if ORT_U8S8_EXACT or w_dtype == np.uint8 else \
        _qlinear_conv_exact(path, x)
    assert got.shape == want.shape == (1, 20, 5, 6)
    assert np.abs(got - want).max() <= 0.5 * 1.001 and np.mean(got == want) > 0.9


def _qlinear_conv_exact(path, x):
    """_qlinear_conv_model's int8-weight output by numpy in int64 and float64: quantize, the
    convolution (pads 1, 0, 1, 2; stride 2), bias, requantize, dequantize."""
    t = {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}
    xq = np.clip(np.rint(x / t["xs"]) + int(t["xzp"]), 0, 255).astype(np.int64)
    padded = np.pad(xq[0] - int(t["xzp"]), ((0, 0), (1, 1), (0, 2)))
    patches = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))[:, ::2, ::2]
    acc = np.einsum("cijkl,ockl->oij", patches, t["w"].astype(np.int64)) + t["b"][:, None, None]
    scale = np.float64(t["xs"]) * t["ws"].astype(np.float64)[:, None, None] / np.float64(t["ys"])
    y = np.clip(np.rint(acc * scale) + int(t["yzp"]), 0, 255)
    return ((y - int(t["yzp"])) * t["ys"]).astype(np.float32)[None]
