"""Experiment 5: transfer learning (AutoTVM Figs. 8-9). A global model trained on the
records of ResNet-18's C1-C6 tunes C7, C8, C9 and a 1024 matmul; how many trials does it
take to reach what tuning without it reaches in 200?

    python benchmarks/paper/transfer.py [--seeds 3 --trials 200 --transfer-trials 64]
        [--no-priors] [--source-random 128]

The sources are tuned first (evolutionary search with XGBoost from scratch, seed 0,
--source-trials each; experiment 2 makes the same runs), then each target with XGBoost from
scratch (--trials, the baseline) and with the transfer model (the fixed global model plus a
local XGBoost fitted on the target's own records over its scores; tessel.cost_model.transfer)
for --transfer-trials. With --no-priors no search measures the expert priors
(tessel.space.priors) in its first batch, the sources' included: every search starts from
random programs, as the paper's did. With --source-random N each source is also measured by
a random search of N trials and the global model learns from both: tuning runs' records
cluster where their search went, and a new workload's first batches lie elsewhere. Every run
is resumable (records in --out). Writes
benchmarks/results/<date>-paper-transfer[-nopriors][-random<N>].md and .png.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

import tessel  # noqa: E402
from tessel import ops  # noqa: E402
from tessel.cost_model import TransferModel, pretrain_global  # noqa: E402

SOURCES = "R18-C1,R18-C2,R18-C3,R18-C4,R18-C5,R18-C6"
TARGETS = "R18-C7,R18-C8,R18-C9,GMM-1024"
BASELINE = "evolutionary+xgb"


def transfer_run(workload: str, seed: int, trials: int, folder: Path, target: tessel.Target,
                 global_model, priors: bool = True, label: str = "transfer") -> common.Run:
    """Tune `workload` with the transfer model until its database holds `trials` records."""
    func = ops.SUITE[workload]
    path = folder / f"{workload}-{label}-s{seed}.db"
    if common.count(path, func, target) < trials:
        tessel.tune(func, target, trials, strategy="evolutionary", database=path, seed=seed,
                    cost_model=TransferModel(global_model(), seed=seed), progress=False,
                    rerun_top=1, strategy_options={"priors": priors})
    return common.read_run(path, func, target, workload, label, seed, trials)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sources", default=SOURCES)
    parser.add_argument("--targets", default=TARGETS)
    parser.add_argument("--source-trials", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200, help="the baseline's trials")
    parser.add_argument("--transfer-trials", type=int, default=64)
    parser.add_argument("--no-priors", action="store_true",
                        help="neither search measures the expert priors first")
    parser.add_argument("--source-random", type=int, default=0, metavar="N",
                        help="also measure each source by N random programs for the global "
                             "model")
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--results", default=str(Path(__file__).parents[1] / "results"))
    args = parser.parse_args()
    target, folder = tessel.Target("host"), Path(args.out)
    start = time.time()
    priors = not args.no_priors
    baseline = BASELINE if priors else f"{BASELINE}-nopriors"
    variant = ("" if priors else "-nopriors") + (f"-random{args.source_random}"
                                                  if args.source_random else "")
    label = "transfer" + variant

    sources = args.sources.split(",")
    measured = [common.run(w, baseline, 0, args.source_trials, folder, target)
                for w in sources]
    if args.source_random:  # a random run's first N records are a random sample
        measured += [common.run(w, "random", 0, args.source_random, folder, target)
                     for w in sources]
    trained: list = []

    def global_model():  # trained once, after the sources are measured
        if not trained:
            pairs = [p for run in measured
                     for p in common.pairs(run.path, target, len(run.seconds))]
            trained.append(pretrain_global(pairs))
            print(f"global model: {len(pairs)} records of {len(sources)} workloads", flush=True)
        return trained[0]

    marks = [m for m in (8, 16, 24, 32, 48, 64, 96, 128, 200)
             if m <= max(args.trials, args.transfer_trials)]
    lines = ["# Transfer learning: a global model from ResNet-18's C1-C6 (AutoTVM Figs. 8-9)",
             "", common.header(target) + f" Sources: {', '.join(sources)}, "
             f"{args.source_trials} trials each ({baseline}, seed 0)"
             + (f", and {args.source_random} random programs each" if args.source_random
                else "") + ". Each target: "
             f"{args.seeds} seeds, XGBoost from scratch for {args.trials} trials against the "
             f"transfer model for {args.transfer_trials}, evolutionary search"
             + ("." if priors else "; no search measures the expert priors, the sources' "
                "included (all start from random programs)."), "",
             "| workload | configuration | " + " | ".join(f"best @{m}" for m in marks)
             + " | first mark reaching the baseline's median @" + str(args.trials)
             + " | tuning time (all seeds) |", "|---|---|" + "---:|" * (len(marks) + 2)]
    panels: dict[str, dict[str, list[np.ndarray]]] = {}
    reached = 0
    for workload in args.targets.split(","):
        flops = ops.flops(ops.SUITE[workload])
        base = [common.run(workload, baseline, s, args.trials, folder, target)
                for s in range(args.seeds)]
        moved = [transfer_run(workload, s, args.transfer_trials, folder, target, global_model,
                              priors, label) for s in range(args.seeds)]
        panels[workload] = {"no transfer (xgb)": [r.best_gflops(flops) for r in base],
                            "transfer": [r.best_gflops(flops) for r in moved]}
        again = common.retime(base + moved, marks, target)
        goal = float(np.median([again[(i, args.trials)] for i in range(len(base))
                                if (i, args.trials) in again]))
        for arm, runs, first in (("no transfer (xgb)", base, 0),
                                 ("transfer", moved, len(base))):
            index = range(first, first + len(runs))
            cells = [common.cell([again[(i, m)] for i in index if (i, m) in again])
                     for m in marks]
            hits = [next((m for m in marks if again.get((i, m), 0.0) >= goal), None)
                    for i in index]
            found = [h for h in hits if h is not None]
            majority = len(found) * 2 > len(hits)
            reach = (f"{int(np.median(found))}" if majority else "-") + " (seeds: " + \
                ", ".join(str(h) if h else "-" for h in hits) + ")"
            if arm == "transfer" and majority and np.median(found) <= args.trials / 3:
                reached += 1
            lines.append(f"| {workload} | {arm} | " + " | ".join(cells) + f" | {reach} | "
                         f"{sum(r.wall_s for r in runs) / 60:.1f} min |")
            print(lines[-1], flush=True)
    lines += ["", "Cells: GFLOP/s of the best program after that many trials, every run's "
              "bests timed again together at the end (common.retime: runs made minutes apart "
              "measure the same programs up to 40% apart on this machine), median [min-max] "
              "over seeds. 'First mark': the median over the seeds that reach the baseline's "
              f"median after {args.trials} trials (a majority must; '-': they do not). The "
              "plot shows the curves as measured during the runs.",
              f"Targets reached within a third of {args.trials} trials: {reached} of "
              f"{len(panels)}. Whole run: {(time.time() - start) / 60:.1f} min.", ""]
    common.write_results(args.results, label, lines, panels,
                         f"Transfer from C1-C6 on {target}" + variant.replace("-", ", "))


if __name__ == "__main__":
    main()
