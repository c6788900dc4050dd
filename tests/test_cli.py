"""The tessel command."""
import errno
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tessel
from tessel import cli, ops

ROOT = Path(__file__).resolve().parents[1]


def test_ops_lists_every_workload(capsys):
    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ops.SUITE)


def test_ops_onnx_lists_the_translated_operators(capsys):
    pytest.importorskip("onnx")
    from tessel.graph.frontend.onnx_import import CONVERTERS
    assert cli.main(["ops", "--onnx"]) == 0
    translated, folded = capsys.readouterr().out.splitlines()
    assert translated.split(": ")[1].split() == sorted(CONVERTERS)
    assert {"Gather", "Where", "Cast", "Slice"} <= set(CONVERTERS)
    assert "Range" in folded and "Gather" not in folded


def test_suite_builds_checks_and_times_a_workload(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path))
    assert cli.main(["suite", "GMM", "SFM", "--budget", "0.05"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [l.split() for l in lines if l.startswith(("GMM", "SFM"))]
    assert [r[0] for r in rows] == ["GMM", "SFM"]
    assert all(r[-1] == "ok" and float(r[1]) > 0 and float(r[2]) > 0 for r in rows)
    assert "2/2 workloads match numpy" in lines[-1]


def test_suite_rejects_unknown_workloads(capsys):
    assert cli.main(["suite", "GMM", "NOPE"]) == 2
    assert "unknown workload(s) NOPE" in capsys.readouterr().err


def test_show_prints_program_and_c(capsys):
    assert cli.main(["show", "GMM"]) == 0
    assert "with T.block(\"C\"):" in capsys.readouterr().out
    assert cli.main(["show", "GMM", "--c"]) == 0
    assert "int32_t tessel_entry(void** args)" in capsys.readouterr().out
    assert cli.main(["show", "XYZ"]) == 2


@pytest.mark.parametrize("error, line", [
    (RuntimeError("can't start new thread"), "can't start new thread"),
    (MemoryError(), "MemoryError"),
    (OSError(errno.EAGAIN, "Resource temporarily unavailable"), "[Errno 11] Resource "),
    (ValueError("\nXGBoost Library (libxgboost.so) could not be loaded.\n\nError message(s): "
                "['libgomp.so.1: failed to map segment from shared object']\n"),
     "Error message(s): ['libgomp.so.1: failed to map segment from shared object']"),
])
def test_running_out_of_memory_or_threads_is_one_line(error, line, monkeypatch, capsys,
                                                      tmp_path):
    """Under `ulimit -v 200000` the tuning loop's thread did not start, or xgboost's library
    did not load: a traceback before."""
    def exhausted(*args, **kwargs):
        raise error
    monkeypatch.setattr(tessel, "tune", exhausted)
    argv = ["tune", "--op", "matmul", "--shape", "8,8,8", "--db", str(tmp_path / "r.db")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tessel tune: out of memory/threads: {line}"), err
    assert err.count("\n") == 1 and "ulimit -v" in err


def test_a_bug_still_shows_its_traceback(monkeypatch, tmp_path):
    def bug(*args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(tessel, "tune", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["tune", "--op", "matmul", "--shape", "8,8,8", "--db", str(tmp_path / "r.db")])


def test_ctrl_c_while_tessel_imports_is_one_line_and_status_130():
    """The `tessel` command's entry point (tessel_entry) catches an interrupt that arrives
    before tessel.cli.main runs: here a real SIGINT while the import of tessel begins."""
    script = textwrap.dedent("""
        import os, signal, sys
        class Interrupt:  # the first import of tessel: Ctrl-C
            def find_spec(self, name, path=None, target=None):
                if name == "tessel":
                    os.kill(os.getpid(), signal.SIGINT)
                return None
        sys.meta_path.insert(0, Interrupt())
        import tessel_entry
        sys.exit(tessel_entry.main())
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,  # SIGINT deliverable, however the suite ran
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "tessel: interrupted\n"


def test_the_console_script_is_the_entry_point_that_catches_ctrl_c():
    import tomllib
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tessel"] == "tessel_entry:main"


def test_a_worker_whose_scheduler_does_not_answer_stops_with_one_line(capsys):
    pytest.importorskip("distributed")
    argv = ["worker", "--scheduler", "tcp://127.0.0.1:9", "--device", "cpu", "--wait", "0.5"]
    assert cli.main(argv) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # distributed logs its own lines first
    assert last == "tessel worker: no Dask scheduler answered at tcp://127.0.0.1:9 within " \
                   "0.5 s; start one (`dask scheduler`) or check the address"
