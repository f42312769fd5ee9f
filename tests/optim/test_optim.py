"""SGD and Adam update expressions against torch.optim in float64: several
steps on random tensors, every option."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow.optim import SGD, Adam

SHAPES = [(), (7,), (3, 5)]


def run_neoflow(opt, p0, grads):
    """Apply `opt` for len(grads) steps with nf.evaluate; returns params after each."""
    p = nf.placeholder(p0.shape, "float64", name="p")
    g = nf.placeholder(p0.shape, "float64", name="g")
    state = {s: nf.placeholder(p0.shape, "float64", name=s) for s in opt.slots}
    scalars = {s: nf.placeholder((), "float64", name=s) for s in opt.scalar_names}
    upd = opt.update(p, g, state, scalars)
    outs = [upd.param] + [upd.state[s] for s in opt.slots]
    values = {s: np.zeros_like(p0) for s in opt.slots}
    cur, history = p0.copy(), []
    for step, grad in enumerate(grads, 1):
        feed = {p: cur, g: grad, **{state[s]: values[s] for s in opt.slots},
                **{scalars[k]: v for k, v in opt.scalar_values(step).items()}}
        res = nf.evaluate(outs, feed)
        cur = res[0]
        values = dict(zip(opt.slots, res[1:]))
        history.append(cur)
    return history


def run_torch(make, p0, grads):
    p = torch.tensor(p0, requires_grad=True)
    opt = make([p])
    history = []
    for grad in grads:
        p.grad = torch.tensor(grad)
        opt.step()
        history.append(p.detach().numpy().copy())
    return history


SGD_OPTIONS = [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True),
               dict(weight_decay=0.01), dict(momentum=0.5, weight_decay=0.1),
               dict(momentum=0.9, weight_decay=0.05, nesterov=True)]
ADAM_OPTIONS = [dict(), dict(betas=(0.8, 0.99)), dict(eps=1e-3), dict(weight_decay=0.1),
                dict(betas=(0.5, 0.9), eps=1e-6, weight_decay=0.01)]


def _data(shape, steps=6, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape), [rng.standard_normal(shape) for _ in range(steps)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("options", SGD_OPTIONS)
def test_sgd_matches_torch(shape, options):
    p0, grads = _data(shape)
    ours = run_neoflow(SGD(lr=0.05, **options), p0, grads)
    ref = run_torch(lambda ps: torch.optim.SGD(ps, lr=0.05, **options), p0, grads)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("options", ADAM_OPTIONS)
def test_adam_matches_torch(shape, options):
    p0, grads = _data(shape)
    ours = run_neoflow(Adam(lr=0.01, **options), p0, grads)
    ref = run_torch(lambda ps: torch.optim.Adam(ps, lr=0.01, **options), p0, grads)
    for a, b in zip(ours, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_lr_change_takes_effect_without_rebuilding():
    opt = SGD(lr=0.1)
    assert opt.scalar_values(1) == {"lr": 0.1}
    opt.lr = 0.01
    assert opt.scalar_values(2) == {"lr": 0.01}


def test_adam_bias_corrections():
    values = Adam(lr=1e-3, betas=(0.9, 0.999)).scalar_values(1)
    assert values["step_size"] == pytest.approx(1e-3 / 0.1)
    assert values["bias_correction2_sqrt"] == pytest.approx(0.001 ** 0.5)


@pytest.mark.parametrize("make, message", [
    (lambda: SGD(lr=-1.0), "lr"),
    (lambda: SGD(lr="0.1"), "lr"),
    (lambda: SGD(lr=0.1, nesterov=True), "nesterov"),
    (lambda: SGD(lr=0.1, momentum=-0.5), "momentum"),
    (lambda: Adam(lr=0.1, betas=(0.9,)), "betas"),
    (lambda: Adam(lr=0.1, betas=(0.9, 1.0)), "betas[1]"),
    (lambda: Adam(lr=0.1, eps=-1), "eps"),
])
def test_bad_options_raise(make, message):
    with pytest.raises(nf.NeoFlowError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make()


def test_update_fuses_as_plain_computes():
    p = nf.parameter((4,), name="w")
    g = nf.placeholder((4,), name="dw")
    state = {"momentum_buffer": nf.placeholder((4,), name="buf")}
    upd = SGD(lr=0.1, momentum=0.9).update(p, g, state, {"lr": nf.placeholder((), name="lr")})
    assert upd.param.is_compute and upd.state["momentum_buffer"].is_compute
    assert upd.param.name == "w.new"
