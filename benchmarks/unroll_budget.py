"""How much auto-unrolling pays: rebuild the best records of a workload under several
budgets of unrolled C (tessel.codegen.c.UNROLL_CHARS) and report, per budget, the C size,
the compile time and the kernel's speed. A budget that cuts compile time without slowing the
programs that win searches is what the tuner should use.

    python benchmarks/unroll_budget.py --db r18.db --workloads R18-C1,R18-C8 --top 6
    python benchmarks/unroll_budget.py --db r18.db --budgets 600000,200000,100000

The records come from a database a search filled (e.g. benchmarks/tune_resnet18_layers.py's);
each program is compiled fresh (own kernel cache), then timed in rounds that alternate the
budgets. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

import tessel
from tessel import ops
from tessel.codegen.c import generate_c
from tessel.codegen.compiler import compile_shared
from tessel.codegen.module import Module
from tessel.codegen.passes import compact_buffers
from tessel.database import Database
from tessel.space import default_postprocs, postprocess

from common import gflops


def variants(func, program, target, budgets, cache):
    """{budget: (C chars, compile seconds, Module)} of one program."""
    out = {}
    for budget in budgets:
        source = generate_c(compact_buffers(program), target, unroll_chars=budget)
        start = time.perf_counter()
        lib = compile_shared(source, target, cache_dir=cache)
        out[budget] = (len(source), time.perf_counter() - start, Module(program, target,
                                                                          source, lib))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--workloads", default="R18-C1,R18-C8")
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--budgets", default="600000,200000,100000")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    target, budgets = tessel.Target("host"), [int(b) for b in args.budgets.split(",")]
    posts = default_postprocs(target)
    print(f"target: {target}; {time.strftime('%Y-%m-%d %H:%M')}; budgets {budgets}\n")
    print("| workload | record | " + " | ".join(f"{b // 1000} KB: KB / compile s / GFLOP/s"
                                              for b in budgets) + " |")
    print("|---|---:|" + "---:|" * len(budgets))
    totals = {b: [0.0, []] for b in budgets}
    with Database(args.db) as db, tempfile.TemporaryDirectory() as cache:
        for name in args.workloads.split(","):
            func = ops.SUITE[name]
            inputs = ops.reference_inputs(func, seed=0)
            outs = ops.empty_outputs(func)
            for k, record in enumerate(db.top_k(func, target, k=args.top)):
                program = postprocess(record.trace().apply(tessel.Schedule(func)), posts).func
                built = variants(func, program, target, budgets, cache)
                secs = {b: [] for b in budgets}
                for _ in range(args.rounds):
                    for b in budgets:
                        secs[b].append(built[b][2].time(*inputs, *outs, number=5, repeat=3))
                cells = []
                for b in budgets:
                    best = min(secs[b])
                    totals[b][0] += built[b][1]
                    totals[b][1].append(best)
                    cells.append(f"{built[b][0] / 1000:.0f} / {built[b][1]:.1f} / "
                                 f"{gflops(ops.flops(func), best):.0f}")
                print(f"| {name} | {k} | " + " | ".join(cells) + " |", flush=True)
    base = np.array(totals[budgets[0]][1])
    for b in budgets:
        ratio = np.exp(np.mean(np.log(base / np.array(totals[b][1]))))
        print(f"\nbudget {b // 1000} KB: compile {totals[b][0]:.1f} s in all, speed "
              f"{ratio:.3f}x the {budgets[0] // 1000} KB builds (geomean)")


if __name__ == "__main__":
    main()
