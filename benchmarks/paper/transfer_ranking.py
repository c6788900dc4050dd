"""Experiment 5's evidence: how well does a global model trained on some workloads' records
rank another workload's programs? Scores each global model on R18-C7's programs against their
measured throughput: Spearman rank correlation and the share of the true top 10% in the
model's top 10% (chance: 0.10).

    python benchmarks/paper/transfer_ranking.py --out paper_runs
    python benchmarks/paper/transfer_ranking.py --out runs --knowledge avx2.db \
        --target x86_64-avx2 [--random 200]

Reads the databases that cost_models.py (random runs), transfer.py (with and without
--no-priors, --source-random) and search_curves.py --experiment strategies leave in --out; a
row whose databases are missing is skipped with a line saying which. Without --knowledge it
measures nothing.

With --knowledge DB: the model transfer.py --knowledge tunes with (the recipe's, trained on
DB without experiment 5's targets: the copy it left in --out), and the same recipe with the
pairwise rank objective, scored on each target's programs: --random N random programs of a
run `common.run(target, "random", 0, N)` (measured first where missing) and the records of
the baseline runs transfer.py made, with and without priors. The median over the targets is
issue 41's bar (Spearman >= 0.7, top-10% recall >= 0.5).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402
from transfer import TARGETS, recipe_model  # noqa: E402

import tessel  # noqa: E402
from tessel.cost_model import (pretrain_global, spearman_rho, throughput,  # noqa: E402
                               top_k_recall)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from pretrain_cost_model import collection_target  # noqa: E402

SOURCES = [f"R18-C{i}" for i in range(1, 7)]


def scores(model, pairs: list) -> tuple[float, float]:
    """(Spearman, top-10% recall) of `model` on measured (candidate, result) pairs."""
    measured = np.array([throughput(r) for _, r in pairs])
    predicted = np.asarray(model.predict([c for c, _ in pairs]))
    recall = top_k_recall(predicted, measured, max(1, len(measured) // 10))
    return spearman_rho(predicted, measured), recall


def knowledge_rows(folder: Path, db: Path, target: tessel.Target, targets: list[str],
                   random: int) -> None:
    """Issue 41's ranking bar on experiment 5's targets (module docstring)."""
    copy = folder / f"knowledge-{db.stem}.db"
    if not copy.exists():
        raise SystemExit(f"{copy} is missing: run transfer.py --knowledge {db} --out {folder} "
                         "first (it leaves the targets out)")
    models = {objective: recipe_model(copy, target, objective)
              for objective in ("lambdarank", "rank")}
    sets = {"random": lambda w: [common.run(w, "random", 0, random, folder, target).path],
            "tuned, no priors": lambda w: [folder / f"{w}-evolutionary+xgb-nopriors-s{s}.db"
                                           for s in range(3)],
            "tuned with priors": lambda w: [folder / f"{w}-evolutionary+xgb-s{s}.db"
                                            for s in range(3)]}
    print(f"target: {target}; models trained on {copy} (the targets left out)\n")
    print("| objective | scored on | " + " | ".join(targets) + " | median |")
    print("|---|---|" + "---:|" * (len(targets) + 1))
    for objective, model in models.items():
        for name, paths in sets.items():
            cells, rhos, recalls = [], [], []
            for w in targets:
                found = [p for p in paths(w) if p.exists()]
                pairs = [p for path in found for p in common.pairs(path, target)
                         if p[1].ok]
                if not found or len(pairs) < 10:
                    cells.append("-")
                    continue
                rho, recall = scores(model, pairs)
                rhos.append(rho)
                recalls.append(recall)
                cells.append(f"{rho:+.2f} / {recall:.2f} ({len(pairs)})")
            median = (f"{np.median(rhos):+.2f} / {np.median(recalls):.2f}" if rhos else "-")
            print(f"| {objective} | {name} | " + " | ".join(cells) + f" | {median} |",
                  flush=True)
    print("\nCells: Spearman / top-10% recall (programs scored).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--knowledge", metavar="DB",
                        help="score the model transfer.py --knowledge DB tunes with")
    parser.add_argument("--target", default="host",
                        help="host, or the preset DB was collected for (x86_64-avx2)")
    parser.add_argument("--targets", default=TARGETS)
    parser.add_argument("--random", type=int, default=200,
                        help="random programs of each target to score (measured if missing)")
    args = parser.parse_args()
    folder, target = Path(args.out), collection_target(args.target)
    if args.knowledge:
        if not Path(args.knowledge).is_file():
            parser.error(f"--knowledge {args.knowledge}: no such database")
        knowledge_rows(folder, Path(args.knowledge), target, args.targets.split(","),
                       args.random)
        return

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
            rho, recall = scores(model, tpairs)
            print(f"| {name} | {len(train)} | {tname} | {rho:+.2f} | {recall:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
