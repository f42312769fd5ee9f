"""NeoFlow's default schedules against PyTorch eager.

Prints a markdown table: GFLOP/s for matmul and conv2d, GB/s (input read
once + output written once) for softmax and the elementwise chain. Each
side runs alone in a process of its own with its default threading
(`--side neoflow` / `--side torch`, neoflow.zoo.solo.run_side: never beside
the other's OpenMP pool); a figure is the median of BLOCKS blocks' medians
of REPEATS calls after a warm-up call, the blocks' range beside it.

    python bench/ops.py            # or: make bench
    python bench/ops.py --blocks 2 --only matmul
"""
import argparse
import json

import numpy as np
import torch

import neoflow as nf
from neoflow.zoo.solo import run_side, summarize, time_blocks

REPEATS = 15
BLOCKS = 5


def rand(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def matmul(n):
    a, b = nf.placeholder((n, n), name="a"), nf.placeholder((n, n), name="b")
    k = nf.reduce_axis(n, name="k")
    c = nf.compute((n, n), lambda i, j: nf.sum(a[i, k] * b[k, j], axis=k), name="c")
    av, bv = rand(n, n), rand(n, n)
    return (f"matmul {n}", nf.build(c, [a, b]), (av, bv), torch.mm,
            (torch.from_numpy(av), torch.from_numpy(bv)), 2 * n ** 3, "GFLOP/s")


def conv2d(batch):
    x = nf.placeholder((batch, 64, 56, 56), name="x")
    w = nf.placeholder((64, 64, 3, 3), name="w")
    y = nf.nn.conv2d(x, w, padding=1)
    xv, wv = rand(batch, 64, 56, 56), rand(64, 64, 3, 3)
    return (f"conv2d 3x3 64ch 56x56 pad 1, batch {batch}", nf.build(y, [x, w]), (xv, wv),
            lambda t, u: torch.nn.functional.conv2d(t, u, padding=1),
            (torch.from_numpy(xv), torch.from_numpy(wv)), 2 * batch * 64 * 64 * 9 * 56 * 56,
            "GFLOP/s")


def softmax():
    x = nf.placeholder((4096, 1024), name="x")
    xv = rand(4096, 1024)
    return ("softmax 4096x1024 (dim 1)", nf.build(nf.nn.softmax(x, dim=1), [x]), (xv,),
            lambda t: torch.softmax(t, dim=1), (torch.from_numpy(xv),), 2 * xv.nbytes, "GB/s")


def chain():
    x = nf.placeholder((1 << 22,), name="x")
    t = x * 2.0
    t = t + 1.0
    t = nf.compute(t.shape, lambda i: nf.tanh(t[i]), name="tanh")
    t = t * t
    t = t - 0.5
    t = nf.compute(t.shape, lambda i: nf.maximum(t[i], 0.0), name="relu")
    xv = rand(1 << 22)

    def torch_chain(u):
        return torch.relu(torch.tanh(u * 2.0 + 1.0) ** 2 - 0.5)
    return ("6 elementwise ops, 4M vector", nf.build(t, [x]), (xv,), torch_chain,
            (torch.from_numpy(xv),), 2 * xv.nbytes, "GB/s")


CASES = {"matmul": (lambda: matmul(512), lambda: matmul(1024)),
         "conv2d": (lambda: conv2d(1), lambda: conv2d(8)),
         "softmax": (softmax,), "chain": (chain,)}


def time_side(side, blocks, only):
    """{case name: [rate, low, high, unit]} of one side ("neoflow" or "torch")."""
    out = {}
    for group in only:
        for make in CASES[group]:
            name, f, args, torch_fn, torch_args, work, unit = make()
            fn, fn_args = (f, args) if side == "neoflow" else (torch_fn, torch_args)
            fn(*fn_args)
            figure = summarize(time_blocks(lambda: fn(*fn_args), REPEATS, blocks))
            low, high = figure["spread_ms"]
            out[name] = [work / figure["median_ms"] / 1e6, work / high / 1e6, work / low / 1e6,
                         unit]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("neoflow", "torch"),
                        help="time one side in this process and print JSON (internal)")
    parser.add_argument("--blocks", type=int, default=BLOCKS)
    parser.add_argument("--only", nargs="+", default=list(CASES), choices=list(CASES))
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps(time_side(args.side, args.blocks, args.only)))
        return None
    common = ["--blocks", str(args.blocks), "--only", *args.only]
    ours, theirs = (run_side(__file__, side, common) for side in ("neoflow", "torch"))
    print(f"NeoFlow default schedules vs torch {torch.__version__} eager, each side alone in "
          f"its own process with default threading; median of {args.blocks} blocks of "
          f"{REPEATS} calls (blocks' range)\n")
    print("| op | NeoFlow | torch | unit | NeoFlow / torch |")
    print("|---|---:|---:|---|---:|")
    for name, (rate, low, high, unit) in ours.items():
        t_rate, t_low, t_high, _ = theirs[name]
        print(f"| {name} | {rate:.1f} ({low:.1f}-{high:.1f}) | {t_rate:.1f} ({t_low:.1f}-"
              f"{t_high:.1f}) | {unit} | {rate / t_rate:.2f} |")
    return ours, theirs


if __name__ == "__main__":
    main()
