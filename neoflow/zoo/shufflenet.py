"""ShuffleNet (v1; Zhang et al., "ShuffleNet: An Extremely Efficient
Convolutional Neural Network for Mobile Devices", CVPR 2018) for square RGB
images, with a dense classifier.

    stem: conv 3x3 stride 2 - BN - relu - maxpool 3x3 stride 2
    stages of units; a unit with `mid` = out / 4 bottleneck channels:
        1x1 group conv - BN - relu - channel shuffle - 3x3 depthwise (stride)
        - BN - 1x1 group conv - BN, then
        stride 1: relu(x + branch); stride 2: relu(concat(avgpool3x3(x), branch))
    (the first 1x1 of the first stage is not grouped: its input is narrow)
    global mean - dense classes
`channels` are the stages' output channels and `repeats` their unit counts
(paper, g = 3: 240/480/960 and 4/8/4; the default halves the channels,
"ShuffleNet 0.5x"). The channel shuffle is a custom operator; the rest are
stock nf.nn ops.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, conv_bn, torch_conv_bn
from .network import Network


def channel_shuffle(x, groups):
    """Output channel c = i * groups + j takes input channel j * (C / groups) + i
    (the reshape-transpose-reshape of the paper, as one index expression).

    >>> y = channel_shuffle(nf.placeholder((8, 30, 16, 16), name="x"), 3)
    """
    per = x.shape[1] // groups
    return te.compute(x.shape, lambda b, c, h, w: x[b, (c % groups) * per + c // groups, h, w],
                      name="channel_shuffle")


def units(stem, channels, repeats):
    """[(name, in channels, out channels, stride, first-stage-first-unit)] of every unit.

    >>> units(24, (120, 240), (2, 1))[:2]
    [('stage0.0', 24, 120, 2, True), ('stage0.1', 120, 120, 1, False)]
    """
    out, cin = [], stem
    for stage, (cout, n) in enumerate(zip(channels, repeats)):
        for r in range(n):
            out.append((f"stage{stage}.{r}", cin, cout, 2 if r == 0 else 1,
                        stage == 0 and r == 0))
            cin = cout
    return out


def _build(ps, dtype, batch, image, groups, stem, channels, repeats, classes):
    x = te.placeholder((batch, 3, image, image), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h = nn.max_pool2d(conv_bn(ps, x, "stem", stem, 3, stride=2, act="relu"), 3, 2, padding=1)
    for name, cin, cout, stride, first in units(stem, channels, repeats):
        mid = cout // 4
        branch = conv_bn(ps, h, f"{name}.compress", mid, 1, groups=1 if first else groups,
                         act="relu")
        branch = conv_bn(ps, channel_shuffle(branch, groups), f"{name}.dw", mid, 3,
                         stride=stride, groups=mid)
        branch = conv_bn(ps, branch, f"{name}.expand", cout - cin if stride == 2 else cout, 1,
                         groups=groups)
        if stride == 2:
            h = nn.relu(nn.concat([nn.avg_pool2d(h, 3, 2, padding=1), branch], dim=1))
        else:
            h = nn.relu(h + branch)
    h = nn.mean(h, dim=(2, 3))
    logits = nn.dense(h, ps("fc.weight", (classes, h.shape[1])),
                      ps("fc.bias", (classes,), "zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def torch_channel_shuffle(x, groups):
    """The torch form of `channel_shuffle`.

    >>> torch_channel_shuffle(torch.arange(6.0).view(1, 6, 1, 1), 2).flatten().tolist()
    [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]
    """
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def _torch_loss(p, data, groups, stem, channels, repeats, **_):
    import torch
    import torch.nn.functional as F
    h = F.max_pool2d(torch_conv_bn(p, data["x"], "stem", 3, stride=2, act="relu"), 3, 2,
                     padding=1)
    for name, cin, cout, stride, first in units(stem, channels, repeats):
        branch = torch_conv_bn(p, h, f"{name}.compress", 1, groups=1 if first else groups,
                               act="relu")
        branch = torch_conv_bn(p, torch_channel_shuffle(branch, groups), f"{name}.dw", 3,
                               stride=stride, groups=cout // 4)
        branch = torch_conv_bn(p, branch, f"{name}.expand", 1, groups=groups)
        if stride == 2:
            h = F.relu(torch.cat([F.avg_pool2d(h, 3, 2, padding=1), branch], dim=1))
        else:
            h = F.relu(h + branch)
    h = h.mean(dim=(2, 3))
    return F.cross_entropy(F.linear(h, p["fc.weight"], p["fc.bias"]), data["y"])


def _make_batch(rng, dtype, batch, image, classes, **_):
    return classification_batch(rng, dtype, (batch, 3, image, image), classes)


NETWORK = Network(
    "shufflenet", "cnn", "ShuffleNet v1 0.5x (g = 3, group convs, channel shuffle) on 64x64",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=8, image=64, groups=3, stem=24, channels=(120, 240, 480),
                  repeats=(4, 8, 4), classes=10),
    small=dict(batch=4, image=32, groups=2, stem=4, channels=(8, 16), repeats=(1, 2),
               classes=3))
