"""Experiments 2, 3, 4 and 6: best GFLOP/s against trials for several search configurations
on the AutoTVM paper's workloads (ResNet-18's C1, C7, C12 and a 1024 matmul), several seeds
each.

    python benchmarks/paper/search_curves.py --experiment objective      # Fig. 5: rank vs
                                                                         #   regression
    python benchmarks/paper/search_curves.py --experiment diversity      # Fig. 6
    python benchmarks/paper/search_curves.py --experiment uncertainty    # Fig. 7
    python benchmarks/paper/search_curves.py --experiment strategies     # exp. 6, auto space
    python benchmarks/paper/search_curves.py --experiment strategies-template   # templates

Each experiment has its own default workloads and trials (EXPERIMENTS), chosen so that a run
from empty databases takes under 45 minutes on a 2-core machine: annealing measures about half
as many programs a minute as evolutionary search, so diversity and uncertainty default to
R18-C7 and GMM-1024 (uncertainty at 64 trials); --workloads and --trials override.

Each run tunes from an empty database in --out (a rerun adds only the trials a run is
missing; runs shared by two experiments are made once). Writes
benchmarks/results/<date>-paper-<experiment>.md and .png: per workload and configuration the
best at each mark as median [min-max] over seeds, every run's best programs timed again
together at the end (common.retime), and the tuning time. Rerun on finished runs, the script
only re-times them.
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

WORKLOADS = "R18-C1,R18-C7,R18-C12,GMM-1024"
# experiment: (title, configurations, default workloads, default trials)
EXPERIMENTS = {
    "diversity": ("Diversity-aware selection: lambda 1 (none), 2 and 4, simulated annealing "
                  "with XGBoost (AutoTVM Fig. 6)",
                  "annealing+xgb-lam1,annealing+xgb,annealing+xgb-lam4", "R18-C7,GMM-1024", 128),
    "uncertainty": ("Acquisition over a bootstrapped XGBoost ensemble: mean, expected "
                    "improvement, upper confidence bound (AutoTVM Fig. 7)",
                    "annealing+ensemble-mean,annealing+ensemble-ei,annealing+ensemble-ucb",
                    "R18-C7,GMM-1024", 64),
    "objective": ("XGBoost with a pairwise rank objective against regression (AutoTVM Fig. 5)",
                  "evolutionary+xgb,evolutionary+xgb-reg", WORKLOADS, 128),
    "strategies": ("Evolutionary search (MetaSchedule) against simulated annealing (AutoTVM) "
                   "on the auto space, XGBoost; evolutionary also without its expert priors",
                   "evolutionary+xgb,evolutionary+xgb-nopriors,annealing+xgb", WORKLOADS, 64),
    "strategies-template": ("Evolutionary search (MetaSchedule) against simulated annealing "
                            "(AutoTVM) on the operator's template (AutoTVM's knobs), XGBoost",
                            "evolutionary+xgb@template,annealing+xgb@template", WORKLOADS, 64),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiment", choices=sorted(EXPERIMENTS), required=True)
    parser.add_argument("--workloads", help="default: the experiment's (EXPERIMENTS)")
    parser.add_argument("--configs", help="override the experiment's configurations: "
                                           f"{', '.join(common.CONFIGS)}")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--trials", type=int, help="default: the experiment's")
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--results", default=str(Path(__file__).parents[1] / "results"))
    args = parser.parse_args()
    title, configs, workloads, trials = EXPERIMENTS[args.experiment]
    configs = (args.configs or configs).split(",")
    workloads = (args.workloads or workloads).split(",")
    args.trials = args.trials or trials
    target = tessel.Target("host")
    marks = [m for m in (16, 32, 64, 128, 200, 256, 400, 800) if m <= args.trials]
    lines = [f"# {title}", "", common.header(target) + f" {args.seeds} seeds, {args.trials} "
             "trials each, evolutionary search unless the configuration says otherwise.", "",
             "| workload | configuration | " + " | ".join(f"best @{m}" for m in marks)
             + " | tuning time (all seeds) |", "|---|---|" + "---:|" * (len(marks) + 1)]
    groups: dict[str, dict[str, list[np.ndarray]]] = {}
    for workload in workloads:
        flops = ops.flops(ops.SUITE[workload])
        runs = {config: [common.run(workload, config, s, args.trials, Path(args.out), target)
                         for s in range(args.seeds)] for config in configs}
        groups[workload] = {c: [r.best_gflops(flops) for r in rs] for c, rs in runs.items()}
        flat = [r for rs in runs.values() for r in rs]
        again = common.retime(flat, marks, target)  # every run's best programs, together
        position = {id(r): i for i, r in enumerate(flat)}
        for config, rs in runs.items():
            cells = [common.cell([again[(position[id(r)], m)] for r in rs
                                  if (position[id(r)], m) in again]) for m in marks]
            lines.append(f"| {workload} | {config} | " + " | ".join(cells) +
                         f" | {sum(r.wall_s for r in rs) / 60:.1f} min |")
            print(lines[-1], flush=True)
    lines += ["", "Cells: GFLOP/s of the best program after that many trials, median [min-max] "
              "over seeds, every run's best programs timed again together at the end "
              "(common.retime: runs made minutes apart measure the same programs up to 40% "
              "apart on this machine). The plot shows the curves as measured during the runs.",
              ""]
    common.write_results(args.results, args.experiment, lines, groups, f"{title} on {target}")


if __name__ == "__main__":
    main()
