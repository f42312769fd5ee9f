"""bench/fp32_parity.py in its smoke mode (LeNet, small, 2 seeds): both
studies run, NeoFlow's float32 figures are float32 rounding's (LeNet's
training is not chaotic at these sizes) and the tables name every row."""
import math

import pytest

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def script():
    return load_bench_script("fp32_parity")


def test_fp32_parity_smoke(script, capsys):
    rows = script.main(["--smoke"])
    grads, seeds = rows["grads"], rows["seeds"]
    assert [r["parameter"] for r in grads][:2] == ["conv1.weight", "conv1.bias"]
    for r in grads:
        assert 0 < r["torch"] < 1e-5 and 0 <= r["neoflow"] < 1e-5, r
    assert [r["seed"] for r in seeds] == [0, 1]
    for r in seeds:
        assert 0 <= r["neoflow"] < 1e-5 and 0 <= r["torch"] < 1e-5, r
    out = capsys.readouterr().out
    assert "| lenet |  | fc3.bias |" in out and "of 2 seeds over 0.0001" in out


def test_relative_error_of_an_all_zero_answer_is_infinite(script):
    assert script.relative([1.0, 2.0], [1.0, 4.0]) == 0.5
    assert math.isinf(script.relative([1.0], [0.0]))
