"""The README cannot rot: its Python blocks run as written, in order, as a reader would paste
them into one script (in a fresh directory, so its databases land there), and every command
of its command-line table exists."""
import re
import subprocess
import sys
from pathlib import Path

from tessel.cli import make_parser

README = Path(__file__).resolve().parents[1] / "README.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README.read_text(), re.M | re.S)


def test_every_python_block_runs_as_written(tmp_path):
    code = blocks("python")
    assert len(code) >= 5
    script = tmp_path / "readme.py"
    script.write_text("\n".join(code) + '\nprint("README OK")\n')
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.rstrip().endswith("README OK")
    assert (tmp_path / "tessel.db").exists() and (tmp_path / "models.db").exists()


def test_the_set_up_commands_and_the_command_table_name_real_commands():
    first, tests = blocks("bash")[0].strip().splitlines()[:2]
    assert first.startswith("pip install -e . && tessel tune ")
    assert tests.startswith('pip install -q -e ".[test]" && python -m pytest')
    ci = (README.parent / ".ci" / "run").read_text()
    assert tests.split("#")[0].strip() in ci  # CI runs the README's test command
    table = re.findall(r"^\| `tessel ([a-z-]+)", README.read_text(), re.M)
    commands = make_parser()._subparsers._group_actions[0].choices
    assert table and set(table) <= set(commands), set(table) - set(commands)
    assert first.split("tessel tune ")[1].split()[0] in ("GMM", "GMM-1024")
