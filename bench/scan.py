"""Scan benchmark: the training step (forward, backward, SGD update) of a
one-layer LSTM over T steps, and its compile time against T.

Variants, each timed alone in its own process (default threading):
  * nf-scan      NeoFlow, the LSTM as one nf.scan (neoflow.zoo.lstm_scan),
                 built with nf.build of the loss and its gradients (the
                 Trainer does not run scans yet; the SGD update is NumPy);
  * nf-unrolled  NeoFlow, the same cell unrolled in Python, nf.Trainer (SGD);
  * torch-lstm   torch.nn.LSTM (oneDNN), eager, torch.optim.SGD;
  * torch-loop   the PyTorch cell in a Python loop, eager;
  * torch-compile the PyTorch loop under torch.compile.
Reported per (variant, T): compile seconds (first build or first step) and
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

VARIANTS = ["nf-scan", "nf-unrolled", "torch-lstm", "torch-loop", "torch-compile"]


def _nf_scan(T, B, I, H, blocks, reps):
    import numpy as np
    import neoflow as nf
    from neoflow.zoo.lstm_scan import lstm_layer
    rng = np.random.default_rng(0)
    x = nf.placeholder((T, B, I), name="x")
    tgt = nf.placeholder((B, H), name="y")
    h0 = nf.compute((B, H), lambda b, s: nf.const(0.0), name="h0")
    ws = [nf.placeholder(s, name=n) for n, s in
          [("wi", (4 * H, I)), ("wh", (4 * H, H)), ("bi", (4 * H,)), ("bh", (4 * H,))]]
    hs, _ = lstm_layer(x, h0, h0, *ws)
    b_, s_ = nf.reduce_axis(B), nf.reduce_axis(H)
    loss = nf.compute((), lambda: nf.sum((hs[T - 1, b_, s_] - tgt[b_, s_]) ** 2.0,
                                         axis=[b_, s_]))
    t0 = time.perf_counter()
    f = nf.build([loss] + nf.grad(loss, ws), [x, tgt] + ws)
    compile_s = time.perf_counter() - t0
    vals = [(rng.normal(size=w.shape) * 0.1).astype(np.float32) for w in ws]
    xv = rng.normal(size=(T, B, I)).astype(np.float32)
    yv = rng.normal(size=(B, H)).astype(np.float32)

    def step():
        out = f(xv, yv, *vals)
        for n, g in enumerate(out[1:]):
            vals[n] -= 0.01 * g
    return compile_s, _time(step, blocks, reps)


def _nf_unrolled(T, B, I, H, blocks, reps):
    import numpy as np
    import neoflow as nf
    x = nf.placeholder((T, B, I), name="x")
    tgt = nf.placeholder((B, H), name="y")
    wi, wh = nf.parameter((4 * H, I), name="wi"), nf.parameter((4 * H, H), name="wh")
    bi, bh = nf.parameter((4 * H,), init="zeros", name="bi"), nf.parameter((4 * H,), init="zeros", name="bh")
    wx = nf.nn.dense(x, wi)
    h = c = nf.compute((B, H), lambda b, s: nf.const(0.0), name="h0")
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
    trainer.step(feed)
    compile_s = time.perf_counter() - t0
    with trainer:
        return compile_s, _time(lambda: trainer.step(feed), blocks, reps)


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
    fn = {"nf-scan": _nf_scan, "nf-unrolled": _nf_unrolled}.get(variant)
    if fn is None:
        return _torch(variant, T, B, I, H, blocks, reps)
    return fn(T, B, I, H, blocks, reps)


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
    print(f"{'variant':14s} {'T':>4s} {'ms/step':>24s} {'compile s':>10s}")
    for variant in args.variants.split(","):
        for T in lengths:
            cmd = [sys.executable, __file__, "--one", variant, str(T)] + \
                (["--smoke"] if args.smoke else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode:
                print(f"{variant:14s} {T:4d}  failed: {p.stderr.strip().splitlines()[-1:]}")
                continue
            compile_s, (med, lo, hi) = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"{variant:14s} {T:4d} {med:9.3f} ({lo:.3f}..{hi:.3f}) {compile_s:10.2f}")


if __name__ == "__main__":
    main()
