"""The cost model shipped with tessel: a global XGBoost rank model per ISA family, pretrained
offline on measured records, fine-tuned on each workload's own records as they arrive.

    model = cost_model.make("pretrained", target=Target("host"))   # the default of tune()
    glob = load_global(target)               # the shipped XGBModel for target's ISA family
    save_global(model, path, family, about)  # what tools/pretrain_cost_model.py writes

A workload's first batches are then ranked by what other workloads taught (AutoTVM's
transfer learning, section 4), not at random. The model is a TransferModel: the fixed global
model's score is the base margin of a small local model trained on this workload's records,
so local data corrects the global model where it is wrong.

The files live in tessel/cost_model/pretrained/, one per ISA family (`Target.isa_family`,
e.g. "x86_64-avx512"), as gzipped JSON holding the XGBoost booster in XGBoost's own JSON
form and what it was trained on: portable across XGBoost versions and platforms (no pickle).
A target of a family with no file starts from the nearest family's model (`nearest_family`:
the same architecture, the nearest vector width) and says so once; its shipped programs stay
with their own family (a program's tiles are cut for its vector width).
A file may also hold the best programs of its training workloads (`programs`: each
workload's program and its best traces), which tessel.tuning.knowledge offers a new task of
the same program as a tuned relative's (`shipped_programs`).
"""
from __future__ import annotations

import functools
import gzip
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

from tessel import features
from tessel.cost_model.base import check
from tessel.cost_model.transfer import TransferModel
from tessel.cost_model.xgb import XGBModel, import_xgboost
from tessel.ir import PrimFunc, from_json as func_from_json, to_json as func_to_json
from tessel.schedule import Trace
from tessel.target import Target

FORMAT = "tessel.pretrained/1"
DIRECTORY = Path(__file__).with_name("pretrained")
log = logging.getLogger("tessel")


def path_for(family: str, directory: Path = DIRECTORY) -> Path:
    return directory / f"{family}.json.gz"


def save_global(model: XGBModel, path: str | Path, family: str,
                about: dict[str, Any] | None = None,
                programs: list[tuple[PrimFunc, list[Trace]]] = ()) -> Path:
    """Write a trained XGBModel as a shipped global model of `family`, with the best
    `programs` of its training workloads ((workload, best traces first) pairs)."""
    check(model.booster is not None, "save_global: the model is not trained")
    raw = model.booster.save_raw(raw_format="json")
    data = {"format": FORMAT, "family": family, "feature": model.feature,
            "width": features.width(model.feature), "objective": model.objective,
            "about": about or {}, "booster": json.loads(bytes(raw)),
            "programs": [{"name": func.name, "func": json.loads(func_to_json(func)),
                          "traces": [json.loads(t.to_json()) for t in traces]}
                         for func, traces in programs]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    return path


@functools.lru_cache(maxsize=4)
def _contents(path: str, mtime_ns: int, size: int) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _read(path: str | Path) -> Any:
    """The parsed file at `path`, read once while it is unchanged (a model and its programs
    come from one read: parsing the file takes half a second)."""
    stat = os.stat(path)
    return _contents(str(path), stat.st_mtime_ns, stat.st_size)


def read_global(path: str | Path) -> tuple[XGBModel, dict[str, Any]]:
    """The global model stored at `path` and what it was trained on (its `about`)."""
    try:
        data = _read(path)
    except (OSError, EOFError, json.JSONDecodeError) as err:
        check(False, f"{path}: not a readable pretrained cost model ({err})")
    check(isinstance(data, dict) and data.get("format") == FORMAT,
          f"{path}: not a pretrained cost model (expected format {FORMAT!r})")
    feature = data.get("feature")
    check(feature in features.NAMES and data.get("width") == features.width(feature),
          f"{path}: trained on feature set {feature!r} of width {data.get('width')}, which "
          f"this tessel computes differently (width {_width_or_none(feature)}); retrain it "
          "with tools/pretrain_cost_model.py")
    xgb = import_xgboost()
    model = XGBModel(feature=feature, objective=data.get("objective", "rank"))
    model.booster = xgb.Booster()
    model.booster.load_model(bytearray(json.dumps(data["booster"]).encode()))
    return model, data.get("about", {})


def _programs(path: str) -> list[dict[str, Any]]:
    return _read(path).get("programs", []) if Path(path).exists() else []


@functools.lru_cache(maxsize=256)
def _parsed(path: str, index: int) -> tuple[PrimFunc, tuple[Trace, ...]]:
    entry = _programs(path)[index]
    return (func_from_json(json.dumps(entry["func"])),
            tuple(Trace.from_json(json.dumps(t)) for t in entry["traces"]))


def forget() -> None:
    """Forget the files read so far (after a retraining replaced one)."""
    for cache in (_cached, _contents, _parsed):
        cache.cache_clear()


def shipped_programs(target: Any, name: str) -> list[tuple[PrimFunc, tuple[Trace, ...]]]:
    """The shipped workloads of `target`'s ISA family whose program is called `name`, each
    with its best traces (fastest first); [] when the family's file holds none."""
    path = str(path_for(target.isa_family))
    return [_parsed(path, k) for k, entry in enumerate(_programs(path)) if entry["name"] == name]


def _width_or_none(feature: Any) -> int | None:
    return features.width(feature) if feature in features.NAMES else None


@functools.lru_cache(maxsize=8)
def _cached(path: str) -> tuple[XGBModel, dict[str, Any]] | None:
    if not Path(path).exists():
        return None
    return read_global(path)


_ISA_BITS = {"avx512": 512, "avx2": 256, "avx": 256, "sse4.2": 128, "sse2": 128, "neon": 128,
             "sve": 128, "sve2": 128}  # vector widths of the ISA families' names


def shipped_families(directory: Path = DIRECTORY) -> list[str]:
    """The ISA families tessel ships a model for."""
    return sorted(p.name.removesuffix(".json.gz") for p in directory.glob("*.json.gz"))


def nearest_family(family: str, available: list[str]) -> str | None:
    """The family of `available` nearest `family`: the same architecture first, then the
    nearest vector width (a model learns what vector length, unrolling and cache reuse do to
    programs of that width), then the narrower; None when nothing is available."""
    arch, _, isa = family.partition("-")
    bits = _ISA_BITS.get(isa, 128)

    def how_far(other: str) -> tuple:
        o_arch, _, o_isa = other.partition("-")
        o_bits = _ISA_BITS.get(o_isa, 128)
        return o_arch != arch, abs(math.log2(o_bits / bits)), o_bits, other
    return min(available, key=how_far, default=None)


_SAID: set[str] = set()  # families whose stand-in model was named once


def load_global(target: Any = None) -> XGBModel | None:
    """The shipped global model of `target`'s ISA family (the host's if None); for a family
    tessel ships none for, the nearest family's (`nearest_family`, named once in the log);
    None when tessel ships none at all. Read once per process."""
    target = target if target is not None else Target("host")
    family = target.isa_family
    if not path_for(family).exists():
        nearest = nearest_family(family, shipped_families())
        if nearest is None:
            return None
        if family not in _SAID:
            _SAID.add(family)
            log.info("no pretrained cost model for %s: the cost model starts from the nearest "
                     "family's, %s", family, nearest)
        family = nearest
    found = _cached(str(path_for(family)))
    return found[0] if found is not None else None


class PretrainedModel(TransferModel):
    """TransferModel whose global part is the shipped model of the target's ISA family (or of
    the nearest family tessel ships one for; cold when it ships none). Its file's best
    programs come with it (tessel.tuning.knowledge; of the target's exact family only)."""

    ships_programs = True

    def __init__(self, target: Any = None, seed: int = 0, **local_kwargs: Any) -> None:
        target = target if target is not None else Target("host")
        glob = load_global(target)
        if glob is None:  # a cold start: the plain XGBoost model of "xgb"
            log.info("no pretrained cost model at all: the cost model starts cold")
            local = XGBModel(seed=seed, **local_kwargs)
        else:  # gentle corrections of what the global model knows
            local = XGBModel(feature=glob.feature, num_rounds=30, eta=0.1, seed=seed,
                             **local_kwargs)
        super().__init__(glob, local=local, seed=seed)


__all__ = ["FORMAT", "DIRECTORY", "PretrainedModel", "load_global", "path_for", "read_global",
           "save_global", "shipped_programs", "forget", "nearest_family",
           "shipped_families"]
