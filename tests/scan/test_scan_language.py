"""nf.scan in the language: construction checks (each a NeoFlowError naming
the tensor), tuple states, reverse-free evaluation against a Python loop,
higher-order gradients, and index arithmetic on t."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import DTypeError, ExpressionError, ShapeError

from scan_check import check


def test_wrong_state_shape_names_the_tensor():
    h0 = nf.placeholder((2, 3), name="h0")
    with pytest.raises(ShapeError, match=r"'bad'.*\(3, 2\).*\(2, 3\).*'h0'"):
        nf.scan(h0, lambda t, h: nf.compute((3, 2), lambda i, j: h[j, i], name="bad"), 4)


def test_wrong_state_dtype_names_the_tensor():
    h0 = nf.placeholder((3,), name="h0")
    with pytest.raises(DTypeError, match=r"'bad' is float64; expected float32.*'h0'"):
        nf.scan(h0, lambda t, h: nf.compute((3,), lambda i: nf.cast(h[i], "float64"),
                                            name="bad"), 4)


def test_tuple_of_wrong_length():
    h0, c0 = nf.placeholder((3,), name="h0"), nf.placeholder((3,), name="c0")
    with pytest.raises(ShapeError, match="returned 1 state tensor.*has 2"):
        nf.scan((h0, c0), lambda t, s: (nf.compute((3,), lambda i: s[0][i] + s[1][i]),), 4,
                name="pair")


def test_prev_of_another_scan_is_refused():
    h0 = nf.placeholder((3,), name="h0")
    leaked = []

    def step(t, h):
        leaked.append(h)
        return nf.compute((3,), lambda i: h[i] * 2.0)
    nf.scan(h0, step, 4, name="first")
    with pytest.raises(ExpressionError, match="'first_prev'.*previous state of scan 'first'"):
        nf.scan(h0, lambda t, h: nf.compute((3,), lambda i: h[i] + leaked[0][i]), 4,
                name="second")


def test_prev_read_outside_its_step_is_refused_by_evaluate():
    h0 = nf.placeholder((3,), name="h0")
    leaked = []
    nf.scan(h0, lambda t, h: leaked.append(h) or nf.compute((3,), lambda i: h[i]), 2, name="s")
    out = nf.compute((3,), lambda i: leaked[0][i] * 1.0)
    with pytest.raises(ExpressionError, match="'s_prev' is the previous state of scan 's'"):
        nf.evaluate(out, {h0: np.ones(3, np.float32)})


def test_bad_init_and_length():
    h0 = nf.placeholder((3,), name="h0")
    with pytest.raises(ExpressionError, match="init must be a Tensor"):
        nf.scan([], lambda t, h: h, 3)
    with pytest.raises(ShapeError, match="length must be a positive int, got 0"):
        nf.scan(h0, lambda t, h: h, 0)


def test_state_passed_on_unchanged_and_index_arithmetic_on_t():
    T = 6
    x = nf.placeholder((T + 1, 2), "float64", name="x")
    h0 = nf.placeholder((2,), "float64", name="h0")
    c0 = nf.placeholder((2,), "float64", name="c0")

    def step(t, s):
        h, c = s
        # reads at t + 1 and, guarded, at t - 1
        nh = nf.compute((2,), lambda i: h[i] * 0.5 + x[t + 1, i]
                        + nf.where(t >= 1, x[t - 1, i], 0.0) * c[i])
        return nh, c
    hs, cs = nf.scan((h0, c0), step, T)
    xv, hv, cv = np.random.default_rng(0).normal(size=(T + 1, 2)), np.ones(2), np.arange(2.0)
    got_h, got_c = nf.evaluate([hs, cs], {x: xv, h0: hv, c0: cv})
    h, want = hv, []
    for t in range(T):
        h = h * 0.5 + xv[t + 1] + (xv[t - 1] if t >= 1 else 0) * cv
        want.append(h)
    np.testing.assert_allclose(got_h, np.array(want), rtol=1e-12)
    np.testing.assert_allclose(got_c, np.tile(cv, (T, 1)))


def test_tuple_state_gradients_and_shared_parameter():
    T = 7

    def ours(x, h0, c0, w):
        def step(t, s):
            h, c = s
            nh = nf.compute((3,), lambda i: nf.tanh(w[i] * h[i] + c[i] * x[t, i]))
            nc = nf.compute((3,), lambda i: c[i] * 0.9 + nh[i] * w[i])
            return nh, nc
        hs, cs = nf.scan((h0, c0), step, T)
        return nf.compute((T, 3), lambda t, i: hs[t, i] * cs[t, i])

    def theirs(x, h0, c0, w):
        h, c, out = h0, c0, []
        for t in range(T):
            h = torch.tanh(w * h + c * x[t])
            c = c * 0.9 + h * w
            out.append(h * c)
        return torch.stack(out)

    check(ours, theirs, [(T, 3), (3,), (3,), (3,)])


def test_second_order_gradient_through_a_scan():
    """d/dw of (dL/dw . v): the gradient graph (itself a reverse scan) differentiated again."""
    T = 5
    rng = np.random.default_rng(3)
    xv, wv, vv = rng.normal(size=(T, 3)), rng.normal(size=3) * 0.5, rng.normal(size=3)
    x = nf.placeholder((T, 3), "float64", name="x")
    w = nf.placeholder((3,), "float64", name="w")
    v = nf.placeholder((3,), "float64", name="v")
    h0 = nf.compute((3,), lambda i: nf.const(0.1, "float64"))
    hs = nf.scan(h0, lambda t, h: nf.compute((3,), lambda i: nf.tanh(w[i] * h[i] + x[t, i])), T)
    r, s = nf.reduce_axis(T, name="r"), nf.reduce_axis(3, name="s")
    loss = nf.compute((), lambda: nf.sum(hs[r, s] * hs[r, s], axis=[r, s]))
    (dw,) = nf.grad(loss, [w])
    s2 = nf.reduce_axis(3, name="s2")
    dot = nf.compute((), lambda: nf.sum(dw[s2] * v[s2], axis=s2))
    ddw, ddx = nf.grad(dot, [w, x])
    got = nf.evaluate([dw, ddw, ddx], {x: xv, w: wv, v: vv})

    X, W = torch.tensor(xv, requires_grad=True), torch.tensor(wv, requires_grad=True)
    h, hs_t = torch.full((3,), 0.1, dtype=torch.float64), []
    for t in range(T):
        h = torch.tanh(W * h + X[t])
        hs_t.append(h)
    L = (torch.stack(hs_t) ** 2).sum()
    (gw,) = torch.autograd.grad(L, W, create_graph=True)
    gww, gwx = torch.autograd.grad((gw * torch.tensor(vv)).sum(), [W, X])
    for a, b in zip(got, [gw.detach(), gww, gwx]):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-9, atol=1e-12)


def test_a_state_made_without_t_or_prev_and_its_gradient():
    """A state element the step builds from outside tensors only (a constant per step)."""
    T = 4

    def ours(x, w):
        h0 = nf.compute((3,), lambda i: nf.const(0.0, "float64"))

        def step(t, s):
            h, c = s
            return (nf.compute((3,), lambda i: h[i] * c[i] + x[t, i]),
                    nf.compute((3,), lambda i: w[i] * 2.0))
        hs, cs = nf.scan((h0, h0), step, T)
        return nf.compute((T, 3), lambda t, i: hs[t, i] + cs[t, i])

    def theirs(x, w):
        h, c, out = torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), []
        for t in range(T):
            h, c = h * c + x[t], w * 2.0
            out.append(h + c)
        return torch.stack(out)

    check(ours, theirs, [(T, 3), (3,)])
    x, w = nf.placeholder((T, 3), "float64", name="x"), nf.placeholder((3,), "float64", name="w")
    y = ours(x, w)
    rng = np.random.default_rng(0)
    xv, wv = rng.normal(size=(T, 3)), rng.normal(size=3)
    np.testing.assert_allclose(nf.build(y, [x, w])(xv, wv), nf.evaluate(y, {x: xv, w: wv}),
                               rtol=1e-12)
