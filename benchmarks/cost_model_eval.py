"""How well does a global cost model rank the programs of a workload it never saw?

    python benchmarks/cost_model_eval.py --db pretrain.db --db suite.db
    python benchmarks/cost_model_eval.py --db avx2.db --target x86_64-avx2 \\
        --models per_store:rank,per_store:lambdarank --protocols family

Reads measured records from tessel databases (`tools/pretrain_cost_model.py collect`, a
model's tuning, any run's), groups their workloads by operator family (convolutions, matrix
products, Winograd transforms, row and memory kernels: from the workload's name) and scores
each model configuration (feature set : objective) under two protocols:

- family: train on every family but one, rank the held-out family's workloads;
- shape: workloads in SHAPE_FOLDS seeded folds, train on the others (every family is seen,
  never the held-out shapes);
- database: train on every database but one, rank the held-out one's workloads (databases of
  two targets, `--db PATH@TARGET`: does what was learned on one ISA family rank the other's
  programs?).

Per held-out workload with at least --min-records valid records: Spearman's rho between
score and measured throughput, top-10% recall (the true best tenth found in the model's best
tenth; chance 0.10), NDCG@16 (gain: throughput over the workload's best) and the best of the
model's top 16 over the workload's best (what a first batch picked by the model reaches).
Prints a markdown table of medians per protocol and fold. Measures nothing; features are
cached beside each database (<db>.<feature>.npz, rebuilt when its records change).
"""
from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tessel
from tessel import features
from tessel.cost_model import XGBModel, spearman_rho, throughput, top_k_recall
from tessel.cost_model.records import pairs_from_database
from tessel.database import Database

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from pretrain_cost_model import collection_target  # noqa: E402

SHAPE_FOLDS = 4
FIRST_BATCH = 16
FAMILIES = ("conv", "matmul", "winograd", "rows")


def family(name: str) -> str:
    """The operator family of a workload, from its name (a task's, a recipe's or a suite
    operator's)."""
    name = name.lower().rsplit("/", 1)[-1]
    if "winograd" in name:
        return "winograd"
    if "conv" in name or name in ("c1d", "c2d", "dep", "dil", "grp", "t2d", "cbr") or \
            name.startswith("r18-c") or name.startswith("odd-"):
        return "conv"
    if any(word in name for word in ("matmul", "dense", "gmm", "tbg", "bmm")):
        return "matmul"
    return "rows"


@dataclass(eq=False)
class Workload:
    name: str
    key: str
    family: str
    X: dict[str, np.ndarray]  # feature set -> [records, width]
    tput: np.ndarray  # throughput (0: an error)
    source: str = ""  # the database it came from


def load(db_path: str, target: tessel.Target, feature_sets: list[str]) -> list[Workload]:
    """Every workload of a database with records on `target`, with its feature matrices
    (cached beside the database)."""
    with Database(db_path) as db:
        names = {w.key: w.func.name for w in db.workloads()}
        count = db.count()
        groups = None
        out: dict[str, Workload] = {}
        for feature in feature_sets:
            cache = Path(f"{db_path}.{feature}.npz")
            stamp = hashlib.sha256(f"{count} {target.fingerprint_hash()} {feature} "
                                   f"{features.width(feature)}".encode()).hexdigest()[:16]
            if cache.exists():
                data = np.load(cache, allow_pickle=False)
                if str(data["stamp"]) == stamp:
                    _add(out, names, feature, data)
                    continue
            if groups is None:
                groups = _pairs(db, db_path, target, count)
            keys = np.array([k for k, ps in groups.items() for _ in ps])
            X = np.concatenate([features.extract(feature, [c for c, _ in ps])
                                for ps in groups.values()])
            tput = np.array([throughput(r) for ps in groups.values() for _, r in ps])
            np.savez_compressed(cache, stamp=stamp, keys=keys, X=X, tput=tput)
            _add(out, names, feature, np.load(cache, allow_pickle=False))
    return list(out.values())


def _pairs(db: Database, db_path: str, target: tessel.Target, count: int) -> dict:
    """The database's (candidate, result) pairs by workload, replayed once and cached
    (pickled beside the database: replaying thousands of traces takes minutes)."""
    cache = Path(f"{db_path}.pairs.pkl")
    stamp = f"{count} {target.fingerprint_hash()}"
    if cache.exists():
        with open(cache, "rb") as f:
            found = pickle.load(f)
        if found["stamp"] == stamp:
            return found["groups"]
    start = time.perf_counter()
    groups = pairs_from_database(db, target)
    print(f"# {db_path}: {sum(map(len, groups.values()))} records of {len(groups)} workloads "
          f"replayed in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 100_000))
    with open(cache, "wb") as f:
        pickle.dump({"stamp": stamp, "groups": groups}, f, protocol=pickle.HIGHEST_PROTOCOL)
    return groups


def _add(out: dict[str, Workload], names: dict[str, str], feature: str, data) -> None:
    keys, X, tput = data["keys"], data["X"], data["tput"]
    for key in dict.fromkeys(keys.tolist()):
        rows = keys == key
        if key not in out:
            name = names.get(key, key[:12])
            out[key] = Workload(name, key, family(name), {}, tput[rows])
        out[key].X[feature] = X[rows]


def ndcg(pred: np.ndarray, gain: np.ndarray, k: int) -> float:
    """Normalized discounted cumulative gain of the model's top k."""
    k = min(k, len(pred))
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (gain[np.argsort(-pred, kind="stable")[:k]] * discount).sum()
    ideal = (np.sort(gain)[::-1][:k] * discount).sum()
    return float(dcg / ideal) if ideal > 0 else 0.0


def scores(pred: np.ndarray, tput: np.ndarray) -> dict[str, float]:
    ok = tput > 0
    pred, tput = pred[ok], tput[ok]
    gain = tput / tput.max()
    top = np.argsort(-pred, kind="stable")[:FIRST_BATCH]
    return {"spearman": spearman_rho(pred, tput),
            "recall10": top_k_recall(pred, tput, max(1, len(tput) // 10)),
            "ndcg16": ndcg(pred, gain, FIRST_BATCH), "first16": float(gain[top].max())}


def make_model(config: str, seed: int = 0) -> XGBModel:
    """A global model of `config` ("feature:objective"); objective rank (pairwise), reg, or
    lambdarank (NDCG's lambda gradients on per-workload relevance grades)."""
    feature, objective = config.split(":")
    return XGBModel(feature=feature, objective=objective, seed=seed)


def fit_score(config: str, train: list[Workload], test: list[Workload]) -> list[dict]:
    feature = config.split(":")[0]
    model = make_model(config)
    X = np.concatenate([w.X[feature] for w in train])
    keys = [w.key for w in train for _ in range(len(w.tput))]
    model.fit(list(X), keys, np.concatenate([w.tput for w in train]))
    return [scores(np.asarray(model.score(list(w.X[feature]))), w.tput) for w in test]


def folds(workloads: list[Workload], protocol: str) -> dict[str, list[Workload]]:
    if protocol == "family":
        return {f: [w for w in workloads if w.family == f] for f in FAMILIES}
    if protocol == "database":
        return {src: [w for w in workloads if w.source == src]
                for src in dict.fromkeys(w.source for w in workloads)}
    by_fold: dict[str, list[Workload]] = {}
    for w in workloads:
        fold = int(hashlib.sha256(w.key.encode()).hexdigest(), 16) % SHAPE_FOLDS
        by_fold.setdefault(f"shapes {fold + 1}/{SHAPE_FOLDS}", []).append(w)
    return dict(sorted(by_fold.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", action="append", required=True, help="a tessel database, "
                        "PATH or PATH@TARGET (repeat for several)")
    parser.add_argument("--target", default="host", help="the records' target where --db "
                        "names none: host or a preset collected with the host's cores "
                        "(x86_64-avx2)")
    parser.add_argument("--models", default="per_store:rank,per_store:lambdarank,"
                        "per_store:reg,itervar:rank")
    parser.add_argument("--protocols", default="family,shape")
    parser.add_argument("--min-records", type=int, default=24)
    args = parser.parse_args()
    configs = args.models.split(",")
    feature_sets = sorted({c.split(":")[0] for c in configs})
    workloads = []
    for spec in args.db:
        path, _, name = spec.partition("@")
        target = collection_target(name or args.target)
        for w in load(path, target, feature_sets):
            w.source = f"{Path(path).name}@{target.isa_family}"
            workloads.append(w)
    scored = [w for w in workloads if (w.tput > 0).sum() >= args.min_records]
    print(f"{sum(len(w.tput) for w in workloads)} records of {len(workloads)} workloads "
          f"({', '.join(args.db)}); {len(scored)} with >= {args.min_records} valid "
          f"records are scored: " + ", ".join(
              f"{f} {sum(w.family == f for w in scored)}" for f in FAMILIES) + "\n")
    print("| model | protocol | held out | workloads | Spearman | top-10% recall | NDCG@16 "
          "| best of top 16 |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for config in configs:
        for protocol in args.protocols.split(","):
            every = []
            for fold, members in folds(workloads, protocol).items():
                test = [w for w in members if w in scored]
                if not test:
                    continue
                train = [w for w in workloads if w not in members]
                rows = fit_score(config, train, test)
                every += rows
                print(_row(config, protocol, fold, rows), flush=True)
            print(_row(config, protocol, "**all**", every), flush=True)


def _row(config: str, protocol: str, fold: str, rows: list[dict]) -> str:
    med = {k: float(np.median([r[k] for r in rows])) for k in rows[0]}
    return (f"| {config} | {protocol} | {fold} | {len(rows)} | {med['spearman']:+.2f} | "
            f"{med['recall10']:.2f} | {med['ndcg16']:.2f} | {med['first16']:.2f} |")


if __name__ == "__main__":
    main()
