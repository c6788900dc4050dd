"""Does what was tuned before carry over? One model tuned by the clock from an empty database
in several arms, then every arm's model timed against onnxruntime in the same interleaved
rounds (benchmarks/model_latency.py):

- cold: no transplants (`strategy_options={"transplants": 0}`): the priors and the model;
- carried: the default: each task's first batch also holds the best programs of its
  nearest relatives (tessel.tuning.knowledge), from the database being tuned into (the
  model's own layers tuned before it) and the shipped cost model's programs;
- carried+<db> (with --transfer-from): the same with another database to learn from.

    python benchmarks/transfer_tuning.py --model resnet18 --time 300
    python benchmarks/transfer_tuning.py --model mobilenet_v2 --time 180 --transfer-from suite.db

Each arm tunes in a process of its own, one after another (never two at once); the databases
stay in --out. Run it on a quiet machine.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from pathlib import Path

import tessel
from model_latency import known_models, measure, tuned_labels, write_onnx

UNBOUNDED = 10 ** 9  # trials: the clock alone bounds each arm, as `tune-model --time`


def tune_arm(onnx: str, db: str, seconds: float, transplants: bool,
             transfer_from: list[str]) -> None:
    results = tessel.tune_model(onnx, None, UNBOUNDED, time_budget=seconds, database=db,
                                progress=False,
                                transfer_from=transfer_from,
                                strategy_options=None if transplants else {"transplants": 0})
    trials = sum(len(r.history) for r in results)
    print(f"  {Path(db).stem}: {len(results)} tasks, {trials} trials", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--time", type=float, default=300.0, help="seconds of tuning per arm")
    p.add_argument("--transfer-from", action="append", default=[], metavar="DB")
    p.add_argument("--out", default="transfer_runs", help="folder of the arms' databases")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--budget", type=float, default=14.0, help="seconds of timing per runner")
    p.add_argument("--arms", default="cold,carried",
                   help="which of cold,carried to tune (the --transfer-from arms always)")
    args = p.parse_args()
    if args.model not in known_models():
        p.error(f"unknown model {args.model!r}; known: {', '.join(known_models())}")
    for db in args.transfer_from:
        if not Path(db).exists():
            p.error(f"--transfer-from {db} does not exist")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    onnx = out / f"{args.model}.onnx"
    write_onnx(args.model, {}, str(onnx))
    arms = {"cold": (False, []), "carried": (True, [])}
    wanted = args.arms.split(",")
    if unknown := sorted(set(wanted) - set(arms)):
        p.error(f"unknown arm {unknown[0]!r}; known: cold, carried")
    arms = {name: arm for name, arm in arms.items() if name in wanted}
    for db in args.transfer_from:
        arms[f"carried+{Path(db).stem}"] = (True, [db])
    print(f"target: {tessel.Target('host')}; {args.model}, {args.time:.0f} s of tuning per arm")
    dbs = []
    for arm, (transplants, sources) in arms.items():
        db = out / f"{args.model}-{arm}.db"
        if db.exists():
            print(f"  {db.stem}: kept from an earlier run (delete it to tune again)")
        else:
            start = time.perf_counter()
            proc = mp.get_context("spawn").Process(
                target=tune_arm, args=(str(onnx), str(db), args.time, transplants, sources))
            proc.start()
            proc.join()
            print(f"  {db.stem}: {time.perf_counter() - start:.0f} s wall", flush=True)
        dbs.append(str(db))
    labels = tuned_labels(dbs)
    rows, _ = measure(args.model, ["onnxruntime", *labels], labels, None, args.rounds,
                      args.budget)
    ref = rows["onnxruntime"]
    print(f"\n{args.model}: median ms per call, and onnxruntime's time over each")
    for label, secs in rows.items():
        print(f"  {label:<36} {secs * 1e3:8.3f} ms  {ref / secs:5.2f}x")


if __name__ == "__main__":
    main()
