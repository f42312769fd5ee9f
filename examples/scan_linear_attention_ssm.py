"""Train causal linear attention and a diagonal selective state-space layer,
each written in a few lines with nf.scan, on a toy sequence task: predict a
running, decaying average of the input from the sequence so far.

The recurrences are not unrolled: each is one scan whose gradient NeoFlow
derives (a reverse scan); nf.Trainer compiles the whole step (each scan's
step once, looped over t in C) and trains it with Adam.

    python examples/scan_linear_attention_ssm.py [--steps 200]
"""
import argparse

import numpy as np

import neoflow as nf

T, D, N = 32, 8, 8          # sequence length, model width, state size


def linear_attention(x, wq, wk, wv):
    """Causal linear attention: S_t = S_{t-1} + k_t v_t^T, out_t = q_t S_t."""
    q, k, v = (nf.nn.matmul(x, w) for w in (wq, wk, wv))               # (T, D)
    q, k = (nf.compute(a.shape, lambda t, d, a=a: nf.exp(nf.minimum(a[t, d], 0.0))
                       + nf.maximum(a[t, d], 0.0)) for a in (q, k))    # elu + 1 > 0
    S0 = nf.compute((D, D), lambda i, j: nf.const(0.0))
    S = nf.scan(S0, lambda t, s: nf.compute((D, D), lambda i, j: s[i, j] + k[t, i] * v[t, j]),
                T, name="kv")
    r = nf.reduce_axis(D, name="r")
    return nf.compute((T, D), lambda t, j: nf.sum(q[t, r] * S[t, r, j], axis=r) / T)


def selective_ssm(x, a_log, w_dt, w_b, c):
    """Diagonal selective scan: h_t = exp(-exp(a) dt_t) h_{t-1} + dt_t B_t x_t; y_t = c . h_t."""
    dt = nf.nn.matmul(x, w_dt)                                         # (T, N), input-dependent
    bx = nf.nn.matmul(x, w_b)
    h0 = nf.compute((N,), lambda n: nf.const(0.0))
    hs = nf.scan(h0, lambda t, h: nf.compute((N,), lambda n:
                 nf.exp(-nf.exp(a_log[n]) * nf.sigmoid(dt[t, n])) * h[n]
                 + nf.sigmoid(dt[t, n]) * bx[t, n]), T, name="ssm")
    r = nf.reduce_axis(N, name="r")
    return nf.compute((T,), lambda t: nf.sum(c[r] * hs[t, r], axis=r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=0.01)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    x = nf.placeholder((T, D), name="x")
    y = nf.placeholder((T,), name="y")
    p = {n: nf.parameter(s, init=(rng.normal(size=s) * 0.3).astype(np.float32), name=n)
         for n, s in {"wq": (D, D), "wk": (D, D), "wv": (D, D), "a_log": (N,), "w_dt": (D, N),
                      "w_b": (D, N), "c": (N,), "wo": (D,)}.items()}
    att = linear_attention(x, p["wq"], p["wk"], p["wv"])
    ssm = selective_ssm(x, p["a_log"], p["w_dt"], p["w_b"], p["c"])
    e = nf.reduce_axis(D, name="e")
    pred = nf.compute((T,), lambda t: ssm[t] + nf.sum(att[t, e] * p["wo"][e], axis=e))
    s = nf.reduce_axis(T, name="s")
    loss = nf.compute((), lambda: nf.sum((pred[s] - y[s]) * (pred[s] - y[s]), axis=s) / T)
    with nf.Trainer(loss, optimizer=nf.optim.Adam(lr=args.lr), tuning="off") as trainer:
        for it in range(args.steps):
            xv = rng.normal(size=(T, D)).astype(np.float32)
            yv = np.zeros(T, np.float32)
            acc = 0.0
            for t in range(T):                  # target: a decaying running mean of x[:, 0]
                acc = 0.8 * acc + 0.2 * xv[t, 0]
                yv[t] = acc
            value = trainer.step({x: xv, y: yv})
            if it % max(1, args.steps // 10) == 0 or it == args.steps - 1:
                print(f"step {it:4d}  loss {value:.5f}")


if __name__ == "__main__":
    main()
