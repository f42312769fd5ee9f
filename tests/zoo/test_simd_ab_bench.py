"""bench/simd_ab.py in its smoke mode (tiny sizes), so the script cannot rot:
both settings build and agree, and every case gets a rate on each side."""

import pytest

from bench_scripts import load_bench_script as load


def test_simd_ab_bench_smoke(capsys):
    rows = load("simd_ab").main(["--smoke", "--only", "matmul", "conv_transpose2d",
                                 "--a", "NEOFLOW_VECTOR_BYTES=32", "--b",
                                 "NEOFLOW_VECTOR_BYTES=64"])
    assert [r[0] for r in rows][:2] == ["matmul 64", "conv_transpose2d 4x4/2 8->4ch 4->8, batch 2"]
    assert all(r[1] > 0 and r[3] > 0 for r in rows)
    assert "| op | A | B | unit | B / A |" in capsys.readouterr().out


def test_simd_ab_cpu_time_needs_one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with pytest.raises(SystemExit):
        load("simd_ab").main(["--smoke", "--cpu-time"])
