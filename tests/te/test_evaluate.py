"""The reference interpreter against NumPy on random inputs."""
import importlib
import time

import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import InputError, OutOfBoundsError

rng = np.random.default_rng(0)


def test_matmul_64_is_fast_and_exact():
    A = nf.placeholder((64, 64), dtype="float64", name="A")
    B = nf.placeholder((64, 64), dtype="float64", name="B")
    k = nf.reduce_axis(64, name="k")
    C = nf.compute((64, 64), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k))
    a, b = rng.standard_normal((64, 64)), rng.standard_normal((64, 64))
    start = time.perf_counter()
    c = nf.evaluate(C, {A: a, B: b})
    assert time.perf_counter() - start < 1.0
    np.testing.assert_allclose(c, a @ b, rtol=1e-12, atol=1e-12)


def test_padding_via_where_is_guarded():
    x = nf.placeholder((5,), name="x")
    p = nf.compute((7,), lambda i: nf.where((i >= 1) & (i < 6), x[i - 1], -1.0))
    xv = rng.standard_normal(5).astype(np.float32)
    np.testing.assert_array_equal(nf.evaluate(p, {x: xv}), np.pad(xv, 1, constant_values=-1))


def test_guarded_read_out_of_range_raises():
    # an unguarded x[i] over i < 6 is refused when built (tests/te/test_read_ranges.py);
    # a guard that does not exclude the point outside is caught where it runs
    x = nf.placeholder((5,), name="x")
    q = nf.compute((6,), lambda i: nf.where(i >= 1, x[i], 0.0), name="q")
    with pytest.raises(OutOfBoundsError, match=r"'q' reads tensor 'x' at index 5 in dimension 0, outside its size 5"):
        nf.evaluate(q, {x: np.ones(5, np.float32)})


def test_gather_index_out_of_range_raises():
    idx = nf.placeholder((3,), dtype="int64", name="idx")
    W = nf.placeholder((4, 2), name="W")
    g = nf.compute((3, 2), lambda i, j: W[idx[i], j], name="g")
    w = rng.standard_normal((4, 2)).astype(np.float32)
    np.testing.assert_array_equal(nf.evaluate(g, {idx: np.array([3, 0, 1]), W: w}), w[[3, 0, 1]])
    with pytest.raises(OutOfBoundsError, match=r"tensor 'W' at index 4 in dimension 0"):
        nf.evaluate(g, {idx: np.array([4, 0, 1]), W: w})


def test_masked_reductions_and_identities():
    x = nf.placeholder((3, 6), name="x")
    k = nf.reduce_axis(6, name="k")
    even_max = nf.compute((3,), lambda i: nf.max(x[i, k], axis=k, where=k % 2 == 0))
    none_sum = nf.compute((3,), lambda i: nf.sum(x[i, k], axis=k, where=k > 10))
    none_min = nf.compute((3,), lambda i: nf.min(x[i, k], axis=k, where=k > 10))
    xv = rng.standard_normal((3, 6)).astype(np.float32)
    a, b, c = nf.evaluate([even_max, none_sum, none_min], {x: xv})
    np.testing.assert_array_equal(a, xv[:, ::2].max(1))
    np.testing.assert_array_equal(b, np.zeros(3))
    assert np.all(np.isposinf(c))


def test_nested_reduction_in_body():
    x = nf.placeholder((4, 5), dtype="float64", name="x")
    r, s = nf.reduce_axis(5, name="r"), nf.reduce_axis(5, name="s")
    # sum over r of (x[i, r] - mean_s x[i, s])^2  (variance * 5)
    v = nf.compute((4,), lambda i: nf.sum((x[i, r] - nf.sum(x[i, s], axis=s) / 5.0) ** 2.0, axis=r))
    xv = rng.standard_normal((4, 5))
    np.testing.assert_allclose(nf.evaluate(v, {x: xv}), xv.var(1) * 5, rtol=1e-12)


def test_floor_division_and_modulo_follow_python():
    vals = np.arange(-7, 8)
    x = nf.placeholder((15,), dtype="int64", name="x")
    q = nf.compute((15,), lambda i: x[i] // 3)
    m = nf.compute((15,), lambda i: x[i] % 3)
    qf = nf.compute((15,), lambda i: nf.cast(x[i], "float64") // 2.5)
    a, b, c = nf.evaluate([q, m, qf], {x: vals})
    np.testing.assert_array_equal(a, vals // 3)
    np.testing.assert_array_equal(b, vals % 3)
    np.testing.assert_array_equal(c, np.floor(vals / 2.5))


def test_large_grids_are_sliced(monkeypatch):
    ev = importlib.import_module("neoflow.te.evaluate")
    monkeypatch.setattr(ev, "GRID_LIMIT", 100)
    A = nf.placeholder((33, 7), dtype="float64", name="A")
    k = nf.reduce_axis(7, name="k")
    s = nf.compute((33, 2), lambda i, j: nf.sum(A[i, k], axis=k) * nf.cast(j + 1, "float64"))
    a = rng.standard_normal((33, 7))
    np.testing.assert_allclose(nf.evaluate(s, {A: a}), a.sum(1)[:, None] * [1, 2])


def test_feed_checks_name_the_input():
    x = nf.placeholder((2, 3), name="x")
    y = nf.compute((2, 3), lambda i, j: x[i, j] * 2)
    with pytest.raises(InputError, match=r"no value fed for 'x'"):
        nf.evaluate(y, {})
    with pytest.raises(InputError, match=r"input 'x': expected shape \(2, 3\), got \(3, 2\)"):
        nf.evaluate(y, {x: np.zeros((3, 2), np.float32)})
    with pytest.raises(InputError, match=r"input 'x': expected dtype float32, got float64"):
        nf.evaluate(y, {"x": np.zeros((2, 3))})


def test_torch_tensors_and_names_are_accepted_as_feed():
    torch = pytest.importorskip("torch")
    x = nf.placeholder((2, 3), name="x")
    y = nf.compute((2, 3), lambda i, j: x[i, j] * 2)
    t = torch.randn(2, 3)
    np.testing.assert_allclose(nf.evaluate(y, {"x": t}), t.numpy() * 2)


def test_zero_dim_output():
    x = nf.placeholder((4,), dtype="float64", name="x")
    k = nf.reduce_axis(4, name="k")
    loss = nf.compute((), lambda: nf.sum(x[k] * x[k], axis=k))
    xv = rng.standard_normal(4)
    out = nf.evaluate(loss, {x: xv})
    assert out.shape == () and np.isclose(out, (xv ** 2).sum())


def test_reduce_condition_over_axes_the_body_does_not_use():
    x = nf.placeholder((4,), "float64", name="x")
    k = nf.reduce_axis(3, name="k")
    y = nf.compute((3, 4), lambda i, j: nf.where(
        j >= 1, nf.sum(x[j - 1] * 1.0, axis=k, where=k <= i), 0.0))
    xv = np.arange(4.0)
    want = np.array([[0.0] + [(i + 1) * xv[j - 1] for j in range(1, 4)] for i in range(3)])
    np.testing.assert_array_equal(nf.evaluate(y, {x: xv}), want)


def test_intrinsics_of_constants():
    y = nf.compute((2,), lambda i: nf.erf(nf.const(0.7, "float64")) + nf.exp(nf.const(0.0, "float64")))
    np.testing.assert_allclose(nf.evaluate(y, {}), [1.6778011938374185] * 2, rtol=1e-15)
