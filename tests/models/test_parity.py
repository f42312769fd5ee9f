"""Training parity with PyTorch: the zoo's MLP, LeNet-5, LLTM and MI-LSTM,
same initial parameters and batches, 20 steps each of SGD with momentum and
of Adam (both with weight decay) against each network's PyTorch twin
(zoo.network.Model.torch_model). Every step's loss within 1e-4 relative of
PyTorch's; final parameters within 1e-4. Sizes are small so the whole file
runs in well under two minutes."""
import numpy as np
import pytest
import torch

import neoflow as nf
from neoflow import zoo

STEPS = 20
SIZES = {"mlp": dict(batch=16, n_in=64, hidden=32, layers=1, classes=10),
         "lenet": dict(batch=4, image=16, c1=3, c2=4, f1=16, f2=12, classes=10),
         "lltm": dict(batch=8, steps=4, n_in=3, state=8, n_out=1),
         "milstm": dict(batch=8, steps=4, n_in=3, hidden=8, classes=2)}
OPTIMIZERS = {
    "sgd": (lambda: nf.optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3)),
    "adam": (lambda: nf.optim.Adam(lr=1e-2, weight_decay=1e-3),
             lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-3)),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("name", sorted(SIZES))
def test_training_matches_pytorch(name, optimizer):
    torch.set_num_threads(2)
    model = zoo.get(name).build("small", **SIZES[name])
    make_ours, make_theirs = OPTIMIZERS[optimizer]
    rng = np.random.default_rng(1)
    batches = [model.make_batch(rng) for _ in range(STEPS)]
    with nf.Trainer(model.loss, optimizer=make_ours(), tuning="off", seed=3) as trainer:
        twin = model.torch_model(trainer.parameters())
        opt = make_theirs(list(twin.parameters()))
        for step, b in enumerate(batches, 1):
            ours = trainer.step(b)
            opt.zero_grad()
            theirs = twin({k: torch.from_numpy(v) for k, v in b.items()})
            theirs.backward()
            opt.step()
            assert ours == pytest.approx(theirs.item(), rel=1e-4), f"step {step}"
        final = trainer.parameters()
    for key, value in twin.values().items():
        np.testing.assert_allclose(final[key], value, rtol=1e-4, atol=1e-4, err_msg=key)
