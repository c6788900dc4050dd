"""Tuning curves: best GFLOP/s against trials, one line per run (or strategy), as a table and
a PNG.

    curves = curves_from_records(db.records(func, target), task.flops)   # {run label: Curve}
    print(table(curves)); plot(curves, "gmm.png", title="GMM")
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tessel.errors import TesselError
from tessel.extras import require


class ReportError(TesselError, ValueError):
    """A plot asked to go where it cannot."""


@dataclass(frozen=True)
class Curve:
    label: str
    best_gflops: tuple[float, ...]  # after trial 1, 2, ... (0 until a valid result)
    errors: int

    @property
    def trials(self) -> int:
        return len(self.best_gflops)

    @property
    def final(self) -> float:
        return self.best_gflops[-1] if self.best_gflops else 0.0


def curve(label: str, seconds: Iterable[float], flops: float) -> Curve:
    """The running best of a sequence of measured seconds (inf: an error)."""
    best, out, errors = 0.0, [], 0
    for secs in seconds:
        if math.isfinite(secs) and secs > 0:
            best = max(best, flops / secs / 1e9)
        else:
            errors += 1
        out.append(best)
    return Curve(label, tuple(out), errors)


def curves_from_records(records: Sequence, flops: float) -> dict[str, Curve]:
    """One curve per run label of TuningRecords (oldest first within a run)."""
    runs: dict[str, list[float]] = {}
    for r in records:
        runs.setdefault(getattr(r, "run", "") or "records", []).append(r.mean_secs)
    return {label: curve(label, secs, flops) for label, secs in runs.items()}


def table(curves: dict[str, Curve]) -> str:
    marks = (16, 64, 256)
    head = f"{'run':<36} {'trials':>6} {'errors':>6} " + " ".join(
        f"{'@' + str(m):>8}" for m in marks) + f" {'best GFLOP/s':>13}"
    lines = [head]
    for c in curves.values():
        at = [f"{c.best_gflops[m - 1]:>8.1f}" if c.trials >= m else f"{'-':>8}" for m in marks]
        lines.append(f"{c.label[:36]:<36} {c.trials:>6} {c.errors:>6} {' '.join(at)} "
                     f"{c.final:>13.1f}")
    return "\n".join(lines)


def plot(curves: dict[str, Curve], path: str | Path, title: str = "",
         reference: tuple[str, float] | None = None) -> Path:
    """Save the curves (and an optional horizontal reference line, e.g. ("numpy", 180.0)) as
    an image; a path without a suffix gets ".png". Returns the path written."""
    path = image_path(path)
    require("matplotlib", "plotting tuning curves").use("Agg")
    plt = require("matplotlib.pyplot", "plotting tuning curves")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for c in curves.values():
        ax.plot(range(1, c.trials + 1), c.best_gflops, label=c.label)
    if reference is not None:
        ax.axhline(reference[1], color="gray", linestyle="--", label=reference[0])
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as err:
        raise ReportError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return path


_IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def image_path(path: str | Path) -> Path:
    """Where an image asked for as `path` goes: ReportError for a directory, a missing
    directory or a suffix no plot is written as; ".png" added when there is none."""
    path = Path(path)
    if path.is_dir():
        raise ReportError(f"{path} is a directory; give a file name, e.g. {path / 'curves.png'}")
    if not path.parent.is_dir():
        raise ReportError(f"the directory {path.parent} does not exist")
    if not path.suffix:
        return path.with_suffix(".png")
    if path.suffix.lower() not in _IMAGE_SUFFIXES:
        raise ReportError(f"{path}: plots are written as {', '.join(_IMAGE_SUFFIXES)}")
    return path
