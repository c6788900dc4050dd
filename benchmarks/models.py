"""Issue 40's model suite through tessel, untuned, checked against onnxruntime and PyTorch.

Each model of benchmarks/model_suite.py (random weights from its library's config; no
download) goes down each path, compiled at zero trials (no database: every task on the auto
space's first expert prior, compile_model's fallback) and run once on the suite's inputs:
- "onnx": torch.onnx.export to a file (opset 17; 18 where only the dynamo exporter takes the
  model), tessel.compile_model on the file; checked against onnxruntime on the same file and
  against torch eager;
- "torch": tessel.compile_model(module, example_inputs=...) through torch.export; checked
  against torch eager;
- "compile": torch.compile(module, backend="tessel"); checked against torch eager, and told
  whether every operator ran in tessel (else the backend's lines naming what it left to
  PyTorch, and Dynamo's graph breaks). Dynamo's `allow_rnn` is on: without it Dynamo runs
  any function calling an nn.LSTM eagerly, whole, and no backend sees it.
A path passes when every output is within rtol 1e-3 of each reference, relative to the
output's largest magnitude (random weights put many outputs near zero); the table gives the
largest absolute error and that relative error, or the path's one-line error.

    python benchmarks/models.py --check --small                  # 2-layer transformers first
    python benchmarks/models.py --models bert_base,gpt2 --paths onnx,torch

`compile_paths` returns the compiled callables with their inputs and references, for a
timing mode to use.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

import model_suite  # (first: it lets torchvision import, which transformers does too)
import tessel
from tessel.graph.torch_backend import TorchFallbackWarning, tessel_backend

PATHS = ("onnx", "torch", "compile")
RTOL = 1e-3
OPSET = 17


@dataclass
class Compiled:
    """One model compiled along one path: `run()` computes its outputs (numpy) on the suite's
    inputs; `references` maps a runtime to its outputs on the same inputs; `notes` says what
    the path left outside tessel."""
    name: str
    path: str
    run: Callable[[], list[np.ndarray]]
    references: dict[str, list[np.ndarray]]
    compile_secs: float
    notes: list[str] = field(default_factory=list)


def eager(module: Any, inputs: tuple) -> list[np.ndarray]:
    """The module's outputs in PyTorch, as numpy arrays."""
    with torch.inference_mode():
        out = module(*inputs)
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


# ---- the three paths ----

def onnx_path(name: str, module: Any, inputs: tuple, folder: Path) -> Compiled:
    file = folder / f"{name}.onnx"
    export_onnx(module, inputs, file)
    start = time.perf_counter()
    model = tessel.compile_model(str(file), database=None)
    secs = time.perf_counter() - start
    feeds = [x.numpy() for x in inputs]
    refs = {"onnxruntime": onnxruntime_outputs(file, feeds), "torch": eager(module, inputs)}
    return Compiled(name, "onnx", lambda: model(*feeds), refs, secs)


def export_onnx(module: Any, inputs: tuple, file: Path) -> None:
    """The TorchScript exporter (fast) at opset OPSET, else the dynamo one at its own lowest
    opset, 18 (asked for 17 it wrote GPT-2's Split with opset 18's num_outputs, which
    onnxruntime refuses)."""
    names = [f"input{k}" for k in range(len(inputs))]
    with warnings.catch_warnings(), quiet_stdout():  # (graphs it refuses, its progress)
        warnings.simplefilter("ignore")
        try:
            torch.onnx.export(module, inputs, str(file), dynamo=False, opset_version=OPSET,
                              input_names=names)
        except Exception:  # noqa: BLE001  the legacy exporter refuses many modules
            program = torch.onnx.export(module, inputs, dynamo=True, input_names=names,
                                        opset_version=max(OPSET, 18), verbose=False)
            program.save(str(file))


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """What Python and C++ write to stdout dropped: the TorchScript exporter prints the whole
    graph of a model it refuses there."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def onnxruntime_outputs(file: Path, feeds: list[np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort
    session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, feeds)))


def torch_path(name: str, module: Any, inputs: tuple, folder: Path) -> Compiled:
    start = time.perf_counter()
    model = tessel.compile_model(module, database=None, example_inputs=inputs)
    secs = time.perf_counter() - start
    feeds = [x.numpy() for x in inputs]
    return Compiled(name, "torch", lambda: model(*feeds), {"torch": eager(module, inputs)}, secs)


def compile_path(name: str, module: Any, inputs: tuple, folder: Path) -> Compiled:
    """torch.compile with the tessel backend, compiled by its first call (in `folder`, so that
    no ./tessel.db is read: zero trials); notes: the backend's fallback lines and the count of
    Dynamo graphs."""
    graphs: list[Any] = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return tessel_backend(gm, example_inputs)

    torch._dynamo.reset()
    fast = torch.compile(module, backend=backend)
    start = time.perf_counter()
    with contextlib.chdir(folder), warnings.catch_warnings(record=True) as said, \
            torch._dynamo.config.patch(allow_rnn=True):
        warnings.simplefilter("always", TorchFallbackWarning)
        eager(fast, inputs)
    secs = time.perf_counter() - start
    notes = [str(w.message) for w in said if issubclass(w.category, TorchFallbackWarning)]
    if len(graphs) != 1:
        notes.append(f"Dynamo made {len(graphs)} graphs (what it did not trace runs eagerly)")
    return Compiled(name, "compile", lambda: eager(fast, inputs),
                    {"torch": eager(module, inputs)}, secs, notes)


COMPILERS = {"onnx": onnx_path, "torch": torch_path, "compile": compile_path}


def compile_paths(name: str, paths: list[str], small: bool, folder: Path
                  ) -> dict[str, Compiled | str]:
    """Model `name` compiled along each of `paths` (files in `folder`); a path that fails maps
    to its one-line error."""
    module, inputs = model_suite.build(name, small)
    out: dict[str, Compiled | str] = {}
    for path in paths:
        try:
            out[path] = COMPILERS[path](name, module, inputs, folder)
        except Exception as e:  # noqa: BLE001  the table reports it
            traceback.print_exc(file=sys.stderr)
            out[path] = one_line(e)
    return out


# ---- checking and the table ----

def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"[:300]


def errors(got: list[np.ndarray], want: list[np.ndarray]) -> tuple[float, float]:
    """The largest absolute error over all outputs, and the largest of each output's absolute
    error relative to that output's largest magnitude."""
    if len(got) != len(want):
        raise ValueError(f"{len(got)} outputs, the reference has {len(want)}")
    worst_abs = worst_rel = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if g.shape != w.shape:
            raise ValueError(f"output shape {g.shape}, the reference has {w.shape}")
        diff = float(np.abs(g - w).max(initial=0.0))
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(float(np.abs(w).max(initial=0.0)), 1e-30))
    return worst_abs, worst_rel


def check(compiled: Compiled) -> tuple[bool, str]:
    """Whether the path's outputs match every reference (RTOL), and the row's text."""
    try:
        got = compiled.run()
        results = {ref: errors(got, want) for ref, want in compiled.references.items()}
    except Exception as e:  # noqa: BLE001
        return False, f"run: {one_line(e)}"
    ok = all(rel <= RTOL for _, rel in results.values())
    scale = max(float(np.abs(w).max(initial=0.0)) for w in compiled.references["torch"])
    text = "; ".join(f"vs {ref} abs {a:.2e} rel {r:.2e}" for ref, (a, r) in results.items())
    text += f" (|out| up to {scale:.2g})"
    if compiled.notes:
        ok = False
        text += "; " + " | ".join(compiled.notes)
    elif compiled.path == "compile":
        text += "; every operator in tessel"
    return ok, text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(model_suite.SUITE),
                   help="names of model_suite.SUITE or HELD_OUT, or 'held_out' for all of those")
    p.add_argument("--paths", default=",".join(PATHS))
    p.add_argument("--small", action="store_true", help="2-layer BERT, GPT-2 and ViT")
    p.add_argument("--check", action="store_true",
                   help="exit 1 unless every model passes on every path")
    args = p.parse_args()
    names = list(model_suite.HELD_OUT) if args.models == "held_out" else args.models.split(",")
    paths = args.paths.split(",")
    unknown = [x for x in paths if x not in PATHS] + [x for x in names
                                                       if x not in model_suite.MODELS]
    if unknown:
        p.error(f"unknown {unknown}: the paths are {PATHS}, the models "
                f"{list(model_suite.MODELS)}")
    print(f"{'model':<20} {'path':<8} {'compile s':>9}  result", flush=True)
    passed = True
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            for path, got in compile_paths(name, paths, args.small, Path(folder)).items():
                ok, text = check(got) if isinstance(got, Compiled) else (False, got)
                secs = f"{got.compile_secs:9.1f}" if isinstance(got, Compiled) else " " * 9
                print(f"{name:<20} {path:<8} {secs}  {'ok' if ok else 'FAIL'}  {text}",
                      flush=True)
                passed &= ok
    sys.exit(0 if passed or not args.check else 1)


if __name__ == "__main__":
    main()
