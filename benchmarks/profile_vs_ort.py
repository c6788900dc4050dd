"""Where a model's time goes: tessel's kernels against onnxruntime's operators, in one process.

A model whose whole-model ratio is poor hides which of its parts are slow. This script runs
the model's ONNX file both ways on the same inputs, in rounds, and prints
- the whole model, median ms of each (a pause between the two: the thread pools of one spin
  for a while after a call, and the other would run beside them);
- onnxruntime's own profile (SessionOptions.enable_profiling) summed by operator type, the
  median of each node's calls;
- tessel's kernels timed in sequence (CompiledModel.profile(in_sequence=True): each kernel in
  the cache state the kernels before it leave) summed by kind (the kernel's name without the
  number a repeated name takes), and the slowest kernels with their parameters' shapes.
The two sums need not match their whole-model times: onnxruntime counts its nodes only, tessel
its kernels only (not the calls between them).

    python benchmarks/profile_vs_ort.py --model resnet50 --rounds 7
    python benchmarks/profile_vs_ort.py --model path/to/model.onnx --database tuned.db
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import tessel
from common import settle


def onnx_path(model: str, workdir: Path) -> Path:
    """`model` itself if it names an ONNX file, else the zoo's or the suite's model exported
    to `workdir`."""
    if model.endswith(".onnx"):
        path = Path(model)
        if not path.is_file():
            raise SystemExit(f"profile_vs_ort: no such file {model}")
        return path
    from model_latency import known_models, write_onnx
    if model not in known_models():
        raise SystemExit(f"profile_vs_ort: unknown model {model!r}; known: "
                         f"{', '.join(known_models())}, or a path ending in .onnx")
    path = workdir / f"{model}.onnx"
    write_onnx(model, {}, str(path))
    return path


def random_feeds(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for each graph input of the ONNX file: token ids in [0, 1000) for integer ones
    (a vocabulary is at least that large in every model of the suite), normal floats else."""
    import onnx
    from onnx import helper
    rng = np.random.default_rng(seed)
    graph = onnx.load(str(path), load_external_data=False).graph
    constants = {t.name for t in graph.initializer}
    feeds = {}
    for value in graph.input:
        if value.name in constants:
            continue
        tensor = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        feeds[value.name] = (rng.integers(0, 1000, shape).astype(dtype)
                             if np.issubdtype(dtype, np.integer)
                             else rng.standard_normal(shape).astype(dtype))
    return feeds


def ort_by_op(profile_file: str) -> dict[str, float]:
    """Milliseconds per operator type: each node's median call, summed over its nodes."""
    calls: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for event in json.loads(Path(profile_file).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            calls[(event["args"]["op_name"], event["name"])].append(event["dur"] / 1e3)
    out: dict[str, float] = collections.Counter()
    for (op, _), durations in calls.items():
        out[op] += statistics.median(durations)
    return dict(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a zoo or suite model's name, or an .onnx")
    p.add_argument("--database", default=None, help="tuning records (default: untuned)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--top", type=int, default=15, help="slowest tessel kernels to list")
    args = p.parse_args()
    if args.rounds < 1:
        raise SystemExit("profile_vs_ort: --rounds must be at least 1")
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as tmp:
        path = onnx_path(args.model, Path(tmp))
        feeds = random_feeds(path)
        model = tessel.compile_model(str(path), database=args.database)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        opts.enable_profiling = True
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        inputs = list(feeds.values())
        ours, theirs = model(*inputs), sess.run(None, feeds)
        err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
        whole: dict[str, list[float]] = {"onnxruntime": [], "tessel": []}
        runs = {"onnxruntime": lambda: sess.run(None, feeds), "tessel": lambda: model(*inputs)}
        for _ in range(args.rounds):
            for name, run in runs.items():
                settle()
                run()
                start = time.perf_counter()
                run()
                whole[name].append(time.perf_counter() - start)
        by_op = ort_by_op(sess.end_profiling())
        settle()
        kernels = model.profile(repeat=args.rounds, in_sequence=True)

    print(f"{args.model}: tessel {model.report().splitlines()[0]}")
    print(f"largest difference from onnxruntime's outputs: {err:.2e}")
    ms = {k: statistics.median(v) * 1e3 for k, v in whole.items()}
    print(f"whole model, median of {args.rounds}: onnxruntime {ms['onnxruntime']:.2f} ms, "
          f"tessel {ms['tessel']:.2f} ms ({ms['onnxruntime'] / ms['tessel']:.2f}x)")
    print(f"\nonnxruntime by operator (ms; nodes only, sum {sum(by_op.values()):.2f}):")
    for op, t in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:<36} {t:9.3f}")
    kinds: dict[str, float] = collections.Counter()
    for name, secs in kernels:
        kinds[re.sub(r"_\d+$", "", name)] += secs * 1e3
    total = sum(kinds.values())
    print(f"\ntessel by kernel kind (ms, in sequence; kernels only, sum {total:.2f}):")
    for kind, t in sorted(kinds.items(), key=lambda kv: -kv[1]):
        print(f"  {kind:<36} {t:9.3f}")
    print(f"\ntessel's {args.top} slowest kernels (ms, parameter shapes):")
    ranked = sorted(zip(kernels, model.kernels), key=lambda kk: -kk[0][1])[:args.top]
    for (name, secs), kernel in ranked:
        shapes = ", ".join("x".join(map(str, b.shape)) for b in kernel.func.params)
        print(f"  {secs * 1e3:8.3f}  {name:<32} {shapes}")


if __name__ == "__main__":
    main()
