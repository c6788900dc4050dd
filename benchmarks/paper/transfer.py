"""Experiment 5: transfer learning (AutoTVM Figs. 8-9). A global model trained on the
records of ResNet-18's C1-C6 tunes C7, C8, C9 and a 1024 matmul; how many trials does it
take to reach what tuning without it reaches in 200?

    python benchmarks/paper/transfer.py [--seeds 3 --trials 200 --transfer-trials 64]
        [--no-priors] [--source-random 128]
    python benchmarks/paper/transfer.py --knowledge avx2.db --target x86_64-avx2 [--no-priors]

The sources are tuned first (evolutionary search with XGBoost from scratch, seed 0,
--source-trials each; experiment 2 makes the same runs), then each target with XGBoost from
scratch (--trials, the baseline) and with the transfer model (the fixed global model plus a
local XGBoost fitted on the target's own records over its scores; tessel.cost_model.transfer)
for --transfer-trials. With --no-priors no search measures the expert priors
(tessel.space.priors) in its first batch, the sources' included: every search starts from
random programs, as the paper's did. With --source-random N each source is also measured by
a random search of N trials and the global model learns from both: tuning runs' records
cluster where their search went, and a new workload's first batches lie elsewhere.

With --knowledge DB the transfer arm is what tessel carries today instead (issue 41): the
pretraining recipe's model (tools/pretrain_cost_model.py: lambdarank over per_store features,
records postprocessed as the search does) trained on DB's records with the targets left out,
under the same local model, and each target's first batch holding the best programs of its
nearest relatives in DB (tessel.tuning.knowledge), again with the targets left out (a copy
of DB without them in --out). No sources are tuned, unless --tuned-sources: then they are,
as without --knowledge, and their programs come first among the relatives (DB's workloads
were tuned 48 trials each: their best programs are about the priors). --target names what
DB was collected for (a preset of a smaller family runs with the host's cores). Every run is
resumable (records in --out). Writes benchmarks/results/<date>-paper-transfer[-knowledge]
[-sources][-fulllocal][-nopriors][-random<N>].md and .png.
"""
from __future__ import annotations

import argparse
import functools
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402

import tessel  # noqa: E402
from tessel import ops  # noqa: E402
from tessel.cost_model import (CostModel, TransferModel, XGBModel,  # noqa: E402
                               from_database, pretrain_global)
from tessel.database import Database  # noqa: E402
from tessel.ir import structural_hash  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from pretrain_cost_model import collection_target  # noqa: E402

SOURCES = "R18-C1,R18-C2,R18-C3,R18-C4,R18-C5,R18-C6"
TARGETS = "R18-C7,R18-C8,R18-C9,GMM-1024"
BASELINE = "evolutionary+xgb"


def transfer_run(workload: str, seed: int, trials: int, folder: Path, target: tessel.Target,
                 global_model, priors: bool = True, label: str = "transfer",
                 carry_from: tuple[str, ...] = (), full_local: bool = False
                 ) -> common.Run:
    """Tune `workload` with the transfer model until its database holds `trials` records
    (with `carry_from`: its first batch also holds the best programs of its relatives
    there; with `full_local`, its local model is XGBoost's from scratch, 150 rounds at eta
    0.2, instead of the gentle 30 at 0.1)."""
    func = ops.SUITE[workload]
    path = folder / f"{workload}-{label}-s{seed}.db"
    if common.count(path, func, target) < trials:
        glob = global_model()
        local = XGBModel(feature=glob.feature, seed=seed) if full_local else None
        tessel.tune(func, target, trials, strategy="evolutionary", database=path, seed=seed,
                    cost_model=TransferModel(glob, local=local, seed=seed), progress=False,
                    rerun_top=1, strategy_options={"priors": priors},
                    transfer_from=carry_from)
    return common.read_run(path, func, target, workload, label, seed, trials)


def recipe_model(db: Path, target: tessel.Target, objective: str = "lambdarank"):
    """The pretraining recipe's model (per_store features) trained on the records of `db` on
    `target`, kept beside it (<db>-<objective>.model) for the next run: the features of some
    six thousand records take minutes to extract."""
    kept = db.with_name(f"{db.stem}-{objective}.model")
    if kept.exists():
        return CostModel.load(kept)
    with Database(db) as records:
        model = from_database(records, target, objective=objective)
    model.save(kept)
    return model


def without(db: Path, keys: set[str], out: Path) -> Path:
    """A copy of the database `db` at `out` without the workloads of `keys` (their records
    and their entries): what a tessel user tuning them for the first time would hold."""
    if out.exists():
        return out
    part = out.with_suffix(".part")
    part.unlink(missing_ok=True)
    src, dst = sqlite3.connect(db), sqlite3.connect(part)
    try:
        src.backup(dst)  # (the backup API: a WAL database's pages as its readers see them)
        marks = ",".join("?" * len(keys))
        with dst:
            dst.execute(f"DELETE FROM records WHERE workload IN ({marks})", sorted(keys))
            dst.execute(f"DELETE FROM claims WHERE workload IN ({marks})", sorted(keys))
            dst.execute(f"DELETE FROM workloads WHERE key IN ({marks})", sorted(keys))
        dst.execute("PRAGMA journal_mode=DELETE")  # all in the one file before it moves
    finally:
        src.close()
        dst.close()
    part.rename(out)
    return out


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
    parser.add_argument("--knowledge", metavar="DB",
                        help="the transfer arm: the recipe's model and the programs of DB, "
                             "the targets left out (no sources tuned but with --tuned-sources)")
    parser.add_argument("--tuned-sources", action="store_true",
                        help="with --knowledge: also tune the sources as without it and carry "
                             "their programs first")
    parser.add_argument("--full-local", action="store_true",
                        help="the transfer model's local part at full strength (XGBoost's "
                             "150 rounds at eta 0.2) instead of 30 gentle rounds")
    parser.add_argument("--target", default="host",
                        help="host, or the preset DB was collected for (x86_64-avx2)")
    parser.add_argument("--out", default="paper_runs", help="folder of the run databases")
    parser.add_argument("--results", default=str(Path(__file__).parents[1] / "results"))
    args = parser.parse_args()
    if args.knowledge and not Path(args.knowledge).is_file():
        parser.error(f"--knowledge {args.knowledge}: no such database")
    if args.knowledge and args.source_random:
        parser.error("--source-random feeds the global model of the sources; --knowledge "
                     "trains the recipe's")
    if args.tuned_sources and not args.knowledge:
        parser.error("--tuned-sources goes with --knowledge (without it the sources are tuned)")
    target, folder = collection_target(args.target), Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    start = time.time()
    priors = not args.no_priors
    baseline = BASELINE if priors else f"{BASELINE}-nopriors"
    variant = ("-knowledge" if args.knowledge else "") + (
        "-sources" if args.tuned_sources else "") + (
        "-fulllocal" if args.full_local else "") + ("" if priors else "-nopriors") + (
        f"-random{args.source_random}" if args.source_random else "")
    label = "transfer" + variant
    targets = args.targets.split(",")
    unknown = [w for w in targets + args.sources.split(",") if w not in ops.SUITE]
    if unknown:
        parser.error(f"unknown workload {unknown[0]!r}; known: {', '.join(ops.SUITE)}")
    carry_from: tuple[str, ...] = ()
    if args.knowledge:
        left_out = {structural_hash(ops.SUITE[w]) for w in targets}
        copy = without(Path(args.knowledge), left_out,
                       folder / f"knowledge-{Path(args.knowledge).stem}.db")
        carry_from = (str(copy),)
        with Database(copy) as db:
            sources = [wl.func.name for wl in db.workloads()]
        if args.tuned_sources:  # tuned deeper than DB's: their programs are nearest first
            carry_from = tuple(str(common.run(w, baseline, 0, args.source_trials, folder,
                                              target).path)
                               for w in args.sources.split(",")) + carry_from

        def train():  # the recipe's model on DB without the targets
            print(f"global model: the records of {len(sources)} workloads of "
                  f"{args.knowledge}, the targets left out", flush=True)
            return recipe_model(copy, target)
    else:
        sources = args.sources.split(",")
        measured = [common.run(w, baseline, 0, args.source_trials, folder, target)
                    for w in sources]
        if args.source_random:  # a random run's first N records are a random sample
            measured += [common.run(w, "random", 0, args.source_random, folder, target)
                         for w in sources]

        def train():  # after the sources are measured
            pairs = [p for run in measured
                     for p in common.pairs(run.path, target, len(run.seconds))]
            print(f"global model: {len(pairs)} records of {len(sources)} workloads",
                  flush=True)
            return pretrain_global(pairs)
    global_model = functools.cache(train)  # trained once, when a transfer run first needs it

    marks = [m for m in (8, 16, 24, 32, 48, 64, 96, 128, 200)
             if m <= max(args.trials, args.transfer_trials)]
    if args.knowledge:
        title = (f"# Transfer learning: what tessel carries, from {Path(args.knowledge).name} "
                 "(AutoTVM Figs. 8-9)")
        about = (f" Knowledge: the records and best programs of {len(sources)} workloads of "
                 f"{args.knowledge} (the targets left out), the recipe's model (lambdarank) "
                 "under a local model" + (" at full strength (150 rounds, eta 0.2)"
                                          if args.full_local else "")
                 + ", relatives' programs in each first batch"
                 + (f", the programs of {args.sources} tuned {args.source_trials} trials "
                    f"each ({baseline}, seed 0) first among them" if args.tuned_sources
                    else "") + ". Each target: ")
    else:
        title = "# Transfer learning: a global model from ResNet-18's C1-C6 (AutoTVM Figs. 8-9)"
        about = (f" Sources: {', '.join(sources)}, {args.source_trials} trials each "
                 f"({baseline}, seed 0)" + (f", and {args.source_random} random programs each"
                                            if args.source_random else "") + ". Each target: ")
    lines = [title, "", common.header(target) + about +
             f"{args.seeds} seeds, XGBoost from scratch for {args.trials} trials against the "
             f"transfer model for {args.transfer_trials}, evolutionary search"
             + ("." if priors else "; no search measures the expert priors"
                + (" (the baseline starts from random programs, the transfer arm from its "
                   "relatives' programs)." if args.knowledge else
                   ", the sources' included (all start from random programs).")), "",
             "| workload | configuration | " + " | ".join(f"best @{m}" for m in marks)
             + " | first mark reaching the baseline's median @" + str(args.trials)
             + " | tuning time (all seeds) |", "|---|---|" + "---:|" * (len(marks) + 2)]
    panels: dict[str, dict[str, list[np.ndarray]]] = {}
    reached = 0
    for workload in targets:
        flops = ops.flops(ops.SUITE[workload])
        base = [common.run(workload, baseline, s, args.trials, folder, target)
                for s in range(args.seeds)]
        moved = [transfer_run(workload, s, args.transfer_trials, folder, target, global_model,
                              priors, label, carry_from, args.full_local)
                 for s in range(args.seeds)]
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
                         ("Transfer" if args.knowledge else "Transfer from C1-C6")
                         + f" on {target}" + variant.replace("-", ", "))


if __name__ == "__main__":
    main()
