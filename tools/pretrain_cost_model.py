"""Train the cost model tessel ships (tessel/cost_model/pretrained/<isa family>.json.gz).

    python tools/pretrain_cost_model.py collect --db pretrain.db          # measure the recipe
    python tools/pretrain_cost_model.py compare --db pretrain.db          # feature sets, held out
    python tools/pretrain_cost_model.py train --db pretrain.db            # write the model file

The data recipe (RECIPE below): every operator suite workload but C3D (ResNet-18's twelve
convolutions among them) and GENERATED seeded random shapes (convolutions, matmuls, dense and
batch matmuls of sizes no suite has), each tuned for `--trials` trials (64) by the default
search with a cold XGBoost model ("xgb"), so the records hold what a search meets: expert
priors, random samples and the mutants of good programs. HELD_BACK shapes are never trained
on: benchmarks/pretrained_vs_cold.py measures the shipped model on them. `collect` resumes (a
rerun only measures what is missing); run it on a quiet machine of the ISA family the model
is for (`Target("host").isa_family`).

`compare` trains on all workloads but one group and ranks the held-out group, for each
feature set: how close the model's top 16 of a workload's records come to that workload's
best (what a first batch chosen by the model would reach), and top-16 recall. `train` fits the
chosen feature set on everything and writes the model with a summary of its data.
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import numpy as np

import tessel
from tessel import cost_model, ops
from tessel.cost_model.base import normalize, throughput, workload_key
from tessel.cost_model.metrics import top_k_recall
from tessel.cost_model.pretrained import path_for, save_global
from tessel.cost_model.records import pairs_from_database
from tessel.database import Database
from tessel.ir import PrimFunc, structural_hash

SUITE = [name for name in ops.SUITE if name != "C3D"]  # C3D: minutes per trial batch
FEATURES = ("per_store", "curve", "itervar")
FIRST_BATCH = 16

# (N, C, H, W, O, KH, KW, stride, padding): shapes no training set holds (the evaluation's)
HELD_BACK = {
    "ODD-3x3-96x20": (1, 96, 20, 20, 96, 3, 3, 1, 1),
    "ODD-3x3s2-48x33": (1, 48, 33, 33, 96, 3, 3, 2, 1),
    "ODD-1x1-160x10": (1, 160, 10, 10, 320, 1, 1, 1, 0),
    "ODD-5x5-32x24": (1, 32, 24, 24, 64, 5, 5, 1, 2),
    "ODD-3x3-40x36": (1, 40, 36, 36, 80, 3, 3, 1, 1),
    "ODD-3x3-192x12": (1, 192, 12, 12, 192, 3, 3, 1, 1),
}


def held_back(name: str) -> PrimFunc:
    n, c, h, w, o, kh, kw, stride, pad = HELD_BACK[name]
    return ops.conv2d(n, c, h, w, o, kh, kw, stride=stride, padding=pad)


def workload(name: str) -> PrimFunc:
    """A suite operator or a held-back shape, by name."""
    return held_back(name) if name in HELD_BACK else ops.SUITE[name]


def generated(seed: int = 0, convs: int = 14, matmuls: int = 8) -> dict[str, PrimFunc]:
    """Seeded random workloads, 20 MFLOP to 1 GFLOP each, none of them held back."""
    rng = random.Random(seed)
    out: dict[str, PrimFunc] = {}
    banned = {structural_hash(held_back(name)) for name in HELD_BACK}
    while len(out) < convs:
        c, o = rng.choice([16, 24, 32, 48, 64, 96, 128, 160, 256, 384]), \
            rng.choice([32, 48, 64, 96, 128, 192, 256, 512])
        h, k, s = rng.choice([7, 9, 12, 14, 17, 20, 28, 30, 42, 56]), rng.choice([1, 3, 3, 5]), \
            rng.choice([1, 1, 2])
        flops = 2 * c * o * k * k * (h // s) ** 2
        func = ops.conv2d(1, c, h, h, o, k, k, stride=s, padding=k // 2)
        if 2e7 <= flops <= 1e9 and structural_hash(func) not in banned:
            out[f"GEN-conv-{c}x{h}-{o}-k{k}s{s}"] = func
    while len(out) < convs + matmuls:
        m, n, k = (rng.choice([48, 64, 96, 100, 128, 196, 256, 384, 500, 512, 768, 1024])
                   for _ in range(3))
        kind = rng.choice(["matmul", "dense", "batch_matmul"])
        if kind == "batch_matmul":
            b = rng.choice([4, 8, 12])
            shape = (b, m // 4, n // 2, k // 2)
            func, name = ops.batch_matmul(*shape), "GEN-bmm-" + "x".join(map(str, shape))
        else:
            func, name = getattr(ops, kind)(m, n, k), f"GEN-{kind}-{m}x{n}x{k}"
        if 2e6 <= 2 * m * n * k <= 2e9:
            out[name] = func
    return out


def recipe() -> dict[str, PrimFunc]:
    return {**{name: ops.SUITE[name] for name in SUITE}, **generated()}


def collect(args: argparse.Namespace) -> None:
    target = tessel.Target("host")
    db = Database(args.db)
    names = [n for n in recipe() if not args.only or n in args.only.split(",")]
    print(f"collecting {len(names)} workloads x {args.trials} trials on {target} "
          f"({target.isa_family}) into {args.db}", flush=True)
    for i, name in enumerate(names):
        func = recipe()[name]
        start = time.perf_counter()
        result = tessel.tune(func, target, args.trials, cost_model="xgb", database=db,
                             seed=args.seed, progress=False, rerun_top=1, name=name)
        print(f"[{i + 1}/{len(names)}] {name}: {len(result.history)} new, best "
              f"{result.best_gflops:.1f} GFLOP/s, {time.perf_counter() - start:.0f} s",
              flush=True)
    db.close()


def load_groups(db_path: str, target: tessel.Target) -> dict[str, list]:
    """{workload name: pairs} of the database's records on `target` (the recipe's names)."""
    names = {structural_hash(f): n for n, f in recipe().items()}
    with Database(db_path) as db:
        groups = pairs_from_database(db, target)
    return {names.get(key, key[:12]): pairs for key, pairs in groups.items()}


def first_batch_quality(model: cost_model.CostModel, pairs: list) -> tuple[float, float]:
    """(best normalized throughput among the model's top FIRST_BATCH, top-16 recall)."""
    cands, results = [c for c, _ in pairs], [r for _, r in pairs]
    true = normalize([workload_key(c) for c in cands],
                     np.array([throughput(r) for r in results]))
    pred = model.predict(cands)
    top = np.argsort(-pred, kind="stable")[:FIRST_BATCH]
    return float(true[top].max()), top_k_recall(pred, true, FIRST_BATCH)


def compare(args: argparse.Namespace) -> None:
    """Leave-one-group-out: ResNet-18 layers, other suite convolutions, matmul-like, generated
    convolutions; per feature set, the mean first-batch quality on held-out workloads."""
    target = tessel.Target("host")
    groups = load_groups(args.db, target)
    folds = {"R18": lambda n: n.startswith("R18-"),
             "GEN-conv": lambda n: n.startswith("GEN-conv"),
             "matmul-like": lambda n: n in ("GMM", "GMM-1024", "TBG") or n.startswith(
                 ("GEN-matmul", "GEN-dense", "GEN-bmm")),
             "suite-other": lambda n: n in ("C1D", "C2D", "DEP", "DIL", "GRP", "T2D", "CBR",
                                            "NRM", "SFM")}
    print(f"{sum(map(len, groups.values()))} records of {len(groups)} workloads\n")
    print("| feature | fold | workloads | best of model's top 16 (mean) | random top 16 | "
          "recall@16 |")
    print("|---|---|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for feature in args.features.split(","):
        for fold, member in folds.items():
            train = [p for n, ps in groups.items() if not member(n) for p in ps]
            test = {n: ps for n, ps in groups.items() if member(n) and len(ps) >= 32}
            if not test or not train:
                continue
            model = cost_model.pretrain_global(train, feature=feature)
            q = [first_batch_quality(model, ps) for ps in test.values()]
            rand = [_random_first_batch(ps, rng) for ps in test.values()]
            print(f"| {feature} | {fold} | {len(test)} | {np.mean([a for a, _ in q]):.3f} | "
                  f"{np.mean(rand):.3f} | {np.mean([b for _, b in q]):.3f} |", flush=True)


def _random_first_batch(pairs: list, rng: np.random.Generator, rounds: int = 50) -> float:
    tput = np.array([throughput(r) for _, r in pairs])
    tput = tput / tput.max() if tput.max() > 0 else tput
    return float(np.mean([tput[rng.choice(len(tput), FIRST_BATCH, replace=False)].max()
                          for _ in range(rounds)]))


def train(args: argparse.Namespace) -> None:
    target = tessel.Target("host")
    groups = load_groups(args.db, target)
    pairs = [p for ps in groups.values() for p in ps]
    model = cost_model.pretrain_global(pairs, feature=args.feature)
    about = {"records": len(pairs), "workloads": sorted(groups), "feature": args.feature,
             "trained": time.strftime("%Y-%m-%d"), "cpu": target.cpu_model,
             "target": str(target), "recipe": "tools/pretrain_cost_model.py"}
    out = Path(args.out) if args.out else path_for(target.isa_family)
    save_global(model, out, target.isa_family, about)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {len(pairs)} records of "
          f"{len(groups)} workloads, feature set {args.feature}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("collect")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="", help="comma-separated workload names of the recipe")
    p.set_defaults(fn=collect)
    p = sub.add_parser("compare")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--features", default=",".join(FEATURES))
    p.set_defaults(fn=compare)
    p = sub.add_parser("train")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--feature", default="per_store")
    p.add_argument("--out", default="", help="default: the shipped model of this ISA family")
    p.set_defaults(fn=train)
    p = sub.add_parser("list")
    p.set_defaults(fn=lambda a: print("\n".join(f"{n}: {ops.flops(f) / 1e6:.0f} MFLOP"
                                                for n, f in recipe().items())))
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
