"""Where a model's time goes: tessel's kernels against onnxruntime's operators, in one process.

A model whose whole-model ratio is poor hides which of its parts are slow. This script runs
the model's ONNX file both ways on the same inputs, in rounds, and prints
- the whole model, median ms of each (a pause between the two: the thread pools of one spin
  for a while after a call, and the other would run beside them);
- onnxruntime's own profile (SessionOptions.enable_profiling, a second session) summed by
  operator type, the median of each node's calls;
- tessel's kernels timed in sequence (CompiledModel.time_kernels: each kernel in the cache
  state the kernels before it leave), the median of each, summed by kind (the kernel's name
  without the number a repeated name takes), and the slowest kernels with their parameters'
  shapes;
- the same ONNX nodes both ways, matched by the node names tessel's kernels keep, where
  tessel loses most.
Each round runs both whole, then both part by part (one profiled run each), so a phase of the
machine's speed meets both. The two sums need not match their whole-model times:
onnxruntime counts its nodes only, tessel its kernels only (not the calls between them).

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

NCHWC = "_nchwc"  # onnxruntime's suffix to a value computed in its blocked layout


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


def ort_nodes(profile_file: str) -> dict[str, tuple[str, float]]:
    """{node name: (operator type, milliseconds: the median of its calls)} from onnxruntime's
    profile."""
    calls: dict[str, list[float]] = collections.defaultdict(list)
    ops: dict[str, str] = {}
    suffix = "_kernel_time"
    for event in json.loads(Path(profile_file).read_text()):
        if event.get("cat") == "Node" and event["name"].endswith(suffix):
            name = event["name"][:-len(suffix)]
            calls[name].append(event["dur"] / 1e3)
            ops[name] = event["args"]["op_name"]
    return {name: (ops[name], statistics.median(d)) for name, d in calls.items()}


def by_node(kernels: list[tuple[str, float]], model: tessel.CompiledModel,
            ort: dict[str, tuple[str, float]]) -> list[tuple[float, float, str, str]]:
    """(tessel ms, onnxruntime ms, onnxruntime's nodes, tessel's kernels) for each set of
    ONNX nodes that tessel's kernels and onnxruntime's nodes both cover, by the node names
    tessel keeps (a kernel fuses several nodes, onnxruntime fuses others; a Winograd
    convolution is three kernels of one node): the two runtimes' times for the same work.
    onnxruntime's layout conversions (ReorderInput/Output) name values tessel does not
    have; they stay out."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    def union(names: list[str]) -> None:
        for other in names[1:]:
            parent[find(other)] = find(names[0])
    groups = []
    for (_, secs), kernel in zip(kernels, model.kernels):
        names = [n.name for n in kernel.group.nodes if n.name]
        if names:
            union(names)
            shapes = ",".join("x".join(map(str, b.shape)) for b in kernel.func.params[:2])
            groups.append((names[0], f"{kernel.func.name}({shapes})", secs * 1e3))
    ours: dict[str, list] = collections.defaultdict(lambda: [0.0, []])
    for name, kernel, ms in groups:
        ours[find(name)][0] += ms
        ours[find(name)][1].append(kernel)
    theirs: dict[str, list] = collections.defaultdict(lambda: [0.0, []])
    for name, (op, ms) in ort.items():
        # a node tessel names too: onnxruntime's fused nodes keep one node's name, or (its
        # blocked convolutions) the name of the value they compute with "_nchwc" added,
        # which torch's exporter names after its node ("<node>_output_0")
        value = name.removesuffix(NCHWC)
        name = next((x for x in (name, value, re.sub(r"_output_\d+$", "", value))
                     if x in parent), None)
        if name is not None:
            theirs[find(name)][0] += ms
            theirs[find(name)][1].append(op)
    return [(ours[root][0], theirs[root][0], "+".join(theirs[root][1]),
             "+".join(ours[root][1])) for root in theirs if root in ours]


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
        model = tessel.compile_model(str(path), database=args.database)
        inputs = model.random_inputs()
        feeds = dict(zip(model.input_names, inputs))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        opts.enable_profiling = True  # a second session, profiled: per node, not timed whole
        opts.profile_file_prefix = str(Path(tmp) / "ort")
        profiled = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        ours, theirs = model(*inputs), sess.run(None, feeds)
        err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
        whole: dict[str, list[float]] = {"onnxruntime": [], "tessel": []}
        runs = {"onnxruntime": lambda: sess.run(None, feeds), "tessel": lambda: model(*inputs)}
        per_kernel = []
        for _ in range(args.rounds):  # each round: both whole, then both part by part
            for name, run in runs.items():
                settle()
                run()
                start = time.perf_counter()
                run()
                whole[name].append(time.perf_counter() - start)
            settle()  # each part-by-part run right after a whole one, its threads awake
            profiled.run(None, feeds)
            profiled.run(None, feeds)
            settle()
            model(*inputs)
            per_kernel.append(model.time_kernels())
        nodes = ort_nodes(profiled.end_profiling())
        names = [kernel.func.name for kernel in model.kernels]
        kernels = list(zip(names, np.median(per_kernel, axis=0).tolist()))

    print(f"{args.model}: tessel {model.report().splitlines()[0]}")
    print(f"largest difference from onnxruntime's outputs: {err:.2e}")
    ms = {k: statistics.median(v) * 1e3 for k, v in whole.items()}
    print(f"whole model, median of {args.rounds}: onnxruntime {ms['onnxruntime']:.2f} ms, "
          f"tessel {ms['tessel']:.2f} ms ({ms['onnxruntime'] / ms['tessel']:.2f}x)")
    by_op: dict[str, float] = collections.Counter()
    for op, ms_node in nodes.values():
        by_op[op] += ms_node
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
    pairs = sorted(by_node(kernels, model, nodes), key=lambda p: p[1] - p[0])
    print(f"\nthe same nodes both ways, where tessel loses most (ms; {len(pairs)} sets "
          "matched by node name):")
    for ours, theirs, ops, kernels_ in pairs[:args.top]:
        print(f"  tessel {ours:8.3f}  onnxruntime {theirs:8.3f}  ({theirs / ours:5.2f}x)  "
              f"{ops} | {kernels_}")
    print(f"\ntessel's {args.top} slowest kernels (ms, parameter shapes):")
    ranked = sorted(zip(kernels, model.kernels), key=lambda kk: -kk[0][1])[:args.top]
    for (name, secs), kernel in ranked:
        shapes = ", ".join("x".join(map(str, b.shape)) for b in kernel.func.params)
        print(f"  {secs * 1e3:8.3f}  {name:<32} {shapes}")


if __name__ == "__main__":
    main()
