"""The tessel command."""
from tessel import cli, ops


def test_ops_lists_every_workload(capsys):
    assert cli.main(["ops"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ops.SUITE)


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
