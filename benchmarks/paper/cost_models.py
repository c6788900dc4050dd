"""Experiment 1: model-based search against random search (AutoTVM Fig. 4). Does XGBoost with
the rank objective (GBT) reach in 200 trials what random search reaches in 800?

    python benchmarks/paper/cost_models.py [--workloads R18-C1,R18-C7,R18-C12,GMM-1024]
        [--configs evolutionary+xgb,evolutionary+treegru,genetic] [--seeds 3 --trials 200]
        [--random-trials 800]

Each configuration of --configs tunes every workload for --trials with --seeds seeds
(evolutionary search unless it says otherwise; the default is GBT alone, TreeGRU and the
genetic algorithm are one flag away: each adds about as much time as GBT). Random search runs
once per workload for --random-trials: its programs are independent uniform draws, so the
disjoint windows of m trials of that one run are independent random searches of m trials,
and the table gives best@m over them as median [min-max] (four windows at 200, one at 800).
Runs are resumable and shared with the other experiments through --out (experiment 5 makes the
GBT runs of R18-C7 and GMM-1024). Writes benchmarks/results/<date>-paper-cost_models.md/.png.
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

WORKLOADS = "R18-C1,R18-C7,R18-C12,GMM-1024"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workloads", default=WORKLOADS)
    parser.add_argument("--configs", default="evolutionary+xgb",
                        help=f"model-based configurations: {', '.join(common.CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--random-trials", type=int, default=800)
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--results", default=str(Path(__file__).parents[1] / "results"))
    args = parser.parse_args()
    target, folder = tessel.Target("host"), Path(args.out)
    configs = args.configs.split(",")
    start = time.time()
    marks = [m for m in (16, 32, 64, 128, 200, 400, 800) if m <= max(args.trials,
                                                                     args.random_trials)]
    lines = ["# Model-based search against random search (AutoTVM Fig. 4)", "",
             common.header(target) + f" Model-based: {args.seeds} seeds x {args.trials} "
             f"trials; random: one run of {args.random_trials} trials per workload, best@m "
             "over its disjoint windows of m trials.", "",
             "| workload | configuration | " + " | ".join(f"best @{m}" for m in marks)
             + " | tuning time |", "|---|---|" + "---:|" * (len(marks) + 1)]
    panels: dict[str, dict[str, list[np.ndarray]]] = {}
    verdicts = []
    for workload in args.workloads.split(","):
        flops = ops.flops(ops.SUITE[workload])
        groups = {config: [common.run(workload, config, s, args.trials, folder, target)
                           for s in range(args.seeds)] for config in configs}
        rand = common.run(workload, "random", 0, args.random_trials, folder, target)
        panels[workload] = {c: [r.best_gflops(flops) for r in runs]
                            for c, runs in groups.items()}
        panels[workload]["random (one run)"] = [rand.best_gflops(flops)]
        # every best program again, together: model-based runs at the marks, random's windows
        spans = [(c, i, m) for c, runs in groups.items() for i, r in enumerate(runs)
                 for m in marks if len(r.seconds) >= m]
        windows = [(m, k) for m in marks for k in range(len(rand.seconds) // m)]
        again = common.retime_spans([(groups[c][i], 0, m) for c, i, m in spans] +
                                    [(rand, k * m, (k + 1) * m) for m, k in windows], target)
        model_based = dict(zip(spans, again[:len(spans)]))
        random_windows = dict(zip(windows, again[len(spans):]))
        for config, runs in groups.items():
            cells = [common.cell([g for (c, _, mark), g in model_based.items()
                                  if c == config and mark == m and g is not None])
                     for m in marks]
            lines.append(f"| {workload} | {config} | " + " | ".join(cells) +
                         f" | {sum(r.wall_s for r in runs) / 60:.1f} min |")
            print(lines[-1], flush=True)
        cells = [common.cell([g for (mark, _), g in random_windows.items()
                              if mark == m and g is not None]) for m in marks]
        lines.append(f"| {workload} | random | " + " | ".join(cells) +
                     f" | {rand.wall_s / 60:.1f} min |")
        print(lines[-1], flush=True)
        gbt = [g for (c, _, mark), g in model_based.items()
               if c == configs[0] and mark == args.trials and g is not None]
        verdicts.append((workload, float(np.median(gbt)) if gbt else 0.0,
                         random_windows.get((args.random_trials, 0)) or 0.0))
    won = sum(g >= r for _, g, r in verdicts)
    lines += ["", "Cells: GFLOP/s of the best program after that many trials, median "
              "[min-max] over seeds (random: over its windows), every best program timed again "
              "together at the end (common.retime_spans: runs made minutes apart measure the "
              "same programs up to 40% apart on this machine). The plot shows the curves as "
              "measured during the runs (random: its one run).", "",
              f"{configs[0]} after {args.trials} trials (median of seeds) against random "
              f"after {args.random_trials}: " + "; ".join(
                  f"{w} {g:.1f} vs {r:.1f}" for w, g, r in verdicts) +
              f". Ahead or even on {won} of {len(verdicts)}. Whole run: "
              f"{(time.time() - start) / 60:.1f} min.", ""]
    common.write_results(args.results, "cost_models", lines, panels,
                         f"Model-based vs random search on {target}")


if __name__ == "__main__":
    main()
