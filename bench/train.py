"""Training-step benchmark: NeoFlow (tuning off) against PyTorch eager on the
example networks (examples/models.py) — ms/step (median), kernels or ATen ops
per step, and peak memory of a step.

Both run in this process on 2 threads (torch.set_num_threads(2),
OMP_NUM_THREADS=2, OMP_WAIT_POLICY=PASSIVE) with the same initial parameters, batch and optimizer
(SGD, momentum 0.9). NeoFlow's peak is its buffer plan (parameters, optimizer
state, inputs and the activation arena). PyTorch's is measured: parameters,
optimizer state and inputs, plus the largest total of tensor storages
allocated during a step and alive at once (a TorchDispatchMode records each
op's new output storages and a finaliser drops them when they are freed).

    python bench/train.py [--models mlp lenet lltm milstm] [--steps 30]
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
# NeoFlow's libgomp and torch's bundled one each keep a thread pool; spinning
# idle threads of one would steal the cores of the other.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import neoflow as nf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from models import SPECS  # noqa: E402

CONFIGS = {"mlp": dict(batch=64), "lenet": dict(batch=32),
           "lltm": dict(batch=32, build=dict(steps=8, n_in=4), data=dict(steps=8, n_in=4)),
           "milstm": dict(batch=32, build=dict(steps=8, n_in=4), data=dict(steps=8, n_in=4))}
LR, MOMENTUM = 0.01, 0.9


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


def interleaved_ms(fns, steps):
    """Median ms of each callable, timed in turns so both see the same machine load."""
    times = [[] for _ in fns]
    for _ in range(steps):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) * 1e3 for ts in times]


def bench(name, steps):
    spec, cfg = SPECS[name], CONFIGS[name]
    net = spec.build(cfg["batch"], **cfg.get("build", {}))
    batch = spec.batch(np.random.default_rng(0), cfg["batch"], **cfg.get("data", {}))
    tbatch = {k: torch.from_numpy(v) for k, v in batch.items()}
    row = {"model": name}
    t0 = time.perf_counter()
    with nf.Trainer(net.loss, optimizer=nf.optim.SGD(lr=LR, momentum=MOMENTUM),
                    tuning="off") as trainer:
        trainer.step(batch)
        row["nf_first_s"] = time.perf_counter() - t0
        params = {k: torch.tensor(v, requires_grad=True) for k, v in trainer.parameters().items()}
        opt = torch.optim.SGD(list(params.values()), lr=LR, momentum=MOMENTUM)

        def torch_step():
            opt.zero_grad()
            spec.torch_loss(params, tbatch).backward()
            opt.step()

        torch_step()
        row["nf_ms"], row["torch_ms"] = interleaved_ms([lambda: trainer.step(batch), torch_step],
                                                       steps)
        row["kernels"] = trainer.stats()["kernels"]
        row["backend"] = trainer.stats()["backend"]
        row["nf_peak"] = trainer.memory_stats()["peak_bytes"]

    persistent = list(params.values()) + list(tbatch.values()) + [
        v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]
    opt.zero_grad()
    with StepMemory([t.untyped_storage() for t in persistent]) as mem:
        spec.torch_loss(params, tbatch).backward()
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per framework")
    args = parser.parse_args()
    torch.set_num_threads(2)
    head = ("model", "kernels", "aten ops", "NeoFlow ms", "PyTorch ms", "speedup",
            "NeoFlow peak KiB", "PyTorch peak KiB", "first step s")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name in args.models:
        r = bench(name, args.steps)
        cells = (r["model"], r["kernels"], r["aten_ops"], f"{r['nf_ms']:.3f}",
                 f"{r['torch_ms']:.3f}", f"{r['torch_ms'] / r['nf_ms']:.2f}x",
                 f"{r['nf_peak'] / 1024:.0f}", f"{r['torch_peak'] / 1024:.0f}",
                 f"{r['nf_first_s']:.2f}")
        print("| " + " | ".join(str(c) for c in cells) + " |", flush=True)
    print(f"(NeoFlow backend: {r['backend']}; torch {torch.__version__}, 2 threads)")
    overhead()


if __name__ == "__main__":
    main()
