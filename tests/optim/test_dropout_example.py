"""examples/dropout_onecycle.py runs (dropout, AdamW, OneCycleLR, clipping
together) and learns: a short run already beats chance by far."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_dropout_onecycle_example_trains():
    pytest.importorskip("sklearn", reason="the example's digits come from scikit-learn")
    pytest.importorskip("tqdm", reason="the examples' progress bar needs tqdm")
    env = dict(os.environ, PYTHONPATH=str(EXAMPLES.parent))
    out = subprocess.run([sys.executable, "dropout_onecycle.py", "--steps", "60"], cwd=EXAMPLES,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", out.stdout).group(1))
    assert accuracy > 0.7
