"""CapsuleNet: capsules with dynamic routing (Sabour et al., "Dynamic
Routing Between Capsules", NeurIPS 2017) for square single-channel images,
trained with the margin loss (the reconstruction decoder is left out).

    conv k1 x k1, conv_channels - relu
    primary capsules: conv k2 x k2 stride 2 to types * dim channels, one
        dim-vector per (type, y, x), squashed
    digit capsules: u_hat[b, i, j] = W[i, j] u[b, i] (out_dim vectors), then
        `routing` iterations of routing by agreement:
        c = softmax_j(logits); s_j = sum_i c_ij u_hat_ij; v_j = squash(s_j);
        logits_ij += u_hat_ij . v_j
    margin loss: sum_k T_k max(0, 0.9 - |v_k|)^2 + 0.5 (1 - T_k) max(0, |v_k| - 0.1)^2,
        mean over the batch
Capsule gathering, squash, votes, routing and the margin loss are custom
operators. Gradients flow through every routing iteration (no detach).
squash and |v| use sqrt(|s|^2 + EPS) so they stay differentiable at 0.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, zeros
from .network import Network

EPS = 1e-9


def squash(s, name):
    """v = s * |s|^2 / (1 + |s|^2) / sqrt(|s|^2 + EPS) over the last axis.

    >>> v = squash(nf.placeholder((16, 10, 16), name="s"), "v")
    """
    *lead, dim = s.shape
    d = te.reduce_axis(dim, name="d")
    n2 = te.compute(tuple(lead), lambda *i: te.sum(s[i + (d,)] * s[i + (d,)], axis=d),
                    name=f"{name}_norm2")
    return te.compute(s.shape, lambda *i: s[i] * (n2[i[:-1]] / (1 + n2[i[:-1]]))
                      * te.rsqrt(n2[i[:-1]] + EPS), name=name)


def _build(ps, dtype, batch, image, conv_channels, conv_kernel, types, dim, caps_kernel,
          classes, out_dim, routing):
    x = te.placeholder((batch, 1, image, image), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h = nn.relu(nn.conv2d(x, ps("conv1.weight", (conv_channels, 1, conv_kernel, conv_kernel),
                                "kaiming"), ps("conv1.bias", (conv_channels,), "zeros")))
    prim = nn.conv2d(h, ps("primary.weight", (types * dim, conv_channels, caps_kernel,
                                              caps_kernel), "kaiming"),
                     ps("primary.bias", (types * dim,), "zeros"), stride=2)
    side = prim.shape[-1]
    n_caps = types * side * side
    u = squash(te.compute((batch, n_caps, dim), lambda b, i, e: prim[
        b, (i // (side * side)) * dim + e, (i // side) % side, i % side], name="primary_caps"),
        "primary_squash")
    W = ps("digit.W", (n_caps, classes, out_dim, dim))
    d = te.reduce_axis(dim, name="d")
    votes = te.compute((batch, n_caps, classes, out_dim), lambda b, i, j, e:
                       te.sum(W[i, j, e, d] * u[b, i, d], axis=d), name="votes")
    logits = zeros((batch, n_caps, classes), dtype, "routing_logits0")
    for r in range(routing):
        c = nn.softmax(logits, dim=2)
        i = te.reduce_axis(n_caps, name="i")
        s = te.compute((batch, classes, out_dim), lambda b, j, e, c=c, i=i:
                       te.sum(c[b, i, j] * votes[b, i, j, e], axis=i), name=f"routing_s{r}")
        v = squash(s, f"routing_v{r}")
        if r + 1 < routing:
            e = te.reduce_axis(out_dim, name="e")
            logits = te.compute((batch, n_caps, classes), lambda b, i, j, v=v, e=e, old=logits:
                                old[b, i, j] + te.sum(votes[b, i, j, e] * v[b, j, e], axis=e),
                                name=f"routing_logits{r + 1}")
    e = te.reduce_axis(out_dim, name="e")
    length = te.compute((batch, classes), lambda b, j: te.sqrt(
        te.sum(v[b, j, e] * v[b, j, e], axis=e) + EPS), name="capsule_length")
    rb, rj = te.reduce_axis(batch, name="rb"), te.reduce_axis(classes, name="rj")

    def margin(b, j):
        present = te.maximum(0.9 - length[b, j], 0.0)
        absent = te.maximum(length[b, j] - 0.1, 0.0)
        return te.where(y[b] == j, present * present, 0.5 * absent * absent)

    loss = te.compute((), lambda: te.sum(margin(rb, rj), axis=[rb, rj]) / batch,
                      name="margin_loss")
    return loss, {"x": x, "y": y}


def torch_squash(s):
    """The torch form of `squash`.

    >>> v = torch_squash(torch.randn(16, 10, 16))
    """
    import torch
    n2 = (s * s).sum(-1, keepdim=True)
    return s * (n2 / (1 + n2)) * torch.rsqrt(n2 + EPS)


def _torch_loss(p, data, types, dim, classes, routing, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    h = F.relu(F.conv2d(x, p["conv1.weight"], p["conv1.bias"]))
    prim = F.conv2d(h, p["primary.weight"], p["primary.bias"], stride=2)
    side = prim.shape[-1]
    u = prim.view(x.shape[0], types, dim, side, side).permute(0, 1, 3, 4, 2)
    u = torch_squash(u.reshape(x.shape[0], types * side * side, dim))
    votes = torch.einsum("ijed,bid->bije", p["digit.W"], u)
    logits = votes.new_zeros(votes.shape[:3])
    for r in range(routing):
        c = F.softmax(logits, dim=2)
        v = torch_squash((c.unsqueeze(-1) * votes).sum(1))
        if r + 1 < routing:
            logits = logits + (votes * v.unsqueeze(1)).sum(-1)
    length = torch.sqrt((v * v).sum(-1) + EPS)
    present = F.one_hot(data["y"], classes).to(x.dtype)
    loss = present * F.relu(0.9 - length) ** 2 + 0.5 * (1 - present) * F.relu(length - 0.1) ** 2
    return loss.sum(1).mean()


def _make_batch(rng, dtype, batch, image, classes, **_):
    return classification_batch(rng, dtype, (batch, 1, image, image), classes)


NETWORK = Network(
    "capsnet", "novel", "CapsuleNet (dynamic routing, margin loss) on 28x28 images",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=16, image=28, conv_channels=256, conv_kernel=9, types=32, dim=8,
                  caps_kernel=9, classes=10, out_dim=16, routing=3),
    small=dict(batch=2, image=10, conv_channels=3, conv_kernel=3, types=2, dim=3,
               caps_kernel=3, classes=3, out_dim=4, routing=3))
