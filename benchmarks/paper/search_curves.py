"""Experiments 2, 3, 4 and 6: best GFLOP/s against trials for several search configurations
on the AutoTVM paper's workloads (ResNet-18's C1, C7, C12 and a 1024 matmul), several seeds
each.

    python benchmarks/paper/search_curves.py --experiment objective      # Fig. 5: rank vs
                                                                         #   regression
    python benchmarks/paper/search_curves.py --experiment diversity      # Fig. 6
    python benchmarks/paper/search_curves.py --experiment uncertainty    # Fig. 7
    python benchmarks/paper/search_curves.py --experiment strategies     # experiment 6

Each run tunes from an empty database in --out (a rerun adds only the trials a run is
missing; runs shared by two experiments are made once). Writes
benchmarks/results/<date>-paper-<experiment>.md and .png: per workload and configuration the
best at each mark as median [min-max] over seeds, and the tuning time.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

import tessel  # noqa: E402
from tessel import ops  # noqa: E402

EXPERIMENTS = {
    "diversity": ("Diversity-aware selection: lambda 1 (none), 2 and 4, simulated annealing "
                  "with XGBoost (AutoTVM Fig. 6)",
                  "annealing+xgb-lam1,annealing+xgb,annealing+xgb-lam4"),
    "uncertainty": ("Acquisition over a bootstrapped XGBoost ensemble: mean, expected "
                    "improvement, upper confidence bound (AutoTVM Fig. 7)",
                    "annealing+ensemble-mean,annealing+ensemble-ei,annealing+ensemble-ucb"),
    "objective": ("XGBoost with a pairwise rank objective against regression (AutoTVM Fig. 5)",
                  "evolutionary+xgb,evolutionary+xgb-reg"),
    "strategies": ("Evolutionary search (MetaSchedule) against simulated annealing (AutoTVM), "
                   "each on the auto space and on the operator's template, XGBoost",
                   "evolutionary+xgb,annealing+xgb,evolutionary+xgb@template,"
                   "annealing+xgb@template"),
}
WORKLOADS = "R18-C1,R18-C7,R18-C12,GMM-1024"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", choices=sorted(EXPERIMENTS), required=True)
    parser.add_argument("--workloads", default=WORKLOADS)
    parser.add_argument("--configs", help="override the experiment's configurations: "
                                           f"{', '.join(common.CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--results", default=str(Path(__file__).parents[1] / "results"))
    args = parser.parse_args()
    title, configs = EXPERIMENTS[args.experiment]
    configs = (args.configs or configs).split(",")
    workloads = args.workloads.split(",")
    target = tessel.Target("host")
    marks = [m for m in (16, 32, 64, 128, 200, 256, 400, 800) if m <= args.trials]
    lines = [f"# {title}", "", common.header(target) + f" {args.seeds} seeds, {args.trials} "
             "trials each, evolutionary search unless the configuration says otherwise.", "",
             "| workload | configuration | " + " | ".join(f"best @{m}" for m in marks)
             + " | tuning time (all seeds) |", "|---|---|" + "---:|" * (len(marks) + 1)]
    groups: dict[str, dict[str, list[np.ndarray]]] = {}
    for workload in workloads:
        flops = ops.flops(ops.SUITE[workload])
        groups[workload] = {}
        for config in configs:
            runs = [common.run(workload, config, s, args.trials, Path(args.out), target)
                    for s in range(args.seeds)]
            curves = [r.best_gflops(flops) for r in runs]
            groups[workload][config] = curves
            cells = [common.cell([c[m - 1] for c in curves if len(c) >= m]) for m in marks]
            lines.append(f"| {workload} | {config} | " + " | ".join(cells) +
                         f" | {sum(r.wall_s for r in runs) / 60:.1f} min |")
            print(lines[-1], flush=True)
    lines += ["", "Cells: best GFLOP/s after that many trials, median [min-max] over seeds.", ""]
    common.write_results(args.results, args.experiment, lines, groups, f"{title} on {target}")


if __name__ == "__main__":
    main()
