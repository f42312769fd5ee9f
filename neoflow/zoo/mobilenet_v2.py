"""MobileNet-v2 (Sandler et al., "MobileNetV2: Inverted Residuals and Linear
Bottlenecks", CVPR 2018) for square RGB images, with torchvision's channel
rounding (multiples of 8) and a dense classifier (no dropout).

    stem: conv 3x3 stride 2 - BN - relu6
    inverted residual blocks (expansion t, channels c, repeats n, stride s):
        [1x1 expand - BN - relu6] - 3x3 depthwise - BN - relu6 - 1x1 project - BN
        (+ input when stride 1 and channels match)
    1x1 conv to `last` channels - BN - relu6 - global mean - dense classes
`settings` lists (t, c, n, s) per stage, as in the paper's Table 2; `width`
scales every channel count but `last` (torchvision's rule for width <= 1).
ReLU6 is a custom operator (zoo.layers); the rest are stock nf.nn ops.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, conv_bn, torch_conv_bn
from .network import Network

PAPER_SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                  (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def round_channels(channels, width, divisor=8):
    """torchvision's _make_divisible(channels * width, 8): the nearest
    multiple of 8, never below 8 nor below 90% of the scaled value.

    >>> round_channels(32, 0.5)
    16
    """
    value = channels * width
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def blocks(settings, width, stem):
    """[(name, in channels, out channels, stride, expansion)] of every block.

    >>> blocks(((1, 16, 1, 1), (6, 24, 2, 2)), 1.0, 32)[1]
    ('block1.0', 16, 24, 2, 6)
    """
    out, cin = [], round_channels(stem, width)
    for stage, (t, c, n, s) in enumerate(settings):
        cout = round_channels(c, width)
        for r in range(n):
            out.append((f"block{stage}.{r}", cin, cout, s if r == 0 else 1, t))
            cin = cout
    return out


def _build(ps, dtype, batch, image, width, stem, settings, last, classes):
    x = te.placeholder((batch, 3, image, image), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h = conv_bn(ps, x, "stem", round_channels(stem, width), 3, stride=2, act="relu6")
    for name, cin, cout, stride, t in blocks(settings, width, stem):
        inner = h
        if t != 1:
            inner = conv_bn(ps, inner, f"{name}.expand", cin * t, 1, act="relu6")
        inner = conv_bn(ps, inner, f"{name}.dw", cin * t, 3, stride=stride, groups=cin * t,
                        act="relu6")
        inner = conv_bn(ps, inner, f"{name}.project", cout, 1)
        h = h + inner if stride == 1 and cin == cout else inner
    h = nn.mean(conv_bn(ps, h, "last", last, 1, act="relu6"), dim=(2, 3))
    logits = nn.dense(h, ps("fc.weight", (classes, last)), ps("fc.bias", (classes,), "zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, width, stem, settings, **_):
    import torch.nn.functional as F
    h = torch_conv_bn(p, data["x"], "stem", 3, stride=2, act="relu6")
    for name, cin, cout, stride, t in blocks(settings, width, stem):
        inner = h
        if t != 1:
            inner = torch_conv_bn(p, inner, f"{name}.expand", 1, act="relu6")
        inner = torch_conv_bn(p, inner, f"{name}.dw", 3, stride=stride, groups=cin * t,
                              act="relu6")
        inner = torch_conv_bn(p, inner, f"{name}.project", 1)
        h = h + inner if stride == 1 and cin == cout else inner
    h = torch_conv_bn(p, h, "last", 1, act="relu6").mean(dim=(2, 3))
    return F.cross_entropy(F.linear(h, p["fc.weight"], p["fc.bias"]), data["y"])


def _make_batch(rng, dtype, batch, image, classes, **_):
    return classification_batch(rng, dtype, (batch, 3, image, image), classes)


NETWORK = Network(
    "mobilenet_v2", "cnn", "MobileNet-v2 (inverted residuals, batch norm) on 64x64 images",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=8, image=64, width=1.0, stem=32, settings=PAPER_SETTINGS, last=1280,
                  classes=10),
    small=dict(batch=4, image=16, width=1.0, stem=8, settings=((1, 8, 1, 1), (2, 8, 2, 2)),
               last=8, classes=3))
