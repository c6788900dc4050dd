"""A feature whose optional package is missing says which extra installs it, in one line: the
`tessel` command prints it without a traceback and exits with status 2. The core install runs
the main job: its default cost model needs nothing beyond the core dependencies."""
import sys
from pathlib import Path

import pytest

from tessel import cli
from tessel.extras import MissingExtra, install_hint, require

ROOT = Path(__file__).resolve().parents[1]


def block(monkeypatch, *modules: str) -> None:
    """Make `import m` fail for each module (as if its package were not installed)."""
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in modules):
            monkeypatch.setitem(sys.modules, name, None)
    for m in modules:
        monkeypatch.setitem(sys.modules, m, None)


@pytest.mark.parametrize("argv, blocked, message", [
    (["worker", "--scheduler", "tcp://127.0.0.1:1", "--device", "cpu"], "distributed",
     "tessel worker: tessel worker needs Dask distributed: pip install 'tessel[distributed]'"),
    (["tasks", "resnet18"], "torch",
     "tessel tasks: the model zoo needs PyTorch: pip install 'tessel[torch]'"),
    (["tune", "GMM", "--trials", "1", "--cost-model", "treegru"], "torch",
     "tessel tune: the treegru cost model needs PyTorch: pip install 'tessel[torch]'"),
])
def test_cli_names_the_missing_extra_in_one_line(argv, blocked, message, monkeypatch, capsys,
                                                 tmp_path):
    block(monkeypatch, blocked)
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and "(in a clone: pip install -e '." in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "tessel.db").exists()


def test_report_plot_and_onnx_import_name_their_extras(monkeypatch, tmp_path):
    from tessel.tuning import report
    from tessel.graph.compiler import load_model
    block(monkeypatch, "matplotlib", "onnx")
    with pytest.raises(MissingExtra, match=r"plotting tuning curves needs matplotlib: "
                                           r"pip install 'tessel\[plot\]'"):
        report.plot({}, tmp_path / "curves.png")
    with pytest.raises(MissingExtra, match=r"importing an ONNX model needs onnx: "
                                           r"pip install 'tessel\[onnx\]'"):
        load_model(tmp_path / "model.onnx")
    assert not (tmp_path / "curves.png").exists()


def test_require_returns_the_module_and_hints_name_packages():
    assert require("json", "anything").dumps([1]) == "[1]"
    assert install_hint("onnxruntime").startswith("pip install 'tessel[onnx]'")
    assert install_hint("xgboost") == "pip install xgboost-cpu"


def test_the_default_cost_model_needs_only_core_dependencies():
    """pyproject's core dependencies hold what `tessel tune` uses by default: xgboost, and
    the package data the shipped cost models."""
    import tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"])
    assert "xgboost" in core and "numpy" in core
    from tessel.cli.tune import add_commands
    import argparse
    sub = argparse.ArgumentParser().add_subparsers()
    add_commands(sub)
    tune = sub.choices["tune"]
    assert tune.get_default("cost_model") == "pretrained"
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "pretrained/*.json.gz" in data["package-data"]["tessel.cost_model"]
    for extra, packages in project["optional-dependencies"].items():
        assert not any(p.startswith("xgboost") for p in packages), extra
