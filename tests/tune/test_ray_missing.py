"""Without Ray installed, nf.RayRunner says how to install it (the import
failure is simulated, so this runs whether Ray is installed or not)."""
import sys

import pytest

import neoflow as nf
from neoflow.tune.ray_runner import RayRunnerError


def test_rayrunner_without_ray_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)     # `import ray` raises ImportError
    with pytest.raises(nf.NeoFlowError, match=r"pip install 'neoflow\[ray\]'") as info:
        nf.RayRunner("local")
    assert isinstance(info.value, RayRunnerError)


def test_cli_tune_with_ray_but_no_ray_is_a_clean_error(monkeypatch, capsys):
    from neoflow.cli import main
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(SystemExit) as exit_info:
        main(["tune", "matmul:8,8,8", "--trials", "2", "--ray", "local"])
    assert exit_info.value.code == 2
    assert "pip install 'neoflow[ray]'" in capsys.readouterr().err


def test_a_runner_must_be_a_runner():
    A = nf.placeholder((4, 4), name="A")
    B = nf.compute((4, 4), lambda i, j: A[i, j] * 2.0, name="B")
    with pytest.raises(nf.NeoFlowError, match="runner must be None or a runner"):
        nf.tune(B, [A], trials=2, runner="ray://somewhere")
    with pytest.raises(nf.NeoFlowError, match="TuningOptions.runner"):
        nf.TuningOptions(runner=object()).check()
