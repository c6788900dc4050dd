"""The docs site builds with `mkdocs build --strict` (every link and page it names exists), its
generated reference covers the registries it is generated from, and every tessel name, file
and page the README and the docs mention exists (a rename shows up here, not in a reader's
traceback)."""
from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tessel.cli import make_parser
from tessel.errors import TesselError
from tessel.schedule import INSTRUCTIONS
from tessel.space.rules import default_rules
from tessel.target import Target

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FILE_SUFFIXES = (".db", ".jsonl", ".json", ".onnx", ".gz", ".png", ".md", ".py", ".so")


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path):
    pytest.importorskip("mkdocs")  # in the test extra: CI builds the site
    site = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for page in ("guides/tune-a-model", "reference/instructions", "reference/api/tessel",
                 "results/catalogue", "results/2026-11-26-zen5-models-rows-aligned"):
        assert (site / page / "index.html").exists(), page


def test_the_reference_covers_the_registries():
    docs = gen_docs()
    instructions, rules, cli = docs.instructions_page(), docs.rules_page(), docs.cli_page()
    assert all(f"\n## {name}\n" in instructions for name in INSTRUCTIONS)
    assert all(f"\n## {type(rule).__name__}\n" in rules
               for rule in default_rules(Target("x86_64-avx2")))
    assert all(f"\n## tessel {name}\n" in cli for name in docs.subcommands(make_parser()))
    errors = docs.errors_page()
    todo, seen = [TesselError], []
    while todo:
        seen.append(todo.pop())
        todo += seen[-1].__subclasses__()
    assert all(f"| `{cls.__name__}` |" in errors for cls in seen)
    assert docs.instructions_page() == instructions and docs.cli_page() == cli  # deterministic


def test_the_results_catalogue_names_every_file_and_a_machine():
    catalogue = gen_docs().catalogue(sorted((ROOT / "benchmarks" / "results").glob("*.md")))
    for path in (ROOT / "benchmarks" / "results").glob("*.md"):
        assert f"]({path.name})" in catalogue
    assert "machine not named" not in catalogue


def resolves(name: str) -> bool:
    """Whether a dotted name is a module of tessel or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_tessel_name_the_docs_mention_exists():
    missing = []
    for page in PAGES:
        for span in re.findall(r"`([^`\n]+)`", page.read_text()):
            for name in re.findall(r"\btessel(?:\.[A-Za-z_]\w*)+(?![\w/])", span):
                if not name.endswith(FILE_SUFFIXES) and not resolves(name):
                    missing.append(f"{page.name}: {name}")
    assert not missing, missing


def test_every_file_the_docs_mention_exists():
    missing = []
    for page in PAGES:
        for path in re.findall(r"(?<![\w/.])((?:tessel|benchmarks|tools|examples|tests|docs)"
                               r"/[\w./-]*\w)", page.read_text()):
            if not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    readme = PAGES[0]  # the docs' own links: mkdocs build --strict checks them
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", readme.read_text()):
        if not (ROOT / link).exists():
            missing.append(f"README.md: link {link}")
    assert not missing, missing
