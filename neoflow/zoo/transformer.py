"""A pre-norm transformer block whose attention is a custom operator:
causal sliding-window attention with a learned relative-position bias and
talking heads (Shazeer et al., 2020: the heads' logits are mixed by a
learned heads x heads matrix before the softmax), trained to regress a
target sequence (mean squared error).

    h = LN(x);  q, k, v = dense(h)  (heads of size dim / heads)
    a[b, h, i, w] = q_i . k_{i-w} / sqrt(dh) + rel[h, w]    for 0 <= w < window, w <= i
    m[b, g, i, w] = sum_h mix[g, h] a[b, h, i, w]             (talking heads)
    p = softmax over w (valid offsets only);  ctx_i = sum_w p[., i, w] v_{i-w}
    x1 = x + dense(ctx);  y = x1 + dense(gelu(dense(LN(x1))))
The attention is written in a banded layout (query i, offset w), so no
work is spent outside the window; the PyTorch twin computes full (T x T)
scores and masks them, as a PyTorch user would.

Hands on: the `NETWORK` record (see zoo.network).
"""
import numpy as np

from .. import nn, te
from .network import Network


def windowed_attention(q, k, v, rel, mix, heads):
    """The custom attention: q, k, v (batch, seq, dim); rel (heads, window);
    mix (heads, heads). Returns the context (batch, seq, dim).

    >>> ctx = windowed_attention(q, k, v, rel, mix, heads=4)
    """
    batch, seq, dim = q.shape
    window, dh = rel.shape[1], dim // heads
    scale = 1.0 / float(np.sqrt(dh))
    e = te.reduce_axis(dh, name="e")
    a = te.compute((batch, heads, seq, window), lambda b, h, i, w: te.sum(
        q[b, i, h * dh + e] * k[b, i - w, h * dh + e], axis=e, where=w <= i) * scale + rel[h, w],
        name="attn_logits")
    r = te.reduce_axis(heads, name="r")
    m = te.compute((batch, heads, seq, window), lambda b, g, i, w: te.sum(
        mix[g, r] * a[b, r, i, w], axis=r), name="attn_mixed")
    w1, w2 = te.reduce_axis(window, name="w1"), te.reduce_axis(window, name="w2")
    top = te.compute((batch, heads, seq), lambda b, g, i: te.max(
        m[b, g, i, w1], axis=w1, where=w1 <= i), name="attn_max")
    den = te.compute((batch, heads, seq), lambda b, g, i: te.sum(
        te.exp(m[b, g, i, w2] - top[b, g, i]), axis=w2, where=w2 <= i), name="attn_den")
    p = te.compute((batch, heads, seq, window), lambda b, g, i, w: te.where(
        w <= i, te.exp(m[b, g, i, w] - top[b, g, i]) / den[b, g, i], te.const(0.0, q.dtype)),
        name="attn_probs")
    w3 = te.reduce_axis(window, name="w3")
    return te.compute((batch, seq, dim), lambda b, i, c: te.sum(
        p[b, c // dh, i, w3] * v[b, i - w3, c], axis=w3, where=w3 <= i), name="attn_context")


def _build(ps, dtype, batch, seq, dim, heads, window, ff):
    x = te.placeholder((batch, seq, dim), dtype, name="x")
    y = te.placeholder((batch, seq, dim), dtype, name="y")

    def dense(t, name, n_out):
        return nn.dense(t, ps(f"{name}.weight", (n_out, t.shape[-1])),
                        ps(f"{name}.bias", (n_out,), "zeros"))

    def layer_norm(t, name):
        return nn.layer_norm(t, dim, ps(f"{name}.weight", (dim,), "ones"),
                             ps(f"{name}.bias", (dim,), "zeros"))

    h = layer_norm(x, "ln1")
    ctx = windowed_attention(dense(h, "attn.q", dim), dense(h, "attn.k", dim),
                             dense(h, "attn.v", dim), ps("attn.rel", (heads, window), "zeros"),
                             ps("attn.mix", (heads, heads), np.eye(heads)), heads)
    x1 = x + dense(ctx, "attn.out", dim)
    out = x1 + dense(nn.gelu(dense(layer_norm(x1, "ln2"), "mlp.fc1", ff)), "mlp.fc2", dim)
    return nn.mse_loss(out, y), {"x": x, "y": y}


def _torch_loss(p, data, heads, window, **_):
    import torch
    import torch.nn.functional as F
    x = data["x"]
    batch, seq, dim = x.shape
    dh = dim // heads

    def dense(t, name):
        return F.linear(t, p[f"{name}.weight"], p[f"{name}.bias"])

    def split(t):
        return t.view(batch, seq, heads, dh).transpose(1, 2)

    h = F.layer_norm(x, (dim,), p["ln1.weight"], p["ln1.bias"])
    q, k, v = (split(dense(h, f"attn.{n}")) for n in "qkv")
    offset = torch.arange(seq)[:, None] - torch.arange(seq)[None, :]      # i - j
    valid = (offset >= 0) & (offset < window)
    a = q @ k.transpose(-1, -2) * (1.0 / float(np.sqrt(dh))) \
        + p["attn.rel"][:, offset.clamp(0, window - 1)]
    m = torch.einsum("gh,bhij->bgij", p["attn.mix"], a).masked_fill(~valid, float("-inf"))
    ctx = (F.softmax(m, dim=-1) @ v).transpose(1, 2).reshape(batch, seq, dim)
    x1 = x + dense(ctx, "attn.out")
    h2 = F.layer_norm(x1, (dim,), p["ln2.weight"], p["ln2.bias"])
    return F.mse_loss(x1 + dense(F.gelu(dense(h2, "mlp.fc1")), "mlp.fc2"), data["y"])


def _make_batch(rng, dtype, batch, seq, dim, **_):
    return {"x": rng.standard_normal((batch, seq, dim)).astype(dtype),
            "y": rng.standard_normal((batch, seq, dim)).astype(dtype)}


NETWORK = Network(
    "transformer", "transformer",
    "transformer block with custom windowed talking-heads attention (relative-position bias)",
    _build, _torch_loss, _make_batch,
    defaults=dict(batch=8, seq=64, dim=128, heads=4, window=16, ff=512),
    small=dict(batch=2, seq=5, dim=6, heads=2, window=3, ff=8))
