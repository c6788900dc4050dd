"""Experiment 5's evidence: how well does a global model trained on some workloads' records
rank another workload's programs? Scores each global model on R18-C7's programs against their
measured throughput: Spearman rank correlation and the share of the true top 10% in the
model's top 10% (chance: 0.10).

    python benchmarks/paper/transfer_ranking.py --out paper_runs

Reads the databases that cost_models.py (random runs), transfer.py (with and without
--no-priors, --source-random) and search_curves.py --experiment strategies leave in --out; a
row whose databases are missing is skipped with a line saying which. Measures nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

import tessel  # noqa: E402
from tessel.cost_model import (pretrain_global, spearman_rho, throughput,  # noqa: E402
                               top_k_recall)

SOURCES = [f"R18-C{i}" for i in range(1, 7)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    args = parser.parse_args()
    folder, target = Path(args.out), tessel.Target("host")

    def pairs(names: list[tuple[str, int | None]]) -> list | None:
        missing = [folder / f"{name}.db" for name, _ in names
                   if not (folder / f"{name}.db").exists()]
        if missing:
            print(f"(skipped: {', '.join(map(str, missing))} missing)")
            return None
        return [p for name, first in names
                for p in common.pairs(folder / f"{name}.db", target, first)]

    tuned = [(f"{w}-evolutionary+xgb-s0", None) for w in SOURCES]
    tuned_np = [(f"{w}-evolutionary+xgb-nopriors-s0", None) for w in SOURCES]
    c1r, c12r = "R18-C1-random-s0", "R18-C12-random-s0"
    models = {
        "C1-C6 tuned with priors": tuned,
        "C1-C6 tuned without priors": tuned_np,
        "the same and 128 random programs of C1": tuned_np + [(c1r, 128)],
        "the same and 800 random programs of C1": tuned_np + [(c1r, 800)],
        "800 random programs of C1 alone": [(c1r, 800)],
        "C1-C6 tuned and 800 random programs of C1 and of C12":
            tuned_np + [(c1r, 800), (c12r, 800)],
        "C7's own records (2 no-priors runs)":
            [(f"R18-C7-evolutionary+xgb-nopriors-s{s}", None) for s in (0, 1)],
    }
    targets = {"C7, 800 random programs": [("R18-C7-random-s0", 800)],
               "C7, the 3 no-priors runs": [(f"R18-C7-evolutionary+xgb-nopriors-s{s}", 200)
                                            for s in range(3)]}
    scored = {name: [p for p in found if p[1].ok]
              for name, names in targets.items() if (found := pairs(names)) is not None}
    print("| global model trained on | records | scored on | Spearman | top-10% recall |")
    print("|---|---:|---|---:|---:|")
    for name, names in models.items():
        train = pairs(names)
        if train is None:
            continue
        model = pretrain_global(train)
        for tname, tpairs in scored.items():
            if name.startswith("C7's own") and "no-priors" in tname:
                continue  # its own training records
            measured = np.array([throughput(r) for _, r in tpairs])
            predicted = np.asarray(model.predict([c for c, _ in tpairs]))
            recall = top_k_recall(predicted, measured, max(1, len(measured) // 10))
            print(f"| {name} | {len(train)} | {tname} | "
                  f"{spearman_rho(predicted, measured):+.2f} | {recall:.2f} |", flush=True)


if __name__ == "__main__":
    main()
