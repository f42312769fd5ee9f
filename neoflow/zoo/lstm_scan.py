"""LSTM over a whole sequence with `nf.scan`: torch.nn.LSTM's cell (gates
i, f, g, o; weights shaped as torch's weight_ih_l0 / weight_hh_l0) run over
T steps as one recurrence -- the step is written once, not unrolled -- with
a dense classifier on the last hidden state and cross-entropy.

The input projection of every step is one dense op outside the scan; the
step reads its row t, adds the recurrent projection and updates (h, c).

Hands on: `lstm_layer` (used by tests, bench/scan.py and the example) and
the `NETWORK` record (see zoo.network).
"""
import numpy as np

from .. import nn, te
from ..te.scan import scan
from .layers import classification_batch, zeros
from .network import Network


def lstm_layer(x, h0, c0, w_ih, w_hh, b_ih=None, b_hh=None, name="lstm"):
    """(hs, cs), each (T, B, H): torch.nn.LSTM's one-layer recurrence over x (T, B, I).

    >>> hs, cs = lstm_layer(x, h0, c0, w_ih, w_hh, b_ih, b_hh)   # doctest: +SKIP
    """
    T, B, _ = x.shape
    H = h0.shape[1]
    wx = nn.dense(x, w_ih)                                   # (T, B, 4H)
    k = te.reduce_axis(H, name="k")

    def bias(j):
        out = 0.0
        for b in (b_ih, b_hh):
            if b is not None:
                out = b[j] + out
        return out

    def step(t, prev):
        h, c = prev
        pre = te.compute((B, 4 * H), lambda b, j: wx[t, b, j] + bias(j)
                         + te.sum(h[b, k] * w_hh[j, k], axis=k), name=f"{name}_gates")
        c2 = te.compute((B, H), lambda b, s: te.sigmoid(pre[b, H + s]) * c[b, s]
                        + te.sigmoid(pre[b, s]) * te.tanh(pre[b, 2 * H + s]), name=f"{name}_c")
        h2 = te.compute((B, H), lambda b, s: te.sigmoid(pre[b, 3 * H + s]) * te.tanh(c2[b, s]),
                        name=f"{name}_h")
        return h2, c2

    return scan((h0, c0), step, T, name=name)


def _build(ps, dtype, batch, steps, n_in, hidden, classes):
    x = te.placeholder((steps, batch, n_in), dtype, name="x")
    y = te.placeholder((batch,), "int64", name="y")
    h0 = zeros((batch, hidden), dtype, "lstm_h0")
    hs, _ = lstm_layer(x, h0, h0, ps("lstm.weight_ih_l0", (4 * hidden, n_in)),
                       ps("lstm.weight_hh_l0", (4 * hidden, hidden)),
                       ps("lstm.bias_ih_l0", (4 * hidden,), init="zeros"),
                       ps("lstm.bias_hh_l0", (4 * hidden,), init="zeros"))
    last = te.compute((batch, hidden), lambda b, s: hs[steps - 1, b, s], name="lstm_last")
    logits = nn.dense(last, ps("head.weight", (classes, hidden)),
                      ps("head.bias", (classes,), init="zeros"))
    return nn.cross_entropy(logits, y), {"x": x, "y": y}


def _torch_loss(p, data, hidden, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    h = c = x.new_zeros((x.shape[1], hidden))
    for t in range(x.shape[0]):
        pre = (F.linear(x[t], p["lstm.weight_ih_l0"], p["lstm.bias_ih_l0"])
               + F.linear(h, p["lstm.weight_hh_l0"], p["lstm.bias_hh_l0"]))
        i, f, g, o = pre.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    return F.cross_entropy(F.linear(h, p["head.weight"], p["head.bias"]), data["y"])


def _make_batch(rng, dtype, batch, steps, n_in, classes, **_):
    data = classification_batch(rng, dtype, (batch, steps, n_in), classes)
    return {"x": np.ascontiguousarray(data["x"].transpose(1, 0, 2)), "y": data["y"]}


NETWORK = Network(
    "lstm_scan", "novel", "LSTM over the whole sequence as one nf.scan, classifier head",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, steps=64, n_in=256, hidden=256, classes=10),
    small=dict(batch=3, steps=5, n_in=4, hidden=3, classes=3))
