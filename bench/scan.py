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
the median ms/step of repeated blocks. With `--repeat N` every process
runs N times, the variants alternated round by round (a 2-core VM's
speed drifts by up to 2x from one process to the next): the median over
rounds, their range, and the ratio to torch-lstm taken within each round.

    python bench/scan.py                 # T = 16, 64, 256
    python bench/scan.py --repeat 5 --variants nf-scan,torch-lstm   # 5 rounds, alternated
    python bench/scan.py --repeat 20 --variants nf-scan,torch-lstm --lengths 64
    python bench/scan.py --smoke         # tiny sizes, one block (tests)
    python bench/scan.py --profile 64    # where an nf-scan step's time goes
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
    trainer, feed, compile_s = _nf_trainer(variant, T, B, I, H)
    with trainer:
        return compile_s, _time(lambda: trainer.step(feed), blocks, reps)


def _nf_trainer(variant, T, B, I, H):
    """(nf.Trainer, feed, compile seconds) of a NeoFlow variant."""
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
    return trainer, feed, compile_s


def profile(T, B, I, H, reps):
    """Where an nf-scan training step's time goes (printed): the plan (segments
    and scan loops with their kernels), per phase the median ms of `reps` runs
    driven from Python, per step kernel the ms of one call (compiled alone,
    random inputs) times the loop's length, the native calls of a replayed
    step, its median ms and its minor page faults."""
    import resource
    import numpy as np
    from neoflow.runtime.native import compile_kernels
    from neoflow.schedule import default_config
    from neoflow.schedule.split_reduce import default_splits_off
    from neoflow.te import dtype as dt
    trainer, feed, _ = _nf_trainer("nf-scan", T, B, I, H)
    with trainer:
        trainer.step(feed)
        fn = trainer._backend.scan_function
        print(f"nf-scan T={T} B={B} I={I} H={H}: {len(fn._recorded[2])} native calls "
              "recorded, replayed as one per step")
        phases, names = {}, {}

        def timed(method):
            def run(item, values):
                t0 = time.perf_counter()
                method(item, values)
                phases.setdefault(names[id(item)], []).append(time.perf_counter() - t0)
            return run
        for n, (_, g, segment, step) in enumerate(fn._plan):
            names[id(segment)] = f"segment {n} (before scan '{g.name}')"
            names[id(g)] = f"scan '{g.name}' ({g.length} steps{', reversed' if g.reverse else ''})"
        names[id(fn._final)] = "final segment"
        fn._run_segment = timed(fn._run_segment)
        scan = fn._run_scan
        fn._run_scan = lambda g, step, values: timed(lambda g, v: scan(g, step, v))(g, values)
        sources = fn._recorded[0]
        for _ in range(reps):
            fn._run(sources)
        for name, ts in phases.items():
            print(f"  {name:44s} {statistics.median(ts) * 1e3:9.3f} ms")
        rng = np.random.default_rng(0)

        def alone(k, config):
            """Median seconds of one call of kernel `k` compiled alone under `config`."""
            one = compile_kernels([k], list(k.inputs), list(k.outputs), list(k.outputs),
                                  [config])
            args = [np.full(t.shape, 1, np.int64) if t.dtype == dt.INDEX else
                    rng.normal(size=t.shape).astype(dt.to_numpy(t.dtype)) for t in k.inputs]
            one(*args)
            ts = []
            for _ in range(max(3, reps)):
                t0 = time.perf_counter()
                one(*args)
                ts.append(time.perf_counter() - t0)
            return statistics.median(ts)
        for _, g, _, (step, *_) in fn._plan:
            for k in step.kernels:
                stages = "+".join(st.name for st in k.stages)
                print(f"    step kernel of '{g.name}' {stages[:40]:40s} "
                      f"{alone(k, default_config(k)) * 1e3:8.4f} ms x {g.length}")
        segments = [(f"segment {n}", p[2][0]) for n, p in enumerate(fn._plan)]
        for name, built in segments + [("final segment", fn._final[0])]:
            for k in (built.kernels if built is not None else ()):
                config = default_config(k)
                stages = "+".join(st.name for st in k.stages)
                parts = [sc.split for sc in config.stages if sc.split]
                line = f"    {name} kernel {stages[:40]:40s} {alone(k, config) * 1e3:8.4f} ms"
                if parts:                # the default made without the split rule
                    with default_splits_off():
                        plain = default_config(k)
                    line += f" split {parts}; unsplit {alone(k, plain) * 1e3:8.4f} ms"
                print(line)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        med, lo, hi = _time(lambda: trainer.step(feed), 1, reps)
        faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (reps + 1)
        print(f"  replayed step {med:.3f} ms; {faults:.0f} minor page faults per step")


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
    ap.add_argument("--lengths", help="comma-separated T (default 16,64,256)")
    ap.add_argument("--profile", type=int, metavar="T", help="where an nf-scan step's time goes")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="rounds of processes, alternated (this machine's speed drifts "
                         "between processes)")
    args = ap.parse_args(argv)
    B, I, H = (2, 3, 4) if args.smoke else (32, 128, 128)
    blocks, reps = (1, 1) if args.smoke else (7, 5)
    if args.profile:
        profile(args.profile, B, I, H, 3 if args.smoke else 15)
        return
    if args.one:
        res = run_one(args.one[0], int(args.one[1]), B, I, H, blocks, reps)
        print(json.dumps(res))
        return
    lengths = (3, 5) if args.smoke else (16, 64, 256)
    if args.lengths:
        lengths = tuple(int(t) for t in args.lengths.split(","))
    variants = args.variants.split(",")
    runs = {}                       # (variant, T) -> [(compile s, median ms) per round]
    for _ in range(args.repeat):    # rounds: every process once, alternated
        for T in lengths:
            for variant in variants:
                runs.setdefault((variant, T), []).append(_run_alone(variant, T, args.smoke))
    print(f"LSTM training step, B={B} I={I} H={H}; ms/step: median over {args.repeat} "
          f"round(s) of each process's median of {blocks} blocks (min..max over rounds); "
          "compile s; x torch-lstm: median (min..max) of each round's ratio")
    print(f"{'variant':16s} {'T':>4s} {'ms/step':>24s} {'compile s':>10s} {'x torch-lstm':>20s}")
    for variant in variants:
        for T in lengths:
            done = [r for r in runs[(variant, T)] if r is not None]
            if not done:
                print(f"{variant:16s} {T:4d}  failed")
                continue
            ms = [m for _, m in done]
            line = (f"{variant:16s} {T:4d} {statistics.median(ms):9.3f} ({min(ms):.3f}.."
                    f"{max(ms):.3f}) {statistics.median(c for c, _ in done):10.2f}")
            ref = runs.get(("torch-lstm", T))
            if ref and variant != "torch-lstm":
                ratios = [r[1] / m[1] for r, m in zip(ref, runs[(variant, T)]) if r and m]
                if ratios:
                    line += (f" {statistics.median(ratios):8.2f}x ({min(ratios):.2f}.."
                             f"{max(ratios):.2f})")
            print(line)


def _run_alone(variant, T, smoke):
    """(compile s, median ms/step) of one variant in its own process, or None
    (its error printed)."""
    cmd = [sys.executable, __file__, "--one", variant, str(T)] + (["--smoke"] if smoke else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        print(f"{variant} T={T} failed: {p.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    compile_s, (med, _, _) = json.loads(p.stdout.strip().splitlines()[-1])
    return compile_s, med


if __name__ == "__main__":
    main()
