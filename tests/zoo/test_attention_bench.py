"""bench/attention.py and bench/delinearize_kernels.py in their smoke modes
(tiny sizes), so the scripts cannot rot: every side times both networks,
and the kernel A/B finds the delinearised d(qkv) blocks and times them."""

from bench_scripts import load_bench_script as load


def test_attention_bench_smoke(capsys):
    results = load("attention").main(["--smoke"])
    assert set(results) == {"neoflow", "neoflow-flat", "torch"}
    for side, rounds in results.items():
        assert set(rounds[0]) == {"custom", "mha"}
        assert all(fig["median_ms"] > 0 for fig in rounds[0].values())
    assert results["neoflow"][0]["custom"]["kernels"]          # the slowest kernels, listed
    assert "| custom |" in capsys.readouterr().out


def test_kernel_ab_smoke():
    rows = load("delinearize_kernels").main(["--smoke", "custom"])
    names = [r[1] for r in rows]
    assert any("ddense." in n for n in names) and any("ctx" in n.split() for n in names)
    assert all(r[2] > 0 and r[3] > 0 and r[4] > 0 for r in rows)
