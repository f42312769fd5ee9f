"""bench/scan.py's smoke mode runs and reports every variant asked for."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ("nf-scan", "nf-scan-natural", "torch-lstm", "torch-loop")


@pytest.mark.slow
def test_bench_smoke():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench/scan.py"), "--smoke", "--variants",
                          ",".join(VARIANTS)], capture_output=True, text=True,
                         env=env, timeout=900, check=True).stdout
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [(v, t) for v in VARIANTS for t in ("3", "5")], out
    assert not any("failed" in r for r in rows), out


def test_bench_profile_smoke():
    """--profile: the plan's phases, every step kernel, and a replayed step of one native call."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench/scan.py"), "--smoke", "--profile",
                          "3"], capture_output=True, text=True, env=env, timeout=900,
                         check=True).stdout
    assert "native calls recorded, replayed as one per step" in out, out
    assert "scan 'lstm' (3 steps)" in out and "scan 'dlstm' (3 steps, reversed)" in out, out
    assert out.count("step kernel of") >= 2 and "replayed step" in out, out
