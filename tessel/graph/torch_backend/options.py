"""What the torch.compile backend is told (`options={...}`) and how it tells what it left to
PyTorch (one warning per message and process)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from tessel.graph.ir import check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS
from tessel.graph.runtime import FALLBACKS
from tessel.target import Target

DEFAULT_DATABASE = "tessel.db"  # the `tessel` command's default


class TorchFallbackWarning(UserWarning):
    """Operators of a compiled graph that run in PyTorch, not in tessel."""


@dataclass(frozen=True)
class BackendOptions:
    """`torch.compile(..., options={...})` for the tessel backend (see the module doc)."""
    database: str | None = None
    fallback: str = "prior"
    tune: int = 0
    strict: bool = False
    layout: str = DEFAULT_LAYOUT
    target: Target | str = "host"

    @classmethod
    def parse(cls, options: dict | None) -> "BackendOptions":
        options = dict(options or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(options) - known)
        check(not unknown, f"torch.compile backend tessel: unknown option(s) {unknown}; its "
                           f"options are {sorted(known)}")
        tune = options.get("tune", 0)
        check(isinstance(tune, int) and not isinstance(tune, bool) and tune >= 0,
              f"torch.compile backend tessel: tune must be an int >= 0 (trials), got {tune!r}")
        fallback = options.get("fallback", "prior")
        check(fallback in FALLBACKS, f"torch.compile backend tessel: fallback must be one of "
                                     f"{FALLBACKS}, got {fallback!r}")
        layout = options.get("layout", DEFAULT_LAYOUT)
        check(layout in (*LAYOUTS, "auto"), f"torch.compile backend tessel: layout must be one "
                                            f"of {(*LAYOUTS, 'auto')}, got {layout!r}")
        strict = options.get("strict", False)
        check(isinstance(strict, bool), f"torch.compile backend tessel: strict must be True or "
                                        f"False, got {strict!r}")
        database = options.get("database")
        if database is None and (tune or Path(DEFAULT_DATABASE).exists()):
            database = DEFAULT_DATABASE
        check(database is None or isinstance(database, (str, Path)),
              f"torch.compile backend tessel: database must be a path, got {database!r}")
        if database is not None and not tune:
            check(Path(database).exists(), f"torch.compile backend tessel: database {database} "
                                           f"does not exist (tune=N creates it)")
        target = options.get("target", "host")
        if not isinstance(target, Target):
            target = Target(target)  # a bad target names itself here, not at the first call
        return cls(None if database is None else str(database), fallback, tune, strict, layout,
                   target)


_SAID: dict = {}  # the warnings registry of say: each message once per process


def say(message: str) -> None:
    """Warn once, in one line that names the backend (no source line beneath)."""
    warnings.warn_explicit(message, TorchFallbackWarning, "torch.compile(backend='tessel')", 0,
                           module="tessel.graph.torch_backend", registry=_SAID)


__all__ = ["BackendOptions", "DEFAULT_DATABASE", "TorchFallbackWarning", "say"]
