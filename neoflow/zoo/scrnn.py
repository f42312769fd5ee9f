"""SCRNN: the structurally constrained recurrent network (Mikolov et al.,
"Learning Longer Memory in Recurrent Neural Networks", 2015), unrolled over
`steps` inputs, classifying from the last step's output layer.

A slow context state s and a fast hidden state h:
    s_t = (1 - alpha) * B x_t + alpha * s_{t-1}              (alpha fixed, 0.95)
    h_t = sigmoid(P s_t + A x_t + R h_{t-1})
    logits = U h_T + V s_T,  cross-entropy
The input projections of every step are dense ops; the context update and
the hidden state (two recurrent sums and the sigmoid in one expression)
are custom operators.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, zeros
from .network import Network

ALPHA = 0.95


def _build(ps, dtype, batch, steps, n_in, hidden, context, classes):
    x = te.placeholder((batch, steps, n_in), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    B = ps("scrnn.B", (context, n_in))
    A = ps("scrnn.A", (hidden, n_in))
    P = ps("scrnn.P", (hidden, context))
    R = ps("scrnn.R", (hidden, hidden))
    bx, ax = nn.dense(x, B), nn.dense(x, A)           # (batch, steps, context | hidden)
    s = zeros((batch, context), dtype, "scrnn_s0")
    h = zeros((batch, hidden), dtype, "scrnn_h0")
    for t in range(steps):
        s = te.compute((batch, context), lambda b, j, s=s, t=t:
                       (1 - ALPHA) * bx[b, t, j] + ALPHA * s[b, j], name=f"scrnn_s{t}")
        k = te.reduce_axis(context, name="k")
        m = te.reduce_axis(hidden, name="m")
        h = te.compute((batch, hidden), lambda b, j, s=s, h=h, t=t, k=k, m=m: te.sigmoid(
            te.sum(P[j, k] * s[b, k], axis=k) + ax[b, t, j] + te.sum(R[j, m] * h[b, m], axis=m)),
            name=f"scrnn_h{t}")
    logits = (nn.dense(h, ps("out.U", (classes, hidden)))
              + nn.dense(s, ps("out.V", (classes, context))))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, steps, hidden, context, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    bx, ax = F.linear(x, p["scrnn.B"]), F.linear(x, p["scrnn.A"])
    s, h = x.new_zeros((x.shape[0], context)), x.new_zeros((x.shape[0], hidden))
    for t in range(steps):
        s = (1 - ALPHA) * bx[:, t] + ALPHA * s
        h = torch.sigmoid(F.linear(s, p["scrnn.P"]) + ax[:, t] + F.linear(h, p["scrnn.R"]))
    logits = F.linear(h, p["out.U"]) + F.linear(s, p["out.V"])
    return F.cross_entropy(logits, data["y"])


def _make_batch(rng, dtype, batch, steps, n_in, classes, **_):
    return classification_batch(rng, dtype, (batch, steps, n_in), classes)


NETWORK = Network(
    "scrnn", "novel", "SCRNN (structurally constrained RNN: context + hidden), unrolled",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, steps=8, n_in=784, hidden=128, context=64, classes=10),
    small=dict(batch=3, steps=3, n_in=5, hidden=4, context=3, classes=3))
