"""bench/step_overhead.py in its smoke mode (lltm, small sizes, a child
process with the region-counting shim preloaded): the counts it prints are
the step's -- one native call, and no fork at all where no kernel has a
parallel loop -- and the table names every column."""
import pytest

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def script():
    return load_bench_script("step_overhead")


def test_step_overhead_smoke(script, capsys):
    (row,) = script.main(["--smoke"])
    assert row["network"] == "lltm" and row["kernels"] > 0
    assert row["native_calls"] == 1 and 0 < row["python_calls"] < 200
    assert row["worksharing_loops"] == 0 and row["parallel_regions"] == 0   # small: all serial
    assert row["step_ms"] > 0 and row["native_ms"] > 0
    assert row["flops"] > 0 and row["bytes"] > 0
    assert row["roofline_ms"] == pytest.approx(1e3 * (row["flops"] / 150e9 + row["bytes"] / 35e9))
    out = capsys.readouterr().out
    assert "| lltm |" in out and "parallel regions" in out and "roofline" in out


def test_the_table_gives_medians_per_tree(script):
    rows = [{"network": "lltm", "tree": t, "step_ms": s, "native_ms": s / 2, "python_ms": s / 2,
             "roofline_ms": 0.1, "python_calls": 40, "kernels": 3, "native_calls": 1, "parallel_regions": r,
             "worksharing_loops": 4} for t, s, r in (("new", 1.0, 1), ("new", 3.0, 1),
                                                      ("new", 2.0, 1), ("old", 5.0, 4))]
    lines = script.table(rows, ["new", "old"]).splitlines()
    assert lines[2].startswith("| lltm | new | 2.000 | 1.000 | 1.000 | 40 | 3 | 1 | 1 | 4 | 0.100 | 5% |")
    assert lines[3].startswith("| lltm | old | 5.000 |")
