"""zoo/benchmark: the zoo's networks trained by nf.Trainer against their
PyTorch twins, eager and under torch.compile (issue 8).

Per network, in one process on THREADS threads, all from the same initial
parameters:
  * parity: PARITY_STEPS SGD steps (momentum 0.9) of NeoFlow and of PyTorch
    eager on the same batches; the largest relative difference of the
    losses, and a pass mark when it is within PARITY_RTOL; next to it the
    same difference between eager float32 and eager float64 ("fp32 noise":
    where it is large, the network amplifies float32 rounding and no float32
    run can match to PARITY_RTOL);
  * speed: the median ms per training step (forward, backward, update) of
    NeoFlow, PyTorch eager and torch.compile on one batch; NeoFlow's build
    time (Trainer construction) and torch.compile's compile time (its first
    step) apart; the parity steps warm NeoFlow and eager up, torch.compile
    gets WARMUP_STEPS more steps before it is timed. The timed steps are
    interleaved (one of each framework in turn), so that load from other
    processes hits all three alike. A torch.compile failure is reported in
    its cells instead of stopping the run.

A network of several phases (DCGAN) trains them in turn, one nf.Trainer
per phase exchanging parameters (zoo.alternating), against one torch
optimizer per phase: its step, timed and compared, is a round of every
phase (the parity compares every phase's losses). A network's own `lr`
replaces LR where it has one (YOLO-v1's summed loss diverges at LR).

Threads: `pin_threads()` sets OMP_NUM_THREADS=2 and OMP_WAIT_POLICY=PASSIVE
(unless already set). OpenMP runtimes read them once, when they load --
torch's on `import torch`, NeoFlow's with the first generated library -- so
it must run before either; `neoflow bench` and bench/networks.py call it
first thing. PASSIVE matters: both frameworks keep an OpenMP thread pool,
and spinning idle threads of one steal the cores of the other while their
steps are timed in turn.

torch (and matplotlib, for the plot) are optional dependencies of NeoFlow:
they are imported when a benchmark runs, and their absence raises
MissingDependencyError with the pip command.

Hands on: the report dict (rows, geometric means, environment) to
zoo.report, which writes networks.md / .png / .json.
"""
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from .. import __version__
from ..errors import InputError, require
from ..optim import SGD
from ..runtime import Trainer
from . import NETWORKS, get
from .alternating import AlternatingTrainers, torch_alternating
from .report import geomeans, markdown, row_summary, write_report

THREADS = 2
THREAD_ENV = {"OMP_NUM_THREADS": str(THREADS), "OMP_WAIT_POLICY": "PASSIVE"}
PARITY_STEPS = 5
PARITY_RTOL = 1e-4
WARMUP_STEPS = 3      # torch.compile's steps after its first before timing (lazy work settles)
LR, MOMENTUM = 0.01, 0.9
QUICK = ("lltm", "sublstm", "scrnn", "transformer", "lenet", "shufflenet")
TUNING = ("off", "background", "ahead")


def pin_threads():
    """Set THREAD_ENV's OpenMP variables where the environment has none;
    returns the values in effect. Call it before torch is imported and
    before NeoFlow loads a generated library (OpenMP reads them then).

    >>> pin_threads()
    {'OMP_NUM_THREADS': '2', 'OMP_WAIT_POLICY': 'PASSIVE'}
    """
    return {key: os.environ.setdefault(key, value) for key, value in THREAD_ENV.items()}


def network_names(chosen):
    """Zoo names from a command-line choice: names, "quick" (QUICK) or "all".

    >>> network_names(["quick", "milstm"])[-1]
    'milstm'
    """
    names = []
    for name in chosen:
        expanded = {"all": list(NETWORKS), "quick": list(QUICK)}.get(name, [name])
        if expanded == [name] and name not in NETWORKS:
            raise InputError(f"no network {name!r} in the zoo; known: "
                             f"{', '.join(NETWORKS)}, quick, all")
        names += [n for n in expanded if n not in names]
    return names


def run_bench(networks=QUICK, steps=10, out_dir="neoflow-bench", preset="default",
              torch_compile=True, tuning="off", log=print):
    """Benchmark `networks` (zoo names) with `steps` timed steps per framework
    (NeoFlow's Trainer with `tuning`); write networks.md, networks.png and
    networks.json under `out_dir` and return the report {"rows", "geomeans",
    "environment", "markdown", "files", ...}.

    >>> report = run_bench(["lltm"], steps=3, out_dir="/tmp/nf-bench", preset="small")
    >>> report["rows"][0]["parity"]
    True
    """
    if steps < 1:
        raise InputError(f"steps must be at least 1, got {steps}")
    names = network_names(networks)
    torch = _torch()
    require("matplotlib", "pip install matplotlib", "the zoo benchmark's plot")
    torch.set_num_threads(THREADS)
    rows = []
    for name in names:
        log(f"[bench] {name} ...")
        rows.append(bench_network(get(name), steps, preset, torch_compile, tuning))
        log(f"[bench] {name}: {row_summary(rows[-1])}")
    report = {"rows": rows, "geomeans": geomeans(rows), "environment": environment(),
              "preset": preset, "steps": steps, "tuning": tuning,
              "parity_steps": PARITY_STEPS, "parity_rtol": PARITY_RTOL}
    report["markdown"] = markdown(report)
    write_report(report, Path(out_dir))
    return report


def bench_network(net, steps, preset="default", torch_compile=True, tuning="off"):
    """One row of the report for the zoo `Network` `net`.

    >>> bench_network(zoo.get("lltm"), 3, "small", torch_compile=False)["parity"]
    True
    """
    torch = _torch()
    models = net.build_phases(preset)
    lr = net.lr or LR
    rng = np.random.default_rng(0)
    batches = [models[0].make_batch(rng) for _ in range(PARITY_STEPS)]
    torch_batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
    row = {"network": net.name, "kind": net.kind, "sizes": sizes_text(models[0].sizes)}

    started = time.perf_counter()
    trainer = AlternatingTrainers(models, SGD(lr=lr, momentum=MOMENTUM), Trainer, tuning=tuning)
    row["nf_build_s"] = time.perf_counter() - started
    with trainer:
        initial = trainer.parameters()
        ours = [trainer.step(b) for b in batches]
        row["kernels"] = sum(s["kernels"] for s in trainer.stats())
        eager = _torch_step(models, initial, False, lr)
        theirs = [eager(b) for b in torch_batches]
        exact = _torch_step(models, _float64(initial), False, lr)
        reference = [exact(_float64(b)) for b in torch_batches]
        row["parity_rel"] = _max_rel(ours, theirs)
        row["parity"] = bool(row["parity_rel"] <= PARITY_RTOL)
        row["fp32_noise_rel"] = _max_rel(theirs, reference)
        timed = {"nf_ms": lambda: trainer.step(batches[0]),
                 "eager_ms": lambda: eager(torch_batches[0])}
        if torch_compile:
            try:
                compiled = _torch_step(models, initial, True, lr)
                started = time.perf_counter()
                compiled(torch_batches[0])
                row["compile_s"] = time.perf_counter() - started
                for _ in range(WARMUP_STEPS):
                    compiled(torch_batches[0])
                timed["compile_ms"] = lambda: compiled(torch_batches[0])
            except Exception as e:  # noqa: BLE001 -- any failure is reported, not fatal
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"
        row.update(interleaved_median_ms(timed, steps))
    return row


def _torch():
    return require("torch", "pip install torch", "the zoo benchmark")


def _torch_step(models, values, compiled, lr):
    """A function running one PyTorch training step (a round of every phase)
    on a batch; returns the losses, one per phase."""
    torch = _torch()
    step, _ = torch_alternating(models, values, compiled, make_optimizer=lambda ps: (
        torch.optim.SGD(ps, lr=lr, momentum=MOMENTUM)))
    return step


def _float64(arrays):
    """{name: array or tensor} with the floating ones converted to float64."""
    torch = _torch()
    return {k: v.double() if torch.is_tensor(v) and v.is_floating_point()
            else v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
            for k, v in arrays.items()}


def _max_rel(values, reference):
    """The largest relative difference of two runs' losses (tuples per step)."""
    return max(abs(a - b) / max(abs(b), 1e-12)
               for ours, theirs in zip(values, reference) for a, b in zip(ours, theirs))


def interleaved_median_ms(fns, steps):
    """{key: median ms} of `steps` calls of each function in `fns`, taken in
    turn, so that load from elsewhere on the machine hits all of them alike.

    >>> interleaved_median_ms({"noop": lambda: None}, 3)["noop"] < 1.0
    True
    """
    times = {key: [] for key in fns}
    for _ in range(steps):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(ts) * 1e3 for key, ts in times.items()}


def sizes_text(sizes):
    """A network's scalar sizes as one line of text.

    >>> sizes_text({"batch": 4, "state": 8, "image": (28, 28)})
    'batch=4, state=8'
    """
    return ", ".join(f"{k}={v}" for k, v in sizes.items() if not isinstance(v, tuple))


def environment():
    """Versions, machine facts and the OpenMP settings, printed under the table.

    >>> environment()["threads"]
    2
    """
    return {"neoflow": __version__, "torch": _torch().__version__, "threads": THREADS,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            **{key.lower(): os.environ.get(key) for key in THREAD_ENV}}
