"""The `neoflow` command line."""
import json
import os
import subprocess
import sys

import pytest


def _neoflow(*args, env=None):
    return subprocess.run([sys.executable, "-m", "neoflow.cli", *args], capture_output=True,
                          text=True, timeout=300, env=env)


def test_help_lists_the_commands():
    out = _neoflow("--help")
    assert out.returncode == 0
    assert "demo" in out.stdout


def test_demo_trains_under_each_tuning_mode_and_draws_the_plot(tmp_path):
    out = _neoflow("demo", "--quick", "--seconds", "3", "--out", str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for mode in ("background", "ahead", "off"):
        run = next(line for line in lines if line.strip().startswith(f"{mode}:"))
        first, last = (float(v) for v in run.split("loss ")[1].split(",")[0].split(" -> "))
        assert last < first, run                    # it trains
        assert f"NeoFlow {mode:>10}:" in out.stdout
    assert "PyTorch eager:" in out.stdout
    assert (tmp_path / "demo.png").stat().st_size > 1000


def test_bench_times_each_framework_alone_with_default_threading(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    out = _neoflow("bench", "--networks", "lltm", "--preset", "small", "--steps", "2",
                   "--blocks", "3", "--no-compile", "--out", str(tmp_path), env=env)
    assert out.returncode == 0, out.stderr
    assert "[bench] lltm ..." in out.stdout
    table = (tmp_path / "networks.md").read_text()
    assert table.startswith("| network | kind |") and "| lltm | novel |" in table
    assert "| n/a |" in table and "geometric mean, novel (1 networks)" in table
    assert "each framework timed alone in its own process" in table
    assert "OMP_WAIT_POLICY=None" in table and "interleaved PASSIVE" not in table
    assert table in out.stdout
    assert (tmp_path / "networks.png").read_bytes().startswith(b"\x89PNG")
    report = json.loads((tmp_path / "networks.json").read_text())
    row = report["rows"][0]
    assert row["parity"] is True
    low, high = row["nf_spread_ms"]
    assert low <= row["nf_ms"] <= high and "eager_spread_ms" in row
    assert (report["environment"]["omp_num_threads"],
            report["environment"]["omp_wait_policy"]) == (None, None)
    assert f"written: {tmp_path / 'networks.md'}" in out.stdout


def test_bench_reports_a_user_error_without_a_traceback(tmp_path):
    out = _neoflow("bench", "--networks", "lstm", "--out", str(tmp_path))
    assert out.returncode == 2
    assert "neoflow bench: error: no network 'lstm' in the zoo" in out.stderr
    assert "Traceback" not in out.stderr


def test_bench_reports_a_trainer_error_cleanly(monkeypatch, tmp_path, capsys):
    from neoflow import cli
    from neoflow.errors import NeoFlowError
    from neoflow.zoo import benchmark

    def failing_trainer(*args, tuning, **kwargs):
        raise NeoFlowError(f"Trainer: tuning={tuning!r} is not available here")
    monkeypatch.setattr(benchmark, "Trainer", failing_trainer)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench", "--networks", "lltm", "--preset", "small", "--no-compile",
                  "--tuning", "ahead", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert ("neoflow bench: error: Trainer: tuning='ahead' is not available here"
            in capsys.readouterr().err)


def test_importing_the_cli_leaves_openmp_unstarted():
    # a subcommand (or a benchmark's child process) controls OpenMP before it starts
    code = "import sys, neoflow.cli; print(sorted({'torch', 'matplotlib'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
