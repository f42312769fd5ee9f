"""nf.grad at the edges: what it refuses (by message) and the zero gradients."""
import numpy as np
import pytest

import neoflow as nf
from neoflow.errors import GradError


def _square_sum(x):
    k = nf.reduce_axis(x.shape[0], name="k")
    return nf.compute((), lambda: nf.sum(x[k] * x[k], axis=k), name="loss")


def test_non_scalar_output_needs_head():
    x = nf.placeholder((3,), name="x")
    y = nf.compute((3,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(GradError, match=r"'y' has shape \(3,\), not a scalar; pass head="):
        nf.grad(y, [x])


def test_head_must_fit_the_output():
    x = nf.placeholder((3,), name="x")
    y = nf.compute((3,), lambda i: x[i] * 2.0, name="y")
    with pytest.raises(GradError, match=r"head 'h' has shape \(4,\).*expected those of output"):
        nf.grad(y, [x], head=nf.placeholder((4,), name="h"))
    with pytest.raises(GradError, match="head 'h' has shape .* dtype float64"):
        nf.grad(y, [x], head=nf.placeholder((3,), "float64", name="h"))
    with pytest.raises(GradError, match="head must be a Tensor"):
        nf.grad(y, [x], head=np.ones(3, np.float32))


def test_integer_output_and_bad_wrt_are_refused():
    i32 = nf.placeholder((3,), "int32", name="n")
    total = nf.compute((), lambda: i32[0] * 2, name="total")
    with pytest.raises(GradError, match="output 'total' is int32; only float outputs"):
        nf.grad(total, [i32])
    with pytest.raises(GradError, match="wrt must be Tensors"):
        nf.grad(_square_sum(nf.placeholder((2,), name="x")), ["x"])
    with pytest.raises(GradError, match="output must be a Tensor"):
        nf.grad("loss", [])


def test_scalar_output_without_head_and_wrt_as_one_tensor():
    x = nf.placeholder((3,), "float64", name="x")
    (dx,) = nf.grad(_square_sum(x), x)
    v = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(nf.evaluate(dx, {x: v}), 2 * v)


def test_unreached_and_integer_wrt_get_zero_gradients():
    x = nf.placeholder((3,), "float64", name="x")
    other = nf.placeholder((2, 2), "float64", name="other")
    ids = nf.placeholder((3,), "int64", name="ids")
    w = nf.placeholder((5,), "float64", name="w")
    y = nf.compute((), lambda: x[0] * w[ids[1]], name="y")
    dx, dother, dids, dw = nf.grad(y, [x, other, ids, w])
    feed = {x: np.ones(3), other: np.ones((2, 2)), ids: np.array([0, 3, 1]),
            w: np.arange(5.0)}
    gx, go, gi, gw = nf.evaluate([dx, dother, dids, dw], feed)
    np.testing.assert_array_equal(go, np.zeros((2, 2)))
    assert gi.dtype == np.int64 and not gi.any()
    np.testing.assert_array_equal(gx, [3.0, 0.0, 0.0])
    np.testing.assert_array_equal(gw, [0, 0, 0, 1.0, 0])


def test_conditions_and_integer_tensors_are_not_differentiated():
    x = nf.placeholder((4,), "float64", name="x")
    n = nf.placeholder((4,), "int32", name="n")
    y = nf.compute((4,), lambda i: nf.where(x[i] > nf.cast(n[i], "float64"),
                                            x[i] * nf.cast(n[i], "float64"), -x[i]))
    h = nf.placeholder((4,), "float64", name="h")
    dx, dn = nf.grad(y, [x, n], head=h)
    xv, nv = np.array([0.5, 3.0, -1.0, 2.0]), np.array([1, 2, 0, 2], np.int32)
    gx, gn = nf.evaluate([dx, dn], {x: xv, n: nv, h: np.ones(4)})
    np.testing.assert_array_equal(gx, np.where(xv > nv, nv, -1.0))
    assert not gn.any()


def test_gradient_of_the_output_itself_is_the_head():
    x = nf.placeholder((3,), name="x")
    y = nf.compute((3,), lambda i: x[i] * 2.0, name="y")
    h = nf.placeholder((3,), name="h")
    dy, dx = nf.grad(y, [y, x], head=h)
    assert dy is h
    loss = _square_sum(x)
    (dloss,) = nf.grad(loss, [loss])
    assert nf.evaluate(dloss, {}) == 1.0


def test_gradients_are_ordinary_tensors():
    x = nf.placeholder((3,), "float64", name="x")
    (dx,) = nf.grad(_square_sum(x), [x])
    assert isinstance(dx, nf.Tensor) and dx.shape == (3,) and dx.dtype == "float64"
    assert dx.is_compute
