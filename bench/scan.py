"""Scan benchmark: the training step (forward, backward, SGD update) of a
one-layer LSTM over T steps, and its compile time against T.

Variants, each timed alone in its own process (default threading):
  * nf-scan      NeoFlow, the LSTM as one nf.scan (neoflow.zoo.lstm_scan: the
                 input projection one dense op before the scan), nf.Trainer (SGD);
  * nf-scan-natural  the same, the cell written as it reads (x[t] @ W_ih and
                 h @ W_hh both in the step): nf.scan hoists the input projection
                 out of the loop itself (docs/scan.md), so it should time as nf-scan;
  * nf-unrolled  NeoFlow, the same cell unrolled in Python, nf.Trainer (SGD);
  * torch-lstm   torch.nn.LSTM (oneDNN), eager, torch.optim.SGD;
  * torch-loop   the PyTorch cell in a Python loop, eager;
  * torch-compile the PyTorch loop under torch.compile.
Reported per (variant, T): compile seconds (NeoFlow: the Trainer's
construction, which compiles everything; torch: the first step) and
the median ms/step of repeated blocks with the spread (min..max of blocks).

    python bench/scan.py                 # T = 16, 64, 256
    python bench/scan.py --smoke         # tiny sizes, one block (tests)
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

VARIANTS = ["nf-scan", "nf-scan-natural", "nf-unrolled", "torch-lstm", "torch-loop",
            "torch-compile"]


def _nf(variant, T, B, I, H, blocks, reps):
    import numpy as np
    import neoflow as nf
    from neoflow.zoo.lstm_scan import lstm_layer
    x = nf.placeholder((T, B, I), name="x")
    tgt = nf.placeholder((B, H), name="y")
    wi, wh = nf.parameter((4 * H, I), name="wi"), nf.parameter((4 * H, H), name="wh")
    bi = nf.parameter((4 * H,), init="zeros", name="bi")
    bh = nf.parameter((4 * H,), init="zeros", name="bh")
    h = c = nf.compute((B, H), lambda b, s: nf.const(0.0), name="h0")
    if variant == "nf-scan":
        hs, _ = lstm_layer(x, h, c, wi, wh, bi, bh)
        h = nf.compute((B, H), lambda b, s: hs[T - 1, b, s], name="last")
    elif variant == "nf-scan-natural":
        hs, _ = _natural_lstm(x, h, c, wi, wh, bi, bh)
        h = nf.compute((B, H), lambda b, s: hs[T - 1, b, s], name="last")
    else:                                       # the same cell, unrolled in Python
        wx = nf.nn.dense(x, wi)
        k = nf.reduce_axis(H, name="k")
        for t in range(T):
            pre = nf.compute((B, 4 * H), lambda b, j, t=t, h=h: wx[t, b, j] + bi[j] + bh[j]
                             + nf.sum(h[b, k] * wh[j, k], axis=k))
            c = nf.compute((B, H), lambda b, s, c=c, pre=pre: nf.sigmoid(pre[b, H + s]) * c[b, s]
                           + nf.sigmoid(pre[b, s]) * nf.tanh(pre[b, 2 * H + s]))
            h = nf.compute((B, H), lambda b, s, c=c, pre=pre:
                           nf.sigmoid(pre[b, 3 * H + s]) * nf.tanh(c[b, s]))
    b_, s_ = nf.reduce_axis(B), nf.reduce_axis(H)
    loss = nf.compute((), lambda: nf.sum((h[b_, s_] - tgt[b_, s_]) ** 2.0, axis=[b_, s_]))
    rng = np.random.default_rng(0)
    feed = {"x": rng.normal(size=(T, B, I)).astype(np.float32),
            "y": rng.normal(size=(B, H)).astype(np.float32)}
    t0 = time.perf_counter()
    trainer = nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.01), tuning="off")
    compile_s = time.perf_counter() - t0         # the Trainer compiles every kernel here
    with trainer:
        return compile_s, _time(lambda: trainer.step(feed), blocks, reps)


def _natural_lstm(x, h0, c0, wi, wh, bi, bh):
    """torch.nn.LSTM's cell with both projections in the step (nf.scan hoists x[t] @ W_ih)."""
    import neoflow as nf
    T, B, I = x.shape
    H = h0.shape[1]
    i, k = nf.reduce_axis(I, name="i"), nf.reduce_axis(H, name="k")

    def step(t, prev):
        h, c = prev
        pre = nf.compute((B, 4 * H), lambda b, j: nf.sum(x[t, b, i] * wi[j, i], axis=i) + bi[j]
                         + bh[j] + nf.sum(h[b, k] * wh[j, k], axis=k), name="gates")
        c2 = nf.compute((B, H), lambda b, s: nf.sigmoid(pre[b, H + s]) * c[b, s]
                        + nf.sigmoid(pre[b, s]) * nf.tanh(pre[b, 2 * H + s]), name="c")
        h2 = nf.compute((B, H), lambda b, s: nf.sigmoid(pre[b, 3 * H + s]) * nf.tanh(c2[b, s]),
                        name="h")
        return h2, c2
    return nf.scan((h0, c0), step, T, name="lstm")


def _torch(variant, T, B, I, H, blocks, reps):
    import torch
    x, y = torch.randn(T, B, I), torch.randn(B, H)
    lstm = torch.nn.LSTM(I, H)
    opt = torch.optim.SGD(lstm.parameters(), lr=0.01)

    def loop(x):
        w_ih, w_hh, b_ih, b_hh = lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0
        h = c = x.new_zeros(B, H)
        for t in range(T):
            i, f, g, o = (x[t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, 1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
        return h
    fwd = {"torch-lstm": lambda x: lstm(x)[0][-1], "torch-loop": loop,
           "torch-compile": torch.compile(loop)}[variant]

    def step():
        opt.zero_grad(set_to_none=True)
        ((fwd(x) - y) ** 2).sum().backward()
        opt.step()
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0, _time(step, blocks, reps)


def _time(step, blocks, reps):
    step()
    per = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        per.append((time.perf_counter() - t0) / reps * 1e3)
    return statistics.median(per), min(per), max(per)


def run_one(variant, T, B, I, H, blocks, reps):
    run = _nf if variant.startswith("nf-") else _torch
    return run(variant, T, B, I, H, blocks, reps)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("VARIANT", "T"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    args = ap.parse_args(argv)
    B, I, H = (2, 3, 4) if args.smoke else (32, 128, 128)
    blocks, reps = (1, 1) if args.smoke else (7, 5)
    if args.one:
        res = run_one(args.one[0], int(args.one[1]), B, I, H, blocks, reps)
        print(json.dumps(res))
        return
    lengths = (3, 5) if args.smoke else (16, 64, 256)
    print(f"LSTM training step, B={B} I={I} H={H}; ms/step median (min..max), compile s")
    print(f"{'variant':16s} {'T':>4s} {'ms/step':>24s} {'compile s':>10s}")
    for variant in args.variants.split(","):
        for T in lengths:
            cmd = [sys.executable, __file__, "--one", variant, str(T)] + \
                (["--smoke"] if args.smoke else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                print(f"{variant:16s} {T:4d}  failed: {p.stderr.strip().splitlines()[-1:]}")
                continue
            compile_s, (med, lo, hi) = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"{variant:16s} {T:4d} {med:9.3f} ({lo:.3f}..{hi:.3f}) {compile_s:10.2f}")


if __name__ == "__main__":
    main()
