"""The zoo benchmark (neoflow.zoo.benchmark, neoflow.zoo.report) end to end
at the small preset without torch.compile (seconds), through bench/networks.py
so the script cannot rot: the report's rows, geometric means and files; and
its checks of the networks asked for and of the optional packages."""
import sys
from pathlib import Path

import pytest

from neoflow.errors import InputError, MissingDependencyError
from neoflow.zoo import NETWORKS
from neoflow.zoo.benchmark import QUICK, network_names, run_bench

from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def script():
    return load_bench_script("networks")


def test_the_script_writes_the_report(script, tmp_path, capsys):
    report = script.main(["--networks", "lltm", "lenet", "--preset", "small", "--steps", "2",
                          "--no-compile", "--out", str(tmp_path)])
    assert [r["network"] for r in report["rows"]] == ["lltm", "lenet"]
    assert all(r["parity"] for r in report["rows"])
    assert set(report["geomeans"]) == {"novel", "cnn", "all"}
    assert report["geomeans"]["novel"]["compile"] is None
    for path in report["files"].values():
        assert Path(path).stat().st_size > 0
    table = (tmp_path / "networks.md").read_text()
    assert "| lltm | novel |" in table
    out = capsys.readouterr().out
    assert "[bench] lenet: NeoFlow" in out and table in out


def test_network_names_expand_quick_and_all_and_reject_unknown_names():
    assert network_names(["quick"]) == list(QUICK)
    assert network_names(["lltm", "all"]) == ["lltm"] + [n for n in NETWORKS if n != "lltm"]
    with pytest.raises(InputError, match="no network 'lstm'.*known: milstm"):
        network_names(["lstm"])


def test_a_missing_package_names_the_pip_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)     # makes its import fail
    with pytest.raises(MissingDependencyError, match=r"'matplotlib'.*pip install matplotlib"):
        run_bench(["lltm"], out_dir=tmp_path)
    assert not any(tmp_path.iterdir())
