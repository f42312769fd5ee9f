"""DCGAN's alternating training (zoo.alternating): one nf.Trainer per phase
exchanging parameters, against the PyTorch DCGAN example's loop (one set of
parameters, an optimizer each for D and G, fake = G(z) once per round, D's
step on fake.detach(), G's on D(fake)): 5 rounds, every loss of both
phases, the final parameters and G's running statistics; and each phase's
float32 gradients against float64, within a small factor of torch's own
float32 error.

DCGAN's float32 training is chaotic at the benchmark's sizes: a leaky_relu
input within ~1e-7 of its kink crosses it under any float32 rounding, and
from then on the run follows another path (docs/zoo.md, "Float32 parity").
So whole runs are compared at the small preset, where the tolerances below
are float32 rounding's, and larger sizes gradient by gradient."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow import zoo
from neoflow.zoo import dcgan
from neoflow.zoo.alternating import AlternatingTrainers, torch_alternating

ROUNDS, LR, MOMENTUM = 5, 0.02, 0.5
LOSS_RTOL = 2e-6                      # achieved 4.4e-7
PARAM_RTOL, PARAM_ATOL = 2e-6, 2e-7   # achieved within a fifth of these


def example_loop(values, batches):
    """The PyTorch example's rounds from `values`: ([(d_loss, g_loss)], final values)."""
    p = {k: torch.tensor(v, requires_grad=not k.endswith(("running_mean", "running_var")))
         for k, v in values.items()}
    opt_d = torch.optim.SGD([v for k, v in p.items() if k.startswith("D.")], lr=LR,
                            momentum=MOMENTUM)
    opt_g = torch.optim.SGD([v for k, v in p.items() if k.startswith("G.") and v.requires_grad],
                            lr=LR, momentum=MOMENTUM)
    losses = []
    for b in batches:
        x, z = torch.from_numpy(b["x"]), torch.from_numpy(b["z"])
        fake = dcgan.torch_generator(p, z, running=True)
        opt_d.zero_grad()
        real_logits = dcgan.torch_discriminator(p, x)
        fake_logits = dcgan.torch_discriminator(p, fake.detach())
        d_loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits)) \
            + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        d_loss.backward()
        opt_d.step()
        opt_g.zero_grad()
        logits = dcgan.torch_discriminator(p, fake)
        g_loss = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
        g_loss.backward()
        opt_g.step()
        losses.append((d_loss.item(), g_loss.item()))
    return losses, {k: v.detach().numpy() for k, v in p.items()}


def test_alternating_training_matches_the_pytorch_example():
    torch.set_num_threads(2)
    models = zoo.get("dcgan").build_phases("small")
    assert [m.phase for m in models] == ["discriminator", "generator"]
    assert not set(models[0].trainable) & set(models[1].trainable)
    rng = np.random.default_rng(4)
    batches = [models[0].make_batch(rng) for _ in range(ROUNDS)]
    with AlternatingTrainers(models, nf.optim.SGD(lr=LR, momentum=MOMENTUM), seed=5) as gan:
        initial = gan.parameters()
        ours = [gan.step(b) for b in batches]
        final = gan.parameters()
    theirs, their_final = example_loop(initial, batches)
    round_, twin = torch_alternating(models, initial, make_optimizer=lambda ps: torch.optim.SGD(
        ps, lr=LR, momentum=MOMENTUM))
    twin_losses = [round_({k: torch.from_numpy(v) for k, v in b.items()}) for b in batches]
    for n, (a, b, c) in enumerate(zip(ours, theirs, twin_losses), 1):
        assert a == pytest.approx(b, rel=LOSS_RTOL), f"round {n}"
        assert c == pytest.approx(b, rel=1e-5), f"round {n} (twin)"
    assert ours[0] != ours[-1]                 # it trains
    assert set(final) == set(their_final)      # weights and G's running statistics
    for key, value in their_final.items():
        np.testing.assert_allclose(final[key], value, rtol=PARAM_RTOL, atol=PARAM_ATOL,
                                   err_msg=key)
        np.testing.assert_allclose(twin.values()[key], value, rtol=1e-5, atol=1e-6,
                                   err_msg=key)


def _torch_grads(model, values, batch, dtype):
    twin = model.torch_model({k: v.astype(dtype) for k, v in values.items()})
    twin({k: torch.from_numpy(batch[k].astype(dtype)) for k in model.inputs}).backward()
    tensors = twin.tensors()
    return {n: tensors[n].grad.double().numpy() for n in model.trainable}


def _relative(got, exact):
    return float(np.abs(got - exact).max() / np.abs(exact).max())


@pytest.mark.parametrize("phase", dcgan.PHASES)
def test_float32_gradients_are_as_accurate_as_torchs(phase):
    # each parameter's float32 gradient (nf.build, default schedules) against
    # torch float64, within 3x the largest of torch float32's own errors over
    # the phase's parameters (one parameter's error alone is luck, 1e-7 either
    # way); at 32x32 images, batch 16, so D.conv0's weight gradient sums
    # 16 x 16 x 16 terms a weight as at the benchmark's sizes; the trainers'
    # initial values (kaiming draws, batch-norm ones and zeros)
    models = zoo.get("dcgan").build_phases("small", batch=16, image=32, nz=20, ngf=8, ndf=8,
                                           channels=3)
    model = models[dcgan.PHASES.index(phase)]
    batch = model.make_batch(np.random.default_rng(3))
    with AlternatingTrainers(models, nf.optim.SGD(lr=LR), seed=2) as gan:
        values = gan.parameters()
    grads = nf.grad(model.loss, [model.params[n] for n in model.trainable])
    f = nf.build(list(grads), list(model.inputs.values()) + list(model.params.values()))
    ours = f(*[batch[k] for k in model.inputs], *[values[k] for k in model.params])
    exact = _torch_grads(model, values, batch, np.float64)
    theirs = _torch_grads(model, values, batch, np.float32)
    bound = 3 * max(_relative(theirs[n], exact[n]) for n in model.trainable)
    for name, g in zip(model.trainable, ours):
        error = _relative(np.asarray(g, np.float64), exact[name])
        assert error <= bound, f"{name}: float32 error {error:.2e}, bound {bound:.2e}"


def test_each_phase_trains_only_its_network():
    models = zoo.get("dcgan").build_phases("small")
    d, g = models
    assert all(n.startswith("D.") for n in d.trainable)
    assert all(n.startswith("G.") for n in g.trainable)
    assert {p.name for p, _ in nf.nn.state_updates(d.loss)} == set()
    assert {p.name for p, _ in nf.nn.state_updates(g.loss)} == {
        n for n in g.params if n.endswith(("running_mean", "running_var"))}
    assert set(d.inputs) == {"x", "z"} and set(g.inputs) == {"z"}


def test_bad_sizes_and_phases_are_reported():
    with pytest.raises(ValueError, match="image must be 4"):
        zoo.get("dcgan").build("small", image=12)
    with pytest.raises(ValueError, match="phase must be one of"):
        zoo.get("dcgan").build("small", phase="critic")
    with pytest.raises(ValueError, match="has no training phases"):
        zoo.get("lenet").build("small", phase="generator")
