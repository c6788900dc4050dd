"""Cost-model quality on measured records: Kendall tau and top-k recall per workload.

    python benchmarks/cost_model_eval.py records.db [--target KEY] [--workloads K1,K2]
    python benchmarks/cost_model_eval.py tests/data/transfer_conv2d.json.gz

For each workload, the records are split (seeded) into train and held-out parts, `--folds`
times. Every feature set x model is trained on the workload's train part and scored on the
held-out part: Kendall tau between predicted scores and measured throughput, and recall of
the true top-k among the predicted top-k. With two or more workloads, transfer rows follow:
"global" (trained only on the other workloads' records, context-relation features) and
"global+local" / "local" trained on `--local` records of the workload. Prints one table.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from tessel import cost_model, features
from tessel.cost_model import kendall_tau, top_k_recall

MODELS = ("xgb", "xgb-reg")
EXTRA = ("treegru", "random")  # models with their own input (no feature set)


def split(n: int, train_frac: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.random.default_rng(seed).permutation(n)
    k = int(round(n * train_frac))
    return idx[:k], idx[k:]


def scores(model, train, test, k: int) -> tuple[float, float]:
    if train:
        model.update([c for c, _ in train], [r for _, r in train])
    pred = model.predict([c for c, _ in test])
    true = np.array([cost_model.throughput(r) for _, r in test])
    return kendall_tau(pred, true), top_k_recall(pred, true, k)


def evaluate(make, pairs, args) -> tuple[float, float, float]:
    """Mean tau, mean recall and train+predict seconds over the folds."""
    out, t0 = [], time.perf_counter()
    for fold in range(args.folds):
        tr, te = split(len(pairs), args.train_frac, fold)
        out.append(scores(make(), [pairs[i] for i in tr], [pairs[i] for i in te], args.k))
    tau, rec = np.mean(out, axis=0)
    return tau, rec, (time.perf_counter() - t0) / args.folds


def transfer_rows(name, by_workload, args):
    others = [p for other, ps in by_workload.items() if other != name for p in ps]
    glob = cost_model.pretrain_global(others)
    pairs, rows = by_workload[name], []
    for label, make in [("global", lambda: cost_model.TransferModel(glob)),
                        ("global+local", lambda: cost_model.TransferModel(glob)),
                        ("local", lambda: cost_model.make("xgb", feature="curve"))]:
        out = []
        for fold in range(args.folds):
            idx = np.random.default_rng(fold).permutation(len(pairs))
            train = [] if label == "global" else [pairs[i] for i in idx[:args.local]]
            out.append(scores(make(), train, [pairs[i] for i in idx[args.local:]], args.k))
        rows.append((name, "curve", f"{label} ({0 if label == 'global' else args.local})",
                     *np.mean(out, axis=0), float("nan")))
    return rows


def load(path: str, target: str | None, workloads: str | None):
    if path.endswith(".json.gz"):
        return cost_model.pairs_from_fixture(path)
    from tessel.database import Database
    db = Database(path)
    keys = workloads.split(",") if workloads else None
    by_key = cost_model.pairs_from_database(db, target, keys)
    return {f"{db.workload(k).name}:{k[:8]}": v for k, v in by_key.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", help="a tessel database (.db) or a fixture (.json.gz)")
    ap.add_argument("--target", default=None, help="target key (database only)")
    ap.add_argument("--workloads", default=None, help="comma-separated workload keys")
    ap.add_argument("--features", default=",".join(features.NAMES))
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--train-frac", type=float, default=0.7)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--local", type=int, default=16)
    args = ap.parse_args()
    by_workload = load(args.records, args.target, args.workloads)
    print(f"{'workload':<24} {'features':<10} {'model':<20} {'tau':>7} {'top-k':>7} {'secs':>7}")
    for name, pairs in by_workload.items():
        rows = []
        for feat in args.features.split(","):
            for model in MODELS:
                make = lambda m=model, f=feat: cost_model.make(m, feature=f)  # noqa: E731
                rows.append((name, feat, model, *evaluate(make, pairs, args)))
        for model in EXTRA:
            rows.append((name, "-", model, *evaluate(lambda m=model: cost_model.make(m),
                                                      pairs, args)))
        if len(by_workload) > 1:
            rows += transfer_rows(name, by_workload, args)
        print(f"# {name}: {len(pairs)} records, k={args.k}")
        for r in rows:
            print(f"{r[0]:<24} {r[1]:<10} {r[2]:<20} {r[3]:>7.3f} {r[4]:>7.2f} {r[5]:>7.2f}")


if __name__ == "__main__":
    main()
