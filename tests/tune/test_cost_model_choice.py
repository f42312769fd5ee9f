"""The cost model the search uses: NeoFlow's own trees by default (NumPy
only), xgboost or lightgbm when NEOFLOW_COST_MODEL names one that is
installed; each ranks a clear trend right."""
import numpy as np
import pytest

from neoflow.tune.cost_model import BoostedTrees, make_model


def _trend(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0, 10, (60, 5))
    y = 0.8 * X[:, 0] - 0.5 * X[:, 2] + 0.05 * rng.standard_normal(60)
    return X, y


def test_the_default_is_the_numpy_trees(monkeypatch):
    monkeypatch.delenv("NEOFLOW_COST_MODEL", raising=False)
    assert isinstance(make_model(), BoostedTrees)


def test_an_unknown_model_is_refused():
    with pytest.raises(ValueError, match="NEOFLOW_COST_MODEL"):
        make_model("forest")


@pytest.mark.parametrize("name", ["trees", "xgboost", "lightgbm"])
def test_each_model_ranks_a_trend(name, monkeypatch):
    if name != "trees":
        pytest.importorskip(name, reason=f"{name} is not installed (pip install 'neoflow[{name}]')")
    monkeypatch.setenv("NEOFLOW_COST_MODEL", name)
    X, y = _trend()
    model = make_model().fit(X[:40], y[:40])
    pred = model.predict(X[40:])
    assert pred.shape == (20,)
    assert np.corrcoef(pred, y[40:])[0, 1] > 0.8
    assert make_model().fit(X[:2], y[:2]).predict(X[:3]).shape == (3,)   # too few rows to fit


def test_a_missing_library_warns_and_falls_back(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_xgboost(name, *args, **kwargs):
        if name == "xgboost":
            raise ImportError("no xgboost here")
        return real(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_xgboost)
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert isinstance(make_model("xgboost"), BoostedTrees)
