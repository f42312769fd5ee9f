"""bench/ops.py in its smoke mode (tiny sizes), so the script cannot rot:
a row per case, the convolution rows included, each with a ratio."""
from bench_scripts import load_bench_script


def test_ops_bench_smoke(capsys):
    rows = load_bench_script("ops").main(["--smoke"])
    names = [r[0] for r in rows]
    assert any(n.startswith("conv3d") for n in names)
    assert any(n.startswith("conv_transpose2d 4x4") for n in names)
    assert any(n.startswith("conv_transpose2d weight grad") for n in names)
    assert any(n.startswith("conv2d input grad 9x9/2") for n in names)
    assert any(n.startswith("max_pool2d 3x3/2 pad 1 input grad") for n in names)
    assert any(n.startswith("softmax") and n.endswith("with input grad") for n in names)
    assert all(float(r[4]) > 0 for r in rows)          # the ratio (tiny rates print as 0.0)
    assert "| op | NeoFlow | torch |" in capsys.readouterr().out
