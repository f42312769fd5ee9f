"""Attention written with flattened and concatenated indices, trained by
nf.Trainer against PyTorch eager.

Two networks, one attention layer each (a fused q/k/v projection, softmax
attention, an output projection, mean squared error):
* `custom`: a researcher's custom attention -- per-head temperature and a
  learned relative-position bias -- read straight out of the flattened
  projection, `qkv[b * T + i, h * hd + e]`, the q, k and v columns side by
  side in one tensor;
* `mha`: ordinary multi-head attention written the obvious way, the fused
  projection reshaped to (B, T, 3, H, hd) and permuted to heads.
Their gradients read and write through `n // T`, `n % T`, `c // hd`; the
schedule sees those stages over split axes (schedule/delinearize.py), as
dense batched contractions.

Each side runs alone in its own process with default threading
(neoflow.zoo.solo.run_side): `neoflow`, `neoflow-flat` (the same with the
delinearised views and the quotient-bound splits turned off, for the A/B
of that pass) and `torch` (eager). A figure is the median of the blocks'
medians of ms per training step (blocks' range beside it); for the NeoFlow
sides the slowest kernels of the step follow, with GFLOP/s. `--rounds N`
runs the sides N times in turn (alternating A/B on a loaded machine).

    python bench/attention.py
    python bench/attention.py --rounds 3 --sides neoflow neoflow-flat
    python bench/attention.py --smoke      # tiny sizes: checks the script runs
"""
import argparse
import json
import math
import statistics

import numpy as np

import neoflow as nf
from neoflow import nn
from neoflow.graph.ops_class import own_flops
from neoflow.zoo.solo import run_side, summarize, time_blocks

SIZES = dict(B=8, T=64, D=128, H=4)
SMOKE_SIZES = dict(B=2, T=8, D=32, H=2)
STEPS, BLOCKS, WARMUP, TOP = 10, 5, 3, 4
SIDES = ("neoflow", "neoflow-flat", "torch")
LR = 0.01


def params(D, H, T, rng):
    """The initial parameters, shared by both frameworks (float32 arrays)."""
    def w(*shape):
        return (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)
    return {"wqkv": w(3 * D, D), "bqkv": np.zeros(3 * D, np.float32), "wo": w(D, D),
            "bo": np.zeros(D, np.float32), "temp": np.ones(H, np.float32),
            "rel": (0.02 * rng.standard_normal((H, 2 * T - 1))).astype(np.float32)}


def custom_loss(B, T, D, H):
    """The custom attention in tensor expressions; (loss, x, y, parameters)."""
    hd = D // H
    x = nf.placeholder((B, T, D), name="x")
    y = nf.placeholder((B, T, D), name="y")
    p = {n: nf.parameter(s, name=n) for n, s in (("wqkv", (3 * D, D)), ("bqkv", (3 * D,)),
                                                 ("wo", (D, D)), ("bo", (D,)), ("temp", (H,)),
                                                 ("rel", (H, 2 * T - 1)))}
    qkv = nn.dense(nn.reshape(x, (B * T, D)), p["wqkv"], p["bqkv"])        # (B*T, 3D)
    e = nf.reduce_axis(hd, name="e")
    s = nf.compute((B, H, T, T), lambda b, h, i, j: nf.sum(
        qkv[b * T + i, h * hd + e] * qkv[b * T + j, D + h * hd + e], axis=e) * p["temp"][h]
        + p["rel"][h, i - j + T - 1], name="scores")
    a = nn.softmax(s, -1)
    j = nf.reduce_axis(T, name="j")
    ctx = nf.compute((B * T, D), lambda n, c: nf.sum(
        a[n // T, c // hd, n % T, j] * qkv[(n // T) * T + j, 2 * D + c], axis=j), name="ctx")
    out = nn.reshape(nn.dense(ctx, p["wo"], p["bo"]), (B, T, D))
    return nn.mse_loss(out, y), x, y, p


def mha_loss(B, T, D, H):
    """Ordinary multi-head attention, the obvious way; (loss, x, y, parameters)."""
    hd = D // H
    x = nf.placeholder((B, T, D), name="x")
    y = nf.placeholder((B, T, D), name="y")
    p = {n: nf.parameter(s, name=n) for n, s in (("wqkv", (3 * D, D)), ("bqkv", (3 * D,)),
                                                 ("wo", (D, D)), ("bo", (D,)))}
    qkv = nn.reshape(nn.dense(x, p["wqkv"], p["bqkv"]), (B, T, 3, H, hd)).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0, ...], qkv[1, ...], qkv[2, ...]                      # (B, H, T, hd)
    a = nn.softmax(nn.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)), -1)
    ctx = nn.reshape(nn.matmul(a, v).permute(0, 2, 1, 3), (B, T, D))
    return nn.mse_loss(nn.dense(ctx, p["wo"], p["bo"]), y), x, y, p


def torch_loss(name, values, xt, yt, B, T, D, H):
    import torch
    F = torch.nn.functional
    hd = D // H
    qkv = F.linear(xt, values["wqkv"], values["bqkv"]).view(B, T, 3, H, hd).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    s = q @ k.transpose(-1, -2)
    if name == "custom":
        offset = torch.arange(T)[:, None] - torch.arange(T)[None, :] + T - 1
        s = s * values["temp"][None, :, None, None] + values["rel"][:, offset][None]
    else:
        s = s * (1.0 / math.sqrt(hd))
    ctx = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, D)
    return F.mse_loss(F.linear(ctx, values["wo"], values["bo"]), yt)


NETWORKS = {"custom": custom_loss, "mha": mha_loss}


def without_delinearize():
    """Turn the pass off in this process (the `neoflow-flat` side): stages
    are scheduled as written and quotient bounds do not cut the output."""
    from neoflow.graph import split
    from neoflow.schedule import stage
    stage.scheduled_view = lambda tensor: tensor
    split.affine_comparison = lambda cond: cond


def neoflow_side(name, sizes, steps, blocks, rng):
    loss, x, y, p = NETWORKS[name](**sizes)
    init = params(sizes["D"], sizes["H"], sizes["T"], rng)
    batch = {x: rng.standard_normal(x.shape).astype(np.float32),
             y: rng.standard_normal(y.shape).astype(np.float32)}
    with nf.Trainer(loss, nf.optim.SGD(lr=LR)) as trainer:
        trainer.load_parameters({n: init[n] for n in p})
        for _ in range(WARMUP):
            trainer.step(batch)
        figure = summarize(time_blocks(lambda: trainer.step(batch), steps, blocks))
        kernels = []
        for row in trainer.stats()["kernel_profile"][:TOP]:
            k = trainer.kernels[row["index"]]
            flops = sum(own_flops(t) for t in k.stages)
            kernels.append([row["kernel"], row["ms"], flops / row["ms"] / 1e6 if row["ms"] else 0])
        figure["kernels"] = kernels
    return figure


def torch_side(name, sizes, steps, blocks, rng):
    import torch
    init = params(sizes["D"], sizes["H"], sizes["T"], rng)
    values = {n: torch.tensor(v, requires_grad=True) for n, v in init.items()
              if name == "custom" or n not in ("temp", "rel")}
    shape = (sizes["B"], sizes["T"], sizes["D"])
    xt = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    yt = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    opt = torch.optim.SGD(list(values.values()), lr=LR)

    def step():
        opt.zero_grad()
        torch_loss(name, values, xt, yt, **sizes).backward()
        opt.step()
    for _ in range(WARMUP):
        step()
    return summarize(time_blocks(step, steps, blocks))


def time_side(side, networks, sizes, steps, blocks):
    """{network: figure} of one side, in this process."""
    if side == "neoflow-flat":
        without_delinearize()
    run = torch_side if side == "torch" else neoflow_side
    return {n: run(n, sizes, steps, blocks, np.random.default_rng(0)) for n in networks}


def main(argv=None):
    """Command line; returns {side: [{network: figure} per round]}."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=SIDES, help="time one side here, print JSON (internal)")
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--networks", nargs="+", choices=list(NETWORKS), default=list(NETWORKS))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--blocks", type=int, default=BLOCKS)
    parser.add_argument("--rounds", type=int, default=1, help="run the sides in turn N times")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one block of 2 steps")
    args = parser.parse_args(argv)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    if args.smoke:
        args.steps, args.blocks = 2, 1
    if args.side:
        print(json.dumps(time_side(args.side, args.networks, sizes, args.steps, args.blocks)))
        return None
    common = ["--networks", *args.networks, "--steps", str(args.steps), "--blocks",
              str(args.blocks)] + (["--smoke"] if args.smoke else [])
    results = {side: [] for side in args.sides}
    for _ in range(args.rounds):
        for side in args.sides:
            results[side].append(run_side(__file__, side, common))
    report(results, args, sizes)
    return results


def report(results, args, sizes):
    print(f"attention training step, sizes {sizes}; each side alone in its own process with "
          f"default threading; median of {args.blocks} blocks of {args.steps} steps (range), "
          f"{args.rounds} round(s) in turn\n")
    print("| network | " + " | ".join(f"{s} ms/step" for s in results) + " |")
    print("|---|" + "---:|" * len(results))
    for net in args.networks:
        cells = []
        for side, rounds in results.items():
            medians = [r[net]["median_ms"] for r in rounds]
            lo = min(r[net]["spread_ms"][0] for r in rounds)
            hi = max(r[net]["spread_ms"][1] for r in rounds)
            cells.append(f"{statistics.median(medians):.3f} ({lo:.3f}-{hi:.3f})")
        print(f"| {net} | " + " | ".join(cells) + " |")
    for side, rounds in results.items():
        for net in args.networks:
            for kernel, ms, rate in rounds[-1][net].get("kernels", ()):
                print(f"  {side} {net}: {kernel}: {ms:.3f} ms, {rate:.2f} GFLOP/s")


if __name__ == "__main__":
    main()
