"""Training-step benchmark: NeoFlow (tuning off) against PyTorch eager on the
example networks (neoflow.zoo's, at the sizes the examples train them at) —
ms/step (median), kernels or ATen ops per step, and peak memory of a step.

Each framework is timed alone in a process of its own with its default
threading (`--side neoflow` / `--side torch`, neoflow.zoo.solo.run_side),
with the same initial parameters, batch and optimizer (SGD, momentum 0.9);
ms/step is the median of BLOCKS blocks' medians, the blocks' range beside it. NeoFlow's peak is its buffer plan (parameters, optimizer
state, inputs and the activation arena). PyTorch's is measured: parameters,
optimizer state and inputs, plus the largest total of tensor storages
allocated during a step and alive at once (a TorchDispatchMode records each
op's new output storages and a finaliser drops them when they are freed).

    python bench/train.py [--models mlp lenet lltm milstm] [--steps 30]
"""
import argparse
import json
import statistics
import time
import weakref

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import neoflow as nf
from neoflow import zoo
from neoflow.zoo.solo import run_side, summarize, time_blocks

# the zoo's default sizes with these overrides: the sizes the examples train at
CONFIGS = {"mlp": dict(batch=64), "lenet": dict(batch=32, image=16),
           "lltm": dict(batch=32, steps=8, n_in=4, state=16, n_out=1),
           "milstm": dict(batch=32, steps=8, n_in=4, hidden=16, classes=2)}
LR, MOMENTUM = 0.01, 0.9
BLOCKS = 5


class StepMemory(TorchDispatchMode):
    """Counts ATen ops and the peak bytes of storages allocated under it."""

    def __init__(self, existing):
        super().__init__()
        self.existing = {id(s) for s in existing}
        self.live, self.peak, self.ops, self.tracked = 0, 0, 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops += 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                if id(s) not in self.existing and id(s) not in self.tracked:
                    self.tracked.add(id(s))
                    self.live += s.nbytes()
                    self.peak = max(self.peak, self.live)
                    weakref.finalize(s, self._freed, id(s), s.nbytes())
        return out

    def _freed(self, key, size):
        self.live -= size
        self.tracked.discard(key)


def median_ms(fn, steps):
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _timed(fn, steps):
    """[median ms, low, high] of `steps`-step blocks of `fn`."""
    figure = summarize(time_blocks(fn, max(1, steps // BLOCKS), BLOCKS))
    return [figure["median_ms"], *figure["spread_ms"]]


def bench_side(name, steps, side):
    """One framework's figures for example model `name`, timed in this process."""
    model = zoo.get(name).build(**CONFIGS[name])
    batch = model.make_batch(np.random.default_rng(0))
    t0 = time.perf_counter()
    trainer = nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=LR, momentum=MOMENTUM),
                         tuning="off")
    with trainer:
        if side == "neoflow":
            trainer.step(batch)
            row = {"nf_first_s": time.perf_counter() - t0}
            row["nf_ms"] = _timed(lambda: trainer.step(batch), steps)
            stats = trainer.stats()
            row.update(kernels=stats["kernels"], backend=stats["backend"],
                       nf_peak=trainer.memory_stats()["peak_bytes"])
            return row
        values = trainer.parameters()        # the same initial parameters; never stepped here
    tbatch = {k: torch.from_numpy(v) for k, v in batch.items()}
    twin = model.torch_model(values)
    opt = torch.optim.SGD(twin.parameters(), lr=LR, momentum=MOMENTUM)

    def torch_step():
        opt.zero_grad()
        twin(tbatch).backward()
        opt.step()

    torch_step()
    row = {"torch_ms": _timed(torch_step, steps)}
    persistent = list(twin.tensors().values()) + list(tbatch.values()) + [
        v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    opt.zero_grad()
    with StepMemory([t.untyped_storage() for t in persistent]) as mem:
        twin(tbatch).backward()
        opt.step()
    row["aten_ops"] = mem.ops
    row["torch_peak"] = sum(t.untyped_storage().nbytes() for t in persistent) + mem.peak
    return row


def overhead(kernels=400, repeats=2000):
    """Executor overhead on a chain of tiny elementwise kernels: Python time
    per step (feed checks, copies, scalars, loss) and native time per kernel."""
    x = nf.placeholder((4,), name="x")
    w = nf.parameter((4,), name="w")
    h = nf.compute((4,), lambda i: x[i] * w[i], name="h0")
    for k in range(kernels):
        h = nf.compute((4,), lambda i, h=h: h[i] * 0.999 + 0.001, name=f"h{k + 1}")
    feed = {x: np.ones(4, np.float32)}
    with nf.Trainer(nf.nn.sum(h), optimizer=nf.optim.SGD(lr=0.01), tuning="off") as trainer:
        trainer.step(feed)
        step_us = median_ms(lambda: trainer.step(feed), repeats) * 1e3
        native_us = median_ms(trainer._executor.program, repeats) * 1e3
        n = trainer.stats()["kernels"]
    print(f"executor overhead ({n} kernels of 4 elements): step {step_us:.1f} us, "
          f"native call {native_us:.1f} us = {native_us / n * 1e3:.1f} ns/kernel, "
          f"Python {step_us - native_us:.1f} us/step")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per framework")
    parser.add_argument("--side", choices=("neoflow", "torch"),
                        help="time one side in this process and print JSON (internal)")
    args = parser.parse_args(argv)
    if args.side:
        print(json.dumps({m: bench_side(m, args.steps, args.side) for m in args.models}))
        return
    common = ["--models", *args.models, "--steps", str(args.steps)]
    ours, theirs = (run_side(__file__, side, common) for side in ("neoflow", "torch"))
    head = ("model", "kernels", "aten ops", "NeoFlow ms", "PyTorch ms", "speedup",
            "NeoFlow peak KiB", "PyTorch peak KiB", "first step s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in args.models:
        r = {**ours[name], **theirs[name]}
        (nf_ms, nf_lo, nf_hi), (t_ms, t_lo, t_hi) = r["nf_ms"], r["torch_ms"]
        cells = (name, r["kernels"], r["aten_ops"], f"{nf_ms:.3f} ({nf_lo:.3f}-{nf_hi:.3f})",
                 f"{t_ms:.3f} ({t_lo:.3f}-{t_hi:.3f})", f"{t_ms / nf_ms:.2f}x",
                 f"{r['nf_peak'] / 1024:.0f}", f"{r['torch_peak'] / 1024:.0f}",
                 f"{r['nf_first_s']:.2f}")
        print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
    print(f"(NeoFlow backend: {r['backend']}; torch {torch.__version__}; each side alone in "
          "its own process with default threading, median of blocks (range))")
    overhead()              # NeoFlow alone: this process runs nothing else


if __name__ == "__main__":
    main()
