"""bench/coldstart.py at the small preset (its smoke mode): one network in
this process and one in a child process; every phase is timed, a warm start
compiles nothing, and the files are written."""
from pathlib import Path

import pytest

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def script():
    return load_bench_script("coldstart")


def test_coldstart_smoke(script, tmp_path, capsys):
    report = script.main(["--networks", "lltm", "--preset", "small", "--in-process",
                          "--horizon", "0.5", "--out", str(tmp_path)])
    (row,) = report["rows"]
    assert row["network"] == "lltm" and row["kernels"] > 0
    assert set(row["cold"]) == set(script.PHASES) == set(row["warm"])
    for phase in ("autodiff", "fusion", "lowering", "codegen", "compile", "first_step"):
        assert row["cold"][phase] > 0, phase
    assert row["warm"]["compile"] < row["cold"]["compile"]    # cache hits only
    assert abs(sum(row["cold"].values()) - row["cold_s"]) < 1e-6 + 0.05 * row["cold_s"]
    assert row["cc_cpu_s"] > 0                                 # the compilers' CPU time
    assert 0 < report["compiler"]["empty"] and 0 < report["compiler"]["prelude"]
    for path in report["files"].values():
        assert Path(path).stat().st_size > 0
    assert row["optimised_s"] == row["cold_s"] and row["steps_to_optimised"] == 1
    assert row["steps_in_horizon"] >= 1
    assert "| lltm |" in capsys.readouterr().out


def test_coldstart_quick_start(script, tmp_path):
    report = script.run_bench(["lltm"], "small", tmp_path, in_process=True, quick=True,
                              horizon=0.5, log=lambda *_: None)
    (row,) = report["rows"]
    assert row["quick_start"] and row["optimised_s"] > row["cold_s"]
    assert row["steps_to_optimised"] > 1 and row["steps_in_horizon"] >= 1
    # (the count stops at the horizon, though the trainer steps on until optimised)
    assert row["optimised_s"] <= 0.5 or row["steps_in_horizon"] <= row["steps_to_optimised"]
    assert "quick_start=True" in report["markdown"]


def test_coldstart_child_process(script, tmp_path):
    report = script.run_bench(["lenet"], "small", tmp_path, log=lambda *_: None, horizon=0.2)
    assert report["rows"][0]["network"] == "lenet" and report["rows"][0]["cold_s"] > 0
