"""Gradients NeoFlow derives against PyTorch's hand-written backward, in one
process on 2 threads (float32).

For conv2d (stride 2, dilation 2, padding 1), overlapping max-pool, matmul,
softmax and an LLTM cell it prints a markdown table: the flops of the
backward (every gradient, with the forward tensors as given) over the
forward's, and the median times of the backward — NeoFlow's built with the
default schedule (the forward tensors it reads fed in as inputs, as in a
training step), torch.autograd's with the graph kept between calls.

    python bench/grad.py
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")   # read when OpenMP starts: set before any import

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow.te.expr import Read  # noqa: E402
from neoflow.te.tensor import ComputeOp, Tensor  # noqa: E402
from neoflow.te.visit import topo_tensors, transform  # noqa: E402

THREADS = 2
REPEATS = 15


def median_seconds(fn):
    fn()
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


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


def run(ours, theirs, shapes):
    xs = [nf.placeholder(s, name=f"x{n}") for n, s in enumerate(shapes)]
    y = ours(*xs)
    head = nf.placeholder(y.shape, name="head")
    grads = nf.grad(y, xs, head=head)
    forward = [t for t in topo_tensors([y]) if t.is_compute]
    ratio = nf.flops(grads, given=forward) / nf.flops(y)
    values = [rand(s, n) for n, s in enumerate(shapes)]
    hv = rand(y.shape, 99)
    backward, stand_in = cut(grads, forward)
    fwd_values = nf.build(forward, xs)(*values)
    f_bwd = nf.build(backward, xs + [head] + list(stand_in.values()))
    t_ours = median_seconds(lambda: f_bwd(*values, hv, *fwd_values))
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    ty = theirs(*ts)
    th = torch.tensor(hv)
    t_torch = median_seconds(lambda: torch.autograd.grad(ty, ts, th, retain_graph=True))
    got = f_bwd(*values, hv, *fwd_values)
    want = torch.autograd.grad(ty, ts, th)
    err = max(float(np.max(np.abs(g - w.numpy())) / max(1e-30, np.max(np.abs(w.numpy()))))
              for g, w in zip(got, want))
    return ratio, t_ours, t_torch, err


def main():
    torch.set_num_threads(THREADS)
    print(f"threads: {THREADS}; float32; medians of {REPEATS} calls\n")
    print("| op | flops bwd/fwd | NeoFlow backward (ms) | torch backward (ms) | torch / NeoFlow "
          "| max rel. err |")
    print("|---|---|---|---|---|---|")
    for name, (ours, theirs, shapes) in CASES.items():
        ratio, ours_s, torch_s, err = run(ours, theirs, shapes)
        speed = torch_s / ours_s if ours_s > 0 else float("inf")
        print(f"| {name} | {ratio:.2f} | {ours_s * 1e3:.2f} | {torch_s * 1e3:.2f} | "
              f"{speed:.2f}x | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
