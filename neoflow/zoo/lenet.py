"""LeNet-5 (LeCun et al., 1998) for 28x28 single-channel images in its
common modern form: ReLU and max pooling instead of scaled tanh and
trainable subsampling, a full C3 connection table, cross-entropy.

    conv 5x5, 6 (padding 2) - relu - maxpool 2
    conv 5x5, 16 - relu - maxpool 2 - dense 120 - relu - dense 84 - relu - dense classes

Only stock nf.nn operators: it is the standard-network baseline. Besides
the loss it hands on its logits (`Model.outputs["logits"]`).

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch
from .network import Network


def _build(ps, dtype, batch, image, c1, c2, f1, f2, classes):
    x = te.placeholder((batch, 1, image, image), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h = nn.conv2d(x, ps("conv1.weight", (c1, 1, 5, 5), "kaiming"),
                  ps("conv1.bias", (c1,), "zeros"), padding=2)
    h = nn.max_pool2d(nn.relu(h), 2)
    h = nn.conv2d(h, ps("conv2.weight", (c2, c1, 5, 5), "kaiming"),
                  ps("conv2.bias", (c2,), "zeros"))
    h = nn.flatten(nn.max_pool2d(nn.relu(h), 2), 1)
    width = h.shape[1]
    for n, out in enumerate((f1, f2, classes), 1):
        h = nn.dense(h, ps(f"fc{n}.weight", (out, width), "kaiming"),
                     ps(f"fc{n}.bias", (out,), "zeros"))
        h = nn.relu(h) if n < 3 else h
        width = out
    return nn.cross_entropy(h, y), {"x": x, "y": y}, {"logits": h}


def _torch_loss(p, data, **_):
    import torch.nn.functional as F
    h = F.max_pool2d(F.relu(F.conv2d(data["x"], p["conv1.weight"], p["conv1.bias"],
                                     padding=2)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, p["conv2.weight"], p["conv2.bias"])), 2).flatten(1)
    for n in (1, 2, 3):
        h = F.linear(h, p[f"fc{n}.weight"], p[f"fc{n}.bias"])
        h = F.relu(h) if n < 3 else h
    return F.cross_entropy(h, data["y"])


def _make_batch(rng, dtype, batch, image, classes, **_):
    return classification_batch(rng, dtype, (batch, 1, image, image), classes)


NETWORK = Network(
    "lenet", "cnn", "LeNet-5 (relu, max pooling) on 28x28 images",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, image=28, c1=6, c2=16, f1=120, f2=84, classes=10),
    small=dict(batch=2, image=16, c1=2, c2=3, f1=6, f2=5, classes=3))
