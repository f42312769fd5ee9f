"""Max pooling's input gradient (nn/pool_grad.py: first-maximum positions and
a gather over the candidate windows) against torch in float64, compiled and
through the interpreter, with ties (the first maximum of a window takes the
whole gradient), every window option, and the cases that keep the solver's
gradient."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow.errors import NeoFlowError

POOL2D = [
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=3, stride=1),
    dict(kernel_size=2),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
    dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True),
    dict(kernel_size=3, stride=3, padding=1, ceil_mode=True),
    dict(kernel_size=4, stride=3, padding=2, dilation=(1, 2)),
    dict(kernel_size=2, stride=3, padding=1),      # windows that skip inputs
    dict(kernel_size=5, stride=2, padding=2, ceil_mode=True),
]


def _inputs(shape, ties, seed):
    rng = np.random.default_rng(seed)
    if ties:    # few distinct values: many windows hold their maximum twice
        return rng.integers(-2, 2, size=shape).astype(np.float64)
    return rng.standard_normal(shape)


def _check(nf_pool, torch_pool, shape, ties, seed=0):
    xv = _inputs(shape, ties, seed)
    x = nf.placeholder(shape, "float64", name="x")
    y = nf_pool(x)
    g = nf.placeholder(y.shape, "float64", name="g")
    (dx,) = nf.grad(y, [x], head=g)
    gv = np.random.default_rng(seed + 1).standard_normal(y.shape)
    xt = torch.tensor(xv, requires_grad=True)
    yt = torch_pool(xt)
    yt.backward(torch.tensor(gv))
    assert y.shape == tuple(yt.shape)
    want_y, want_dx = yt.detach().numpy(), xt.grad.numpy()
    y_got, dx_got = nf.build([y, dx], [x, g])(xv, gv)
    np.testing.assert_allclose(y_got, want_y, rtol=0, atol=0)
    np.testing.assert_allclose(dx_got, want_dx, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(nf.evaluate(dx, {x: xv, g: gv}), want_dx, rtol=1e-12,
                               atol=1e-12)
    return dx


def _uses_rule(dx):
    """Whether dx is the gather of nn/pool_grad.py (it reads int32 positions)."""
    from neoflow.te.visit import reads
    return any(r.tensor.dtype == "int32" for r in reads(dx.op.body))


@pytest.mark.parametrize("kw", POOL2D)
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool2d_gradient(kw, ties):
    dx = _check(lambda x: nf.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw),
                (2, 3, 11, 9), ties)
    assert _uses_rule(dx)


def test_max_pool2d_unbatched_and_all_equal():
    kw = dict(kernel_size=3, stride=2, padding=1)
    _check(lambda x: nf.nn.max_pool2d(x, **kw), lambda x: F.max_pool2d(x, **kw),
           (3, 7, 10), ties=False)
    x = nf.placeholder((1, 1, 5, 5), "float64", name="x")
    (dx,) = nf.grad(nf.nn.sum(nf.nn.max_pool2d(x, 3, stride=1, padding=1)), [x])
    xt = torch.zeros((1, 1, 5, 5), dtype=torch.float64, requires_grad=True)
    F.max_pool2d(xt, 3, stride=1, padding=1).sum().backward()
    got = nf.build(dx, [x])(np.zeros((1, 1, 5, 5)))
    assert (got == xt.grad.numpy()).all() and got.sum() == 25


@pytest.mark.parametrize("kw", [dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=(2, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)),
                                dict(kernel_size=2, stride=2, ceil_mode=True),
                                dict(kernel_size=3, stride=2, dilation=(2, 1, 1))])
@pytest.mark.parametrize("ties", [False, True])
def test_max_pool3d_gradient(kw, ties):
    dx = _check(lambda x: nf.nn.max_pool3d(x, **kw), lambda x: F.max_pool3d(x, **kw),
                (2, 2, 5, 7, 9), ties)
    assert _uses_rule(dx)


@pytest.mark.parametrize("size,out,rule", [((12, 9), (4, 3), True), ((7, 9), (4, 4), False),
                                           ((10, 7), (5, None), True)])
@pytest.mark.parametrize("ties", [False, True])
def test_adaptive_max_pool2d_gradient(size, out, rule, ties):
    dx = _check(lambda x: nf.nn.adaptive_max_pool2d(x, out),
                lambda x: F.adaptive_max_pool2d(x, out), (2, 3) + size, ties)
    assert _uses_rule(dx) == rule    # uneven windows keep the solver's gradient


def test_max_pool_float32_compiled():
    xv = np.random.default_rng(3).standard_normal((2, 4, 13, 15)).astype(np.float32)
    xv[:, :, ::2] = 0.25     # ties in every other row
    x = nf.placeholder(xv.shape, name="x")
    y = nf.nn.max_pool2d(x, 3, stride=2, padding=1)
    g = nf.placeholder(y.shape, name="g")
    (dx,) = nf.grad(y, [x], head=g)
    gv = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    xt = torch.tensor(xv, requires_grad=True)
    F.max_pool2d(xt, 3, 2, 1).backward(torch.tensor(gv))
    np.testing.assert_allclose(nf.build(dx, [x, g])(xv, gv), xt.grad.numpy(), atol=1e-6)


def test_second_order_through_the_rule():
    """The gather is an ordinary compute: its own gradient (by g) is max pooling again."""
    x = nf.placeholder((1, 2, 7, 7), "float64", name="x")
    y = nf.nn.max_pool2d(x, 3, stride=2, padding=1)
    g = nf.placeholder(y.shape, "float64", name="g")
    (dx,) = nf.grad(y, [x], head=g)
    (dg,) = nf.grad(nf.nn.sum(dx * x), [g])
    xv = np.random.default_rng(5).standard_normal(x.shape)
    gv = np.random.default_rng(6).standard_normal(y.shape)
    np.testing.assert_allclose(nf.evaluate(dg, {x: xv, g: gv}),
                               nf.evaluate(y, {x: xv}), rtol=1e-12)


@pytest.mark.parametrize("call", [
    lambda x: nf.nn.max_pool2d(x, 3, padding=2),
    lambda x: nf.nn.max_pool2d(x, 3, return_indices=True),
    lambda x: nf.nn.max_pool2d(x, 9),
    lambda x: nf.nn.adaptive_max_pool2d(x, 0),
    lambda x: nf.nn.max_pool2d(x, 3, stride=0),
    lambda x: nf.nn.max_pool3d(nf.placeholder((7, 7), name="x2"), 2),
])
def test_errors_stay_neoflow_errors(call):
    with pytest.raises(NeoFlowError):
        call(nf.placeholder((2, 3, 7, 7), name="x"))
