"""ResNet-3D-18 (Hara, Kataoka and Satoh, "Can Spatiotemporal 3D CNNs Retrace
the History of 2D CNNs and ImageNet?", CVPR 2018; their 3D-ResNets-PyTorch
model) for short RGB clips (N, 3, frames, H, W):

    stem: conv 7x7x7 stride (1, 2, 2) - BN - relu - maxpool 3x3x3 stride 2
    4 stages of 2 basic blocks (channels c, c, 2c, 4c, 8c; stride 1, 2, 2, 2
    in time and space): conv 3x3x3 - BN - relu - conv 3x3x3 - BN, + shortcut
    (the input, or conv 1x1x1 (stride) - BN where the shape changes: type B)
    - relu
    adaptive mean to 1x1x1 - dense classes
`channels` are the stages' widths (paper: four, 64, 128, 256, 512; the small test
preset has two, where batch norm has enough values per channel to stay
well-conditioned in float32). Stock
nf.nn operators only: conv3d, batch_norm, max_pool3d, adaptive_avg_pool3d.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, conv_bn, torch_conv_bn
from .network import Network


def blocks(channels, repeats=2):
    """[(name, in channels, out channels, stride)] of every basic block.

    >>> blocks((64, 128, 256, 512))[2]
    ('layer2.0', 64, 128, 2)
    """
    out, cin = [], channels[0]
    for stage, c in enumerate(channels, 1):
        for r in range(repeats):
            out.append((f"layer{stage}.{r}", cin, c, 2 if r == 0 and stage > 1 else 1))
            cin = c
    return out


def _build(ps, dtype, batch, frames, image, channels, classes):
    x = te.placeholder((batch, 3, frames, image, image), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h = conv_bn(ps, x, "stem", channels[0], 7, stride=(1, 2, 2), act="relu")
    h = nn.max_pool3d(h, 3, stride=2, padding=1)
    for name, cin, cout, stride in blocks(channels):
        inner = conv_bn(ps, h, f"{name}.conv1", cout, 3, stride=stride, act="relu")
        inner = conv_bn(ps, inner, f"{name}.conv2", cout, 3)
        short = h if stride == 1 and cin == cout else conv_bn(ps, h, f"{name}.down", cout, 1,
                                                               stride=stride)
        h = nn.relu(inner + short)
    h = nn.flatten(nn.adaptive_avg_pool3d(h, 1), 1)
    logits = nn.dense(h, ps("fc.weight", (classes, channels[-1])),
                      ps("fc.bias", (classes,), "zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, channels, **_):
    import torch.nn.functional as F
    h = torch_conv_bn(p, data["x"], "stem", 7, stride=(1, 2, 2), act="relu")
    h = F.max_pool3d(h, 3, stride=2, padding=1)
    for name, cin, cout, stride in blocks(channels):
        inner = torch_conv_bn(p, h, f"{name}.conv1", 3, stride=stride, act="relu")
        inner = torch_conv_bn(p, inner, f"{name}.conv2", 3)
        short = h if stride == 1 and cin == cout else torch_conv_bn(p, h, f"{name}.down", 1,
                                                                    stride=stride)
        h = F.relu(inner + short)
    h = F.adaptive_avg_pool3d(h, 1).flatten(1)
    return F.cross_entropy(F.linear(h, p["fc.weight"], p["fc.bias"]), data["y"])


def _make_batch(rng, dtype, batch, frames, image, classes, **_):
    return classification_batch(rng, dtype, (batch, 3, frames, image, image), classes)


NETWORK = Network(
    "resnet3d", "cnn", "ResNet-3D-18 (3-D convolutions, batch norm) on 8-frame 56x56 clips",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=2, frames=8, image=56, channels=(64, 128, 256, 512), classes=10),
    small=dict(batch=2, frames=8, image=24, channels=(4, 8), classes=3))
