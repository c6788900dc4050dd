"""What the paper experiments share: resumable tuning runs (one database per workload,
configuration and seed: a rerun adds only the trials a run is missing), curves read back from
the databases, and tables and plots with the spread over seeds.

A configuration is a (strategy, cost model, strategy options) triple under a label; the
option "space": "template" tunes the workload's template (its operator's: conv2d, matmul)
instead of the auto space:

    CONFIGS["evolutionary+xgb"] == ("evolutionary", "xgb", {})
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tessel
from tessel import ops
from tessel.cost_model.records import pairs_from_database
from tessel.database import Database
from tessel.space.templates import TEMPLATES

CONFIGS: dict[str, tuple[str, str, dict]] = {
    "evolutionary+xgb": ("evolutionary", "xgb", {}),
    "evolutionary+xgb-reg": ("evolutionary", "xgb-reg", {}),
    "evolutionary+xgb-nopriors": ("evolutionary", "xgb", {"priors": False}),
    "evolutionary+pretrained": ("evolutionary", "pretrained", {}),
    "evolutionary+treegru": ("evolutionary", "treegru", {}),
    "annealing+xgb": ("annealing", "xgb", {}),  # diversity-aware selection, lambda 2
    "annealing+xgb-lam1": ("annealing", "xgb", {"lam": 1.0}),  # no diversity: the top n
    "annealing+xgb-lam4": ("annealing", "xgb", {"lam": 4.0}),
    "annealing+ensemble-mean": ("annealing", "ensemble", {"acquisition": "mean"}),
    "annealing+ensemble-ei": ("annealing", "ensemble", {"acquisition": "ei"}),
    "annealing+ensemble-ucb": ("annealing", "ensemble", {"acquisition": "ucb"}),
    "evolutionary+xgb@template": ("evolutionary", "xgb", {"space": "template"}),
    "annealing+xgb@template": ("annealing", "xgb", {"space": "template"}),
    "genetic": ("genetic", "random", {}),
    "random": ("random", "random", {}),
}


@dataclass
class Run:
    """One tuning run's measured seconds (inf: an error), oldest first, its wall time (from
    its first record to its last, pauses between invocations left out) and its database."""
    workload: str
    config: str
    seed: int
    seconds: list[float]
    wall_s: float
    path: Path | None = None

    def best_gflops(self, flops: float) -> np.ndarray:
        g = np.array([flops / s / 1e9 if np.isfinite(s) and s > 0 else 0.0
                      for s in self.seconds])
        return np.maximum.accumulate(g) if g.size else g


def run(workload: str, config: str, seed: int, trials: int, folder: Path,
        target: tessel.Target) -> Run:
    """Tune `workload` with `config` and `seed` until its database holds `trials` records."""
    if config not in CONFIGS:
        raise SystemExit(f"unknown configuration {config!r}; known: {sorted(CONFIGS)}")
    if workload not in ops.SUITE:
        raise SystemExit(f"unknown workload {workload!r}; known: {sorted(ops.SUITE)}")
    strategy, model, options = CONFIGS[config]
    func = ops.SUITE[workload]
    options = dict(options)
    space = options.pop("space", "auto")
    if space == "template":
        space = func.attrs["op"]
        if space not in TEMPLATES:
            raise SystemExit(f"{workload}: no template for {space}; templates: "
                             f"{sorted(TEMPLATES)}")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{workload}-{config}-s{seed}.db"
    if count(path, func, target) < trials:
        tessel.tune(func, target, trials, space=space, strategy=strategy, cost_model=model,
                    database=path, seed=seed, progress=False, rerun_top=1,
                    strategy_options=options)
    return read_run(path, func, target, workload, config, seed, trials)


def read_run(path: Path, func, target: tessel.Target, workload: str, config: str, seed: int,
             trials: int) -> Run:
    """The first `trials` records of a run's database as a Run."""
    records = Database(path).records(func, target)[:trials]
    wall = records[0].build_secs + records[0].run_secs if records else 0.0
    for a, b in zip(records, records[1:]):  # a new run label: resumed later, not tuning time
        wall += b.timestamp - a.timestamp if a.run == b.run else 0.0
    return Run(workload, config, seed, [r.mean_secs if r.ok else float("inf")
                                        for r in records], wall, path)


def retime(runs: list[Run], marks: list[int], target: tessel.Target,
           rounds: int = 5) -> dict[tuple[int, int], float]:
    """{(run index, mark): GFLOP/s} of each run's best program after `mark` trials, all timed
    again together in this process (retime_spans); marks a run has not reached are left out.
    """
    spans = [(i, m) for i, run in enumerate(runs) for m in marks if len(run.seconds) >= m]
    again = retime_spans([(runs[i], 0, m) for i, m in spans], target, rounds)
    return {key: g for key, g in zip(spans, again) if g is not None}


def retime_spans(spans: list[tuple[Run, int, int]], target: tessel.Target,
                 rounds: int = 5) -> list[float | None]:
    """GFLOP/s of the best program of each (run, start, stop) span of trials, all timed again
    together in this process, round-robin over `rounds` rounds (median); None for a span
    without a valid program. Runs made at different times are measured in different phases
    of a shared machine (the same prior programs measured 25-40% apart in two runs of one
    workload minutes apart): this is the comparison that holds. A template's record (knobs,
    no trace) is rebuilt from its knobs in the operator's template."""
    func = ops.SUITE[spans[0][0].workload]
    chosen: list[str | None] = []
    programs: dict[str, object] = {}
    cache: dict[Path, list] = {}
    for run, start, stop in spans:
        if run.path not in cache:
            cache[run.path] = Database(run.path).records(func, target)
        ok = [r for r in cache[run.path][start:stop]
              if r.ok and (r.trace_json is not None or r.knobs is not None)]
        if not ok:
            chosen.append(None)
            continue
        best = min(ok, key=lambda r: r.mean_secs)
        key = best.trace_json if best.trace_json is not None else f"knobs {best.knobs}"
        chosen.append(key)
        if key not in programs:
            programs[key] = tessel.build(_program(func, best, target), target)
    args = [*ops.reference_inputs(func), *ops.empty_outputs(func)]
    times: dict[str, list[float]] = {k: [] for k in programs}
    for _ in range(rounds):
        for key, mod in programs.items():
            times[key].append(mod.time(*args, number=1, repeat=3, min_repeat_ms=20.0))
    flops = ops.flops(func)
    return [flops / float(np.median(times[key])) / 1e9 if key else None for key in chosen]


def _program(func, record, target: tessel.Target):
    """The postprocessed program a record measured: its trace replayed, or its knobs applied
    to the operator's template."""
    from tessel.schedule import Schedule
    from tessel.space import default_postprocs, make_space, postprocess
    if record.trace_json is not None:
        sch = record.trace().apply(Schedule(func))
    else:
        space = make_space(func.attrs["op"], target)
        config = space.config_space(func).from_choices(list(record.knobs))
        sch = space.apply_config(func, config)
    return postprocess(sch, default_postprocs(target)).func


def pairs(path: Path, target: tessel.Target, first: int | None = None) -> list:
    """(candidate, result) pairs of the records in the database at `path` (the first `first`
    of each workload's), as a cost model trains on them."""
    return [p for ps in pairs_from_database(Database(path), target).values()
            for p in ps[:first]]


def count(path: Path, func, target) -> int:
    """Records of `func` on `target` in the database at `path` (0 when there is none)."""
    return len(Database(path).records(func, target)) if path.exists() else 0


def cell(values: list[float]) -> str:
    """median [min-max] of `values`, '-' for none."""
    if not values:
        return "-"
    return f"{np.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]"


def spread(curves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Median, minimum and maximum over seeds at each trial (curves cut to the shortest)."""
    n = min(len(c) for c in curves)
    stack = np.stack([c[:n] for c in curves])
    return np.median(stack, 0), stack.min(0), stack.max(0)


def plot_panels(panels: dict[str, dict[str, list[np.ndarray]]], path: Path,
                title: str) -> None:
    """One panel per workload; in each, every configuration's median best-so-far curve over
    seeds with its min-max band."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1.5, 3.9),
                             squeeze=False)
    for ax, (workload, groups) in zip(axes[0], panels.items()):
        for label, curves in groups.items():
            med, lo, hi = spread(curves)
            xs = np.arange(1, len(med) + 1)
            ax.plot(xs, med, label=f"{label} ({len(curves)} seeds)")
            ax.fill_between(xs, lo, hi, alpha=0.2)
        ax.set(title=workload, xlabel="trials")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("best GFLOP/s (median, min-max band)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(folder: str | Path, experiment: str, lines: list[str],
                  panels: dict[str, dict[str, list[np.ndarray]]], title: str) -> None:
    """<date>-paper-<experiment>.png (the panels) and .md (`lines`, then the plot) in
    `folder`."""
    stamp = time.strftime("%Y-%m-%d")
    Path(folder).mkdir(parents=True, exist_ok=True)
    png = Path(folder) / f"{stamp}-paper-{experiment}.png"
    plot_panels(panels, png, title)
    md = png.with_suffix(".md")
    md.write_text("\n".join(lines + [f"![curves]({png.name})", ""]))
    print(f"wrote {md} and {png}")


def header(target: tessel.Target) -> str:
    return f"Machine: {target}; {time.strftime('%Y-%m-%d %H:%M')}."
