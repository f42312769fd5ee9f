"""zoo/benchmark: the zoo's networks trained by nf.Trainer against their
PyTorch twins, eager and under torch.compile (issue 8).

Per network, all from the same initial parameters:
  * parity: PARITY_STEPS SGD steps (momentum 0.9) of NeoFlow and of PyTorch
    eager on the same batches; the largest relative difference of the
    losses, and a pass mark when it is within PARITY_RTOL; next to it the
    same difference between eager float32 and eager float64 ("fp32 noise":
    where it is large, the network amplifies float32 rounding and no float32
    run can match to PARITY_RTOL);
  * speed: the ms per training step (forward, backward, update) of NeoFlow,
    PyTorch eager and torch.compile on one batch, each framework timed alone
    in a process of its own with its default threading (zoo.solo: the median
    of `blocks` blocks' medians of `steps` steps, with the blocks' range);
    with `interleaved=True` also the old figure beside it, labelled: the
    three in one process under OMP_WAIT_POLICY=PASSIVE, one step of each in
    turn (PASSIVE slows PyTorch's small kernels about 2x here, so it
    flatters NeoFlow). NeoFlow's build time (Trainer construction, cold in
    this process) and torch.compile's compile time (its first step, in its
    timing process) apart. A torch.compile failure is reported in its cells
    instead of stopping the run.
A network of several phases (DCGAN) trains them in turn, one nf.Trainer
per phase exchanging parameters (zoo.alternating), against one torch
optimizer per phase: its step, timed and compared, is a round of every
phase (the parity compares every phase's losses). A network's own `lr`
replaces LR where it has one (YOLO-v1's summed loss diverges at LR).


torch (and matplotlib, for the plot) are optional dependencies of NeoFlow:
they are imported when a benchmark runs, and their absence raises
MissingDependencyError with the pip command.

Hands on: the report dict (rows, geometric means, environment) to
zoo.report, which writes networks.md / .png / .json.
"""
import os
import platform
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
from .solo import LR, MOMENTUM, run_alone, run_interleaved

PARITY_STEPS = 5
PARITY_RTOL = 1e-4
BLOCKS = 5

QUICK = ("lltm", "sublstm", "scrnn", "transformer", "lenet", "shufflenet")
TUNING = ("off", "background", "ahead")


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
              torch_compile=True, tuning="off", log=print, blocks=BLOCKS, interleaved=False):
    """Benchmark `networks` (zoo names), each framework alone in its own
    process, `blocks` blocks of `steps` timed steps (NeoFlow's Trainer with
    `tuning`; `interleaved`: also the labelled PASSIVE figure); write
    networks.md, networks.png and networks.json under `out_dir` and return
    the report {"rows", "geomeans", "environment", "markdown", "files", ...}.

    >>> report = run_bench(["lltm"], steps=3, out_dir="/tmp/nf-bench", preset="small")
    >>> report["rows"][0]["parity"]
    True
    """
    if steps < 1 or blocks < 1:
        raise InputError(f"steps and blocks must be at least 1, got {steps} and {blocks}")
    names = network_names(networks)
    _torch()
    require("matplotlib", "pip install matplotlib", "the zoo benchmark's plot")
    rows = []
    for name in names:
        log(f"[bench] {name} ...")
        rows.append(bench_network(get(name), steps, preset, torch_compile, tuning, blocks,
                                  interleaved))
        log(f"[bench] {name}: {row_summary(rows[-1])}")
    report = {"rows": rows, "geomeans": geomeans(rows), "environment": environment(),
              "preset": preset, "steps": steps, "blocks": blocks, "tuning": tuning,
              "interleaved": interleaved, "parity_steps": PARITY_STEPS,
              "parity_rtol": PARITY_RTOL}
    report["markdown"] = markdown(report)
    write_report(report, Path(out_dir))
    return report


FIGURES = {"neoflow": "nf", "eager": "eager", "compile": "compile"}   # framework: row key prefix


def bench_network(net, steps, preset="default", torch_compile=True, tuning="off",
                  blocks=BLOCKS, interleaved=False):
    """One row of the report for the zoo `Network` `net`: parity in this
    process, then each framework's speed alone in its own (zoo.solo).

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
    eager = _torch_step(models, initial, lr)
    theirs = [eager(b) for b in torch_batches]
    exact = _torch_step(models, _float64(initial), lr)
    reference = [exact(_float64(b)) for b in torch_batches]
    row["parity_rel"] = _max_rel(ours, theirs)
    row["parity"] = bool(row["parity_rel"] <= PARITY_RTOL)
    row["fp32_noise_rel"] = _max_rel(theirs, reference)

    frameworks = ["neoflow", "eager"] + (["compile"] if torch_compile else [])
    timing = dict(preset=preset, steps=steps, blocks=blocks, tuning=tuning)
    for fw in frameworks:
        try:
            _record(row, FIGURES[fw], run_alone(net.name, fw, **timing))
        except RuntimeError as e:
            if fw != "compile":
                raise
            row["compile_error"] = str(e).split(": ", 1)[-1][:60]
    if interleaved:
        for fw, figure in run_interleaved(net.name, frameworks, **timing).items():
            row[f"passive_{FIGURES[fw]}_ms"] = figure["median_ms"]
    return row


def _record(row, key, figure):
    """Put one framework's solo figure into the row: ms, spread, set-up time."""
    row[f"{key}_ms"], row[f"{key}_spread_ms"] = figure["median_ms"], figure["spread_ms"]
    if key == "compile":
        row["compile_s"] = figure["setup_s"]


def _torch():
    return require("torch", "pip install torch", "the zoo benchmark")


def _torch_step(models, values, lr):
    """A function running one PyTorch eager training step (a round of every
    phase) on a batch; returns the losses, one per phase."""
    torch = _torch()
    step, _ = torch_alternating(models, values, make_optimizer=lambda ps: (
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


def sizes_text(sizes):
    """A network's scalar sizes as one line of text.

    >>> sizes_text({"batch": 4, "state": 8, "image": (28, 28)})
    'batch=4, state=8'
    """
    return ", ".join(f"{k}={v}" for k, v in sizes.items() if not isinstance(v, tuple))


def environment():
    """Versions, machine facts and the OpenMP variables found (None: the
    frameworks' defaults, the fair setting), printed under the table.

    >>> environment()["cores"] == os.cpu_count()
    True
    """
    return {"neoflow": __version__, "torch": _torch().__version__,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
            **{key.lower(): os.environ.get(key) for key in ("OMP_NUM_THREADS",
                                                            "OMP_WAIT_POLICY")}}
