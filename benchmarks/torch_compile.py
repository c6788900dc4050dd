"""`torch.compile(backend="tessel")` against eager PyTorch and `torch.compile` with inductor.

Each zoo model (random weights, batch 1) runs three ways, each in its own process (two OpenMP
runtimes in one process spin against each other), timed in interleaved rounds with all the
machine's cores: "eager" (the module under torch.inference_mode), "inductor"
(`torch.compile(module)`) and "tessel" (`torch.compile(module, backend="tessel", options=
{"database": DB})`). Outputs are compared with eager's first; the first call's time (tracing
and compiling) is reported beside the latency. With `--tune N`, each model is first tuned
through the backend itself (`options={"tune": N}`: its tasks' records go to DB) and the tuning
time printed.

    python benchmarks/torch_compile.py --models resnet18,bert_layer --db models.db --tune 400
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import numpy as np

RUNNERS = ("eager", "inductor", "tessel")


def _make(label: str, name: str, db: str | None):
    import torch
    from tessel.graph.frontend import models
    torch.set_num_threads(os.cpu_count() or 1)
    module, inputs = models.build(name)
    if label == "inductor":
        module = torch.compile(module)
    elif label == "tessel":
        module = torch.compile(module, backend="tessel",
                               options={"database": db} if db else {})

    def call():
        with torch.inference_mode():
            return module(*inputs).numpy()
    return call


def _serve(conn, label: str, name: str, db: str | None) -> None:
    start = time.perf_counter()
    call = _make(label, name, db)
    first = call()
    conn.send((first, time.perf_counter() - start))
    while True:
        budget = conn.recv()
        if budget is None:
            return
        times, end = [], time.perf_counter() + budget
        while time.perf_counter() < end or len(times) < 3:
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        conn.send(float(np.median(times)))


def measure(name: str, db: str | None, rounds: int, budget: float) -> dict[str, dict]:
    ctx = mp.get_context("spawn")
    rows: dict[str, dict] = {}
    workers = {}
    for label in RUNNERS:  # started one at a time: compile times are not shared
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(child, label, name, db), daemon=True)
        proc.start()
        out, first = parent.recv()
        workers[label] = (parent, proc)
        rows[label] = {"first": first, "out": out, "times": []}
    want = rows["eager"]["out"]
    for label in RUNNERS:
        rows[label]["err"] = float(np.abs(rows[label].pop("out") - want).max())
    for r in range(rounds):
        order = RUNNERS if r % 2 == 0 else RUNNERS[::-1]
        for label in order:
            conn, _ = workers[label]
            conn.send(budget)
            rows[label]["times"].append(conn.recv())
    for conn, proc in workers.values():
        conn.send(None)
        proc.join(timeout=10)
    return rows


def tune(name: str, db: str, trials: int) -> float:
    import torch
    from tessel.graph.frontend import models
    module, inputs = models.build(name)
    start = time.perf_counter()
    fast = torch.compile(module, backend="tessel", options={"database": db, "tune": trials})
    with torch.inference_mode():
        fast(*inputs)
    torch._dynamo.reset()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="resnet18,bert_layer")
    ap.add_argument("--db", default=None, help="the record database tessel compiles with")
    ap.add_argument("--tune", type=int, default=0, help="tune each model first (trials)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per runner per round")
    args = ap.parse_args()
    if args.tune and not args.db:
        ap.error("--tune needs --db")
    print(f"{os.cpu_count()} cores; batch 1; median per-call ms over {args.rounds} interleaved "
          f"rounds (min-max of the round medians); first call = trace + compile")
    for name in args.models.split(","):
        if args.tune:
            print(f"{name}: tuned through the backend, {args.tune} trials in "
                  f"{tune(name, args.db, args.tune):.0f} s")
        rows = measure(name, args.db, args.rounds, args.budget)
        eager = float(np.median(rows["eager"]["times"]))
        print(f"\n| {name} | ms (median) | min-max | vs eager | first call s | max abs diff |")
        print("|---|---:|---:|---:|---:|---:|")
        for label, row in rows.items():
            t = np.array(row["times"]) * 1e3
            print(f"| {label} | {np.median(t):.2f} | {t.min():.2f}-{t.max():.2f} | "
                  f"{eager * 1e3 / np.median(t):.2f}x | {row['first']:.1f} | {row['err']:.1e} |")


if __name__ == "__main__":
    main()
