"""tessel.graph.frontend.onnx_file: an .onnx file read with each weight in memory once gives
the model
and the arrays `onnx.load` gives (every kind of initializer storage, external data), files cut
short are rejected by name, and importing a large model costs about its weights in memory."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from tessel.graph import GraphError  # noqa: E402
from tessel.graph.frontend.onnx_file import load_file  # noqa: E402
from tessel.graph.frontend.onnx_import import from_onnx  # noqa: E402
from tessel.graph.frontend.onnx_import import load_file as import_file  # noqa: E402
from tessel.graph.reference import run_graph  # noqa: E402


def _initializers():
    rng = np.random.default_rng(3)
    raw = [numpy_helper.from_array(a, name) for name, a in [
        ("w", rng.standard_normal((3, 5, 7)).astype(np.float32)),
        ("idx", np.array([4, -1, 7], np.int64)),
        ("half", rng.standard_normal((2, 9)).astype(np.float16)),
        ("mask", np.array([[True, False, True]])),
        ("scalar", np.array(2.5, np.float32)),
        ("empty", np.zeros((0, 3), np.float32)),
        ("u8", np.arange(11, dtype=np.uint8)),
    ]]
    typed = [helper.make_tensor("typed", TensorProto.FLOAT, (2, 3), np.arange(6.0)),
             helper.make_tensor("bf16", TensorProto.BFLOAT16, (4,), [1.0, -2.0, 0.5, 8.0]),
             helper.make_tensor("bf16raw", TensorProto.BFLOAT16, (2,),
                                np.array([0x3F80, 0xC000], np.uint16).tobytes(), raw=True)]
    return raw + typed


def _model(inits):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, (3, 5, 7))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 5, 7))
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                              [x], [y], inits, doc_string="a graph")
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="tests")
    m.ir_version = 8
    m.metadata_props.add(key="k", value="v")
    return m


def _arrays(proto, weights):
    return {t.name: weights[t.name] if t.name in weights else numpy_helper.to_array(t)
            for t in proto.graph.initializer}


def _without_raw(proto):
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for t in copy.graph.initializer:
        t.ClearField("raw_data")
    return copy


def _same(got_proto, weights, expected_proto):
    expected = {t.name: numpy_helper.to_array(t) for t in expected_proto.graph.initializer}
    got = _arrays(got_proto, weights)
    assert list(got) == list(expected)
    for name, array in expected.items():
        assert got[name].dtype == array.dtype and got[name].shape == array.shape, name
        np.testing.assert_array_equal(got[name], array, err_msg=name)
    assert _without_raw(got_proto) == _without_raw(expected_proto)


def test_every_initializer_storage_reads_as_onnx_load(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(_initializers()), path)
    proto, weights = load_file(path)
    _same(proto, weights, onnx.load(path))
    # raw tensors numpy can hold are arrays and left out of the proto; the rest stay in it
    assert set(weights) == {"w", "idx", "half", "mask", "scalar", "empty", "u8"}
    assert all(not t.raw_data for t in proto.graph.initializer if t.name in weights)
    assert weights["w"].flags.writeable and weights["w"].flags.c_contiguous


def test_external_data_is_loaded_from_beside_the_file(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_model(_initializers()), path, save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").stat().st_size > 0
    proto, weights = load_file(path)
    _same(proto, weights, onnx.load(path))


def test_imported_model_runs_as_the_proto_does(tmp_path):
    m = _model(_initializers()[:1])
    path = tmp_path / "m.onnx"
    onnx.save(m, path)
    x = np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32)
    from_file, from_proto = from_onnx(path), from_onnx(m)
    np.testing.assert_array_equal(run_graph(from_file, {"x": x})[0],
                                  run_graph(from_proto, {"x": x})[0])


def test_a_file_cut_short_is_rejected_or_reads_as_onnx_reads_it(tmp_path):
    """Every cut of the file: a GraphError naming it, or (cut between two fields) the model
    protobuf itself reads from those bytes."""
    data = _model(_initializers()).SerializeToString()
    rejected = 0
    for cut in range(1, len(data), 3):
        path = tmp_path / f"cut{cut}.onnx"
        path.write_bytes(data[:cut])
        try:
            proto, weights = import_file(path)
        except GraphError as err:
            assert str(path) in str(err) and ("not an ONNX model" in str(err)
                                              or "holds no ONNX graph" in str(err))
            rejected += 1
            continue
        _same(proto, weights, onnx.load_from_string(data[:cut]))
    assert rejected > len(data) // 6


def test_a_raw_tensor_of_the_wrong_size_is_named(tmp_path):
    t = numpy_helper.from_array(np.ones((2, 3), np.float32), "w")
    t.raw_data = t.raw_data[:-4]
    path = tmp_path / "m.onnx"
    path.write_bytes(_model([t]).SerializeToString())
    with pytest.raises(GraphError, match=r"not an ONNX model .*initializer 'w': 20 bytes"):
        import_file(path)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux /proc only")
def test_importing_a_large_model_holds_its_weights_about_once(tmp_path):
    """onnx.load and to_array held a model's weights three times over at the peak; here the
    peak growth of an import stays under 1.5x the weights' size."""
    weights = 32 * 2**20
    m = _model([numpy_helper.from_array(np.ones(weights // 4, np.float32), "w")])
    m.graph.node[0].op_type = "Relu"
    del m.graph.node[0].input[1]
    path = tmp_path / "big.onnx"
    onnx.save(m, path)
    script = textwrap.dedent(f"""
        import tessel.graph.frontend.onnx_import as oi
        def hwm():
            return next(int(l.split()[1]) for l in open("/proc/self/status")
                        if l.startswith("VmHWM")) * 1024
        def rss():
            return next(int(l.split()[1]) for l in open("/proc/self/status")
                        if l.startswith("VmRSS")) * 1024
        open("/proc/self/clear_refs", "w").write("5")
        start = rss()
        graph = oi.from_onnx({str(path)!r})
        print(hwm() - start)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    growth = int(out.stdout.split()[-1])
    assert 0.9 * weights <= growth < 1.5 * weights, growth / weights  # the array is resident
