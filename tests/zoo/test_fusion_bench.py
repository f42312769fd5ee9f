"""bench/fusion.py end to end (so the script cannot rot): its main function on
the small preset, one network, one timed step, without torch.compile
(seconds); and torch.compile's kernel counts on their own (slow: inductor
compiles for ~20 s on this machine)."""
import json

import numpy as np
import pytest
import torch

from neoflow import zoo

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("fusion")


def test_main_writes_the_table_and_json(bench, tmp_path, capsys):
    report = bench.main(["--networks", "lltm", "--preset", "small", "--steps", "1",
                         "--out", str(tmp_path), "--no-compile"])
    (row,) = report["rows"]
    assert row["network"] == "lltm"
    assert 0 < row["kernels_fused"] <= row["kernels_unfused"]
    assert 0 < row["bytes_fused"] <= row["bytes_unfused"]
    assert row["aten_ops"] > row["kernels_unfused"]
    assert all(row[k] > 0 for k in ("fused_ms", "unfused_ms", "eager_ms"))
    table = (tmp_path / "fusion.md").read_text()
    assert table.startswith("| network |") and "| lltm |" in table and "| n/a |" in table
    assert table in capsys.readouterr().out
    assert json.loads((tmp_path / "fusion.json").read_text())["rows"][0]["network"] == "lltm"


def lltm_twin():
    """The small LLTM's twin (random parameters) and a batch for it."""
    model = zoo.get("lltm").build("small")
    rng = np.random.default_rng(0)
    batch = {k: torch.from_numpy(v) for k, v in model.make_batch(rng).items()}
    values = {k: rng.standard_normal(t.shape).astype(np.float32) for k, t in model.params.items()}
    return model.torch_model(values), batch


@pytest.mark.slow
def test_compile_kernel_counts(bench):
    counts = bench.compile_kernels(*lltm_twin())
    assert counts["compile_fwd_bwd"] > 0 and counts["compile_opt"] > 0


def test_compile_failure_is_reported_not_raised(bench, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no compiler\nmore text")
    monkeypatch.setattr(torch, "compile", broken)
    counts = bench.compile_kernels(*lltm_twin())
    assert counts == {"compile_error": "RuntimeError: no compiler"}
    assert bench._compile_cell(counts) == "failed (RuntimeError: no compiler)"
