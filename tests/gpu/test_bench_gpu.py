# bench/gpu.py's smoke mode runs every section (under the interpreter here)
# and writes the documented JSON lines.
import json
import sys
from pathlib import Path

from gpu_suite import require_triton

require_triton()

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import gpu as bench_gpu  # noqa: E402


def test_smoke_run_writes_every_section(tmp_path, capsys):
    out = tmp_path / "gpu.jsonl"
    bench_gpu.main(["--smoke", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    sections = {r["section"] for r in rows}
    assert sections == {"device", "check", "train", "gemm", "memory", "prune"}
    assert all(r["ok"] for r in rows if r["section"] == "check"), rows
    assert not [r for r in rows if "error" in r], [r for r in rows if "error" in r]
    for r in rows:
        if r["section"] == "gemm":
            assert r["neoflow_tflops"] > 0 and r["ratio"] > 0
        if r["section"] == "train":
            assert r["neoflow_s"] > 0 and r["eager_s"] > 0
    text = capsys.readouterr().out
    assert "### gemm" in text and "| name |" in text
