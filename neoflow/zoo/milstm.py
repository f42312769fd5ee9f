"""MI-LSTM: the LSTM with multiplicative integration (Wu et al., "On
Multiplicative Integration with Recurrent Neural Networks", NeurIPS 2016),
unrolled over `steps` inputs, with a dense classifier on the last hidden
state and cross-entropy.

Each gate (i, f, o, candidate z) combines Wx = W x_t and Uh = U h_{t-1} as
    alpha * Wx * Uh + beta1 * Uh + beta2 * Wx + bias
and c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(z), h_t = sigmoid(o) * tanh(c_t).
The input projections of every step are one dense op (x is batch-first);
the multiplicative integration (all four gates' pre-activations) and the
cell and output updates are custom operators in the expression language.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, zeros
from .network import Network


def _build(ps, dtype, batch, steps, n_in, hidden, classes):
    x = te.placeholder((batch, steps, n_in), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    W = ps("mi.W", (4 * hidden, n_in))
    U = ps("mi.U", (4 * hidden, hidden))
    alpha = ps("mi.alpha", (4 * hidden,), init="ones")
    beta1 = ps("mi.beta1", (4 * hidden,), init="ones")
    beta2 = ps("mi.beta2", (4 * hidden,), init="ones")
    bias = ps("mi.bias", (4 * hidden,), init="zeros")
    wx = nn.dense(x, W)                                   # (batch, steps, 4 * hidden)
    h = c = zeros((batch, hidden), dtype, "mi_h0")
    for t in range(steps):
        uh = nn.dense(h, U)
        pre = te.compute((batch, 4 * hidden), lambda b, j, t=t, uh=uh:
                         alpha[j] * wx[b, t, j] * uh[b, j] + beta1[j] * uh[b, j]
                         + beta2[j] * wx[b, t, j] + bias[j], name=f"mi_pre{t}")
        c = te.compute((batch, hidden), lambda b, s, c=c, pre=pre:
                       te.sigmoid(pre[b, hidden + s]) * c[b, s]
                       + te.sigmoid(pre[b, s]) * te.tanh(pre[b, 3 * hidden + s]), name=f"mi_c{t}")
        h = te.compute((batch, hidden), lambda b, s, c=c, pre=pre:
                       te.sigmoid(pre[b, 2 * hidden + s]) * te.tanh(c[b, s]), name=f"mi_h{t}")
    logits = nn.dense(h, ps("head.weight", (classes, hidden)),
                      ps("head.bias", (classes,), init="zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, steps, hidden, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    wx = F.linear(x, p["mi.W"])
    h = c = x.new_zeros((x.shape[0], hidden))
    for t in range(steps):
        uh = F.linear(h, p["mi.U"])
        pre = (p["mi.alpha"] * wx[:, t] * uh + p["mi.beta1"] * uh + p["mi.beta2"] * wx[:, t]
               + p["mi.bias"])
        i, f, o, z = pre.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
        h = torch.sigmoid(o) * torch.tanh(c)
    return F.cross_entropy(F.linear(h, p["head.weight"], p["head.bias"]), data["y"])


def _make_batch(rng, dtype, batch, steps, n_in, classes, **_):
    return classification_batch(rng, dtype, (batch, steps, n_in), classes)


NETWORK = Network(
    "milstm", "novel", "MI-LSTM (multiplicative-integration LSTM), unrolled, classifier head",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, steps=8, n_in=784, hidden=1024, classes=10),
    small=dict(batch=3, steps=3, n_in=5, hidden=4, classes=3))
