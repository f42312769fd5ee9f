"""bench/split_reduce.py's smoke mode runs: it finds a kernel the default splits
and times it split and unsplit."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_smoke():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench/split_reduce.py"), "--smoke"],
                         capture_output=True, text=True, env=env, timeout=600,
                         check=True).stdout
    assert "LSTM dW T=128 B=32 I=H=32 (smoke): 1 kernel(s) split by default" in out, out
    row = next(line for line in out.splitlines() if line.strip().startswith("dW T=128"))
    assert "split" in row and "unsplit" in row and " ms" in row, out
    assert "lenet (small):" in out, out
    assert "lenet step split" in out and "lenet step unsplit" in out, out
