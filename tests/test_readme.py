"""The README and the docs cannot rot: the Python blocks of each page run as written, in order,
as a reader would paste them into one script (in a fresh directory, so its databases land
there); every `tessel` command line of their shell blocks parses; every command of the
README's table exists.

A block right after `<!-- test: skip (why) -->` is not run (a tuning run of minutes); one
after `<!-- test: needs PROGRAM ... -->` runs where those programs are on PATH.

The calls run as written, with less search effort than a user's run gets (SMALLER_SEARCH,
run before each page sets these defaults): the evolutionary search evolves 8 programs a
generation instead of 64, a run re-times its best program at the end instead of its best 3,
and a model's kernels are chosen in its sequence among each task's 2 best records instead of
8. A page then costs seconds of a 2-core CI runner, not a minute."""
from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tessel.cli import make_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
FENCE = re.compile(r"^(?:<!-- test: (?P<marker>.*?) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)^```",
                   re.M | re.S)

SMALLER_SEARCH = """\
def smaller_search():
    from tessel import tune, tune_model, tune_tasks
    from tessel.graph.compiler.select import select_graph
    from tessel.search.evolutionary import EvolutionarySearch
    for func, key, value in [(EvolutionarySearch.__init__, "population", 8),
                             (tune, "rerun_top", 1), (tune_tasks, "rerun_top", 1),
                             (tune_model, "select", 2), (select_graph, "candidates", 2)]:
        assert key in func.__kwdefaults__, f"{func.__qualname__} has no keyword {key!r}"
        func.__kwdefaults__[key] = value
smaller_search()
del smaller_search
"""


@dataclass(frozen=True)
class Block:
    language: str
    code: str
    marker: str | None

    def runs_here(self) -> bool:
        """Whether the tests run this block on this machine (its marker says)."""
        if self.marker is None:
            return True
        kind, _, rest = self.marker.partition(" ")
        assert kind in ("skip", "needs") and rest.strip(), f"unknown marker {self.marker!r}"
        return kind == "needs" and all(shutil.which(p) for p in rest.split())


def blocks(page: Path, language: str) -> list[Block]:
    found = [Block(m["lang"], m["code"], m["marker"]) for m in FENCE.finditer(page.read_text())]
    return [b for b in found if b.language == language]


def run_page(page: Path, tmp_path: Path) -> str:
    """Run the page's Python blocks as one script in tmp_path; its output."""
    code = [b.code for b in blocks(page, "python") if b.runs_here()]
    assert code, f"{page.name}: no Python block runs"
    script = tmp_path / "page.py"
    script.write_text("\n".join([SMALLER_SEARCH, *code]) + '\nprint("PAGE OK")\n')
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, f"{page.relative_to(ROOT)}:\n{proc.stderr[-4000:]}"
    assert proc.stdout.rstrip().endswith("PAGE OK")
    return proc.stdout


def test_every_python_block_of_the_readme_runs_as_written(tmp_path):
    run_page(README, tmp_path)
    assert (tmp_path / "tessel.db").exists()


PAGES_WITH_CODE = [p for p in DOCS if blocks(p, "python")]


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_python_block_of_the_docs_runs_as_written(page, tmp_path):
    run_page(page, tmp_path)


def test_the_docs_have_code_to_run_and_mark_few_blocks():
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in PAGES_WITH_CODE}
    assert {"concepts/index.md", "guides/tune-an-operator.md", "guides/tune-a-model.md",
            "guides/torch-compile.md"} <= pages
    marked = [b for p in [README, *DOCS] for b in blocks(p, "python") if b.marker]
    for block in marked:
        block.runs_here()  # an unknown marker fails here
    assert len(marked) <= 3


def command_lines(page: Path) -> list[str]:
    """The `tessel ...` commands of a page's shell blocks, without comments."""
    found = []
    for block in blocks(page, "bash"):
        for line in block.code.splitlines():
            for part in line.split("#")[0].split("&&"):
                command = part.split(">")[0].split("|")[0].strip()  # without redirections
                if command.startswith("tessel "):
                    found.append(command)
    return found


def test_every_tessel_command_of_the_readme_and_docs_parses():
    parser = make_parser()
    lines = [line for page in [README, *DOCS] for line in command_lines(page)]
    assert len(lines) >= 15
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])  # a UsageError names what is wrong


def test_the_set_up_commands_and_the_command_table_name_real_commands():
    first, tests = blocks(README, "bash")[0].code.strip().splitlines()[:2]
    assert first.startswith("pip install -e . && tessel tune ")
    assert tests.startswith('pip install -q -e ".[test]" && python -m pytest')
    ci = (ROOT / ".ci" / "run").read_text()
    assert tests.split("#")[0].strip() in ci  # CI runs the README's test command
    table = re.findall(r"^\| `tessel ([a-z-]+)", README.read_text(), re.M)
    commands = make_parser()._subparsers._group_actions[0].choices
    assert table and set(table) <= set(commands), set(table) - set(commands)
    assert first.split("tessel tune ")[1].split()[0] in ("GMM", "GMM-1024")


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= 150
