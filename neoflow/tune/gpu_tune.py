"""tune/gpu_tune: `nf.tune(..., target="cuda")` -- measure the GPU schedules
the hardware model ranks best and record the fastest.

Per kernel: the default GPU schedule first (the baseline and the reference
every candidate's result is checked against), then the best-ranked
candidates of tune/gpu_hardware.py, each built (runtime/cuda.py), checked
and timed. The timer on a GPU is CUDA events around each run with the L2
cache flushed (a buffer twice its size overwritten) between repeats, the
median of the repeats; under TRITON_INTERPRET=1 it is the wall clock
(interpreter speed says nothing about a GPU: such records are keyed by the
table GPU's fingerprint and only good for testing the path). Every trial
goes into the database under target "cuda" and the GPU's fingerprint; the
fastest correct schedule is offered as the best.

Measurement runs in the calling process (unlike the CPU tuner's isolated
workers): a faulting Triton kernel takes the process with it.

Hands on: `Record`s (tune/database.py).
"""
import statistics
import time

import numpy as np

from ..schedule import default_config
from ..te.flops import flops
from .database import Record
from .gpu_hardware import detect_gpu, rank_gpu_configs

REPEATS = 10


def cuda_time(fn, device, repeats=REPEATS, l2_bytes=None):
    """Median seconds of `fn()`: CUDA events with the L2 flushed between
    repeats on a GPU, the wall clock on the interpreter's CPU "device".

    >>> cuda_time(lambda: None, "cpu", repeats=3) >= 0
    True
    """
    times = []
    if device == "cuda":
        import torch
        flush = torch.empty(max(1, 2 * (l2_bytes or detect_gpu().l2_bytes)) // 4,
                            dtype=torch.float32, device="cuda")
        fn()                                        # compile and warm up
        for _ in range(repeats):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
    else:
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _random_inputs(kernel, device, seed):
    import torch
    from ..runtime.cuda import torch_dtype
    g = torch.Generator().manual_seed(seed)
    out = []
    for t in kernel.inputs:
        if t.dtype in ("float32", "float64"):
            out.append(torch.randn(t.shape, generator=g, dtype=torch_dtype(t.dtype)))
        else:   # index inputs: 0 is in range of any gather
            out.append(torch.zeros(t.shape, dtype=torch_dtype(t.dtype)))
    return [x.to(device) for x in out]


def tune_gpu_kernel(kernel, db, trials=16, repeats=REPEATS, seed=0, hw=None):
    """Tune one Kernel on the GPU; returns its best Record (also offered to `db`).

    >>> rec = tune_gpu_kernel(kernel, db=Database("/tmp/t.sqlite"), trials=4)  # doctest: +SKIP
    """
    import torch
    from ..runtime.cuda import (Launcher, compile_program, raise_error, require_device,
                                torch_dtype)
    device = require_device()
    hw = hw or detect_gpu()
    default = default_config(kernel, "cuda")
    ranked = [c for c, _ in rank_gpu_configs(kernel, hw)[0]]
    candidates = [default] + [c for c in ranked if c != default][:max(0, trials - 1)]
    inputs = _random_inputs(kernel, device, seed)
    reference, results = None, []
    for cfg in candidates:
        try:
            program, tp = compile_program([kernel], [cfg], list(kernel.inputs),
                                          list(kernel.outputs), hardware=hw)
            outs = [torch.empty(t.shape, dtype=torch_dtype(t.dtype), device=device)
                    for t in kernel.outputs]
            tensors = {id(b): x for b, x in zip(program.inputs + program.outputs, inputs + outs)}
            launcher = Launcher(program, tp, device)

            class _Owner:
                _sites = program.sites

            def run():
                return launcher.run(tensors)
            raise_error(_Owner, run())
            got = [o.detach().cpu().numpy().copy() for o in outs]
            if reference is None:
                reference = got
            elif not all(np.allclose(a, b, rtol=1e-3, atol=1e-4, equal_nan=True)
                         for a, b in zip(got, reference)):
                results.append((cfg, "wrong", None, "result differs from the default's"))
                continue
            results.append((cfg, "ok", cuda_time(run, device, repeats, hw.l2_bytes), ""))
        except Exception as e:       # a candidate that fails is a trial, not a crash
            results.append((cfg, "error", None, f"{type(e).__name__}: {e}"[:500]))
    db.add_trials(kernel.key, "cuda", hw.fingerprint, results)
    ok = [(s, cfg) for cfg, status, s, _ in results if status == "ok"]
    if not ok:
        from .tuner import TuneError
        raise TuneError(f"no GPU schedule of {kernel} could be measured: {results[0][3]}")
    seconds, cfg = min(ok, key=lambda p: p[0])
    name = " ".join(t.name for t in kernel.stages)
    return db.offer(Record(kernel.key, "cuda", hw.fingerprint, cfg, seconds,
                           flops(list(kernel.outputs), given=kernel.inputs), len(results), name))

