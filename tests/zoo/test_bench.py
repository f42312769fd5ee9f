"""bench/networks.py end to end at the small preset (no torch.compile, so it
takes seconds): the report's rows, geometric means and files."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "networks.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_networks", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_bench_writes_the_report(bench, tmp_path):
    report = bench.run_bench(["lltm", "lenet"], steps=2, out_dir=tmp_path, preset="small",
                             torch_compile=False, log=lambda *_: None)
    assert [r["network"] for r in report["rows"]] == ["lltm", "lenet"]
    assert all(r["parity"] for r in report["rows"])
    assert set(report["geomeans"]) == {"novel", "cnn", "all"}
    assert report["geomeans"]["novel"]["compile"] is None
    for path in report["files"].values():
        assert Path(path).stat().st_size > 0
    assert "| lltm | novel |" in (tmp_path / "networks.md").read_text()
