"""bench/ops.py and bench/grad.py end to end at tiny settings (so the scripts
cannot rot): each side is timed in a process of its own (--side), and the
table pairs the two sides' figures."""
import pytest

from bench_scripts import load_bench_script


def test_ops_times_each_side_alone_and_pairs_them(capsys):
    [(name, ours, theirs, unit, ratio)] = load_bench_script("ops").main(
        ["--blocks", "1", "--only", "softmax"])
    assert name.startswith("softmax") and unit == "GB/s"
    assert float(ratio) == pytest.approx(float(ours) / float(theirs), rel=0.05)
    out = capsys.readouterr().out
    assert "each side alone in its own process" in out and f"| {name} |" in out


def test_grad_times_each_side_alone_and_checks_the_gradient(capsys):
    ours, theirs = load_bench_script("grad").main(["--blocks", "1", "--only", "softmax"])
    [(name, (ratio, ms, low, high, err))] = ours.items()
    assert ratio > 0 and low <= ms <= high and err < 1e-5   # softmax: 0.57 (its own rule)
    assert theirs[name][0] > 0
    assert "each side alone in its own process" in capsys.readouterr().out
