"""NeoFlow's Triton backend on a GPU, against PyTorch (eager cuBLAS/cuDNN and
torch.compile), in one script for a short device run.

Sections (each prints a table and appends JSON lines to the output file):

* `check`   every test kernel compiled natively and checked against torch
            on the device (max abs error, pass/fail);
* `train`   the zoo's novel networks (LLTM, MI-LSTM, SCRNN, subLSTM) and
            the CNNs: ms/step of nf.Trainer(target="cuda") against PyTorch
            eager and torch.compile, fp32 and bf16 (torch.autocast);
* `gemm`    GEMM and conv TFLOP/s against torch.mm / conv2d;
* `memory`  fused memory-bound kernels' GB/s against the measured copy
            bandwidth (torch clone of the same bytes);
* `prune`   the hardware model's kept configs vs a random sample of the
            whole space: is the best measured config in the kept set?

Timing: CUDA events around each call, the L2 flushed between repeats, the
median of REPEATS after a warm-up (tune/gpu_tune.py's timer); frameworks
alternate in one process (one GPU, one context).

Output: one JSON object per line in bench/results/gpu-<UTC time>.jsonl,
    {"section": "gemm", "name": "gemm 4096^3 fp32", "neoflow_s": ...,
     "torch_s": ..., "ratio": ..., ...}
(`ratio` = torch time / NeoFlow time: above 1 NeoFlow is faster), and a
markdown table per section on stdout. `--smoke` runs every section at tiny
sizes, one repeat (works under TRITON_INTERPRET=1 on a CPU; the tests
run it that way); the figures then mean nothing.

    python bench/gpu.py                       # all sections, full sizes
    python bench/gpu.py --only gemm memory
    TRITON_INTERPRET=1 python bench/gpu.py --smoke
"""
import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import neoflow as nf
from neoflow import zoo
from neoflow.graph.plan import plan_kernels
from neoflow.runtime.cuda import require_device
from neoflow.tune.gpu_hardware import detect_gpu, gpu_candidates, rank_gpu_configs
from neoflow.tune.gpu_tune import cuda_time

SECTIONS = ("check", "train", "gemm", "memory", "prune")
NOVEL = ("lltm", "milstm", "scrnn", "sublstm")
CNNS = ("lenet", "mobilenet_v2", "shufflenet")


class Bench:
    def __init__(self, smoke, out):
        self.smoke, self.out = smoke, out
        self.device = require_device()
        self.repeats = 1 if smoke else 20
        self.rows = []

    def time(self, fn):
        return cuda_time(fn, self.device, self.repeats)

    def record(self, **row):
        row = {k: (round(v, 9) if isinstance(v, float) else v) for k, v in row.items()}
        self.rows.append(row)
        with open(self.out, "a") as f:
            f.write(json.dumps(row) + "\n")

    def table(self, section, keys):
        rows = [r for r in self.rows if r["section"] == section]
        print(f"\n### {section}\n")
        print("| " + " | ".join(keys) + " |")
        print("|" + "---|" * len(keys))
        for r in rows:
            print("| " + " | ".join(_fmt(r.get(k)) for k in keys) + " |")
        sys.stdout.flush()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def rand(shape, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(device)


# -- check: every test kernel natively, against torch ------------------------------
def check_cases(s):
    n = 33 if s else 257
    A, B = nf.placeholder((n, 65), name="A"), nf.placeholder((65, 47), name="B")
    x = nf.placeholder((2, 3, 15, 15), name="x")
    w = nf.placeholder((8, 3, 3, 3), name="w")
    idx = nf.placeholder((19,), "int64", name="idx")
    g = nf.placeholder((65,), name="g")
    return [
        ("matmul", nf.nn.matmul(A, B), [A, B], lambda a, b: a @ b),
        ("softmax", nf.nn.softmax(A, 1), [A], lambda a: torch.softmax(a, 1)),
        ("log_softmax", nf.nn.log_softmax(A, 1), [A], lambda a: torch.log_softmax(a, 1)),
        ("layer_norm", nf.nn.layer_norm(A, (65,), g), [A, g],
         lambda a, gg: F.layer_norm(a, (65,), gg)),
        ("conv2d", nf.nn.conv2d(x, w, padding=1), [x, w], lambda a, b: F.conv2d(a, b, padding=1)),
        ("max_pool2d", nf.nn.max_pool2d(x, 3, stride=2), [x], lambda a: F.max_pool2d(a, 3, 2)),
        ("gather", nf.compute((19, 65), lambda i, j: A[idx[i], j], name="rows"), [A, idx],
         lambda a, i: a[i]),
        ("tanh_sigmoid", nf.compute((n, 65), lambda i, j: nf.tanh(A[i, j]) * nf.sigmoid(A[i, j])),
         [A], lambda a: torch.tanh(a) * torch.sigmoid(a)),
    ]


def section_check(b):
    for name, out, inputs, ref in check_cases(b.smoke):
        args = []
        rows = inputs[0].shape[0]
        for n, t in enumerate(inputs):
            if t.dtype == "int64":
                args.append(torch.randint(0, rows, t.shape).to(b.device))
            else:
                args.append(rand(t.shape, b.device, n))
        try:
            f = nf.build(out, inputs, target="cuda")
            got, want = f(*args), ref(*args)
            err = float((got.double() - want.double()).abs().max())
            ok = bool(torch.allclose(got, want, rtol=1e-4, atol=1e-4))
            b.record(section="check", name=name, launches=len(f.launches), max_abs_err=err,
                     ok=ok)
        except Exception as e:   # reported, not fatal: the other sections still run
            b.record(section="check", name=name, ok=False, error=f"{type(e).__name__}: {e}"[:300])
    b.table("check", ["name", "launches", "max_abs_err", "ok", "error"])


# -- train: ms/step against eager and torch.compile ---------------------------------
def _torch_step(twin, batch, bf16):
    opt = torch.optim.SGD(twin.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        if bf16:
            with torch.autocast("cuda" if batch_device(batch) == "cuda" else "cpu",
                                dtype=torch.bfloat16):
                loss = twin(batch)
        else:
            loss = twin(batch)
        loss.backward()
        opt.step()
    return step


def batch_device(batch):
    return next(iter(batch.values())).device.type


def section_train(b):
    names = ("lltm",) if b.smoke else NOVEL + CNNS
    for name in names:
        model = zoo.get(name).build("small" if b.smoke else "default")
        batch = model.make_batch(np.random.default_rng(0))
        dev = {k: torch.from_numpy(v).to(b.device) for k, v in batch.items()}
        for precision in ("fp32", "bf16"):
            row = dict(section="train", name=name, precision=precision)
            try:
                with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=0.01), target="cuda",
                                precision=precision) as tr:
                    row["neoflow_s"] = b.time(lambda: tr.step(dev))
                    values = tr.parameters()
                twin = model.torch_model(values).to(b.device)
                row["eager_s"] = b.time(_torch_step(twin, dev, precision == "bf16"))
                if not b.smoke:
                    compiled = torch.compile(twin)
                    row["compile_s"] = b.time(_torch_step(compiled, dev, precision == "bf16"))
                row["vs_eager"] = row["eager_s"] / row["neoflow_s"]
                if "compile_s" in row:
                    row["vs_compile"] = row["compile_s"] / row["neoflow_s"]
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
            b.record(**row)
    b.table("train", ["name", "precision", "neoflow_s", "eager_s", "compile_s", "vs_eager",
                      "vs_compile", "error"])
    novel = [r["vs_eager"] for r in b.rows if r["section"] == "train" and r["name"] in NOVEL
             and "vs_eager" in r]
    if novel:
        print(f"\nnovel networks, geomean vs eager: "
              f"{math.exp(statistics.mean(map(math.log, novel))):.3g}x (target 3x)")


# -- gemm/conv TFLOP/s ---------------------------------------------------------
def section_gemm(b):
    n = 16 if b.smoke else 4096
    A, B = nf.placeholder((n, n), name="A"), nf.placeholder((n, n), name="B")
    x = nf.placeholder((1, 2, 6, 6) if b.smoke else (32, 64, 56, 56), name="x")
    w = nf.placeholder((2, 2, 3, 3) if b.smoke else (64, 64, 3, 3), name="w")
    cases = [("gemm", nf.nn.matmul(A, B), [A, B], lambda a, bb: a @ bb, 2 * n ** 3),
             ("conv3x3", nf.nn.conv2d(x, w, padding=1), [x, w],
              lambda a, ww: F.conv2d(a, ww, padding=1),
              2 * math.prod(x.shape) * w.shape[0] * 9)]
    for name, out, inputs, ref, work in cases:
        args = [rand(t.shape, b.device, k) for k, t in enumerate(inputs)]
        row = dict(section="gemm", name=name, shape=str([t.shape for t in inputs]))
        try:
            f = nf.build(out, inputs, target="cuda")
            row["neoflow_s"], row["torch_s"] = b.time(lambda: f(*args)), b.time(lambda: ref(*args))
            row["neoflow_tflops"] = work / row["neoflow_s"] / 1e12
            row["torch_tflops"] = work / row["torch_s"] / 1e12
            row["ratio"] = row["torch_s"] / row["neoflow_s"]
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        b.record(**row)
    b.table("gemm", ["name", "shape", "neoflow_tflops", "torch_tflops", "ratio", "error"])


# -- memory-bound GB/s against copy bandwidth ---------------------------------------
def section_memory(b):
    n = 1 << (11 if b.smoke else 26)
    big = rand((n,), b.device)
    copy_s = b.time(lambda: big.clone())
    copy_gbs = 2 * 4 * n / copy_s / 1e9
    X = nf.placeholder((n // 1024, 1024), name="X")
    Y = nf.placeholder((n // 1024, 1024), name="Y")
    cases = [("lltm-like pointwise", nf.compute(X.shape, lambda i, j: nf.sigmoid(X[i, j]) *
                                                 nf.tanh(Y[i, j]) + X[i, j]), [X, Y], 3),
             ("softmax rows", nf.nn.softmax(X, 1), [X], 2)]
    for name, out, inputs, passes in cases:
        args = [rand(t.shape, b.device, k) for k, t in enumerate(inputs)]
        row = dict(section="memory", name=name, copy_gbs=copy_gbs)
        try:
            f = nf.build(out, inputs, target="cuda")
            s = b.time(lambda: f(*args))
            row["neoflow_gbs"] = passes * 4 * n / s / 1e9
            row["of_copy"] = row["neoflow_gbs"] / copy_gbs
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        b.record(**row)
    b.table("memory", ["name", "neoflow_gbs", "copy_gbs", "of_copy", "error"])


# -- prune: does the kept set hold the best measured config? ---------------------------
def section_prune(b):
    from neoflow.runtime.cuda import Launcher, compile_program
    n = 16 if b.smoke else 2048
    A, B = nf.placeholder((n, n), name="A"), nf.placeholder((n, n), name="B")
    out = nf.nn.matmul(A, B)
    (kernel,), _ = plan_kernels(out, [A, B])
    hw = detect_gpu()
    ranked, rejected = rank_gpu_configs(kernel, hw)
    cands = gpu_candidates(kernel)
    pool = [c for c, _ in ranked]
    if b.smoke:   # the interpreter pays per program and pass: whole-loop blocks only
        pool = [c for c in pool if c.gpu.xblock >= n * n and c.gpu.rblock >= n]
    top = pool[:2] if b.smoke else pool[:16]
    rng = np.random.default_rng(0)
    space = pool if b.smoke else [c for c, _ in ranked]
    sample = [space[int(i)] for i in rng.choice(len(space), min(len(space), 2 if b.smoke else 32),
                                                replace=False)]
    args = [rand((n, n), b.device, 0), rand((n, n), b.device, 1)]
    measured = []
    for group, configs in (("kept", top), ("sample", sample)):
        for cfg in configs:
            program, tp = compile_program([kernel], [cfg], [A, B], [out], hardware=hw)
            res = torch.empty((n, n), device=b.device)
            launcher = Launcher(program, tp, b.device)
            tensors = {id(bf): t for bf, t in zip(program.inputs + program.outputs,
                                                  args + [res])}
            measured.append((b.time(lambda: launcher.run(tensors)), group, cfg))
    best = min(measured, key=lambda m: m[0])
    b.record(section="prune", name=f"matmul {n}^3", candidates=len(cands),
             rejected=sum(rejected.values()), kept_measured=len(top), sampled=len(sample),
             best_in_kept=best[1] == "kept", best_s=best[0], best=best[2].gpu.to_dict())
    b.table("prune", ["name", "candidates", "rejected", "kept_measured", "sampled",
                      "best_in_kept", "best_s"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--out", default=None, help="JSON lines file (default bench/results/...)")
    args = ap.parse_args(argv)
    out = Path(args.out or Path(__file__).parent / "results" /
               f"gpu-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    b = Bench(args.smoke, out)
    hw = detect_gpu()
    b.record(section="device", name=hw.name, source=hw.source, sms=hw.sm_count,
             interpreter=os.environ.get("TRITON_INTERPRET") == "1", torch=torch.__version__)
    for name in args.only:
        globals()[f"section_{name}"](b)
    print(f"\nresults: {out}")
    return b


if __name__ == "__main__":
    main()
