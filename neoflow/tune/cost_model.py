"""tune/cost_model: a small learned model of schedule speed, trained online.

Gradient-boosted regression trees (numpy only): each round fits a shallow
tree to the residuals of the rounds before by exact greedy splits on the
feature values (variance reduction), shrunk by a learning rate. The target
is log(time), so the model ranks schedules by predicted speed; the search
refits it from all measurements after every batch. Deterministic: no
randomness in fitting.

`make_model()` is the model the search uses: these trees, or, when
NEOFLOW_COST_MODEL names one ("xgboost", "lightgbm") and it is installed
(the optional extras `neoflow[xgboost]`, `neoflow[lightgbm]`), that
library's regressor with the same budget (bench/tune.py --rank-check
compares their top-k recall on recorded trials: docs/tuning.md).

Hands on: predicted log-times for the search to rank candidates with.
"""
import os
import warnings

import numpy as np

MODEL_ENV = "NEOFLOW_COST_MODEL"


def make_model(name=None):
    """A fresh cost model: `name` (default $NEOFLOW_COST_MODEL, else
    "trees") -- "trees" (BoostedTrees, NumPy only), "xgboost" or
    "lightgbm" (a warning and the trees when the library is missing).

    >>> type(make_model("trees")).__name__
    'BoostedTrees'
    """
    name = name or os.environ.get(MODEL_ENV) or "trees"
    makers = {"trees": BoostedTrees, "xgboost": _xgboost, "lightgbm": _lightgbm}
    if name not in makers:
        raise ValueError(f"{MODEL_ENV}={name!r}: expected one of {sorted(makers)}")
    try:
        return makers[name]()
    except ImportError:
        warnings.warn(f"{MODEL_ENV}={name}: {name} is not installed (pip install "
                      f"'neoflow[{name}]'); using NeoFlow's own trees", RuntimeWarning,
                      stacklevel=2)
        return BoostedTrees()


class LibraryModel:
    """A gradient-boosting library's regressor behind BoostedTrees' fit/predict."""

    def __init__(self, model):
        self.model, self.fitted = model, False
        self.base = 0.0

    def fit(self, X, y):
        X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
        self.base, self.fitted = float(y.mean()) if len(y) else 0.0, len(y) >= 4
        if self.fitted:
            self.model.fit(X, y)
        return self

    def predict(self, X):
        X = np.asarray(X, np.float64)
        if not self.fitted:
            return np.full(len(X), self.base)
        return np.asarray(self.model.predict(X), np.float64)


def _xgboost():
    import xgboost
    return LibraryModel(xgboost.XGBRegressor(n_estimators=60, max_depth=3, learning_rate=0.25,
                                             n_jobs=1))


def _lightgbm():
    import lightgbm
    return LibraryModel(lightgbm.LGBMRegressor(n_estimators=60, num_leaves=8, learning_rate=0.25,
                                               min_child_samples=2, n_jobs=1, verbose=-1))


class BoostedTrees:
    """Gradient-boosted regression trees on a float matrix.

    >>> model = BoostedTrees(rounds=40).fit(X, np.log(times))
    >>> model.predict(X[:3]).shape
    (3,)
    """

    def __init__(self, rounds=60, depth=3, rate=0.25, min_leaf=2):
        self.rounds, self.depth, self.rate, self.min_leaf = rounds, depth, rate, min_leaf
        self.base, self.trees = 0.0, []

    def fit(self, X, y):
        """Fit to rows `X` and targets `y`; returns self."""
        X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
        self.base, self.trees = float(y.mean()) if len(y) else 0.0, []
        if len(y) < 2 * self.min_leaf:
            return self
        order = np.argsort(X, axis=0, kind="stable")
        pred = np.full(len(y), self.base)
        for _ in range(self.rounds):
            tree = self._tree(X, y - pred, order, np.ones(len(y), bool), self.depth)
            self.trees.append(tree)
            pred += self.rate * _apply(tree, X)
        return self

    def predict(self, X):
        """Predicted targets for rows `X`."""
        X = np.asarray(X, np.float64)
        out = np.full(len(X), self.base)
        for tree in self.trees:
            out += self.rate * _apply(tree, X)
        return out

    def _tree(self, X, r, order, mask, depth):
        """A node: ("leaf", value) or ("split", feature, threshold, left, right)."""
        value = float(r[mask].mean())
        if depth == 0 or mask.sum() < 2 * self.min_leaf:
            return ("leaf", value)
        best = None
        for f in range(X.shape[1]):
            idx = order[:, f][mask[order[:, f]]]
            xs, rs = X[idx, f], r[idx]
            n = len(rs)
            csum = np.cumsum(rs)
            left_n = np.arange(1, n)
            left_s = csum[:-1]
            right_s = csum[-1] - left_s
            gain = left_s ** 2 / left_n + right_s ** 2 / (n - left_n)
            ok = (xs[1:] > xs[:-1]) & (left_n >= self.min_leaf) & (n - left_n >= self.min_leaf)
            if not ok.any():
                continue
            gain = np.where(ok, gain, -np.inf)
            k = int(np.argmax(gain))
            if best is None or gain[k] > best[0]:
                best = (gain[k], f, 0.5 * (xs[k] + xs[k + 1]))
        if best is None or best[0] <= r[mask].sum() ** 2 / mask.sum() + 1e-12:
            return ("leaf", value)
        _, f, threshold = best
        go_left = X[:, f] <= threshold
        return ("split", f, threshold,
                self._tree(X, r, order, mask & go_left, depth - 1),
                self._tree(X, r, order, mask & ~go_left, depth - 1))


def _apply(tree, X):
    if tree[0] == "leaf":
        return np.full(len(X), tree[1])
    _, f, threshold, left, right = tree
    go_left = X[:, f] <= threshold
    out = np.empty(len(X))
    out[go_left] = _apply(left, X[go_left])
    out[~go_left] = _apply(right, X[~go_left])
    return out
