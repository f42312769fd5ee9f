"""nf.nn.dropout: torch's semantics (scale 1 / (1 - p), p = 0 and p = 1,
training=False, bad p), the keep rate, and one mask per step that the
backward recomputes: the gradient (and the Trainer's update) uses exactly
the mask the forward output shows."""
import math

import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.errors import NeoFlowError


def test_identity_cases_return_the_input():
    x = nf.placeholder((3, 5), name="x")
    assert nf.nn.dropout(x, p=0.5, training=False) is x
    assert nf.nn.dropout(x, p=0.0) is x


def test_p_one_is_input_times_zero_as_torch():
    x = nf.placeholder((2, 3), name="x")
    xv = np.array([[1.0, -2.0, np.nan], [np.inf, 0.5, 3.0]], np.float32)
    ours = nf.build(nf.nn.dropout(x, p=1.0), [x])(xv)
    theirs = torch.nn.functional.dropout(torch.tensor(xv), p=1.0).numpy()
    np.testing.assert_array_equal(ours, theirs)        # NaN where torch has NaN (inf * 0)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_and_keep_rate(p, dtype):
    n = 1 << 15
    x = nf.placeholder((n,), dtype, name="x")
    xv = np.random.default_rng(0).uniform(0.5, 2.0, n).astype(dtype)
    out = nf.build(nf.nn.dropout(x, p=p), [x])(xv, seed=1)
    kept = out != 0
    scale = np.asarray(1 / (1 - p), dtype)
    np.testing.assert_array_equal(out[kept], xv[kept] * scale)
    assert abs(kept.mean() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("p,message", [(-0.1, "in \\[0, 1\\]"), (1.5, "in \\[0, 1\\]"),
                                       ("0.5", "number"), (True, "number")])
def test_bad_p_raises(p, message):
    x = nf.placeholder((3,), name="x")
    with pytest.raises(NeoFlowError, match=message):
        nf.nn.dropout(x, p=p)


def test_bad_options_raise():
    x = nf.placeholder((3,), name="x")
    with pytest.raises(NeoFlowError, match="training"):
        nf.nn.dropout(x, training="yes")
    with pytest.raises(NeoFlowError, match="inplace"):
        nf.nn.dropout(x, inplace=True)
    with pytest.raises(NeoFlowError, match="float"):
        nf.nn.dropout(nf.placeholder((3,), "int32", name="i"))


@pytest.mark.parametrize("fusion", [True, False])
def test_gradient_uses_the_forward_mask(fusion):
    """Forward and backward in one call: the gradient is head * scale exactly
    where the forward output kept the element."""
    x = nf.placeholder((7, 11), "float64", name="x")
    head = nf.placeholder((7, 11), "float64", name="head")
    y = nf.nn.dropout(nf.nn.tanh(x), p=0.4)
    (dx,) = nf.grad(y, [x], head=head)
    f = nf.build([y, dx], [x, head], fusion=fusion)
    rng = np.random.default_rng(2)
    xv, hv = rng.uniform(0.1, 1, (7, 11)), rng.standard_normal((7, 11))
    for seed in (None, 3):
        out, g = f(xv, hv, seed=seed)
        mask = out != 0
        assert 0 < mask.mean() < 1
        np.testing.assert_allclose(g, hv * mask / 0.6 * (1 - np.tanh(xv) ** 2), rtol=1e-12)
        ref_out, ref_g = nf.evaluate([y, dx], {x: xv, head: hv}, seed=3)
        if seed == 3:
            np.testing.assert_array_equal(out != 0, ref_out != 0)
            np.testing.assert_allclose(g, ref_g, rtol=1e-12)


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_trainer_step_backward_sees_the_forward_mask(backend):
    """loss = sum(dropout(w) * c); SGD(lr=1): w - w_new = c * mask * scale,
    and the loss of that step must be sum(w * c * mask * scale), mask for mask.
    The next step draws another mask."""
    shape, p = (6, 9), 0.3
    rng = np.random.default_rng(4)
    w0 = rng.uniform(0.5, 1.5, shape)
    cv = rng.uniform(0.5, 1.5, shape)
    c = nf.placeholder(shape, "float64", name="c")
    w = nf.parameter(shape, init=w0, dtype="float64", name="w")
    d = nf.nn.dropout(w, p=p)
    loss = nf.nn.sum(nf.compute(shape, lambda i, j: d[i, j] * c[i, j], name="dc"))
    masks = []
    with nf.Trainer(loss, nf.optim.SGD(lr=1.0), seed=9, backend=backend) as trainer:
        for _ in range(2):
            before = trainer.parameters()["w"]
            value = trainer.step({c: cv})
            step = before - trainer.parameters()["w"]
            mask = step != 0
            np.testing.assert_allclose(step[mask], (cv / (1 - p))[mask], rtol=1e-12)
            assert value == pytest.approx((before * step).sum(), rel=1e-12)
            masks.append(mask)
    assert (masks[0] != masks[1]).any()


def test_random_leaf_has_no_gradient():
    """d(x * u)/dx is u (the same draw), and nothing flows into u."""
    x = nf.placeholder((5, 4), "float64", name="x")
    u = nf.random_uniform((5, 4), dtype="float64", name="u")
    y = nf.nn.sum(nf.compute((5, 4), lambda a, b: x[a, b] * u[a, b], name="xu"))
    (dx,) = nf.grad(y, [x])
    f = nf.build([dx, u], [x])
    g, uv = f(np.ones((5, 4)), seed=2)
    np.testing.assert_array_equal(g, uv)
