"""Gradients NeoFlow derives against PyTorch's hand-written backward (float32).

For conv2d (stride 2, dilation 2, padding 1), overlapping max-pool, matmul,
softmax and an LLTM cell it prints a markdown table: the flops of the
backward (every gradient, with the forward tensors as given) over the
forward's, and the median times of the backward — NeoFlow's built with the
default schedule (the forward tensors it reads fed in as inputs, as in a
training step), torch.autograd's with the graph kept between calls. Each
side is timed alone in a process of its own with its default threading
(`--side neoflow` / `--side torch`, neoflow.zoo.solo.run_side): the median of
BLOCKS blocks' medians of REPEATS calls, the blocks' range beside it.

    python bench/grad.py
"""
import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow.te.expr import Read
from neoflow.te.tensor import ComputeOp, Tensor
from neoflow.te.visit import topo_tensors, transform
from neoflow.zoo.solo import run_side, summarize, time_blocks

REPEATS = 15
BLOCKS = 5


def timed_ms(fn, blocks):
    """[median, low, high] ms of `fn` (see the module docstring)."""
    fn()
    figure = summarize(time_blocks(fn, REPEATS, blocks))
    return [figure["median_ms"], *figure["spread_ms"]]


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def lltm(x, h, c, w, b):
    """The LLTM cell of PyTorch's C++-extension tutorial (elu candidate)."""
    gates = nf.nn.dense(nf.nn.concat([x, h], dim=1), w, b)
    B, S = c.shape
    ig = nf.compute((B, S), lambda i, j: nf.sigmoid(gates[i, j]), name="ig")
    og = nf.compute((B, S), lambda i, j: nf.sigmoid(gates[i, S + j]), name="og")
    cand = nf.compute((B, S), lambda i, j: nf.where(gates[i, 2 * S + j] > 0, gates[i, 2 * S + j],
                                                    nf.exp(gates[i, 2 * S + j]) - 1.0),
                      name="cand")
    c2 = nf.compute((B, S), lambda i, j: c[i, j] + cand[i, j] * ig[i, j], name="c2")
    return nf.compute((B, S), lambda i, j: nf.tanh(c2[i, j]) * og[i, j], name="h2")


def lltm_torch(x, h, c, w, b):
    ig, og, cand = F.linear(torch.cat([x, h], 1), w, b).chunk(3, dim=1)
    c2 = c + F.elu(cand) * torch.sigmoid(ig)
    return torch.tanh(c2) * torch.sigmoid(og)


CASES = {
    "conv2d 8x32x32x32, 3x3, s2 d2 p1": (
        lambda x, w: nf.nn.conv2d(x, w, stride=2, dilation=2, padding=1),
        lambda x, w: F.conv2d(x, w, stride=2, dilation=2, padding=1),
        [(8, 32, 32, 32), (32, 32, 3, 3)]),
    "max_pool2d 8x32x32x32, 3x3 s2 p1": (
        lambda x: nf.nn.max_pool2d(x, 3, stride=2, padding=1),
        lambda x: F.max_pool2d(x, 3, stride=2, padding=1), [(8, 32, 32, 32)]),
    "matmul 256x512 @ 512x256": (nf.nn.matmul, torch.matmul, [(256, 512), (512, 256)]),
    "softmax 256x1024": (lambda x: nf.nn.softmax(x, -1), lambda x: F.softmax(x, -1),
                         [(256, 1024)]),
    "LLTM cell, batch 32, in 64, state 128": (
        lltm, lltm_torch, [(32, 64), (32, 128), (32, 128), (384, 192), (384,)]),
}


def cut(outputs, given):
    """`outputs` rebuilt so that they read placeholders where they read the
    `given` tensors; returns (new outputs, {given tensor: its placeholder})."""
    stand_in = {id(t): nf.placeholder(t.shape, t.dtype, name=f"fwd_{t.name}") for t in given}
    new = {}
    for t in topo_tensors(outputs):
        if id(t) in stand_in or not t.is_compute:
            continue
        swap = {**stand_in, **new}
        body = transform(t.op.body, lambda n: Read(swap[id(n.tensor)], n.indices)
                         if isinstance(n, Read) and id(n.tensor) in swap else n)
        new[id(t)] = Tensor(t.shape, t.dtype, t.name, ComputeOp(t.op.axes, body))
    return [new.get(id(t), t) for t in outputs], {t: stand_in[id(t)] for t in given}


def run_neoflow(ours, theirs, shapes, blocks):
    """[backward flops / forward flops, ms, low, high, max relative error
    against torch.autograd] of NeoFlow's derived backward."""
    xs = [nf.placeholder(s, name=f"x{n}") for n, s in enumerate(shapes)]
    y = ours(*xs)
    head = nf.placeholder(y.shape, name="head")
    grads = nf.grad(y, xs, head=head)
    forward = [t for t in topo_tensors([y]) if t.is_compute]
    ratio = nf.flops(grads, given=forward) / nf.flops(y)
    values, hv = _values(shapes, y.shape)
    backward, stand_in = cut(grads, forward)
    fwd_values = nf.build(forward, xs)(*values)
    f_bwd = nf.build(backward, xs + [head] + list(stand_in.values()))
    ms = timed_ms(lambda: f_bwd(*values, hv, *fwd_values), blocks)
    got = f_bwd(*values, hv, *fwd_values)
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    want = torch.autograd.grad(theirs(*ts), ts, torch.tensor(hv))
    err = max(float(np.max(np.abs(g - w.numpy())) / max(1e-30, np.max(np.abs(w.numpy()))))
              for g, w in zip(got, want))
    return [ratio, *ms, err]


def run_torch(theirs, shapes, blocks):
    """[ms, low, high] of torch.autograd's backward (graph kept between calls)."""
    ts = [torch.tensor(v, requires_grad=True) for v in _values(shapes, None)[0]]
    ty = theirs(*ts)
    th = torch.tensor(rand(ty.shape, 99))
    return timed_ms(lambda: torch.autograd.grad(ty, ts, th, retain_graph=True), blocks)


def _values(shapes, out_shape):
    return [rand(s, n) for n, s in enumerate(shapes)], \
        None if out_shape is None else rand(out_shape, 99)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("neoflow", "torch"),
                        help="time one side in this process and print JSON (internal)")
    parser.add_argument("--blocks", type=int, default=BLOCKS)
    parser.add_argument("--only", nargs="+", default=None, metavar="SUBSTRING",
                        help="cases whose name contains one of these")
    args = parser.parse_args(argv)
    cases = {name: case for name, case in CASES.items()
             if args.only is None or any(part in name for part in args.only)}
    if args.side == "neoflow":
        print(json.dumps({name: run_neoflow(*case, args.blocks) for name, case in cases.items()}))
        return None
    if args.side == "torch":
        print(json.dumps({name: run_torch(theirs, shapes, args.blocks)
                          for name, (_, theirs, shapes) in cases.items()}))
        return None
    common = ["--blocks", str(args.blocks)] + (["--only", *args.only] if args.only else [])
    ours, theirs = (run_side(__file__, side, common) for side in ("neoflow", "torch"))
    print(f"float32; each side alone in its own process with default threading; median of "
          f"{args.blocks} blocks of {REPEATS} calls (blocks' range)\n")
    print("| op | flops bwd/fwd | NeoFlow backward (ms) | torch backward (ms) | torch / NeoFlow "
          "| max rel. err |")
    print("|---|---|---|---|---|---|")
    for name, (ratio, ms, low, high, err) in ours.items():
        t_ms, t_low, t_high = theirs[name]
        print(f"| {name} | {ratio:.2f} | {ms:.2f} ({low:.2f}-{high:.2f}) | {t_ms:.2f} "
              f"({t_low:.2f}-{t_high:.2f}) | {t_ms / ms:.2f}x | {err:.1e} |", flush=True)
    return ours, theirs


if __name__ == "__main__":
    main()
