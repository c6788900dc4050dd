"""Which way of timing a kernel alone ranks a model task's programs as the model runs them?

For each chosen kernel of a compiled model, the task's best records (any protocol) are built
and timed three ways: warm (repeated calls, data in cache: how the tuner timed a model's
kernels before MEASURE="in_model"), in_model (each call alone, after a sweep of the
last-level cache, its weights and output flushed and its activation inputs written again by
the threads: tessel.ir.MEASURE) and in sequence (the candidate bound in the kernel's place,
the whole model run, only that kernel's call timed; median of `--rounds` runs). It prints,
per kernel, the Spearman rank correlation of the warm and the in_model times with the
in-sequence times, and the in-sequence time of the program each protocol would pick:

    python benchmarks/measure_protocols.py mobilenet_v2.onnx --db tuned.db --kernels 0,5,8,35

Candidates whose compiled form takes other arrays than the model's kernel (a different
weight packing) are left out.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import tessel
from tessel.codegen import build
from tessel.cost_model.metrics import spearman_rho
from tessel.database import Database, record_program
from tessel.graph.compiler import compile_model
from tessel.graph.compiler.compile import protocols
from tessel.prepack import split_prepacks
from tessel.space import default_postprocs


def candidates(kernel, call, target, db, k: int) -> list:
    """(module, bound call) of the best `k` records of the kernel's task (its protocol's
    records, else the older protocols') that take the model kernel's arrays."""
    workload = kernel.func
    const = set(workload.constant_params)
    posts = default_postprocs(target, pack_panels=not const)
    records = next((r for r in (db.top_k(w, target, k) for w in protocols(workload)) if r), [])
    out = []
    for record in records:
        func = record_program(record, workload, posts)
        if func is None:  # recorded by an older tessel: not replayable
            continue
        main, _ = split_prepacks(func, const, drop_unread=True)
        shapes = [tuple(int(n) for n in p.shape) for p in main.params]
        if shapes != [a.shape for a in call.arrays]:
            continue
        module = build(main, target)
        out.append((module, module.bind(*call.arrays)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="an .onnx file")
    parser.add_argument("--db", required=True, help="a database the model was tuned into")
    parser.add_argument("--kernels", default="", help="kernel indices (default: all)")
    parser.add_argument("--top", type=int, default=12, help="records per task")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if not Path(args.db).is_file():
        parser.error(f"no database at {args.db}")
    if args.top < 2 or args.rounds < 1:
        parser.error("--top must be >= 2 and --rounds >= 1")
    target = tessel.Target("host")
    model = compile_model(args.model, target, args.db)
    db = Database(args.db)
    rng = np.random.default_rng(0)
    model(*[rng.standard_normal(model.graph.types[v].shape).astype("float32")
            for v in model.input_names])
    calls = model.calls
    wanted = ([int(k) for k in args.kernels.split(",")] if args.kernels
              else range(len(calls)))
    print(f"target: {target}\n{'kernel':32s} {'n':>3s} {'rho warm':>8s} {'in_model':>8s} | "
          f"in sequence (us): {'warm pick':>9s} {'its pick':>9s} {'best':>7s} {'worst':>7s}")
    totals = np.zeros(3)
    for i in wanted:
        kernel, call = model.kernels[i], calls[i]
        found = candidates(kernel, call, target, db, args.top)
        if len(found) < 2:
            print(f"{i:3d} {kernel.func.name[:28]:28s} fewer than 2 candidates")
            continue
        warm = [m.time(*call.arrays, number=10, repeat=3) for m, _ in found]
        cold = [m.time(*call.arrays, number=10, repeat=3, in_model=True) for m, _ in found]
        seq = [[] for _ in found]
        for _ in range(args.rounds):
            for j, (_, candidate) in enumerate(found):
                for k, other in enumerate(calls):
                    if k != i:
                        other()
                        continue
                    start = time.perf_counter()
                    candidate()
                    seq[j].append(time.perf_counter() - start)
        seq = np.array([np.median(s) for s in seq])
        picks = seq[int(np.argmin(warm))], seq[int(np.argmin(cold))], seq.min()
        totals += picks
        print(f"{i:3d} {kernel.func.name[:28]:28s} {len(found):3d} "
              f"{spearman_rho(np.array(warm), seq):+8.2f} {spearman_rho(np.array(cold), seq):+8.2f}"
              f" | {'':17s} {picks[0] * 1e6:9.1f} {picks[1] * 1e6:9.1f} {picks[2] * 1e6:7.1f}"
              f" {seq.max() * 1e6:7.1f}")
    print(f"sum of the picks' in-sequence times: warm {totals[0] * 1e6:.0f} us, in_model "
          f"{totals[1] * 1e6:.0f} us, best {totals[2] * 1e6:.0f} us")


if __name__ == "__main__":
    main()
