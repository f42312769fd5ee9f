"""bench/torch_backend.py's smoke mode: each framework in its own process,
the interleaved figure and the op-overhead figures come back, and the JSON
report is written."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "torch_backend.py"


@pytest.mark.slow
def test_smoke_mode(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--networks", "lltm",
                           "--frameworks", "eager", "neoflow", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "| lltm |" in done.stdout and "nf.torch.op (grad)" in done.stdout
    report = json.loads((tmp_path / "torch_backend.json").read_text())
    lltm = report["networks"]["lltm"]
    for f in ("eager", "neoflow"):
        assert lltm["alone"][f]["ms_step"] > 0, lltm["alone"][f]
        assert lltm["interleaved"][f]["ms_step"] > 0
    assert lltm["alone"]["neoflow"]["native_share"] == 1.0
    assert lltm["alone"]["neoflow"]["compile_s"] > 0
    assert lltm["alone"]["neoflow"]["kernels"] > 0
    assert report["op_overhead_us"]["autograd.Function (grad)"] > 0


@pytest.mark.slow
def test_breakdown_smoke():
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--breakdown", "lltm"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    lltm = json.loads(done.stdout.strip().splitlines()[-1])["lltm"]
    ms, counts = lltm["ms_step"], lltm["counts"]
    assert 0 < ms["native"] <= ms["runner"] <= ms["step"]
    assert ms["forward"] + ms["backward"] + ms["optimizer"] <= ms["step"] * 1.05
    assert ms["trainer step"] > 0 and ms["eager step"] > 0
    assert ms["trainer kernels (profiled once, wall)"] > 0
    assert counts["dynamo graphs"] == 1 and counts["native calls"] == 2    # one per graph
    assert counts["fallback ops"] == 0 and counts["saved for backward"] > 0
    assert counts["kernels"] > 0 and counts["trainer kernels"] > 0


@pytest.mark.slow
def test_smoke_mode_with_phases(tmp_path):
    """DCGAN: a step is a round of both phases, for the twin through the
    backend (one compiled module) and for nf.Trainer (one per phase)."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--networks", "dcgan",
                           "--frameworks", "eager", "neoflow", "trainer", "--no-interleaved",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    dcgan = json.loads((tmp_path / "torch_backend.json").read_text())["networks"]["dcgan"]
    for f in ("eager", "neoflow", "trainer"):
        assert dcgan["alone"][f]["ms_step"] > 0, dcgan["alone"][f]
    assert dcgan["alone"]["neoflow"]["native_share"] > 0.95
    assert dcgan["alone"]["trainer"]["kernels"] > 0 and dcgan["alone"]["neoflow"]["kernels"] > 0
