"""Training parity with PyTorch: MLP, LeNet-5, LLTM and MI-LSTM, same initial
parameters and batches, 20 steps each of SGD with momentum and of Adam.
Every step's loss within 1e-4 relative of PyTorch's; final parameters within
1e-4. Sizes are small so the whole file runs in well under two minutes."""
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import neoflow as nf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from models import SPECS  # noqa: E402

STEPS = 20
SIZES = {"mlp": dict(batch=16, build=dict(hidden=(32,))),
         "lenet": dict(batch=4, build=dict(c1=3, c2=4, f1=16, f2=12)),
         "lltm": dict(batch=8, build=dict(steps=4, n_in=3, state=8), data=dict(steps=4, n_in=3)),
         "milstm": dict(batch=8, build=dict(steps=4, n_in=3, hidden=8),
                        data=dict(steps=4, n_in=3))}
OPTIMIZERS = {
    "sgd": (lambda: nf.optim.SGD(lr=0.05, momentum=0.9, weight_decay=1e-3),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3)),
    "adam": (lambda: nf.optim.Adam(lr=1e-2, weight_decay=1e-3),
             lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-3)),
}


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
@pytest.mark.parametrize("model", sorted(SPECS))
def test_training_matches_pytorch(model, optimizer):
    torch.set_num_threads(2)
    spec, sizes = SPECS[model], SIZES[model]
    net = spec.build(sizes["batch"], **sizes["build"])
    make_ours, make_theirs = OPTIMIZERS[optimizer]
    rng = np.random.default_rng(1)
    batches = [spec.batch(rng, sizes["batch"], **sizes.get("data", {})) for _ in range(STEPS)]
    with nf.Trainer(net.loss, optimizer=make_ours(), tuning="off", seed=3) as trainer:
        params = {k: torch.tensor(v, requires_grad=True) for k, v in trainer.parameters().items()}
        opt = make_theirs(list(params.values()))
        for step, b in enumerate(batches, 1):
            ours = trainer.step(b)
            opt.zero_grad()
            theirs = spec.torch_loss(params, {k: torch.from_numpy(v) for k, v in b.items()})
            theirs.backward()
            opt.step()
            assert ours == pytest.approx(theirs.item(), rel=1e-4), f"step {step}"
        final = trainer.parameters()
    for name, value in params.items():
        np.testing.assert_allclose(final[name], value.detach().numpy(), rtol=1e-4, atol=1e-4,
                                   err_msg=name)
