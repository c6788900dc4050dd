"""Tune the models of issue 40's suite (benchmarks/model_suite.py) by the clock, one after
another, each as a user would: its ONNX file written once, then `tessel tune-model MODEL.onnx
--time T --db DB` in a process of its own. One database serves them all, so a task two models
share (BERT-base's and GPT-2's 768 x 768 products) is tuned once and resumed. Prints each
run's wall time (loading, tuning, the choice in sequence), trials and tasks; time the result
with benchmarks/model_latency.py --db DB.

    python benchmarks/tune_suite.py --models bert_base=7,gpt2=8,vit_b16=8 --db suite.db
    python benchmarks/model_latency.py --models bert_base,gpt2,vit_b16 --db suite.db \\
        --skip-unscheduled
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from model_latency import known_models, write_onnx


def parse_models(text: str) -> list[tuple[str, str]]:
    """[(name, time)] of "name=minutes,..." (a bare name: 5 minutes)."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, minutes = item.partition("=")
        if name not in known_models():
            raise SystemExit(f"tune_suite: unknown model {name!r}; known: "
                             f"{', '.join(known_models())}")
        if minutes and not re.fullmatch(r"\d+(\.\d+)?", minutes):
            raise SystemExit(f"tune_suite: {item!r}: give minutes as a number, e.g. {name}=8")
        out.append((name, f"{minutes or 5}m"))
    return out


def tune(name: str, budget: str, onnx: Path, db: str, log: Path) -> dict:
    """Run tune-model on one model; its wall time and what its output says."""
    start = time.perf_counter()
    with open(log, "w") as out:
        rc = subprocess.call([sys.executable, "-c", "import sys, tessel_entry; "
                              "sys.exit(tessel_entry.main())", "tune-model", str(onnx),
                              "--time", budget, "--db", db], stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text()
    tasks = re.search(r"(\d+) tasks, records in", text)
    trials = sum(int(n) for n in re.findall(r"x\S+\s+(\d+) trials", text))
    chosen = re.search(r"in-sequence selection: (.*)", text)
    return dict(model=name, budget=budget, rc=rc, wall=time.perf_counter() - start,
                tasks=tasks.group(1) if tasks else "?", trials=trials,
                chosen=chosen.group(1) if chosen else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", required=True, help="name=minutes,... (tuning time each)")
    p.add_argument("--db", default="suite.db")
    p.add_argument("--dir", default="suite_onnx", help="where the ONNX files and logs go")
    args = p.parse_args()
    models = parse_models(args.models)
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, budget in models:
        onnx = folder / f"{name}.onnx"
        if not onnx.exists():
            write_onnx(name, {}, str(onnx))
        rows.append(tune(name, budget, onnx, args.db, folder / f"{name}.log"))
        r = rows[-1]
        print(f"{r['model']:<16} --time {r['budget']:<5} {r['wall'] / 60:5.1f} min wall  "
              f"{r['tasks']:>3} tasks {r['trials']:5d} trials  {r['chosen']}"
              + (f"  (exit {r['rc']}: see {folder / (name + '.log')})" if r["rc"] else ""),
              flush=True)


if __name__ == "__main__":
    main()
