"""Recurrent networks as nf.scan against torch in float64, forward and every
gradient: an LSTM (zoo.lstm_scan.lstm_layer) against torch.nn.LSTM over 1, 2
and 17 steps, a GRU against torch.nn.GRU, causal linear attention against its
O(T^2) masked form, a selective (Mamba-style) scan against a Python loop."""
import pytest
import torch

import neoflow as nf
from neoflow.zoo.lstm_scan import lstm_layer

from scan_check import check

B, I, H = 2, 3, 4


@pytest.mark.parametrize("T", [1, 2, 17])
def test_lstm_matches_torch_nn_lstm(T):
    def ours(x, h0, c0, wi, wh, bi, bh):
        hs, cs = lstm_layer(x, h0, c0, wi, wh, bi, bh)
        return nf.compute(hs.shape, lambda t, b, s: hs[t, b, s] + 0.5 * cs[t, b, s] * cs[t, b, s])

    def theirs(x, h0, c0, wi, wh, bi, bh):
        rnn = torch.nn.LSTM(I, H).double()
        params = dict(weight_ih_l0=wi, weight_hh_l0=wh, bias_ih_l0=bi, bias_hh_l0=bh)
        hs = torch.func.functional_call(rnn, params, (x, (h0[None], c0[None])))[0]
        # torch.nn.LSTM hands back h only: rebuild c from the gates of each step
        cs, c = [], c0
        for t in range(T):
            h = h0 if t == 0 else hs[t - 1]
            i, f, g, o = (x[t] @ wi.T + bi + h @ wh.T + bh).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            cs.append(c)
        return hs + 0.5 * torch.stack(cs) ** 2

    check(ours, theirs, [(T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,)],
          seed=T)


def gru_layer(x, h0, wi, wh, bi, bh):
    T = x.shape[0]
    gx = nf.nn.dense(x, wi, bi)                 # (T, B, 3H)
    k = nf.reduce_axis(H, name="k")

    def step(t, h):
        gh = nf.compute((B, 3 * H), lambda b, j: nf.sum(h[b, k] * wh[j, k], axis=k) + bh[j])
        r = nf.compute((B, H), lambda b, s: nf.sigmoid(gx[t, b, s] + gh[b, s]))
        z = nf.compute((B, H), lambda b, s: nf.sigmoid(gx[t, b, H + s] + gh[b, H + s]))
        n = nf.compute((B, H), lambda b, s: nf.tanh(gx[t, b, 2 * H + s]
                                                   + r[b, s] * gh[b, 2 * H + s]))
        return nf.compute((B, H), lambda b, s: (1.0 - z[b, s]) * n[b, s] + z[b, s] * h[b, s])

    return nf.scan(h0, step, T, name="gru")


def test_gru_matches_torch_nn_gru():
    T = 9

    def theirs(x, h0, wi, wh, bi, bh):
        rnn = torch.nn.GRU(I, H).double()
        params = dict(weight_ih_l0=wi, weight_hh_l0=wh, bias_ih_l0=bi, bias_hh_l0=bh)
        return torch.func.functional_call(rnn, params, (x, h0[None]))[0]

    check(gru_layer, theirs, [(T, B, I), (B, H), (3 * H, I), (3 * H, H), (3 * H,), (3 * H,)])


def linear_attention(q, k, v):
    """out[t] = q[t] . S_t with S_t = sum_{u <= t} k[u] v[u]^T, as a scan over t."""
    T, D = q.shape
    E = v.shape[1]
    S0 = nf.compute((D, E), lambda d, e: nf.const(0.0, "float64"))
    Ss = nf.scan(S0, lambda t, S: nf.compute((D, E), lambda d, e: S[d, e] + k[t, d] * v[t, e]),
                 T, name="kv")
    r = nf.reduce_axis(D, name="r")
    return nf.compute((T, E), lambda t, e: nf.sum(q[t, r] * Ss[t, r, e], axis=r))


def test_causal_linear_attention_matches_masked_quadratic_form():
    T, D, E = 11, 3, 5

    def masked(q, k, v):
        scores = (q @ k.T) * torch.tril(torch.ones(T, T, dtype=torch.float64))
        return scores @ v

    check(linear_attention, masked, [(T, D), (T, D), (T, E)])


def selective_scan(x, a, bgate, c):
    """h_t = exp(-softplus(a) * dt_t) * h_{t-1} + dt_t * x_t (dt_t = sigmoid(bgate[t])); y_t = c . h_t."""
    T, N = x.shape

    def step(t, h):
        return nf.compute((N,), lambda n: nf.exp(-nf.log(1.0 + nf.exp(a[n])) * nf.sigmoid(bgate[t, n]))
                          * h[n] + nf.sigmoid(bgate[t, n]) * x[t, n])

    h0 = nf.compute((N,), lambda n: nf.const(0.0, "float64"))
    hs = nf.scan(h0, step, T, name="ssm")
    return nf.compute((T, N), lambda t, n: c[n] * hs[t, n])


def test_selective_scan_matches_python_loop():
    T, N = 13, 4

    def loop(x, a, bgate, c):
        h, out = torch.zeros(N, dtype=torch.float64), []
        for t in range(T):
            dt = torch.sigmoid(bgate[t])
            h = torch.exp(-torch.nn.functional.softplus(a) * dt) * h + dt * x[t]
            out.append(c * h)
        return torch.stack(out)

    check(selective_scan, loop, [(T, N), (N,), (T, N), (N,)])
