"""DCGAN (Radford, Metz and Chintala, "Unsupervised Representation Learning
with Deep Convolutional Generative Adversarial Networks", ICLR 2016), as in
the PyTorch DCGAN example, for square images of side 4 * 2^L:

    generator G: z (N, nz, 1, 1) - conv_transpose 4x4 (stride 1) to ngf * 2^(L-1)
        channels, 4x4 - BN - relu - L - 1 times [conv_transpose 4x4 stride 2
        padding 1, channels halved - BN - relu] - conv_transpose 4x4 stride 2
        padding 1 to `channels` - tanh
    discriminator D: conv 4x4 stride 2 padding 1 to ndf - leaky relu 0.2 -
        L - 1 times [conv 4x4 stride 2 padding 1, channels doubled - BN -
        leaky relu 0.2] - conv 4x4 (stride 1) to 1 logit
No biases (the example's bias=False). Losses: binary cross-entropy on D's
logits, D: real -> 1 and G(z) -> 0; G: D(G(z)) -> 1 (non-saturating).

Training alternates two phases, each a Model of its own (zoo.network):
"discriminator" trains D's parameters with G's as requires_grad=False
copies, "generator" trains G's with D's as copies; zoo.alternating runs one
nf.Trainer per phase and, after each step, loads the parameters that phase
changed into the other trainer (Trainer.parameters / load_parameters). One
round uses one batch (x real images, z noise) for both phases: the round
of the PyTorch example, where fake = G(z) serves D's step (detached) and
G's. G's batch norms update their running statistics in the generator
phase only (once per round, as the example's one G forward does); in the
discriminator phase they normalise with the batch statistics alone. D's
batch norms keep no running statistics (D runs only in training mode;
torch's track_running_stats=False), since D runs twice per round.

Hands on: the `NETWORK` record (see zoo.network).
"""
import math

from .. import nn, te
from .layers import leaky_relu
from .network import Network

PHASES = ("discriminator", "generator")
SLOPE = 0.2


def depth(image):
    """L, the number of upsamplings (image = 4 * 2^L).

    >>> depth(64)
    4
    """
    layers = round(math.log2(image / 4))
    if image != 4 * 2 ** layers or layers < 1:
        raise ValueError(f"dcgan: image must be 4 * 2^L with L >= 1 (8, 16, 32, 64, ...), "
                         f"got {image}")
    return layers


def _bn(ps, x, name, trainable, running):
    c = x.shape[1]
    weight = ps(f"{name}.weight", (c,), "ones", requires_grad=trainable)
    bias = ps(f"{name}.bias", (c,), "zeros", requires_grad=trainable)
    mean = var = None
    if running:
        mean = ps(f"{name}.running_mean", (c,), "zeros", requires_grad=False)
        var = ps(f"{name}.running_var", (c,), "ones", requires_grad=False)
    return nn.batch_norm(x, mean, var, weight, bias, training=True)


def generator(ps, z, image, ngf, channels, trainable, running):
    """G(z) (N, channels, image, image); parameters "G.*" made through ps.

    >>> fake = generator(ps, z, 32, 64, 3, trainable=True, running=True)
    """
    layers = depth(image)
    h, cin = z, z.shape[1]
    for n in range(layers + 1):
        last = n == layers
        cout = channels if last else ngf * 2 ** (layers - 1 - n)
        w = ps(f"G.convt{n}.weight", (cin, cout, 4, 4), "kaiming", requires_grad=trainable)
        h = nn.conv_transpose2d(h, w, stride=1 if n == 0 else 2, padding=0 if n == 0 else 1)
        h = nn.tanh(h) if last else nn.relu(_bn(ps, h, f"G.bn{n}", trainable, running))
        cin = cout
    return h


def discriminator(ps, x, ndf, trainable, made=None):
    """D's logits (N,) of images x; parameters "D.*" through ps, or the
    tensors of an earlier call in `made` ({name: tensor}) when D is applied
    again.

    >>> logits = discriminator(ps, x, 64, trainable=True)
    """
    layers = depth(x.shape[2])
    made = {} if made is None else made

    def param(name, shape, init):
        if name not in made:
            made[name] = ps(name, shape, init, requires_grad=trainable)
        return made[name]

    h, cin = x, x.shape[1]
    for n in range(layers):
        cout = ndf * 2 ** n
        h = nn.conv2d(h, param(f"D.conv{n}.weight", (cout, cin, 4, 4), "kaiming"), stride=2,
                      padding=1)
        if n:
            c = h.shape[1]
            h = nn.batch_norm(h, None, None, param(f"D.bn{n}.weight", (c,), "ones"),
                              param(f"D.bn{n}.bias", (c,), "zeros"), training=True)
        h = leaky_relu(h, SLOPE)
        cin = cout
    out = nn.conv2d(h, param(f"D.conv{layers}.weight", (1, cin, 4, 4), "kaiming"))
    return nn.reshape(out, (x.shape[0],))


def bce_with_logits(logits, target):
    """F.binary_cross_entropy_with_logits against a constant 0/1 target:
    the mean of softplus(-l) (target 1) or softplus(l) (target 0).

    >>> loss = bce_with_logits(logits, 1)
    """
    sign = -1.0 if target == 1 else 1.0

    def softplus(i):
        v = logits[i] * sign
        return te.maximum(v, 0.0) + te.log(te.exp(-te.abs(v)) + 1.0)
    return nn.mean(te.compute(logits.shape, softplus, name="bce_with_logits"))


def _build(ps, dtype, phase, batch, image, nz, ngf, ndf, channels):
    x = te.placeholder((batch, channels, image, image), dtype, name="x")
    z = te.placeholder((batch, nz, 1, 1), dtype, name="z")
    if phase == "discriminator":
        fake = generator(ps, z, image, ngf, channels, trainable=False, running=False)
        made = {}
        loss = bce_with_logits(discriminator(ps, x, ndf, True, made), 1) + bce_with_logits(
            discriminator(ps, fake, ndf, True, made), 0)
        return loss, {"x": x, "z": z}
    fake = generator(ps, z, image, ngf, channels, trainable=True, running=True)
    return bce_with_logits(discriminator(ps, fake, ndf, False), 1), {"z": z}


def torch_generator(p, z, running):
    """The torch form of `generator` (running: update G's running statistics)."""
    import torch.nn.functional as F
    layers = sum(1 for k in p if k.startswith("G.convt"))
    h = z
    for n in range(layers):
        h = F.conv_transpose2d(h, p[f"G.convt{n}.weight"], stride=1 if n == 0 else 2,
                               padding=0 if n == 0 else 1)
        if n == layers - 1:
            return h.tanh()
        stats = (p[f"G.bn{n}.running_mean"], p[f"G.bn{n}.running_var"]) if running else \
            (None, None)
        h = F.relu(F.batch_norm(h, *stats, p[f"G.bn{n}.weight"], p[f"G.bn{n}.bias"],
                                training=True))


def torch_discriminator(p, x):
    """The torch form of `discriminator`."""
    import torch.nn.functional as F
    layers = sum(1 for k in p if k.startswith("D.conv")) - 1
    h = x
    for n in range(layers):
        h = F.conv2d(h, p[f"D.conv{n}.weight"], stride=2, padding=1)
        if n:
            h = F.batch_norm(h, None, None, p[f"D.bn{n}.weight"], p[f"D.bn{n}.bias"],
                             training=True)
        h = F.leaky_relu(h, SLOPE)
    return F.conv2d(h, p[f"D.conv{layers}.weight"]).reshape(x.shape[0])


def _torch_loss(p, data, phase, **_):
    import torch
    import torch.nn.functional as F

    def bce(logits, target):
        return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))
    if phase == "discriminator":
        fake = torch_generator(p, data["z"], running=False).detach()
        return bce(torch_discriminator(p, data["x"]), 1.0) + bce(torch_discriminator(p, fake),
                                                                0.0)
    return bce(torch_discriminator(p, torch_generator(p, data["z"], running=True)), 1.0)


def _make_batch(rng, dtype, batch, image, nz, channels, **_):
    """Real images in [-1, 1] (tanh's range) and standard-normal noise."""
    return {"x": rng.uniform(-1.0, 1.0, (batch, channels, image, image)).astype(dtype),
            "z": rng.standard_normal((batch, nz, 1, 1)).astype(dtype)}


NETWORK = Network(
    "dcgan", "cnn", "DCGAN generator and discriminator (transposed convs, batch norm) on "
    "32x32 images, trained in alternating phases",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=16, image=32, nz=100, ngf=64, ndf=64, channels=3),
    small=dict(batch=4, image=16, nz=5, ngf=3, ndf=3, channels=2), phases=PHASES)
