"""Records of a database made by an older tessel, rebuilt by this one: is the kernel as fast?

For each workload, the best record of the database is replayed and compiled twice: by this
tessel, and by the older checkout given with --old (its generated C, compiled here). Both
kernels and the vendor library (numpy/OpenBLAS for matmul, torch/oneDNN for conv2d) are timed
in interleaved rounds in this process. Also prints each kernel's hot loop (vector FMAs,
spills, instructions).

    git worktree add /tmp/old <commit>
    python benchmarks/rebuild_records.py --db pre.db --old /tmp/old GMM-1024 R18-C6
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

import tessel
from tessel import ops
from tessel.codegen import Module
from tessel.codegen.asm import summary
from tessel.codegen.compiler import compile_shared
from tessel.database import Database
from tessel.tuning import best_func

from common import best_secs, gflops
from tune_vs_reference import reference

OLD_SOURCE = textwrap.dedent("""\
    import sys
    import tessel
    from tessel import ops
    from tessel.database import Database
    try:
        from tessel.tuning import best_func
    except ImportError:  # before the tuning package (2026-11-24)
        from tessel.tune import best_func
    func, target = ops.SUITE[sys.argv[1]], tessel.Target("host")
    with Database(sys.argv[2]) as db:
        best = best_func(func, target, db)
    sys.stdout.write(tessel.build(best, target).source)  # compact buffers, then C
    """)


def old_module(name: str, db: str, old: Path, func, target) -> Module:
    """The kernel the older tessel at `old` generates for the best record, compiled here."""
    env = {**os.environ, "PYTHONPATH": str(old)}
    source = subprocess.run([sys.executable, "-c", OLD_SOURCE, name, db], env=env, cwd=old,
                            check=True, capture_output=True, text=True).stdout
    return Module(func, target, source, compile_shared(source, target))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workloads", nargs="+")
    parser.add_argument("--db", required=True)
    parser.add_argument("--old", required=True, type=Path, help="checkout of the older tessel")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    target = tessel.Target("host")
    for name in args.workloads:
        func = ops.SUITE[name]
        with Database(args.db) as db:
            new = tessel.build(best_func(func, target, db), target)
        old = old_module(name, args.db, args.old, func, target)
        print(f"{name}: the two C sources are "
              f"{'identical' if old.source == new.source else 'different'}")
        inputs = [np.random.default_rng(0).standard_normal(p.shape).astype(np.float32)
                  for p in func.params]
        ref, ref_name = reference(func, inputs[:-1])
        want = np.asarray(ref())
        for label, mod in (("old", old), ("new", new)):
            mod(*inputs)
            np.testing.assert_allclose(inputs[-1], want.reshape(inputs[-1].shape),
                                       rtol=1e-3, atol=1e-3)
            print(f"{name} {label}: {summary(mod.asm(), target)}")
        runs = {"old": old.bind(*inputs), "new": new.bind(*inputs), ref_name: ref}
        best = {k: float("inf") for k in runs}
        for _ in range(args.rounds):
            for label, fn in runs.items():
                best[label] = min(best[label], best_secs(fn, 10))
        flops = ops.flops(func)
        line = ", ".join(f"{k} {gflops(flops, v):.1f}" for k, v in best.items())
        print(f"{name}: GFLOP/s {line}; new/old {best['old'] / best['new']:.3f}x, "
              f"new/{ref_name} {best[ref_name] / best['new']:.2f}x")


if __name__ == "__main__":
    main()
