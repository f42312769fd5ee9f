"""Tuned NeoFlow kernels against PyTorch.

Tunes each workload with a stated budget (nf.tune into a database of its
own), then times each side alone in a process of its own with its default
threading (`--side neoflow`: the tuned and the default build, alternating;
`--side torch`; neoflow.zoo.solo.run_side) and prints a markdown table with
the issue's targets. The timing runs in BLOCKS blocks: on a shared machine
a figure drifts by 20% and more from one block of seconds to the next, so
each side's figure is the median of its blocks' medians; the ratio's range
pairs the sides' extreme blocks (the widest it can be).

* fp32 GEMM 1024^3 and 2048x1024x1024 vs torch.mm         (target 80%)
* ResNet-18 3x3 convolutions at batch 8 vs torch conv2d    (target 70%)
* novel operators vs the same computation in PyTorch eager (target 2x):
  LLTM cell forward+backward, MI-LSTM gates, capsule convolution

`--prune-check` instead compares unpruned and pruned search on small
kernels: how much the hardware model prunes, and whether the best schedule
unpruned search finds survives pruning (and how fast the pruned best is).

    python bench/tune.py --minutes 1                  # 1 minute per kernel
    python bench/tune.py --only gemm --minutes 10
    python bench/tune.py --prune-check --trials 48
    python bench/tune.py --threads 1    # both sides on one thread (steadier on a shared machine)
"""
import os
import sys

if "--threads" in sys.argv:   # read when OpenMP starts: set before any import
    os.environ["OMP_NUM_THREADS"] = sys.argv[sys.argv.index("--threads") + 1]

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow.graph.plan import plan_kernels  # noqa: E402
from neoflow.tune import Database, detect  # noqa: E402
from neoflow.tune.prune import Pruner, prune_report  # noqa: E402
from neoflow.zoo import workloads  # noqa: E402
from neoflow.zoo.solo import run_side  # noqa: E402

REPEATS = 31
MIN_SECONDS = 3.0
BLOCKS = 5       # timing blocks per workload (median_seconds each)


def median_seconds(*calls):
    """Median seconds of each callable in `calls`, timed in alternation
    (REPEATS rounds, more until MIN_SECONDS have passed: sub-millisecond
    calls on this machine swing by 20% from one second to the next); the
    order rotates every round, so that each runs equally often right after
    each other one (a call right after PyTorch's ran measurably slower)."""
    times = [[] for _ in calls]
    for fn in calls:
        fn()
    started, round_ = time.perf_counter(), 0
    while round_ < REPEATS or time.perf_counter() - started < MIN_SECONDS:
        round_ += 1
        for k in range(len(calls)):
            n = (round_ + k) % len(calls)
            start = time.perf_counter()
            calls[n]()
            times[n].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def rand(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


# -- PyTorch versions of the workloads (same inputs, in order) ---------------------

def torch_matmul(a, b):
    return lambda: torch.mm(a, b)


def torch_conv(x, w):
    return lambda: F.conv2d(x, w, padding=1)


def torch_lltm(x, h, c, W, b, dh):
    state = h.shape[1]
    params = [t.clone().requires_grad_() for t in (W, b, h, c, x)]

    def step():
        Wq, bq, hq, cq, xq = params
        for p in params:
            p.grad = None
        gates = F.linear(torch.cat([hq, xq], dim=1), Wq, bq)
        g_in, g_out, g_cand = gates[:, :state], gates[:, state:2 * state], gates[:, 2 * state:]
        c_new = cq + F.elu(g_cand) * torch.sigmoid(g_in)
        h_new = torch.tanh(c_new) * torch.sigmoid(g_out)
        h_new.backward(dh)
        return h_new, c_new
    return step


def torch_milstm(x, h, c, W, U, alpha, beta1, beta2, bias):
    hidden = h.shape[1]

    def step():
        wx, uh = F.linear(x, W), F.linear(h, U)
        pre = alpha * wx * uh + beta1 * uh + beta2 * wx + bias
        i, f, o, z = pre.split(hidden, dim=1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(z)
        return c_new, torch.sigmoid(o) * torch.tanh(c_new)
    return step


def torch_capsule(X, W):
    k = W.shape[2]
    p = k // 2

    def step():
        padded = F.pad(X, (0, 0, 0, 0, p, p, p, p))                # pad y and x
        windows = padded.unfold(2, k, 1).unfold(3, k, 1)           # n c y x i k r s
        return torch.einsum("ncyxikrs,ocrskj->noyxij", windows, W)
    return step


def suites(only):
    """[(suite, workload, torch maker, target ratio, what the ratio compares)]."""
    out = []
    if "gemm" in only:
        for m in (1024, 2048):
            [w] = workloads.matmul(m, 1024, 1024)
            out.append(("gemm", w, torch_matmul, 0.8, "of torch.mm GFLOP/s"))
    if "conv" in only:
        for w in workloads.conv2d_resnet18(8):
            out.append(("conv", w, torch_conv, 0.7, "of torch conv2d GFLOP/s"))
    if "novel" in only:
        out.append(("novel", workloads.lltm_cell()[0], torch_lltm, 2.0, "x PyTorch eager"))
        out.append(("novel", workloads.milstm_gates()[0], torch_milstm, 2.0, "x PyTorch eager"))
        out.append(("novel", workloads.capsule_conv()[0], torch_capsule, 2.0,
                    "x PyTorch eager"))
    return out


def run_suites(args):
    db = Database(args.database)
    print(f"hardware: {detect().describe()}; database {db.path}", file=sys.stderr)
    tuned = []
    for suite, w, make_torch, target, unit in suites(args.only):
        kernels = {k.key for k in plan_kernels(w.outputs, w.inputs)[0]}
        seconds = args.minutes * 60 * len(kernels)
        started = time.monotonic()
        found = nf.tune(w.outputs, w.inputs, trials=args.trials, seconds=seconds, database=db,
                        seed=args.seed, progress=not args.quiet)
        records = found if isinstance(found, tuple) else (found,)
        tuned.append((len(kernels), sum(r.trials for r in records), time.monotonic() - started))
    db.close()
    common = ["--only", ",".join(sorted(args.only)), "--database", args.database]
    if args.threads:
        common += ["--threads", str(args.threads)]
    ours, theirs = (run_side(__file__, side, common) for side in ("neoflow", "torch"))
    rows = []
    for (suite, w, _, target, unit), (nk, trials, tuned_s) in zip(suites(args.only), tuned):
        (t_nf, nf_low, nf_high), t_default = ours[w.label]
        t_torch, torch_low, torch_high = theirs[w.label]
        ratio, work = t_torch / t_nf, nf.flops(w.outputs)
        rows.append((w.label, nk, trials, tuned_s, work / t_default / 1e9, work / t_nf / 1e9,
                     work / t_torch / 1e9, ratio, (torch_low / nf_high, torch_high / nf_low),
                     target, unit))
        print(f"{w.label}: {ratio:.2f} {unit} (target {target:g})", file=sys.stderr)
    threads = args.threads or "default"
    print(f"\nBudget: {args.minutes:g} min per kernel; threads: {threads}, each side alone in "
          f"its own process"
          f"{f', at most {args.trials} trials per computation' if args.trials else ''}; "
          f"{detect().describe()}\n")
    print("| workload | kernels | trials | tuning s | default GFLOP/s | tuned GFLOP/s | "
          f"torch GFLOP/s | ratio (medians of {BLOCKS} blocks) | range | target |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (label, nk, trials, secs, g_def, g_nf, g_torch, ratio, (low, high), target,
         unit) in rows:
        ok = "met" if ratio >= target else "missed"
        print(f"| {label} | {nk} | {trials} | {secs:.0f} | {g_def:.1f} | {g_nf:.1f} | "
              f"{g_torch:.1f} | {ratio:.2f} {unit} | {low:.2f}-{high:.2f} | {target:g} ({ok}) |")


def time_side(side, args):
    """{workload label: figures} of one side, timed in this process:
    neoflow [[tuned s, low, high], default s]; torch [s, low, high]."""
    out = {}
    for _, w, make_torch, _, _ in suites(args.only):
        values = [rand(t.shape, n) if t.dtype == "float32" else np.zeros(t.shape, t.dtype)
                  for n, t in enumerate(w.inputs)]
        if side == "torch":
            torch_fn = make_torch(*[torch.from_numpy(v) for v in values])
            blocks = [median_seconds(torch_fn)[0] for _ in range(BLOCKS)]
            out[w.label] = [statistics.median(blocks), min(blocks), max(blocks)]
            continue
        f = nf.build(w.outputs, w.inputs, database=args.database)
        default = nf.build(w.outputs, w.inputs, database=False)
        blocks = [median_seconds(lambda: f(*values), lambda: default(*values))
                  for _ in range(BLOCKS)]
        tuned_s = [b[0] for b in blocks]
        out[w.label] = [[statistics.median(tuned_s), min(tuned_s), max(tuned_s)],
                        statistics.median(b[1] for b in blocks)]
    return out


def prune_check(args):
    """Unpruned vs pruned search on small kernels (each in its own database)."""
    hw = detect()
    picks = (workloads.matmul(256, 256, 256)[0], workloads.conv2d_resnet18(1)[2],
             workloads.milstm_gates(16, 32, 64)[0])
    print("| kernel | pruned (of 500 samples) | unpruned best ms | kept by pruner? | "
          "pruned best ms | pruned/unpruned |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for w in picks:
            kernels, _ = plan_kernels(w.outputs, w.inputs)
            kernel = max(kernels, key=lambda k: nf.flops(list(k.outputs), given=k.inputs))
            report = prune_report(kernel, hw, samples=500)
            best = {}
            for prune in (False, True):
                with Database(os.path.join(tmp, f"{kernel.key[:8]}-{prune}.sqlite")) as db:
                    best[prune] = _tune_one(kernel, db, args, prune)
            why = Pruner(kernel, hw).reject(best[False].config)
            print(f"| {w.label}: {kernel.stages[-1].name} | {report['pruned_fraction']:.0%} "
                  f"{report['by_rule']} | {best[False].median_s * 1e3:.3f} | "
                  f"{'yes' if why is None else 'no: ' + why} | {best[True].median_s * 1e3:.3f} "
                  f"| {best[True].median_s / best[False].median_s:.2f} |")


def _tune_one(kernel, db, args, prune):
    from neoflow.tune.progress import Progress
    from neoflow.tune.tuner import tune_kernel
    with Progress(args.trials, f"{'pruned' if prune else 'unpruned'} "
                  f"{kernel.stages[-1].name}", enabled=not args.quiet) as bar:
        return tune_kernel(kernel, db=db, trials=args.trials, seed=args.seed, prune=prune,
                           bar=bar)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=0.5,
                        help="tuning minutes per kernel (default 0.5; the issue allows 10)")
    parser.add_argument("--trials", type=int, default=None,
                        help="also cap the trials per computation")
    parser.add_argument("--only", default="gemm,conv,novel", help="suites: gemm,conv,novel")
    parser.add_argument("--database", default=None,
                        help="tuning database (default: a fresh one in a temp folder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--prune-check", action="store_true")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("--threads", type=int, default=None,
                        help="threads for NeoFlow (OpenMP) and torch (default: all cores)")
    parser.add_argument("--side", choices=("neoflow", "torch"),
                        help="time one side in this process and print JSON (internal)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.only = set(args.only.split(","))
    if args.side:
        print(json.dumps(time_side(args.side, args)))
        return
    if args.prune_check:
        args.trials = args.trials or 48
        prune_check(args)
        return
    if args.database is None:
        args.database = os.path.join(tempfile.mkdtemp(prefix="neoflow-bench-"), "tuning.sqlite")
    run_suites(args)


if __name__ == "__main__":
    main()
