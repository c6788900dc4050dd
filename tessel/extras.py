"""Optional features and the extras that install them.

    torch = require("torch", "the model zoo")     # the module, or MissingExtra saying
                                                    # "the model zoo needs PyTorch: pip install
                                                    #  'tessel[torch]'"

The core install (numpy, xgboost, tqdm) runs the main job: tuning an operator with the default
cost model. Everything else is an extra (pyproject.toml), and a feature whose extra is missing
says which to install in one line: the `tessel` command prints it and exits with status 2.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from tessel.errors import TesselError

# top-level module -> (extra, what the package is called)
EXTRAS = {
    "torch": ("torch", "PyTorch"),
    "onnx": ("onnx", "onnx"),
    "onnxruntime": ("onnx", "onnxruntime"),
    "distributed": ("distributed", "Dask distributed"),
    "dask": ("distributed", "Dask distributed"),
    "matplotlib": ("plot", "matplotlib"),
    "xgboost": ("", "xgboost"),  # a core dependency: a broken install, not a missing extra
}


class MissingExtra(TesselError, ImportError):
    """An optional feature was asked for without the package its extra installs."""


def install_hint(module: str) -> str:
    """What to run to get `module`: the extra that installs it, or the package itself."""
    extra, package = EXTRAS.get(module.split(".")[0], ("", module.split(".")[0]))
    if extra:
        return f"pip install 'tessel[{extra}]' (in a clone: pip install -e '.[{extra}]')"
    return f"pip install {'xgboost-cpu' if package == 'xgboost' else package}"


def require(module: str, feature: str) -> ModuleType:
    """Import `module`, or raise MissingExtra naming `feature` and the install command."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        # the module itself, or a package it needs that is missing
        top = module.split(".")[0]
        if err.name and err.name.split(".")[0] != top:
            top = err.name.split(".")[0]
        package = EXTRAS.get(top, ("", top))[1]
        raise MissingExtra(f"{feature} needs {package}: {install_hint(top)}") from None


__all__ = ["EXTRAS", "MissingExtra", "install_hint", "require"]
