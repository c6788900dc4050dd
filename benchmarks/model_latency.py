"""End-to-end latency of whole models: tessel (untuned and tuned) vs onnxruntime and PyTorch.

Each model of the zoo (random weights, batch 1) is imported through ONNX, compiled by tessel
three times (no database, every kernel unscheduled; no database, every tiled kernel on the
auto space's first expert prior, the untuned default; with the database: the best record per
task, the prior where a task has none), and timed in alternating rounds against onnxruntime and torch on the same machine, all
with the machine's cores. Outputs are checked against onnxruntime first. Prints a table and
saves a bar plot.

    tessel tune-model resnet18 --trials 256 --db models.db      # tune first (optional)
    python benchmarks/model_latency.py --models resnet18,bert_layer --db models.db \
        --out benchmarks/results/model_latency.png
"""
from __future__ import annotations

import argparse
import inspect
import os
import time
from pathlib import Path

import numpy as np

import tessel
from tessel.graph import models
from tessel.graph.executor import load_model


def _timer(fn, feeds):
    def run() -> float:
        start = time.perf_counter()
        fn(*feeds)
        return time.perf_counter() - start
    return run


def runners(name: str, db: str | None, image: int | None) -> dict:
    import onnxruntime as ort
    import torch
    takes_image = "image" in inspect.signature(models.MODELS[name]).parameters
    kwargs = {"image": image} if image and takes_image else {}
    module, example = models.MODELS[name](**kwargs)
    proto = models.onnx_model(name, **kwargs)
    graph = load_model(proto)
    feeds = [e.numpy() for e in example]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count() or 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    out = {"onnxruntime": lambda *xs: sess.run(None, dict(zip(names, xs))),
           "torch": lambda *xs: _torch_call(module, xs)}
    expected = sess.run(None, dict(zip(names, feeds)))[0]
    variants = [("tessel unscheduled", None, "unscheduled"), ("tessel prior", None, "prior")]
    variants += [("tessel tuned", db, "prior")] if db else []
    for label, database, fallback in variants:
        model = tessel.compile_model(graph, database=database, fallback=fallback)
        err = float(np.max(np.abs(model(*feeds)[0] - expected)))
        print(f"{name}: {label}: {model.report().splitlines()[0]}; max |err| vs ort {err:.1e}")
        out[label] = model
    torch.set_num_threads(os.cpu_count() or 1)
    return {k: _timer(f, feeds) for k, f in out.items()}


def _torch_call(module, xs):
    import torch
    with torch.inference_mode():
        return module(*(torch.from_numpy(x) for x in xs))


def measure(timers: dict, rounds: int, budget_s: float) -> dict[str, float]:
    """Median seconds per call of each runner, rounds interleaved so load drifts hit all."""
    for t in timers.values():  # warm up
        t()
    samples: dict[str, list[float]] = {k: [] for k in timers}
    for _ in range(rounds):
        for k, t in timers.items():
            start = time.perf_counter()
            while True:
                samples[k].append(t())
                if time.perf_counter() - start > budget_s / rounds:
                    break
    return {k: float(np.median(v)) for k, v in samples.items()}


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
    p.add_argument("--db", default=None, help="record database of a tune-model run")
    p.add_argument("--image", type=int, default=None, help="image size of the CNNs")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timing per runner")
    p.add_argument("--out", default=None, help="save a bar plot here")
    args = p.parse_args()
    print(f"target: {tessel.Target('host')}")
    rows = {}
    for name in args.models.split(","):
        rows[name] = measure(runners(name, args.db, args.image), args.rounds, args.budget)
    labels = list(next(iter(rows.values())))
    print("\nmodel            " + "".join(f"{k:>17}" for k in labels) + "   (ms, median)")
    for name, row in rows.items():
        ref = row["onnxruntime"]
        cells = "".join(f"{row[k] * 1e3:>10.2f} ({ref / row[k]:4.2f}x)" for k in labels)
        print(f"{name:<17}{cells}")
    print("(x: speed relative to onnxruntime in the same run; > 1 is faster)")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.out)
        print(f"saved {args.out}")


if __name__ == "__main__":
    main()
