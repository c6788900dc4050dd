"""End-to-end latency of whole models: tessel (untuned and tuned) vs onnxruntime and PyTorch.

Each model of the zoo, or of issue 40's suite (benchmarks/model_suite.py: BERT-base, GPT-2,
ViT-B/16, ResNet-50, ... with the `models` extra; random weights, batch 1) is exported to
ONNX, compiled by tessel three times (no database, every kernel unscheduled; no database,
every tiled kernel on the auto space's first expert prior, the untuned default; with the
database: the best record per task, the prior where a task has none), and timed in
interleaved rounds against onnxruntime and torch on the same machine, each runner in its own
process, all with the machine's cores. Outputs are checked against onnxruntime first. Prints
a table and saves a bar plot.

Memory (Linux): each onnxruntime and tessel worker starts from the model's ONNX file (written
once, by the parent) with its libraries loaded (onnxruntime; tessel and onnx); the table
gives the memory it takes from there to a compiled model that has run once: its peak
(VmHWM, reset before building: weight copies, packing, compilation, activations) and what
stays resident afterwards (VmRSS), both as growth over the worker's resident memory before
building. torch builds its module from code (its weights are the model), so it has no such
figure.

    tessel tune-model resnet18 --trials 256 --db models.db      # tune first (optional)
    python benchmarks/model_latency.py --models resnet50,bert_base --skip-unscheduled
    python benchmarks/model_latency.py --models resnet18,bert_layer --db models.db \
        --out benchmarks/results/model_latency.png
    python benchmarks/model_latency.py --models resnet18 --db cold.db --db carried.db

With several --db, each database is a runner of its own ("tessel <file stem>"), timed in the
same interleaved rounds: two tunings of one model compared on equal terms.

With --quantized, each model is quantized by onnxruntime's own tools first: a model with
convolutions statically (QDQ, int8 per-channel weights, uint8 activations calibrated on a few
random batches), the others dynamically (int8 weights, MatMulInteger). onnxruntime and tessel
run the int8 model; "onnxruntime fp32" and "tessel fp32" (tuned with --fp32-db) the float
model, in the same rounds; each runner's output is checked against the first of its kind.

    tessel tune-model bert_int8.onnx --trials 800 --db bert_int8.db
    python benchmarks/model_latency.py --models bert_layer --quantized --db bert_int8.db \
        --fp32-db models.db
"""
from __future__ import annotations

import argparse
import inspect
import multiprocessing as mp
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import tessel
from tessel.graph.frontend import models
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS


RUNTIMES = ("onnxruntime", "torch")
FP32 = "fp32"  # the path of the float model, beside the int8 one ("") with --quantized
FP32_LABELS = ("onnxruntime fp32", "tessel fp32")
VARIANTS = {"tessel unscheduled": (False, "unscheduled"), "tessel prior": (False, "prior"),
            "tessel tuned": (True, "prior")}  # label -> (uses the database, fallback)


def tuned_labels(dbs: list[str]) -> dict[str, str]:
    """{runner label: database} of the tuned runners: "tessel tuned" for one database, one
    "tessel <file stem>" each for several."""
    if len(dbs) == 1:
        return {"tessel tuned": dbs[0]}
    labels = {f"tessel {Path(db).stem}": db for db in dbs}
    if len(labels) < len(dbs):
        raise SystemExit("model_latency: give the databases different file names")
    return labels


def _make(label: str, name: str, kwargs: dict, db: str | None, path: str, layout: str):
    """The callable `label` runs for model `name` (numpy arrays in), built in this process
    from the model's ONNX file `path`."""
    if label in ("onnxruntime", "onnxruntime fp32"):
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        return lambda *xs: sess.run(None, dict(zip(names, xs)))[0]
    if label == "torch":
        import torch
        torch.set_num_threads(os.cpu_count() or 1)
        module, _ = build_model(name, kwargs)

        def call(*xs):
            with torch.inference_mode():
                out = module(*(torch.from_numpy(x) for x in xs))
                return (out[0] if isinstance(out, (tuple, list)) else out).numpy()
        return call
    use_db, fallback = VARIANTS.get(label, (db is not None, "prior"))  # "tessel <stem>": a db's
    model = tessel.compile_model(path, database=db if use_db else None, fallback=fallback,
                                 layout=layout)
    print(f"{name}: {label}: {model.report().splitlines()[0]}", flush=True)
    return lambda *xs: model(*xs)[0]


def build_model(name: str, kwargs: dict) -> tuple:
    """(torch module, example inputs) of model `name`: the zoo's, else the suite's
    (benchmarks/model_suite.py: transformers, torchvision, the LSTM language model)."""
    if name in models.MODELS:
        return models.MODELS[name](**kwargs)
    import model_suite
    return model_suite.build(name)


def write_onnx(name: str, kwargs: dict, path: str) -> None:
    """Model `name` as an ONNX file at `path` (the suite's through torch.onnx.export)."""
    if name in models.MODELS:
        Path(path).write_bytes(models.onnx_model(name, **kwargs).SerializeToString())
        return
    import models as suite_paths  # benchmarks/models.py, beside this script
    suite_paths.export_onnx(*build_model(name, kwargs), Path(path))


def known_models() -> list[str]:
    """The zoo's models and, where the `models` extra is installed, the suite's."""
    try:
        import model_suite
    except ImportError:
        return list(models.MODELS)
    return [*models.MODELS, *(n for n in model_suite.MODELS if not n.startswith("zoo_"))]


def _memory_kb() -> dict[str, int]:
    """VmRSS and VmHWM of this process (kB), {} where /proc does not say."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in lines)
            if k in ("VmRSS", "VmHWM")}


def _reset_peak() -> bool:
    """Restart VmHWM from the current resident size (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _serve(conn, label: str, name: str, kwargs: dict, db: str | None, feeds: list,
           path: str, layout: str) -> None:
    """Worker process: build one runner, send its output and the memory it took (MB: peak,
    resident; None for torch or without /proc), then time it on request."""
    # the runtime's own libraries are loaded before measuring: the figure is the model's
    __import__("onnxruntime" if label.startswith("onnxruntime") else "torch"
               if label == "torch" else "onnx")
    measured = label != "torch" and _reset_peak()
    before = _memory_kb()
    fn = _make(label, name, kwargs, db, path[FP32] if label in FP32_LABELS else path[""],
               layout)
    out = np.asarray(fn(*feeds))
    after = _memory_kb()
    mem = None
    if measured and after:
        mem = tuple((after[k] - before["VmRSS"]) / 1024 for k in ("VmHWM", "VmRSS"))
    conn.send((out, mem))
    while (secs := conn.recv()) is not None:
        samples, start = [], time.perf_counter()
        while not samples or time.perf_counter() - start < secs:
            t0 = time.perf_counter()
            fn(*feeds)
            samples.append(time.perf_counter() - t0)
        conn.send(samples)


def measure(name: str, labels: list[str], dbs: dict[str, str], image: int | None, rounds: int,
            budget_s: float, layout: str = DEFAULT_LAYOUT, quantized: bool = False
            ) -> tuple[dict[str, float], dict[str, tuple[float, float] | None]]:
    """Median seconds per call of each runner. Each runner lives in its own process (thread
    pools of different runtimes in one process slow each other down) and only one process
    runs at a time; rounds are interleaved so load drifts on the machine hit all runners.
    `dbs`: the database of each tuned runner's label."""
    takes_image = name in models.MODELS and "image" in inspect.signature(
        models.MODELS[name]).parameters
    kwargs = {"image": image} if image and takes_image else {}
    feeds = [e.numpy() for e in build_model(name, kwargs)[1]]
    ctx = mp.get_context("spawn")
    tmp = tempfile.TemporaryDirectory()
    fp32 = str(Path(tmp.name) / f"{name}.onnx")
    write_onnx(name, kwargs, fp32)
    path = {"": fp32, FP32: fp32}
    if quantized:
        path[""] = str(Path(tmp.name) / f"{name}_int8.onnx")
        print(f"{name}: quantized {quantize_onnx(fp32, path[''], feeds)}", flush=True)
    workers, memory = {}, {}
    samples: dict[str, list[float]] = {k: [] for k in labels}
    try:
        _start(workers, memory, labels, ctx, name, kwargs, dbs, feeds, path, layout)
        for round_ in range(rounds + 1):  # round 0 warms up
            for label, (conn, proc) in workers.items():
                conn.send(budget_s / rounds)
                got = _receive(conn, proc, label)
                if round_:
                    samples[label] += got
    finally:
        for conn, proc in workers.values():
            if proc.is_alive():
                conn.send(None)
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
        tmp.cleanup()
    return {k: float(np.median(v)) for k, v in samples.items()}, memory


def _start(workers: dict, memory: dict, labels: list[str], ctx, name: str, kwargs: dict,
           dbs: dict[str, str], feeds: list, path: dict[str, str], layout: str) -> None:
    """One worker process per runner, built one at a time (compiling is CPU-heavy too); each
    one's output checked against the first's of its kind (the float or the int8 model)."""
    expected: dict[bool, np.ndarray] = {}
    for label in labels:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, label, name, kwargs, dbs.get(label),
                                                feeds, path, layout))
        proc.start()
        workers[label] = (parent, proc)
        out, memory[label] = _receive(parent, proc, label)
        kind = label in FP32_LABELS
        if kind in expected:
            want = expected[kind]
            err = float(np.max(np.abs(out - want)))
            print(f"{name}: {label}: max |err| {err:.1e}", flush=True)
            assert err < 1e-2 * max(1.0, float(np.max(np.abs(want)))), (label, err)
        else:
            expected[kind] = out


def quantize_onnx(path: str, out: str, feeds: list) -> str:
    """Quantize the ONNX model at `path` into `out` with onnxruntime's tools: statically (QDQ,
    per-channel int8 weights, uint8 activations calibrated on the feeds and three random
    batches like them) when it has convolutions, else dynamically (int8 weights). Returns
    how."""
    import onnx
    from onnxruntime import quantization as q
    model = onnx.load(path)
    if not any(n.op_type == "Conv" for n in model.graph.node):
        q.quantize_dynamic(path, out, weight_type=q.QuantType.QInt8)
        return "dynamically (int8 weights)"
    names = [i.name for i in model.graph.input]
    rng = np.random.default_rng(0)
    batches = [feeds] + [[rng.standard_normal(f.shape).astype(f.dtype) for f in feeds]
                         for _ in range(3)]

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.left = iter(dict(zip(names, b)) for b in batches)

        def get_next(self):
            return next(self.left, None)
    q.quantize_static(path, out, Reader(), quant_format=q.QuantFormat.QDQ, per_channel=True,
                      weight_type=q.QuantType.QInt8, activation_type=q.QuantType.QUInt8)
    return "statically (QDQ, per-channel int8 weights, 4 calibration batches)"


def _receive(conn, proc, label: str):
    """The worker's next message; a worker that died (its traceback is on stderr) is named
    instead of waited on forever."""
    try:
        while not conn.poll(1.0):
            if not proc.is_alive():
                raise EOFError
        return conn.recv()
    except EOFError:
        proc.join(timeout=30)
        raise SystemExit(f"model_latency: the {label} worker exited with code "
                         f"{proc.exitcode} (its error is above)") from None


def _mem_cell(mem: tuple[float, float] | None, ref: tuple[float, float] | None) -> str:
    if mem is None:
        return "-"
    ratio = f" ({mem[0] / ref[0]:.2f}x)" if ref and ref[0] > 0 else ""
    return f"{mem[0]:.0f} / {mem[1]:.0f}{ratio}"


def plot(rows: dict[str, dict[str, float]], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = list(next(iter(rows.values())))
    fig, ax = plt.subplots(figsize=(2 + 2 * len(rows), 4))
    width = 0.8 / len(labels)
    for k, label in enumerate(labels):
        xs = [i + k * width for i in range(len(rows))]
        ax.bar(xs, [rows[m][label] * 1e3 for m in rows], width, label=label)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], list(rows))
    ax.set_ylabel("latency (ms, log)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(models.MODELS))
    p.add_argument("--db", action="append", default=[], help="record database of a "
                   "tune-model run (repeat to compare several)")
    p.add_argument("--image", type=int, default=None, help="image size of the CNNs")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timing per runner")
    p.add_argument("--skip-unscheduled", action="store_true",
                   help="leave out the unscheduled variant (seconds per call on the big CNNs)")
    p.add_argument("--layout", choices=LAYOUTS, default=DEFAULT_LAYOUT,
                   help="tessel's convolution layout (tune the database in the same one)")
    p.add_argument("--quantized", action="store_true", help="time the models quantized by "
                   "onnxruntime's tools, beside their float versions")
    p.add_argument("--fp32-db", default=None, help="with --quantized: the database of the "
                   "float model's tuning (tessel fp32)")
    p.add_argument("--out", default=None, help="save a bar plot here")
    args = p.parse_args()
    for db in args.db:
        if not Path(db).exists():
            p.error(f"--db {db} does not exist (make it with tessel tune-model)")
    unknown = sorted(set(args.models.split(",")) - set(known_models()))
    if unknown:
        p.error(f"--models: unknown {unknown}; known: {', '.join(known_models())} (the "
                "suite's need the `models` extra)")
    print(f"target: {tessel.Target('host')}")
    dbs = tuned_labels(args.db) if args.db else {}
    labels = [*RUNTIMES, *(k for k, (db, _) in VARIANTS.items() if not db), *dbs]
    if args.skip_unscheduled or args.quantized:
        labels.remove("tessel unscheduled")
    if args.quantized:  # torch has no quantized twin of the model here
        labels = [k for k in labels if k != "torch"] + list(FP32_LABELS)
        if args.fp32_db:
            dbs["tessel fp32"] = args.fp32_db
    rows, memory = {}, {}
    for name in args.models.split(","):
        rows[name], memory[name] = measure(name, labels, dbs, args.image, args.rounds,
                                           args.budget, args.layout, args.quantized)
    width = max(len(k) for k in labels) + 2
    print("\nlatency in ms (median) and speed relative to onnxruntime in the same run")
    print(f"{'model':<17}" + "".join(f"{k:>{width}}" for k in labels))
    for name, row in rows.items():
        ref = row["onnxruntime"]
        cells = "".join(f"{f'{row[k] * 1e3:.2f} ({ref / row[k]:.2f}x)':>{width}}" for k in labels)
        print(f"{name:<17}{cells}")
    print("\nmemory in MB from the serialized model to a compiled model that ran once: peak / "
          "resident, and the peak relative to onnxruntime's")
    cells = {name: [_mem_cell(mem[k], mem.get("onnxruntime")) for k in labels]
             for name, mem in memory.items()}
    width = max([width, *(len(c) + 2 for row in cells.values() for c in row)])
    print(f"{'model':<17}" + "".join(f"{k:>{width}}" for k in labels))
    for name, row in cells.items():
        print(f"{name:<17}" + "".join(f"{c:>{width}}" for c in row))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.out)
        print(f"saved {args.out}")


if __name__ == "__main__":
    main()
