"""Cold start, footprint and speed of an exported model (`tessel export`) against the ways to
run the same model without it.

A zoo model (random weights, batch 1; ResNet-18 at 224 by default) is exported once, then four
kinds of fresh process run it on the same input, each started, run to its first result and
ended `--starts` times, interleaved:

  (a) "c"        examples/deploy/run_model.c on the exported library (tessel_runtime.h)
  (b) "python"   `import numpy, tessel.runtime; load(...)(x)` (numpy alone)
  (c) "compile"  `tessel.compile_model(model.onnx, database=DB)(x)` with a warm kernel cache
  (d) "ort"      `onnxruntime.InferenceSession(model.onnx).run(...)`

Each reports the wall time from its spawn to its exit (process start to first result, plus
the exit) and its peak resident memory (the child's ru_maxrss). Then the steady state: the
exported model from Python and compile_model's model in one process, timed in `--rounds`
interleaved slices of `--slice` seconds each (median per slice), and the C example's own
median over its --repeat runs. Outputs are compared with onnxruntime's first.

    python benchmarks/deploy.py --model resnet18 --db tessel.db --starts 7 --rounds 10
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("c", "python", "compile", "ort")


def scripts(onnx_path: Path, lib: Path, x_npy: Path, db: str | None) -> dict[str, list[str]]:
    db_arg = repr(db) if db else "None"
    python = {
        "python": f"import numpy as np, tessel.runtime as rt\n"
                  f"rt.load({str(lib)!r})(np.load({str(x_npy)!r}))",
        "compile": f"import numpy as np, tessel\n"
                   f"tessel.compile_model({str(onnx_path)!r}, database={db_arg})"
                   f"(np.load({str(x_npy)!r}))",
        "ort": f"import numpy as np, onnxruntime as ort\n"
               f"s = ort.InferenceSession({str(onnx_path)!r}, "
               f"providers=['CPUExecutionProvider'])\n"
               f"s.run(None, {{s.get_inputs()[0].name: np.load({str(x_npy)!r})}})",
    }
    return {k: [sys.executable, "-c", v] for k, v in python.items()}


# Spawns the measured processes. A child's ru_maxrss counts what it inherited at fork (the
# parent's resident pages, carried across exec): forked from this script, holding a model and
# onnxruntime, every child read 621 MiB. Forked from this small process instead, started before
# any of that, a child starts from a few MiB.
LAUNCHER = r"""
import json, os, sys, time
devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
for line in sys.stdin:
    cmd = json.loads(line)
    start = time.perf_counter()
    pid = os.posix_spawn(cmd[0], cmd, os.environ, file_actions=devnull)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    print(json.dumps([wall, usage.ru_maxrss, os.waitstatus_to_exitcode(status)]), flush=True)
"""


class Launcher:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def run(self, cmd: list[str]) -> tuple[float, float]:
        """(wall seconds from spawn to exit, peak resident MiB) of one fresh process."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        wall, rss_kib, code = json.loads(self.proc.stdout.readline())
        if code != 0:
            raise SystemExit(f"{' '.join(cmd[:3])} exited with {code}")
        return wall, rss_kib / 1024

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--image", type=int, default=None)
    p.add_argument("--db", default=None, help="record database (default: expert priors)")
    p.add_argument("--starts", type=int, default=5, help="fresh processes of each kind")
    p.add_argument("--rounds", type=int, default=10, help="interleaved steady-state slices")
    p.add_argument("--slice", type=float, default=0.5, help="seconds per slice")
    args = p.parse_args()
    launcher = Launcher()  # (before this process grows: see LAUNCHER)

    import onnx
    import onnxruntime as ort
    import tessel
    import tessel.runtime as rt
    from tessel.graph.frontend import models

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), "?")
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} {cpu}, {os.cpu_count()} cores, "
          f"model {args.model}, database {args.db or '(priors)'}")
    tmp = Path(tempfile.mkdtemp(prefix="tessel-deploy-"))
    try:
        kwargs = {"image": args.image} if args.image else {}
        proto = models.onnx_model(args.model, **kwargs)
        onnx_path = tmp / f"{args.model}.onnx"
        onnx.save(proto, onnx_path)
        model = tessel.compile_model(str(onnx_path), database=args.db)
        print(model.report().splitlines()[0])
        start = time.perf_counter()
        summary = model.export(tmp / f"{args.model}.so")
        print(f"export: {summary.line()} in {time.perf_counter() - start:.1f} s")
        x = model.random_inputs()[0]
        np.save(tmp / "x.npy", x)
        x.tofile(tmp / "x.bin")
        session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
        want = session.run(None, {session.get_inputs()[0].name: x})[0]
        del session
        exported = rt.load(summary.path)
        err = float(np.max(np.abs(exported(x)[0] - want)) / max(1.0, np.abs(want).max()))
        print(f"exported vs onnxruntime: max relative error {err:.1e}")

        binary = tmp / "run_model"
        subprocess.run(["cc", "-O2", "-I", str(rt.header_path().parent),
                        str(ROOT / "examples" / "deploy" / "run_model.c"), "-o", str(binary),
                        "-ldl"], check=True)
        cmds = {"c": [str(binary), str(summary.path), str(tmp / "x.bin"), "--out",
                      str(tmp / "out_")], **scripts(onnx_path, summary.path, tmp / "x.npy",
                                                    args.db)}
        for cmd in cmds.values():  # warm: the page cache, the kernel cache
            launcher.run(cmd)
        cold = {k: [] for k in KINDS}
        for _ in range(args.starts):
            for kind in KINDS:
                cold[kind].append(launcher.run(cmds[kind]))
        print("\n| process | start to first result and exit, ms (median, min) | peak RSS, MiB |")
        print("|---|---|---|")
        for kind in KINDS:
            walls = [w * 1e3 for w, _ in cold[kind]]
            rss = max(r for _, r in cold[kind])
            print(f"| {kind} | {np.median(walls):.0f} ({min(walls):.0f}) | {rss:.0f} |")

        slices = {"exported": [], "compile_model": []}
        feeds = [x]
        for _ in range(args.rounds):
            for label, fn in (("exported", exported), ("compile_model", model)):
                times, t0 = [], time.perf_counter()
                while time.perf_counter() - t0 < args.slice:
                    a = time.perf_counter()
                    fn(*feeds)
                    times.append(time.perf_counter() - a)
                slices[label].append(float(np.median(times)))
        proc = subprocess.run(cmds["c"] + ["--repeat", "50"], capture_output=True, text=True,
                              check=True)
        c_line = next(line for line in proc.stdout.splitlines() if line.startswith("median"))
        ex, cm = (np.median(slices[k]) * 1e3 for k in ("exported", "compile_model"))
        ratios = [a / b for a, b in zip(slices["exported"], slices["compile_model"])]
        print(f"\nsteady state ({args.rounds} interleaved slices of {args.slice} s): exported "
              f"from Python {ex:.3f} ms, compile_model {cm:.3f} ms, exported / compile_model "
              f"{np.median(ratios):.3f} (slices {min(ratios):.3f}-{max(ratios):.3f}); C "
              f"example: {c_line}")
    finally:
        launcher.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
