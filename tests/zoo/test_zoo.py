"""The zoo's networks against their PyTorch twins, at the small presets:
loss and every parameter gradient in float64 (nf.evaluate, rtol 1e-8), loss
and gradients in float32 (nf.build, rtol 1e-4), 5 SGD steps of nf.Trainer
(losses within 1e-4 relative; final parameters and batch-norm running
statistics too), and the interface (the issue's default sizes, presets).

Parameter values for the nf.evaluate / nf.build checks are the initialisers'
draws plus noise, so ones/zeros/identity initialisations (norm scales,
biases, the talking-heads mix) are exercised with generic values too.
"""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow import zoo

NAMES = sorted(zoo.NETWORKS)
SLOW = {"mobilenet_v2", "shufflenet"}   # the longest compiles (about 10 s each)


def slow_marked(names):
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in names]


def torch_loss_and_grads(model, values, batch):
    """The twin's loss (float) and {trainable name: gradient ndarray}."""
    twin = model.torch_model(values)
    loss = twin({k: torch.from_numpy(v) for k, v in batch.items()})
    loss.backward()
    tensors = twin.tensors()
    return loss.item(), {n: tensors[n].grad.numpy() for n in model.trainable}


def assert_grads_close(ours, theirs, names, rtol):
    """Each gradient within rtol, with an absolute floor of rtol times the
    largest gradient entry (some gradients are exactly 0 in exact arithmetic:
    a batch-norm bias feeding another batch norm)."""
    scale = max(float(np.max(np.abs(g))) for g in theirs.values())
    for name, g in zip(names, ours):
        np.testing.assert_allclose(g, theirs[name], rtol=rtol, atol=rtol * scale, err_msg=name)


def feed_of(model, batch, values):
    return {**{model.inputs[k]: v for k, v in batch.items()},
            **{model.params[k]: v for k, v in values.items()}}


@pytest.mark.parametrize("name", NAMES)
def test_float64_loss_and_gradients_match_torch(name):
    model = zoo.get(name).build("small", dtype="float64")
    batch = model.make_batch(np.random.default_rng(0))
    values = model.perturbed_values()
    grads = nf.grad(model.loss, [model.params[n] for n in model.trainable])
    loss, *ours = nf.evaluate([model.loss] + list(grads), feed_of(model, batch, values))
    their_loss, theirs = torch_loss_and_grads(model, values, batch)
    assert float(loss) == pytest.approx(their_loss, rel=1e-10)
    assert_grads_close(ours, theirs, model.trainable, rtol=1e-8)


@pytest.mark.parametrize("name", slow_marked(NAMES))
def test_float32_build_matches_torch(name):
    model = zoo.get(name).build("small")
    batch = model.make_batch(np.random.default_rng(0))
    values = model.perturbed_values()
    grads = nf.grad(model.loss, [model.params[n] for n in model.trainable])
    inputs = list(model.inputs.values()) + list(model.params.values())
    f = nf.build([model.loss] + list(grads), inputs)
    loss, *ours = f(*[batch[k] for k in model.inputs], *[values[k] for k in model.params])
    their_loss, theirs = torch_loss_and_grads(model, values, batch)
    assert float(loss) == pytest.approx(their_loss, rel=1e-4)
    assert_grads_close(ours, theirs, model.trainable, rtol=1e-4)


@pytest.mark.parametrize("name", slow_marked(NAMES))
def test_trainer_matches_torch_for_5_sgd_steps(name):
    torch.set_num_threads(2)
    model = zoo.get(name).build("small")
    rng = np.random.default_rng(2)
    batches = [model.make_batch(rng) for _ in range(5)]
    lr = model.network.lr or 0.05
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=lr, momentum=0.9), tuning="off",
                    seed=3) as trainer:
        twin = model.torch_model(trainer.parameters())
        opt = torch.optim.SGD(twin.parameters(), lr=lr, momentum=0.9)
        for step, batch in enumerate(batches, 1):
            ours = trainer.step(batch)
            opt.zero_grad()
            theirs = twin({k: torch.from_numpy(v) for k, v in batch.items()})
            theirs.backward()
            opt.step()
            assert ours == pytest.approx(theirs.item(), rel=1e-4), f"step {step}"
        final = trainer.parameters()
    for key, value in twin.values().items():   # trained weights and running statistics
        np.testing.assert_allclose(final[key], value, rtol=1e-4, atol=1e-5, err_msg=key)


# -- the interface ------------------------------------------------------------------
ISSUE_SIZES = {   # issue 8: the sizes the paper's networks are benchmarked at
    "milstm": dict(n_in=784, hidden=1024, batch=64),
    "scrnn": dict(hidden=128, context=64, n_in=784, batch=64),
    "sublstm": dict(state=128, batch=64),
    "lltm": dict(state=128, batch=64),
    "capsnet": dict(image=28, conv_channels=256, conv_kernel=9, types=32, dim=8,
                    caps_kernel=9, classes=10, out_dim=16, routing=3, batch=16),
    "mobilenet_v2": dict(image=64, batch=8),
    "shufflenet": dict(image=64, batch=8),
}


def test_every_issue_network_is_in_the_zoo():
    assert set(ISSUE_SIZES) | {"lenet", "transformer", "lstm_scan", "yolo", "resnet3d",
                               "dcgan", "mlp"} == set(zoo.NETWORKS)
    kinds = {n.name: n.kind for n in zoo.NETWORKS.values()}
    assert {k for k, v in kinds.items() if v == "novel"} == {
        "milstm", "scrnn", "sublstm", "lltm", "capsnet", "lstm_scan"}


@pytest.mark.parametrize("name", sorted(ISSUE_SIZES))
def test_defaults_are_the_issue_sizes(name):
    defaults = zoo.get(name).defaults
    for key, value in ISSUE_SIZES[name].items():
        assert defaults[key] == value, key


@pytest.mark.parametrize("name", NAMES)
def test_default_build_is_a_scalar_loss_with_a_matching_twin(name):
    model = zoo.get(name).build()
    assert model.loss.shape == () and model.loss.dtype == "float32"
    batch = model.make_batch(np.random.default_rng(0))
    assert {k: (v.shape, str(v.dtype)) for k, v in batch.items()} == {
        k: (t.shape, t.dtype) for k, t in model.inputs.items()}
    twin = model.torch_model({n: np.zeros(p.shape, np.float32) for n, p in model.params.items()})
    assert sum(p.numel() for p in twin.parameters()) == sum(
        int(np.prod(model.params[n].shape)) for n in model.trainable)
    assert set(twin.values()) == set(model.params)


@pytest.mark.parametrize("name", ["mlp", "lenet"])
def test_classifiers_hand_on_the_logits_their_loss_is_taken_of(name):
    model = zoo.get(name).build("small", dtype="float64")
    batch = model.make_batch(np.random.default_rng(0))
    logits, loss = nf.evaluate([model.outputs["logits"], model.loss],
                               feed_of(model, batch, model.perturbed_values()))
    assert logits.shape == (model.sizes["batch"], model.sizes["classes"])
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits),
                                                 torch.from_numpy(batch["y"]))
    assert float(loss) == pytest.approx(expected.item(), rel=1e-12)
    assert zoo.get("lltm").build("small").outputs == {}


def test_capsnet_default_has_1152_primary_capsules():
    model = zoo.get("capsnet").build()
    assert model.params["digit.W"].shape == (1152, 10, 16, 8)


def test_sizes_and_presets():
    net = zoo.get("lltm")
    assert net.sizes("small", batch=7)["batch"] == 7
    assert net.sizes()["state"] == 128
    with pytest.raises(ValueError, match="unknown size"):
        net.sizes(hidden=3)
    with pytest.raises(ValueError, match="preset"):
        net.sizes("huge")
    with pytest.raises(KeyError, match="no network"):
        zoo.get("resnet")
