"""NeoFlow's default schedules against PyTorch eager.

Prints a markdown table: GFLOP/s for matmul and the convolutions (conv2d,
conv3d, conv_transpose2d and its weight gradient, a strided conv's input
gradient), GB/s (input read once + output written once) for softmax, the
elementwise chain, max_pool2d's input gradient and softmax with its
input gradient. Each side runs
alone in a process of its own with its default threading (`--side neoflow`
/ `--side torch`, neoflow.zoo.solo.run_side: never beside the other's
OpenMP pool); a figure is the median of BLOCKS blocks' medians of REPEATS
calls after a warm-up call, the blocks' range beside it.

    python bench/ops.py            # or: make bench
    python bench/ops.py --blocks 2 --only matmul conv3d
    python bench/ops.py --smoke    # tiny sizes, 2 calls a block: checks the script runs
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


def conv3d(batch, channels, frames, size):
    """A ResNet-3D-18 3x3x3 convolution (stage 1 on 8-frame 56x56 clips: 64
    channels, 4 x 14 x 14 after the stem and max pool)."""
    x = nf.placeholder((batch, channels, frames, size, size), name="x")
    w = nf.placeholder((channels, channels, 3, 3, 3), name="w")
    y = nf.nn.conv3d(x, w, padding=1)
    xv, wv = rand(batch, channels, frames, size, size), rand(channels, channels, 3, 3, 3)
    return (f"conv3d 3x3x3 {channels}ch {frames}x{size}x{size} pad 1, batch {batch}",
            nf.build(y, [x, w]), (xv, wv),
            lambda t, u: torch.nn.functional.conv3d(t, u, padding=1),
            (torch.from_numpy(xv), torch.from_numpy(wv)),
            2 * batch * channels * channels * 27 * frames * size * size, "GFLOP/s")


def conv_transpose2d(batch, cin, size, weight_grad=False):
    """A DCGAN generator layer: 4x4 stride 2 padding 1, cin -> cin / 2
    channels, size -> 2 size; or the gradient of its weight."""
    cout = cin // 2
    x = nf.placeholder((batch, cin, size, size), name="x")
    w = nf.placeholder((cin, cout, 4, 4), name="w")
    y = nf.nn.conv_transpose2d(x, w, stride=2, padding=1)
    xv, wv = rand(batch, cin, size, size), rand(cin, cout, 4, 4)
    work = 2 * batch * cin * cout * 16 * size * size
    name = f"conv_transpose2d 4x4/2 {cin}->{cout}ch {size}->{2 * size}, batch {batch}"
    if not weight_grad:
        return (name, nf.build(y, [x, w]), (xv, wv),
                lambda t, u: torch.nn.functional.conv_transpose2d(t, u, stride=2, padding=1),
                (torch.from_numpy(xv), torch.from_numpy(wv)), work, "GFLOP/s")
    g = nf.placeholder(y.shape, name="g")
    dw, = nf.grad(y, [w], head=g)
    gv = rand(*y.shape)

    def torch_dw(t, u, h):
        return torch.ops.aten.convolution_backward(
            h, t, u, None, [2, 2], [1, 1], [1, 1], True, [0, 0], 1, [False, True, False])[1]
    return (name.replace("conv_transpose2d", "conv_transpose2d weight grad"),
            nf.build(dw, [x, g]), (xv, gv), torch_dw,
            (torch.from_numpy(xv), torch.from_numpy(wv), torch.from_numpy(gv)), work, "GFLOP/s")


def conv_input_grad(batch, cin, cout, size, kernel, padding):
    """The input gradient of a stride-2 convolution (polyphase split,
    nn/polyphase.py): the CapsNet primary layer (9x9, 256 channels, 20 -> 6)
    or a ResNet downsampling 3x3."""
    x = nf.placeholder((batch, cin, size, size), name="x")
    w = nf.placeholder((cout, cin, kernel, kernel), name="w")
    y = nf.nn.conv2d(x, w, stride=2, padding=padding)
    g = nf.placeholder(y.shape, name="g")
    dx, = nf.grad(y, [x], head=g)
    wv, gv = rand(*w.shape), rand(*y.shape)
    xt = torch.from_numpy(rand(*x.shape))

    def torch_dx(u, h):
        return torch.ops.aten.convolution_backward(
            h, xt, u, None, [2, 2], [padding] * 2, [1, 1], False, [0, 0], 1,
            [True, False, False])[0]
    work = 2 * batch * cin * cout * kernel * kernel * y.shape[2] * y.shape[3]
    return (f"conv2d input grad {kernel}x{kernel}/2 {cin}->{cout}ch {size}->{y.shape[2]}, "
            f"batch {batch}", nf.build(dx, [w, g]), (wv, gv), torch_dx,
            (torch.from_numpy(wv), torch.from_numpy(gv)), work, "GFLOP/s")


def max_pool_grad(batch, channels, size):
    """max_pool2d 3x3 stride 2 padding 1 (ResNet's stem) forward and input
    gradient from the input and the output gradient, as a training step
    needs them: NeoFlow's window maximum, first-maximum positions and
    scatter against torch's max_pool2d_with_indices and its backward.
    GB/s: input and output gradient read, input gradient written."""
    x = nf.placeholder((batch, channels, size, size), name="x")
    y = nf.nn.max_pool2d(x, 3, stride=2, padding=1)
    g = nf.placeholder(y.shape, name="g")
    dx, = nf.grad(y, [x], head=g)
    xv, gv = rand(*x.shape), rand(*y.shape)

    def torch_both(t, h):
        out, idx = torch.ops.aten.max_pool2d_with_indices(t, [3, 3], [2, 2], [1, 1])
        return torch.ops.aten.max_pool2d_with_indices_backward(
            h, t, [3, 3], [2, 2], [1, 1], [1, 1], False, idx)
    return (f"max_pool2d 3x3/2 pad 1 input grad {channels}ch {size}x{size}, batch {batch}",
            nf.build(dx, [x, g]), (xv, gv), torch_both,
            (torch.from_numpy(xv), torch.from_numpy(gv)), 2 * xv.nbytes + gv.nbytes, "GB/s")


def softmax(rows=4096, cols=1024, grad=False):
    """softmax over dim 1; with `grad` the forward and the input gradient
    from x and the output gradient, as a training step needs them (torch:
    softmax and _softmax_backward_data). GB/s: x read and y written, with
    `grad` also g read and dx written."""
    x = nf.placeholder((rows, cols), name="x")
    xv = rand(rows, cols)
    y = nf.nn.softmax(x, dim=1)
    name = f"softmax {rows}x{cols} (dim 1)"
    if not grad:
        return (name, nf.build(y, [x]), (xv,), lambda t: torch.softmax(t, dim=1),
                (torch.from_numpy(xv),), 2 * xv.nbytes, "GB/s")
    g = nf.placeholder(y.shape, name="g")
    dx, = nf.grad(y, [x], head=g)
    gv = rand(rows, cols) * 0.5

    def torch_both(t, h):
        out = torch.softmax(t, dim=1)
        return out, torch._softmax_backward_data(h, out, 1, t.dtype)
    return (name + " with input grad", nf.build([y, dx], [x, g]), (xv, gv), torch_both,
            (torch.from_numpy(xv), torch.from_numpy(gv)), 4 * xv.nbytes, "GB/s")


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
         "conv3d": (lambda: conv3d(2, 64, 4, 14), lambda: conv3d(2, 128, 2, 7)),
         "conv_transpose2d": (lambda: conv_transpose2d(16, 256, 8),
                              lambda: conv_transpose2d(16, 128, 16),
                              lambda: conv_transpose2d(16, 256, 8, weight_grad=True)),
         "conv_input_grad": (lambda: conv_input_grad(16, 256, 256, 20, 9, 0),
                             lambda: conv_input_grad(8, 64, 128, 56, 3, 1)),
         "max_pool_grad": (lambda: max_pool_grad(8, 64, 112),),
         "softmax": (softmax,), "softmax_grad": (lambda: softmax(grad=True),),
         "chain": (chain,)}
SMOKE = {"matmul": (lambda: matmul(64),), "conv3d": (lambda: conv3d(1, 8, 3, 6),),
         "conv_transpose2d": (lambda: conv_transpose2d(2, 8, 4),
                              lambda: conv_transpose2d(2, 8, 4, weight_grad=True)),
         "conv_input_grad": (lambda: conv_input_grad(2, 8, 8, 13, 9, 0),),
         "max_pool_grad": (lambda: max_pool_grad(2, 4, 15),),
         "softmax": (lambda: softmax(64, 97),),
         "softmax_grad": (lambda: softmax(64, 97, grad=True),)}


def time_side(side, blocks, only, smoke=False):
    """{case name: [rate, low, high, unit]} of one side ("neoflow" or "torch")."""
    out, table = {}, SMOKE if smoke else CASES
    for group in only:
        for make in table.get(group, ()):
            name, f, args, torch_fn, torch_args, work, unit = make()
            fn, fn_args = (f, args) if side == "neoflow" else (torch_fn, torch_args)
            fn(*fn_args)
            figure = summarize(time_blocks(lambda: fn(*fn_args), 2 if smoke else REPEATS,
                                           blocks))
            low, high = figure["spread_ms"]
            out[name] = [work / figure["median_ms"] / 1e6, work / high / 1e6, work / low / 1e6,
                         unit]
    return out


def main(argv=None):
    """Time every case, each side alone; print the table and return its rows
    (name, NeoFlow rate, torch rate, unit, ratio)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=("neoflow", "torch"),
                        help="time one side in this process and print JSON (internal)")
    parser.add_argument("--blocks", type=int, default=BLOCKS)
    parser.add_argument("--only", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one block of 2 calls")
    args = parser.parse_args(argv)
    if args.smoke:
        args.blocks = 1
    if args.side:
        print(json.dumps(time_side(args.side, args.blocks, args.only, args.smoke)))
        return None
    common = ["--blocks", str(args.blocks), "--only", *args.only] + \
        (["--smoke"] if args.smoke else [])
    ours, theirs = (run_side(__file__, side, common) for side in ("neoflow", "torch"))
    print(f"NeoFlow default schedules vs torch {torch.__version__} eager, each side alone in "
          f"its own process with default threading; median of {args.blocks} blocks of "
          f"{2 if args.smoke else REPEATS} calls (blocks' range)\n")
    print("| op | NeoFlow | torch | unit | NeoFlow / torch |")
    print("|---|---:|---:|---|---:|")
    rows = []
    for name, (rate, low, high, unit) in ours.items():
        t_rate, t_low, t_high, _ = theirs[name]
        rows.append((name, f"{rate:.3g}", f"{t_rate:.3g}", unit, f"{rate / t_rate:.3g}"))
        print(f"| {name} | {rate:.1f} ({low:.1f}-{high:.1f}) | {t_rate:.1f} ({t_low:.1f}-"
              f"{t_high:.1f}) | {unit} | {rate / t_rate:.3g} |")
    return rows


if __name__ == "__main__":
    main()
