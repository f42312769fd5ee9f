"""`neoflow tune` and `neoflow db` on the command line."""
import json
import subprocess
import sys


def neoflow(*args, env=None):
    return subprocess.run([sys.executable, "-m", "neoflow.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_tune_then_list_and_export(tmp_path):
    db = str(tmp_path / "t.sqlite")
    out = neoflow("tune", "matmul:48,40,32", "--trials", "5", "--database", db)
    assert out.returncode == 0, out.stderr
    assert "matmul 48x40x32: 1 kernel(s)" in out.stdout
    listed = neoflow("db", "--database", db)
    assert listed.returncode == 0 and "1 record(s)" in listed.stdout
    exported = neoflow("db", "export", "--trials", "--database", db)
    assert exported.returncode == 0, exported.stderr
    [record] = json.loads(exported.stdout)
    assert record["trials"] == 5 and len(record["trials_run"]) == 5
    assert record["config"]["stages"] and record["median_s"] > 0


def test_unknown_workload_is_a_clear_error():
    out = neoflow("tune", "nonsense")
    assert out.returncode != 0 and "unknown workload 'nonsense'" in out.stderr
