"""ResNet-18 convolutions in int8 (u8 data x s8 weights -> int32) and in float, tuned by tessel,
against onnxruntime's QLinearConv (u8 x s8, requantized) and Conv (float) in the same run.

    python benchmarks/int8_conv.py [--layers C6,C8,C9] [--trials 64] [--db int8_conv.db]

The int8 programs tile around the host's dot-product intrinsic (MultiLevelTilingWithIntrin:
the data packed with four channels last, the weight in the instruction's panels, the
accumulator with the output channels last); the weight is a constant (packed once, as a
model has it), the data an input. Each kernel is timed in interleaved rounds with the same
inputs (tessel's by Module.time, the weight packed once; onnxruntime's by session.run, a few
microseconds of Python included); GOP/s counts a multiply and an add per product.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

import tessel
from tessel import ir, ops

from common import best_secs, gflops, settle

# name -> (H, C, O, K, stride), the DESIGN's ResNet-18 table (padding 1 for 3x3, 0 for 1x1)
LAYERS = {"C2": (56, 64, 64, 3, 1), "C5": (56, 64, 128, 1, 2), "C6": (28, 128, 128, 3, 1),
          "C8": (28, 128, 256, 1, 2), "C9": (14, 256, 256, 3, 1), "C12": (7, 512, 512, 3, 1)}


def workload(layer: str, int8: bool) -> ir.PrimFunc:
    H, C, O, K, S = LAYERS[layer]
    dtypes = dict(dtype="uint8", b_dtype="int8", out_dtype="int32") if int8 else {}
    f = ops.conv2d(1, C, H, H, O, K, K, stride=S, padding=K // 2, **dtypes)
    return ir.PrimFunc(f.name, f.params, f.body, {**f.attrs, ir.CONSTANT_PARAMS: (1,)})


def ort_sessions(layer: str, w: np.ndarray, wf: np.ndarray):
    """onnxruntime's QLinearConv (u8 x s8, scales 1, zero points 0) and float Conv."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    H, C, O, K, S = LAYERS[layer]
    attrs = dict(kernel_shape=[K, K], strides=[S, S], pads=[K // 2] * 4)
    one, zu, zs = (numpy_helper.from_array(np.array(v, d), n) for v, d, n in (
        (1.0, np.float32, "one"), (0, np.uint8, "zu"), (0, np.int8, "zs")))
    sessions = {}
    for label, node, inits, elem in (
            ("onnxruntime QLinearConv", helper.make_node(
                "QLinearConv", ["x", "one", "zu", "w", "one", "zs", "one", "zu"], ["y"], **attrs),
             [numpy_helper.from_array(w, "w"), one, zu, zs], TensorProto.UINT8),
            ("onnxruntime Conv (fp32)", helper.make_node("Conv", ["x", "w"], ["y"], **attrs),
             [numpy_helper.from_array(wf, "w")], TensorProto.FLOAT)):
        graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info(
            "x", elem, [1, C, H, H])], [helper.make_tensor_value_info("y", elem, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        sessions[label] = ort.InferenceSession(model.SerializeToString(), opts,
                                               providers=["CPUExecutionProvider"])
    return sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="C6,C8,C9")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--db", default="int8_conv.db")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    target = tessel.Target("host")
    print(f"target: {target}")
    rng = np.random.default_rng(0)
    for layer in args.layers.split(","):
        H, C, O, K, S = LAYERS[layer]
        mods = {}
        for int8 in (True, False):
            func = workload(layer, int8)
            result = tessel.tune(func, target, args.trials, database=args.db)
            mods["tessel int8" if int8 else "tessel fp32"] = (func, result.module)
        x = rng.integers(0, 256, (1, C, H, H)).astype(np.uint8)
        w = rng.integers(-128, 128, (O, C, K, K)).astype(np.int8)
        xf, wf = x.astype(np.float32), w.astype(np.float32)
        func, mod = mods["tessel int8"]
        out = np.zeros(func.outputs[0].shape, np.int32)
        mod(x, w, out)
        outf = np.zeros(out.shape, np.float32)
        mods["tessel fp32"][1](xf, wf, outf)
        assert np.array_equal(out, outf.astype(np.int64)), f"{layer}: int8 differs from fp32"
        runs = {"tessel int8": lambda: mod.time(x, w, out, number=5, repeat=3),
                "tessel fp32": lambda: mods["tessel fp32"][1].time(xf, wf, outf, number=5,
                                                                   repeat=3)}
        for label, sess in ort_sessions(layer, w, wf).items():
            feed = {"x": x if "QLinear" in label else xf}
            runs[label] = lambda sess=sess, feed=feed: best_secs(lambda: sess.run(None, feed), 5)
        best = {k: float("inf") for k in runs}
        for _ in range(args.rounds):
            settle()
            for label, fn in runs.items():
                best[label] = min(best[label], fn())
        flops = ops.flops(func)
        print(f"\n{layer}: {H}x{H}, {C} -> {O}, {K}x{K} stride {S} ({args.trials} trials each)")
        for label, secs in best.items():
            print(f"  {label:26s} {gflops(flops, secs):7.1f} GOP/s  ({secs * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
