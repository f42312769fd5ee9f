"""bench/ceiling.py: the FMA peak it measures is a real rate, the flop
counts of a network agree with PyTorch's and NeoFlow's own counters, the
ceiling is eager's time over the floor at the peak, and the smoke run
prints its table."""
import math

import pytest

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def script():
    return load_bench_script("ceiling")


def test_ceiling_smoke(script, capsys):
    means = script.main(["--smoke"])
    out = capsys.readouterr().out
    assert "| lltm |" in out and "FMA peak" in out and "ceiling" in out
    assert means["ceiling_eager"] > 0 and means["neoflow_eager"] > 0


def test_the_fma_peak_is_at_least_a_scalar_core(script):
    assert script.fma_peak(0.05, 1) > 1.0          # GFLOP/s: far below any vector core


def test_flop_counts_of_a_network(script):
    # lltm small: torch counts its matmuls (forward and backward); NeoFlow counts
    # every operation of its kernels, at least its contractions
    torch_count = script.contraction_flops("lltm", "small")
    own = script.neoflow_flops("lltm", "small")
    assert torch_count > 0 and own > 0.5 * torch_count


def test_the_ceiling_is_eager_over_the_floor_at_the_peak(script):
    times = {"a": {"neoflow": 1.0, "eager": 4.0, "compile": 2.0},
             "b": {"neoflow": 10.0, "eager": 20.0, "compile": 30.0}}
    flops = {"a": (2e9, 3e9), "b": (9e9, 8e9)}           # the smaller count makes the floor
    table, means = script.report(times, flops, peak=100.0, gemm={"torch": 80.0})
    # floors: 2e9 / 100 GFLOP/s = 20 ms, 8e9 -> 80 ms; ceilings 0.2 and 0.25 against eager
    assert means["ceiling_eager"] == pytest.approx(math.sqrt(0.2 * 0.25))
    assert means["ceiling_compile"] == pytest.approx(math.sqrt(0.1 * 0.375))
    assert means["neoflow_eager"] == pytest.approx(math.sqrt(4.0 * 2.0))
    assert "| a | 1.00 | 4.00 | 2.00 | 4.00x | 2.000; 3.000 | 20.00 | 0.20x | 0.10x |" in table
