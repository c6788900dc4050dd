"""Measure random schedules of two small conv2d workloads: the transfer-learning fixture.

    python benchmarks/make_transfer_fixture.py [--n 180] [--out tests/data/transfer_conv2d.json.gz]

For each workload (ResNet-like 3x3 convolutions at reduced size, each well under 2 ms),
generates n distinct random schedules with real primitives (random_schedules.py), builds
each with tessel.build, checks it against the numpy reference, and times it with
Module.time_all on one core (Target("host", cores=1): parallel loops get one thread). On a
shared 2-core machine a 2-thread kernel waits for scheduler time slices whenever another
process holds a core, and its time becomes ~8 ms whatever it computes; one thread gives
times that reflect the program. Writes gzipped JSON:

    {"format": "tessel.transfer_fixture/1", "target": ..., "workloads": [
        {"name": ..., "workload": <PrimFunc JSON>, "records": [
            {"trace": <Trace JSON>, "costs": [seconds, ...]}, ...]}, ...]}

A failing build or a wrong result is stored with "error": kind instead of costs. The test
replays each trace on the workload to get the scheduled program back.
"""
from __future__ import annotations

import argparse
import gzip
import json
import tempfile
import time

import numpy as np
from random_schedules import random_schedules

import tessel
from tessel import ir, ops

FORMAT = "tessel.transfer_fixture/1"
WORKLOADS = {
    # name: conv2d(N, C, H, W, O, KH, KW, stride, padding)
    "conv-a": (1, 32, 14, 14, 32, 3, 3, 1, 1),
    "conv-b": (1, 16, 28, 28, 32, 3, 3, 2, 1),
}


def measure(func: ir.PrimFunc, sched: ir.PrimFunc, inputs, expected, target: tessel.Target,
            cache_dir: str) -> dict:
    try:
        mod = tessel.build(sched, target, cache_dir=cache_dir)
    except tessel.CompileError as e:
        return {"error": "compile_error", "msg": str(e)[:200]}
    outs = ops.empty_outputs(func)
    mod(*inputs, *outs)
    if not np.allclose(outs[0], expected, rtol=1e-4, atol=1e-4):
        return {"error": "wrong_result", "msg": "output differs from the numpy reference"}
    costs = mod.time_all(*inputs, *outs, number=5, repeat=3, min_repeat_ms=20)
    return {"costs": [float(c) for c in costs]}


def workload_records(name: str, n: int, seed: int, target: tessel.Target,
                     cache_dir: str) -> dict:
    func = ops.conv2d(*WORKLOADS[name])
    inputs = ops.reference_inputs(func, seed=0)
    expected = ops.run_reference(func, *inputs)
    records = []
    t0 = time.time()
    for k, sch in enumerate(random_schedules(func, n, seed=seed)):
        rec = measure(func, sch.func, inputs, expected, target, cache_dir)
        records.append({"trace": json.loads(sch.trace.to_json()), **rec})
        if k % 20 == 0:
            best = min((min(r["costs"]) for r in records if "costs" in r), default=0)
            print(f"{name}: {k + 1}/{n} measured, best {best * 1e3:.3f} ms, "
                  f"{time.time() - t0:.0f} s", flush=True)
    return {"name": name, "workload": json.loads(ir.to_json(func)), "records": records}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=180)
    ap.add_argument("--out", default="tests/data/transfer_conv2d.json.gz")
    args = ap.parse_args()
    target = tessel.Target("host", cores=1)
    with tempfile.TemporaryDirectory() as cache_dir:
        data = {"format": FORMAT, "target": str(target),
                "workloads": [workload_records(name, args.n, 1000 * i, target, cache_dir)
                              for i, name in enumerate(WORKLOADS)]}
    with gzip.open(args.out, "wt") as f:
        json.dump(data, f, separators=(",", ":"))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
