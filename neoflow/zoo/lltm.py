"""LLTM: the "long-long-term memory" cell of PyTorch's C++/CUDA extension
tutorial, unrolled over `steps` inputs, regressing a target vector from the
last hidden state (mean squared error).

    gates = W [h_{t-1}, x_t] + b               (W: (3 * state, state + n_in))
    c_t = c_{t-1} + elu(g_candidate) * sigmoid(g_input)
    h_t = tanh(c_t) * sigmoid(g_output)
The gate matrix product is one custom operator: two sums over the halves of
W's columns, so [h, x] is never concatenated; the cell update (with its ELU
written inline) and the output are custom operators too.

Hands on: the `NETWORK` record (see zoo.network).
"""
from .. import nn, te
from .layers import zeros
from .network import Network


def _build(ps, dtype, batch, steps, n_in, state, n_out):
    x = te.placeholder((batch, steps, n_in), dtype, name="x")
    y = te.placeholder((batch, n_out), dtype, name="y")
    W = ps("lltm.weight", (3 * state, state + n_in))
    bias = ps("lltm.bias", (3 * state,), init="zeros")
    h = c = zeros((batch, state), dtype, "lltm_h0")
    for t in range(steps):
        k = te.reduce_axis(state, name="k")
        f = te.reduce_axis(n_in, name="f")
        gates = te.compute((batch, 3 * state), lambda b, g, h=h, t=t, k=k, f=f:
                           te.sum(W[g, k] * h[b, k], axis=k)
                           + te.sum(W[g, state + f] * x[b, t, f], axis=f) + bias[g],
                           name=f"lltm_gates{t}")

        def elu(v):
            return te.where(v > 0, v, te.exp(v) - 1)

        c = te.compute((batch, state), lambda b, s, c=c, gates=gates:
                       c[b, s] + elu(gates[b, 2 * state + s]) * te.sigmoid(gates[b, s]),
                       name=f"lltm_c{t}")
        h = te.compute((batch, state), lambda b, s, c=c, gates=gates:
                       te.tanh(c[b, s]) * te.sigmoid(gates[b, state + s]), name=f"lltm_h{t}")
    out = nn.dense(h, ps("head.weight", (n_out, state)), ps("head.bias", (n_out,), init="zeros"))
    return nn.mse_loss(out, y), {"x": x, "y": y}


def _torch_loss(p, data, steps, state, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    h = c = x.new_zeros((x.shape[0], state))
    for t in range(steps):
        gates = F.linear(torch.cat([h, x[:, t]], dim=1), p["lltm.weight"], p["lltm.bias"])
        g_input, g_output, g_candidate = gates.chunk(3, dim=1)
        c = c + F.elu(g_candidate) * torch.sigmoid(g_input)
        h = torch.tanh(c) * torch.sigmoid(g_output)
    return F.mse_loss(F.linear(h, p["head.weight"], p["head.bias"]), data["y"])


def _make_batch(rng, dtype, batch, steps, n_in, n_out, **_):
    return {"x": rng.standard_normal((batch, steps, n_in)).astype(dtype),
            "y": rng.standard_normal((batch, n_out)).astype(dtype)}


NETWORK = Network(
    "lltm", "novel", "LLTM (PyTorch extension-tutorial cell), unrolled, regression head",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=64, steps=8, n_in=32, state=128, n_out=8),
    small=dict(batch=3, steps=3, n_in=5, state=4, n_out=2))
