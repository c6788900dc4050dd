"""Train the cost model tessel ships (tessel/cost_model/pretrained/<isa family>.json.gz).

    python tools/pretrain_cost_model.py collect --db pretrain.db          # measure the recipe
    python tools/pretrain_cost_model.py collect --db avx2.db --target x86_64-avx2
    python tools/pretrain_cost_model.py compare --db pretrain.db          # feature sets, held out
    python tools/pretrain_cost_model.py train --db pretrain.db            # write the model file

The data recipe (`recipe`): the tuning tasks of PIECES seeded random network pieces as the
compiler makes them for the target (`pieces`: dense, depthwise and grouped convolutions with
their activations and residual adds, in the target's blocked layout or through Winograd;
linear layers with theirs; attention's products and softmax; layer norms, softmaxes and
pooling: what a model's tuning meets), GENERATED seeded random shapes of plain convolutions
and matrix products, and every operator suite workload but C3D (ResNet-18's twelve
convolutions among them), each tuned for `--trials` trials (64) by the default search with a
cold XGBoost model ("xgb"), so the records hold what a search meets: expert priors, random
samples and the mutants of good programs. HELD_BACK shapes are never trained on:
benchmarks/pretrained_vs_cold.py measures the shipped model on them. `collect` resumes (a
rerun only measures what is missing; Ctrl-C stops it after the batch in flight); run it on a
quiet machine of the ISA family the model is for (`Target("host").isa_family`), or with
`--target` a preset of a smaller family this machine runs (x86_64-avx2 on an AVX-512 host:
the same instructions, the host's cores and caches).

`compare` trains on all workloads but one group and ranks the held-out group, for each
feature set: how close the model's top 16 of a workload's records come to that workload's
best (what a first batch chosen by the model would reach), and top-16 recall
(benchmarks/cost_model_eval.py scores models by family and shape, with Spearman and NDCG).
`train` fits the chosen feature set and objective on everything and writes the model with a
summary of its data and the best PROGRAMS_KEPT programs of each workload (a new task starts
from those of its nearest relative: tessel.tuning.knowledge).
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
from tessel.cost_model.pretrained import path_for, read_global, save_global
from tessel.cost_model.records import pairs_from_database
from tessel.database import Database
from tessel.graph.compiler.tasks import model_tasks
from tessel.graph.ir import Graph
from tessel.graph.passes import simplify
from tessel.ir import PrimFunc, structural_hash

SUITE = [name for name in ops.SUITE if name != "C3D"]  # C3D: minutes per trial batch
FEATURES = ("per_store", "curve", "itervar")
FIRST_BATCH = 16
PROGRAMS_KEPT = 2  # best programs of each workload shipped with the model (for transplants)

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


PIECES = 56  # network pieces of the recipe
LAYOUT_COPIES = 3
EPILOGUES = ("", "relu", "silu", "sigmoid", "hardswish", "relu6", "gelu", "tanh")


def _epilogue(g: Graph, x: str, kind: str) -> str:
    if kind == "relu6":
        return g.add_node("clip", [x], min=0.0, max=6.0)
    return g.add_node(kind, [x]) if kind else x


def _weights(g: Graph, rng: np.random.Generator, name: str, *shape: int) -> str:
    return g.add_constant(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))


def _conv_piece(rng: np.random.Generator) -> tuple[str, Graph, int]:
    """A convolution as networks hold it: bias, an activation, sometimes a residual add;
    dense, depthwise or grouped, in the layout the compiler gives it."""
    kind = rng.choice(["dense", "dense", "dense", "depthwise", "grouped"])
    c = int(rng.choice([16, 24, 32, 40, 48, 64, 72, 96, 112, 128, 144, 160, 192, 256, 384]))
    h = int(rng.choice([7, 10, 12, 14, 17, 20, 28, 35, 56]))
    k = int(rng.choice([1, 1, 3, 3, 3, 5, 7] if kind == "dense" else [3, 3, 5]))
    s = int(rng.choice([1, 1, 2]))
    groups = {"dense": 1, "depthwise": c, "grouped": int(rng.choice([2, 4, 8]))}[kind]
    o = c if kind == "depthwise" else int(rng.choice([16, 32, 48, 64, 96, 128, 192, 256, 512]))
    o = o // groups * groups or groups
    act = str(rng.choice(EPILOGUES))
    residual = s == 1 and o == c and rng.random() < 0.3
    g = Graph("piece")
    x = g.add_input("x", (1, c, h, h))
    y = g.add_node("conv", [x, _weights(g, rng, "w", o, c // groups, k, k),
                            _weights(g, rng, "b", o)], strides=(s, s), pads=(k // 2,) * 4,
                   groups=groups)
    y = _epilogue(g, g.add_node("add", [y, x]) if residual else y, act)
    g.set_outputs([y])
    flops = 2 * o * (c // groups) * k * k * (h // s) ** 2
    name = f"PIECE-{kind}conv-{c}x{h}-{o}-k{k}s{s}{'-' + act if act else ''}" \
           f"{'-res' if residual else ''}"
    return name, g, flops


def _dense_piece(rng: np.random.Generator) -> tuple[str, Graph, int]:
    """A transformer's or a classifier's linear layer: tokens x in -> out, bias, activation,
    sometimes a residual add; or attention's two batched products and its softmax."""
    m = int(rng.choice([1, 7, 16, 49, 50, 64, 128, 196, 197, 256]))
    if rng.random() < 0.25:  # attention: (heads, seq, dim) x (heads, dim, seq), softmax, x v
        heads, d = int(rng.choice([4, 8, 12])), int(rng.choice([32, 64]))
        m = max(m, 16)
        g = Graph("piece")
        q, kt = g.add_input("q", (1, heads, m, d)), g.add_input("k", (1, heads, d, m))
        v = g.add_input("v", (1, heads, m, d))
        scale = g.add_constant("scale", np.float32(d ** -0.5))
        p = g.add_node("softmax", [g.add_node("mul", [g.add_node("matmul", [q, kt]), scale])],
                       axis=-1)
        g.set_outputs([g.add_node("matmul", [p, v])])
        return f"PIECE-attention-{heads}x{m}x{d}", g, 4 * heads * m * m * d
    k, n = (int(rng.choice([64, 96, 128, 192, 256, 320, 384, 512, 768, 1024, 1536])) for _ in "kn")
    act = str(rng.choice(["", "", "gelu", "relu", "tanh", "silu"]))
    residual = n == k or rng.random() < 0.2
    g = Graph("piece")
    x = g.add_input("x", (1, m, k))
    y = g.add_node("dense", [x, _weights(g, rng, "w", n, k), _weights(g, rng, "b", n)])
    y = _epilogue(g, y, act)
    if residual:
        y = g.add_node("add", [y, g.add_input("r", (1, m, n))])
    g.set_outputs([y])
    name = f"PIECE-dense-{m}x{k}-{n}{'-' + act if act else ''}{'-res' if residual else ''}"
    return name, g, 2 * m * n * k


def _row_piece(rng: np.random.Generator) -> tuple[str, Graph, int]:
    """The memory-bound kernels between the products: a layer norm, a softmax, a pooling."""
    kind = str(rng.choice(["layer_norm", "softmax", "global_avg_pool", "max_pool"]))
    g = Graph("piece")
    if kind in ("layer_norm", "softmax"):
        m, n = int(rng.choice([49, 128, 196, 197, 256, 512])), int(rng.choice([
            64, 128, 197, 256, 384, 768, 1000]))
        x = g.add_input("x", (1, m, n))
        args = [x, _weights(g, rng, "s", n), _weights(g, rng, "b", n)] if kind == \
            "layer_norm" else [x]
        g.set_outputs([g.add_node(kind, args, axis=-1)])
        return f"PIECE-{kind}-{m}x{n}", g, 8 * m * n
    c, h = int(rng.choice([32, 64, 96, 128, 256, 512])), int(rng.choice([7, 14, 28, 56]))
    x = g.add_input("x", (1, c, h, h))
    if kind == "max_pool":
        y = g.add_node("max_pool", [x], kernel=(3, 3), strides=(2, 2), pads=(1, 1, 1, 1))
    else:
        y = g.add_node("global_avg_pool", [x])
    g.set_outputs([y])
    return f"PIECE-{kind}-{c}x{h}", g, c * h * h * 9


def pieces(target: tessel.Target, seed: int = 1, count: int = PIECES) -> dict[str, PrimFunc]:
    """The tuning tasks of `count` seeded random network pieces (convolutions of every kind
    with their activations, linear layers, attention, norms and pooling), as the compiler
    makes them for `target` (its layout, fusion and Winograd): what a model's tuning meets,
    beyond the operator suite's plain loop nests. Named PIECE-<piece>/<task>. The layout
    conversions at a piece's ends (a model has a few) are kept for the first LAYOUT_COPIES
    pieces."""
    rng = np.random.default_rng(seed)
    makers = [_conv_piece] * 5 + [_dense_piece] * 3 + [_row_piece]
    out: dict[str, PrimFunc] = {}
    seen: set[str] = {structural_hash(held_back(name)) for name in HELD_BACK}
    made = 0
    while made < count:
        name, g, flops = makers[int(rng.integers(len(makers)))](rng)
        if not 1e5 <= flops <= 1.5e9 or any(k.startswith(name + "/") for k in out):
            continue
        made += 1
        for task in model_tasks(simplify(g), target)[1]:
            key = task.key
            copies = sum(k.endswith("/" + task.workload.name) for k in out)
            if task.workload.name in ("to_blocked", "from_blocked") and copies >= LAYOUT_COPIES:
                continue
            if key not in seen:
                seen.add(key)
                out[f"{name}/{task.workload.name}"] = task.workload
    return out


def recipe(target: tessel.Target | None = None) -> dict[str, PrimFunc]:
    target = target or tessel.Target("host")
    return {**pieces(target), **generated(), **{name: ops.SUITE[name] for name in SUITE}}


def collection_target(name: str) -> tessel.Target:
    """The target a collection measures for: the host, or a preset of a smaller ISA family
    this host runs (x86_64-avx2 on an AVX-512 host), with the host's cores."""
    host = tessel.Target("host")
    return host if name == "host" else tessel.Target(name, cores=host.cores)


def collect(args: argparse.Namespace) -> None:
    target = collection_target(args.target)
    db = Database(args.db)
    workloads = recipe(target)
    names = args.only.split(",") if args.only else list(workloads)  # --only: in its order
    unknown = [n for n in names if n not in workloads]
    if unknown:
        sys.exit(f"pretrain_cost_model.py: not in the recipe: {', '.join(unknown)} (see list)")
    print(f"collecting {len(names)} workloads x {args.trials} trials on {target} "
          f"({target.isa_family}) into {args.db}", flush=True)
    for i, name in enumerate(names):
        func = workloads[name]
        start = time.perf_counter()
        result = tessel.tune(func, target, args.trials, cost_model="xgb", database=db,
                             seed=args.seed, progress=False, rerun_top=1, name=name)
        print(f"[{i + 1}/{len(names)}] {name}: {len(result.history)} new, best "
              f"{result.best_gflops:.1f} GFLOP/s, {time.perf_counter() - start:.0f} s",
              flush=True)
        if result.interrupted:  # Ctrl-C: what was measured is stored; a rerun resumes
            print("interrupted: run collect again to resume", flush=True)
            break
    db.close()


def load_groups(db_path: str, target: tessel.Target) -> dict[str, list]:
    """{workload name: pairs} of the database's records on `target` (the recipe's names)."""
    names = {structural_hash(f): n for n, f in recipe(target).items()}
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
    target = collection_target(args.target)
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
    target = collection_target(args.target)
    groups = load_groups(args.db, target)
    pairs = [p for ps in groups.values() for p in ps]
    model = cost_model.pretrain_global(pairs, feature=args.feature, objective=args.objective)
    programs = best_programs([args.db], target)
    about = {"records": len(pairs), "workloads": sorted(groups), "feature": args.feature,
             "objective": args.objective, "trained": time.strftime("%Y-%m-%d"),
             "cpu": tessel.Target("host").cpu_model, "target": str(target),
             "recipe": "tools/pretrain_cost_model.py"}
    out = Path(args.out) if args.out else path_for(target.isa_family)
    save_global(model, out, target.isa_family, about, programs)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.2f} MB): {len(pairs)} records of "
          f"{len(groups)} workloads, feature set {args.feature}, objective {args.objective}, "
          f"the best {PROGRAMS_KEPT} programs of {len(programs)} workloads")


def best_programs(dbs: list[str], target: tessel.Target) -> list:
    """(workload, its best PROGRAMS_KEPT traces) of every workload measured on `target` in
    any of `dbs` (the first database's where two hold one)."""
    out: dict[str, tuple] = {}
    for path in dbs:
        with Database(path) as db:
            for wl in db.workloads():
                traces = [t for r in db.top_k(wl.key, target, PROGRAMS_KEPT)
                          if (t := r.trace()) is not None]
                if traces and wl.key not in out:
                    out[wl.key] = (wl.func, traces)
    return list(out.values())


def programs(args: argparse.Namespace) -> None:
    """Put the best programs of databases' workloads into a model file (its booster and
    summary kept): knowledge a new task starts from, beside what the model learned."""
    target = collection_target(args.target)
    path = Path(args.model) if args.model else path_for(target.isa_family)
    model, about = read_global(path)
    kept = best_programs(args.db, target)
    about = {**about, "programs": {"databases": [Path(d).name for d in args.db],
                                   "workloads": len(kept), "kept": PROGRAMS_KEPT,
                                   "what": args.what,
                                   "cpu": tessel.Target("host").cpu_model,
                                   "added": time.strftime("%Y-%m-%d")}}
    save_global(model, path, target.isa_family, about, kept)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB): the best {PROGRAMS_KEPT} "
          f"programs of {len(kept)} workloads of {', '.join(args.db)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("collect")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="",
                   help="comma-separated workload names of the recipe, measured in that order")
    p.add_argument("--target", default="host", help="host, or a preset this host runs "
                   "(x86_64-avx2 on an AVX-512 host)")
    p.set_defaults(fn=collect)
    p = sub.add_parser("compare")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--target", default="host", help="the records' target (as collected)")
    p.add_argument("--features", default=",".join(FEATURES))
    p.set_defaults(fn=compare)
    p = sub.add_parser("train")
    p.add_argument("--db", default="pretrain.db")
    p.add_argument("--target", default="host", help="the records' target (as collected)")
    p.add_argument("--feature", default="per_store")
    p.add_argument("--objective", default="lambdarank", choices=("rank", "lambdarank", "reg"))
    p.add_argument("--out", default="", help="default: the shipped model of this ISA family")
    p.set_defaults(fn=train)
    p = sub.add_parser("programs", help="put databases' best programs into a model file")
    p.add_argument("--db", action="append", required=True, help="a database (repeatable)")
    p.add_argument("--target", default="host", help="the records' target (as collected)")
    p.add_argument("--model", default="", help="default: the shipped model of this ISA family")
    p.add_argument("--what", required=True, help="what the databases hold, for the file's "
                   "summary (which runs, which machine)")
    p.set_defaults(fn=programs)
    p = sub.add_parser("list")
    p.set_defaults(fn=lambda a: print("\n".join(f"{n}: {ops.flops(f) / 1e6:.0f} MFLOP"
                                                for n, f in recipe().items())))
    args = parser.parse_args()
    args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
