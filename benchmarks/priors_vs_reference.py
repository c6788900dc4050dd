"""The expert priors alone (no search, no measurements to learn from) against the vendor
library, timed in interleaved rounds in this process: numpy/OpenBLAS for matmul, torch/oneDNN
for conv2d. Prints each ranked prior's GFLOP/s, and the first one's (what `compile_model`
runs for a task without records).

    python benchmarks/priors_vs_reference.py GMM-1024 R18-C6
    python benchmarks/priors_vs_reference.py ODD-1x1-160x10        # a held-back shape
    python benchmarks/priors_vs_reference.py R18-C6 --target x86_64-avx2   # AVX2-sized priors
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import tessel
from tessel import ops
from tessel.schedule import ScheduleError, Schedule
from tessel.space import default_postprocs, make_space, postprocess
from tessel.space.priors import ranked_priors

from common import best_secs, gflops
from tune_vs_reference import reference
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from pretrain_cost_model import workload  # noqa: E402


def prior_modules(func, target: tessel.Target, build_target: tessel.Target, limit: int):
    """(rank, Module) of the first `limit` priors of the auto space sized for `target`,
    built for `build_target` (the host: the code runs here)."""
    space, posts = make_space("auto", target), default_postprocs(target)
    out = []
    for rank, (design, decisions) in enumerate(ranked_priors(space, func)):
        if len(out) >= limit:
            break
        try:
            final = postprocess(design.apply(Schedule(func), decisions), posts)
        except ScheduleError:
            continue
        if final is not None:
            out.append((rank, tessel.build(final.func, build_target)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--target", default="host",
                        help="size the priors for this target (default: this host)")
    parser.add_argument("--limit", type=int, default=6, help="priors per workload (default 6)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    args = parser.parse_args()
    host = tessel.Target("host")
    sized = host if args.target == "host" else tessel.Target(args.target, cores=host.cores)
    print(f"host: {host}; priors sized for: {sized} "
          f"({sized.vector_lanes('float32')} float lanes, {getattr(sized, 'vector_registers', 16)} registers)")
    for name in args.workloads:
        func = workload(name)
        inputs = ops.reference_inputs(func, seed=0)
        (out,) = ops.empty_outputs(func)
        ref_fn, ref_name = reference(func, inputs)
        expected = ops.run_reference(func, *inputs)
        mods = prior_modules(func, sized, host, args.limit)
        for _, mod in mods:
            mod(*inputs, out)
            np.testing.assert_allclose(out, expected, rtol=1e-3, atol=1e-3)
        flops = ops.flops(func)
        ref_secs, secs = [], {rank: [] for rank, _ in mods}
        for _ in range(args.rounds):  # interleaved: a noisy moment hits every runner alike
            ref_secs.append(best_secs(ref_fn, 3))
            for rank, mod in mods:
                secs[rank].append(best_secs(lambda: mod(*inputs, out), 3))
        ref = min(ref_secs)
        print(f"\n{name}: {ref_name} {gflops(flops, ref):.1f} GFLOP/s")
        for rank, _ in mods:
            s = min(secs[rank])
            print(f"  prior {rank}: {gflops(flops, s):7.1f} GFLOP/s  {ref / s:5.2f}x")
        if mods:
            first, best = min(secs[mods[0][0]]), min(min(v) for v in secs.values())
            print(f"  first prior {ref / first:.2f}x, best of {len(mods)} priors {ref / best:.2f}x")


if __name__ == "__main__":
    main()
