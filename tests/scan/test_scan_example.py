"""examples/scan_linear_attention_ssm.py runs (a few SGD steps) and its loss falls."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_example_trains():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "examples/scan_linear_attention_ssm.py"),
                          "--steps", "30"], capture_output=True, text=True, env=env,
                         timeout=600, check=True).stdout
    losses = [float(v) for v in re.findall(r"loss ([0-9.e+-]+)", out)]
    assert len(losses) >= 3 and all(v == v for v in losses)
    assert min(losses[-3:]) < losses[0]
