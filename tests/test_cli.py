"""The `neoflow` command line."""
import subprocess
import sys


def _neoflow(*args):
    return subprocess.run([sys.executable, "-m", "neoflow.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_help_lists_the_commands():
    out = _neoflow("--help")
    assert out.returncode == 0
    assert "demo" in out.stdout


def test_demo_quick_runs_and_agrees_with_the_references():
    out = _neoflow("demo", "--quick")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    assert len(rows) == 3
    for row in rows:
        err = float(next(tok for tok in row if "e-" in tok or "e+" in tok))
        assert err < 1e-4, row
