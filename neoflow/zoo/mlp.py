"""MLP: `layers` dense + ReLU layers of width `hidden`, then a dense layer
to `classes` logits and cross-entropy -- the smallest standard network
(at its defaults, 64-128-10: the 8x8-digits classifier of
examples/mlp_digits.py).

    h = relu(x W1^T + b1), ..., logits = h W^T + b

Only stock nf.nn operators. Besides the loss it hands on its logits
(`Model.outputs["logits"]`), e.g. to score a test set.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch
from .network import Network


def _build(ps, dtype, batch, n_in, hidden, layers, classes):
    x = te.placeholder((batch, n_in), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h, width = x, n_in
    for n, out in enumerate([hidden] * layers + [classes], 1):
        h = nn.dense(h, ps(f"fc{n}.weight", (out, width), "kaiming"),
                     ps(f"fc{n}.bias", (out,), "zeros"))
        h = nn.relu(h) if n <= layers else h
        width = out
    return nn.cross_entropy(h, y), {"x": x, "y": y}, {"logits": h}


def _torch_loss(p, data, layers, **_):
    import torch.nn.functional as F
    h = data["x"]
    for n in range(1, layers + 2):
        h = F.linear(h, p[f"fc{n}.weight"], p[f"fc{n}.bias"])
        h = F.relu(h) if n <= layers else h
    return F.cross_entropy(h, data["y"])


def _make_batch(rng, dtype, batch, n_in, classes, **_):
    return classification_batch(rng, dtype, (batch, n_in), classes)


NETWORK = Network(
    "mlp", "mlp", "MLP (dense + relu layers, cross-entropy) on flat vectors",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, n_in=64, hidden=128, layers=1, classes=10),
    small=dict(batch=4, n_in=5, hidden=6, layers=2, classes=3))
