"""subLSTM: the LSTM with subtractive gating (Costa et al., "Cortical
microcircuits as gated-recurrent neural networks", NeurIPS 2017), unrolled
over `steps` inputs, with a dense classifier on the last output.

All four gates are sigmoids of W x_t + R h_{t-1} + b (z, i, f, o in that
order); gating subtracts instead of multiplying:
    c_t = sigmoid(f) * c_{t-1} + sigmoid(z) - sigmoid(i)
    h_t = sigmoid(c_t) - sigmoid(o)
The input projections of every step are one dense op; the gates (sum and
sigmoid), the cell and the output updates are custom operators.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import classification_batch, zeros
from .network import Network


def _build(ps, dtype, batch, steps, n_in, state, classes):
    x = te.placeholder((batch, steps, n_in), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    W = ps("sub.W", (4 * state, n_in))
    R = ps("sub.R", (4 * state, state))
    bias = ps("sub.bias", (4 * state,), init="zeros")
    wx = nn.dense(x, W)                                  # (batch, steps, 4 * state)
    h = c = zeros((batch, state), dtype, "sub_h0")
    for t in range(steps):
        rh = nn.dense(h, R)
        gates = te.compute((batch, 4 * state), lambda b, j, t=t, rh=rh:
                           te.sigmoid(wx[b, t, j] + rh[b, j] + bias[j]), name=f"sub_gates{t}")
        c = te.compute((batch, state), lambda b, s, c=c, g=gates:
                       g[b, 2 * state + s] * c[b, s] + g[b, s] - g[b, state + s], name=f"sub_c{t}")
        h = te.compute((batch, state), lambda b, s, c=c, g=gates:
                       te.sigmoid(c[b, s]) - g[b, 3 * state + s], name=f"sub_h{t}")
    logits = nn.dense(h, ps("head.weight", (classes, state)),
                      ps("head.bias", (classes,), init="zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, steps, state, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    wx = F.linear(x, p["sub.W"])
    h = c = x.new_zeros((x.shape[0], state))
    for t in range(steps):
        z, i, f, o = torch.sigmoid(wx[:, t] + F.linear(h, p["sub.R"]) + p["sub.bias"]).chunk(4, 1)
        c = f * c + z - i
        h = torch.sigmoid(c) - o
    return F.cross_entropy(F.linear(h, p["head.weight"], p["head.bias"]), data["y"])


def _make_batch(rng, dtype, batch, steps, n_in, classes, **_):
    return classification_batch(rng, dtype, (batch, steps, n_in), classes)


NETWORK = Network(
    "sublstm", "novel", "subLSTM (subtractive-gating LSTM), unrolled, classifier head",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, steps=8, n_in=128, state=128, classes=10),
    small=dict(batch=3, steps=3, n_in=5, state=4, classes=3))
