"""bench/tune_ray.py --smoke runs end to end (its figures are not checked:
speed is measured on a quiet machine, never asserted in tests)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'neoflow[ray]')")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tune_ray.py"


@pytest.mark.slow
def test_tune_ray_bench_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--json", str(out)],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert set(figures["settings"]) == {"local workers", "Ray, 1 node", "Ray, 2 simulated nodes"}
    for row in figures["settings"].values():
        assert row["trials"] >= 1 and row["best_gflops"] > 0
    assert "ray_overhead_per_measurement_s" in figures
    assert "| Ray, 2 simulated nodes |" in done.stdout
