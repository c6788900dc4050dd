"""An exported model (tessel.graph.export) runs without tessel: from tessel.runtime with numpy
alone and from C through tessel_runtime.h, with the compiled model's outputs and
onnxruntime's, and a file it cannot run is refused with one line, never a crash."""
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tessel
import tessel.runtime as rt
from tessel.cli.main import main
from tessel.target import Target

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "deploy" / "run_model.c"


def two_input_model(path: Path) -> Path:
    """Token ids through an embedding and a projection, and an image through a 3x3
    convolution: int64 and float32 inputs, two outputs, odd shapes."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("emb", rng.standard_normal((53, 24)).astype(np.float32)),
        ("proj", rng.standard_normal((24, 37)).astype(np.float32) / 5),
        ("bias", rng.standard_normal(37).astype(np.float32)),
        ("w", rng.standard_normal((11, 3, 3, 3)).astype(np.float32) / 3),
        ("b", rng.standard_normal(11).astype(np.float32))]]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "proj"], ["p"]),
             helper.make_node("Add", ["p", "bias"], ["q"]),
             helper.make_node("Relu", ["q"], ["tokens"]),
             helper.make_node("Conv", ["image", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["s"]),
             helper.make_node("Mul", ["c", "s"], ["features"])]
    graph = helper.make_graph(
        nodes, "two_inputs",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 7]),
         helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 13, 9])],
        [helper.make_tensor_value_info("tokens", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("features", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def feeds():
    rng = np.random.default_rng(1)
    return [rng.integers(0, 53, (1, 7)).astype(np.int64),
            rng.standard_normal((1, 3, 13, 9)).astype(np.float32)]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(onnx path, compiled model, exported library path)."""
    tmp = tmp_path_factory.mktemp("export")
    path = two_input_model(tmp / "m.onnx")
    model = tessel.compile_model(str(path))
    summary = model.export(tmp / "m.so")
    assert summary.path == tmp / "m.so" and summary.calls == len(model.calls)
    return path, model, tmp / "m.so"


def onnxruntime_outputs(path: Path) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(["ids", "image"], feeds())))


def test_the_loaded_library_computes_what_the_compiled_model_does(exported):
    path, model, lib = exported
    loaded = rt.load(lib)
    assert loaded.input_names == ["ids", "image"] and loaded.output_names == ["tokens",
                                                                              "features"]
    assert [t[1:] for t in loaded.inputs] == [((1, 7), np.int64), ((1, 3, 13, 9), np.float32)]
    got, want = loaded(*feeds()), model(*feeds())
    for g, w, r in zip(got, want, onnxruntime_outputs(path)):
        np.testing.assert_array_equal(g, w)  # the same kernels on the same numbers
        np.testing.assert_allclose(g, r, rtol=1e-3, atol=1e-4)
    named = loaded(image=feeds()[1], ids=feeds()[0])
    np.testing.assert_array_equal(named[0], got[0])
    loaded.threads = 1
    assert loaded.threads == 1
    np.testing.assert_array_equal(loaded(*feeds())[1], got[1])
    loaded.threads = model.target.cores
    meta = loaded.meta
    assert meta["arch"] == model.target.arch and meta["calls"] == len(model.calls)
    assert meta["tasks"]["prior"] >= 1 and meta["provenance"]["database"] is None
    assert meta["features"] == sorted(model.target.features)


def test_inputs_the_model_cannot_take_get_one_clear_error(exported):
    loaded = rt.load(exported[2])
    ids, image = feeds()
    cases = [((ids,), "takes inputs"),
             ((ids, image[:, :, :12]), "shape (1, 3, 12, 9), expected (1, 3, 13, 9)"),
             ((ids.astype(np.int32), image), "dtype int32, expected int64"),
             ((ids, image[0]), "shape (3, 13, 9)"),
             ((ids, np.asfortranarray(image.reshape(3, 13, 9)).reshape(1, 3, 13, 9)),
              "not C-contiguous"),
             ((ids.tolist(), image), "expected a numpy array")]
    for args, message in cases:
        with pytest.raises(rt.InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            loaded(*args)
    with pytest.raises(rt.InputError, match="takes inputs"):
        loaded(ids=ids, picture=image)
    with pytest.raises(rt.InputError, match="positive int"):
        loaded.threads = 0
    loaded.close()
    with pytest.raises(rt.InputError, match="closed"):
        loaded(ids, image)


def with_trailer(lib: Path, out: Path, *, abi: int | None = None, meta: dict | None = None,
                 size_delta: int = 0) -> Path:
    """A copy of `lib` whose trailer says another ABI, carries other meta, or another size."""
    data = lib.read_bytes()
    n_meta, old_abi, size, magic = rt.TRAILER.unpack(data[-rt.TRAILER.size:])
    body = data[:-rt.TRAILER.size - n_meta]
    text = json.dumps(meta).encode() if meta is not None else data[len(body):-rt.TRAILER.size]
    total = len(body) + len(text) + rt.TRAILER.size
    out.write_bytes(body + text + rt.TRAILER.pack(len(text), old_abi if abi is None else abi,
                                                  total + size_delta, magic))
    return out


def refusals(lib: Path, tmp: Path) -> dict[str, tuple[Path, str, str]]:
    """Files a loader must refuse, each with the words of its one line from Python and
    from C."""
    data = lib.read_bytes()
    (tmp / "cut.so").write_bytes(data[:len(data) // 2])
    (tmp / "text.so").write_text("hello\n")
    meta = rt.read_meta(lib)
    foreign = "not a model exported by tessel"
    return {
        "cut": (tmp / "cut.so", foreign, foreign),
        "text": (tmp / "text.so", foreign, foreign),
        "program": (Path(shutil.which("ls") or "/bin/ls"), foreign, foreign),
        "abi": (with_trailer(lib, tmp / "abi.so", abi=rt.ABI_VERSION + 1),
                f"runtime ABI {rt.ABI_VERSION + 1}", f"runtime ABI {rt.ABI_VERSION + 1}"),
        "size": (with_trailer(lib, tmp / "size.so", size_delta=5), "truncated or padded",
                 "truncated or padded"),
        "arch": (with_trailer(lib, tmp / "arch.so", meta={**meta, "arch": "riscv64"}),
                 "built for riscv64", "built for another architecture"),
        "missing": (tmp / "none.so", "cannot read", "cannot open"),
    }


def test_files_it_cannot_run_are_refused_with_one_line(exported, tmp_path):
    for name, (path, words, _) in refusals(exported[2], tmp_path).items():
        with pytest.raises(rt.LoadError, match=words) as info:
            rt.load(path)
        assert "\n" not in str(info.value), name


def missing_feature() -> str | None:
    """An x86 feature tessel knows and gcc compiles for that this CPU lacks."""
    host = Target("host")
    if host.arch != "x86_64":
        return None
    return next((f for f in ("avx512_fp16", "amx_tile", "avx_vnni", "avx512f", "avx2")
                 if f not in host.features), None)


def test_an_export_for_features_this_cpu_lacks_is_refused_before_a_kernel_runs(exported,
                                                                               tmp_path):
    feature = missing_feature()
    if feature is None:
        pytest.skip("this CPU has every feature the test could ask for")
    _, model, _ = exported
    host = model.target
    model.target = Target("host", features=sorted(host.features | {feature}))
    try:
        model.export(tmp_path / "wide.so")
    finally:
        model.target = host
    flag = Target("host", features=[feature]).feature_flags[0]  # gcc's name of it
    with pytest.raises(rt.LoadError, match=f"this CPU lacks {flag}"):
        rt.load(tmp_path / "wide.so")
    assert run_example(tmp_path, tmp_path / "wide.so", []).returncode == 1


def test_the_loader_needs_numpy_alone(exported, tmp_path):
    """tessel.runtime imports no other part of tessel and none of its dependencies but numpy:
    run with tqdm, xgboost, onnx, torch and tessel's compiler made unimportable."""
    _, model, lib = exported
    paths = []
    for k, array in enumerate(feeds()):
        paths.append(tmp_path / f"in{k}.npy")
        np.save(paths[-1], array)
    got = run_numpy_alone(lib, paths, tmp_path / "out")
    for g, w in zip(got, model(*feeds()), strict=True):
        np.testing.assert_array_equal(g, w)


NUMPY_ALONE = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in ("tqdm", "xgboost", "onnx", "onnxruntime", "torch", "dask") or (
                name.startswith("tessel.") and name not in ("tessel.runtime", "tessel.errors")):
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
import numpy as np
import tessel.runtime
"""


def run_numpy_alone(lib: Path, inputs: list[Path], out: Path) -> list[np.ndarray]:
    """The exported model's outputs from a process where tqdm, xgboost, onnx, torch and
    tessel's compiler cannot be imported (inputs and outputs as .npy files)."""
    script = NUMPY_ALONE + f"""
m = tessel.runtime.load({str(lib)!r})
outs = m(*[np.load(p) for p in {[str(p) for p in inputs]!r}])
for k, o in enumerate(outs):
    np.save({str(out)!r} + f"{{k}}.npy", o)
print(len(outs), *sorted(k for k in sys.modules if k.startswith("tessel")))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    count, *modules = proc.stdout.split()
    assert modules == ["tessel", "tessel.errors", "tessel.runtime"]
    return [np.load(f"{out}{k}.npy") for k in range(int(count))]


ZOO = {"resnet18": dict(image=40), "mobilenet_v2": dict(image=36),
       "bert_layer": dict(seq=7, hidden=96, heads=4, ffn=160)}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_exported_zoo_models_give_onnxruntimes_outputs_from_c_and_from_numpy(name, tmp_path):
    """As a deployment runs them: the library alone, loaded by the C example and by the
    numpy-only loader, against onnxruntime on the same inputs."""
    pytest.importorskip("torch")
    from tessel.graph.frontend import models
    proto = models.onnx_model(name, **ZOO[name])
    session = ort.InferenceSession(proto.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    _, example = models.build(name, **ZOO[name])
    arrays = [x.numpy() for x in example]
    want = session.run(None, {i.name: x for i, x in zip(session.get_inputs(), arrays)})
    # MobileNet-v2's 30-odd kernels on priors cost half a minute: unscheduled, as
    # test_graph_models compiles it
    model = tessel.compile_model(proto, fallback="unscheduled" if name == "mobilenet_v2"
                                 else "prior")
    model.export(tmp_path / f"{name}.so")
    del model
    files = []
    for k, array in enumerate(arrays):
        files.append(tmp_path / f"in{k}.bin")
        array.tofile(files[-1])
        np.save(tmp_path / f"in{k}.npy", array)
    proc = run_example(tmp_path, tmp_path / f"{name}.so", files)
    assert proc.returncode == 0, proc.stderr
    from_numpy = run_numpy_alone(tmp_path / f"{name}.so",
                                 [tmp_path / f"in{k}.npy" for k in range(len(arrays))],
                                 tmp_path / "out")
    assert len(from_numpy) == len(want)
    for k, w in enumerate(want):
        from_c = np.fromfile(tmp_path / f"out_{k}.bin", w.dtype).reshape(w.shape)
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(from_c, w, rtol=1e-3, atol=1e-4 * scale)
        np.testing.assert_array_equal(from_numpy[k].reshape(w.shape), from_c)


def run_example(tmp: Path, lib: Path, inputs: list[Path], *extra: str):
    binary = tmp / "run_model"
    if not binary.exists():
        subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-Werror", "-I",
                        str(rt.header_path().parent), str(EXAMPLE), "-o", str(binary),
                        "-ldl"], check=True, capture_output=True, text=True)
    return subprocess.run([str(binary), str(lib), *map(str, inputs), "--out",
                           str(tmp / "out_"), *extra], capture_output=True, text=True,
                          timeout=300)


def test_the_c_example_runs_the_library_as_onnxruntime_does(exported, tmp_path):
    path, _, lib = exported
    files = []
    for k, array in enumerate(feeds()):
        files.append(tmp_path / f"in{k}.bin")
        array.tofile(files[-1])
    proc = run_example(tmp_path, lib, files, "--repeat", "3", "--threads", "1")
    assert proc.returncode == 0, proc.stderr
    assert "output 1: features float32 [1, 11, 13, 9]" in proc.stdout
    assert "median" in proc.stdout and "1 threads" in proc.stdout
    for k, want in enumerate(onnxruntime_outputs(path)):
        got = np.fromfile(tmp_path / f"out_{k}.bin", np.float32).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)
    for name, (bad, _, words) in refusals(lib, tmp_path).items():
        proc = run_example(tmp_path, bad, files)
        assert proc.returncode == 1 and proc.stderr.count("\n") == 1, (name, proc.stderr)
        assert words in proc.stderr, name
    proc = run_example(tmp_path, lib, files[:1])
    assert proc.returncode == 1 and "takes 2 inputs, 1 files given" in proc.stderr


def test_the_cli_exports_a_model_and_prints_the_header(tmp_path, capsys):
    path = two_input_model(tmp_path / "m.onnx")
    assert main(["export", "--header"]) == 0
    assert capsys.readouterr().out == rt.header_path().read_text()
    assert main(["export", str(path), "-o", str(tmp_path / "m.so"),
                 "--db", str(tmp_path / "none.db")]) == 2
    assert "no such database" in capsys.readouterr().err
    assert main(["export", str(path)]) == 2
    assert "needs a model and -o" in capsys.readouterr().err
    assert main(["export", str(path), "-o", str(tmp_path / "m.so")]) == 0
    assert "tessel.runtime.load(" in capsys.readouterr().out
    out = rt.load(tmp_path / "m.so")(*feeds())
    np.testing.assert_allclose(out[0], onnxruntime_outputs(path)[0], rtol=1e-3, atol=1e-4)
    assert os.access(tmp_path / "m.so", os.X_OK)
    assert struct.unpack("<8s", (tmp_path / "m.so").read_bytes()[-8:])[0] == rt.MAGIC
