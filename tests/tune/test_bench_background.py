"""bench/background.py --smoke runs end to end, with trials in the step
(its figures are not checked: speed is measured on a quiet machine, never
asserted in tests)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "background.py"


@pytest.mark.slow
def test_background_bench_smoke(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--json", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(out.read_text())["lltm"]
    [off], [background] = figures["runs"]["off"], figures["runs"]["background"]
    assert off["steps"] == background["steps"] == 200000
    assert off["wall_s"] > 0 and background["wall_s"] > 0
    assert "trials" not in off["tuner"]
    assert background["tuner"]["trials"] + background["tuner"]["screened"] >= 1
    assert len(figures["final_ms"]) == 2 and min(figures["final_ms"]) > 0
    assert "| lltm | 200000 |" in done.stdout
