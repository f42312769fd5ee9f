"""`neoflow demo` (and `make demo`): train a novel network end to end while
NeoFlow tunes it, then measure it against PyTorch on this machine.

The network is an MI-LSTM (multiplicative-integration LSTM, neoflow.zoo's
`milstm`: the gate, cell and output updates are custom tensor-expression
operators) at a size that trains in milliseconds per step here. It learns
a synthetic task (the class is the largest of the last input's first
features) from a fixed set of batches. The same training runs three times
for the same wall-clock budget, each from the same initial parameters and
a fresh tuning database in a temporary directory, so the runs are
comparable and nothing is left behind:

* tuning="background": the first step runs as soon as the kernels compile;
  a tuner in a child process tries a schedule only where its expected gain
  over the remaining steps pays for the CPU it takes, times it inside the
  training step and keeps it only if the step gets faster (a live progress
  line shows step, loss, ms/step and kernels tuned);
* tuning="ahead": tune first (TUNING_SHARE of the budget), then train;
* tuning="off": default schedules throughout.

Then the PyTorch eager twin (same network and sizes) is timed alone in a
process of its own with its default threading (zoo.solo, the fair method:
never beside NeoFlow's thread pool), and the demo prints each run's time to first step, loss and
ms/step at the start and at the end, the final speed against PyTorch eager,
and draws ms/step against wall-clock time for the three runs with PyTorch
eager's ms/step as a line (`demo.png` in the output directory).

Hands on: the printed summary and the PNG; `run_demo` returns the figures.
"""
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from .zoo.solo import run_alone

SIZES = {"full": dict(batch=32, steps=8, n_in=64, hidden=256, classes=10),
         "quick": dict(batch=8, steps=4, n_in=16, hidden=32, classes=4)}
BATCHES = 8          # the fixed training set: this many batches, cycled
LR = 0.05
TAIL = 20            # steps the final ms/step is the median of (each run takes 2 * TAIL at least)
TUNING_SHARE = 0.4   # of a run's seconds, the tuning budget (ahead: before its first step)
MODES = ("background", "ahead", "off")


def run_demo(seconds=40.0, quick=False, out_dir="neoflow-demo", log=print):
    """Train the demo MI-LSTM for `seconds` per tuning mode, time PyTorch
    eager, print a summary, write `demo.png` under `out_dir`; returns
    {"runs": {mode: figures}, "eager_ms": ms, "png": path}.

    >>> report = run_demo(seconds=5, quick=True, out_dir="/tmp/nf-demo")   # doctest: +SKIP
    >>> sorted(report["runs"])
    ['ahead', 'background', 'off']
    """
    import neoflow as nf
    from neoflow import zoo
    from neoflow.errors import require
    require("torch", "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu",
            "neoflow demo")
    require("matplotlib", "pip install matplotlib", "neoflow demo")
    from neoflow.runtime.plot import plot_step_times

    sizes = SIZES["quick" if quick else "full"]
    rng = np.random.default_rng(0)
    batches = [_learnable_batch(rng, **sizes) for _ in range(BATCHES)]
    log(f"NeoFlow demo: an MI-LSTM {_describe(sizes)}, custom operators in the tensor-expression "
        f"language, trained for {seconds:g} s per tuning mode on {BATCHES} fixed batches.")
    runs, initial = {}, None
    with tempfile.TemporaryDirectory(prefix="neoflow-demo-") as scratch:
        for mode in MODES:
            model = zoo.get("milstm").build(**sizes)
            runs[mode], initial = _train(nf, model, mode, seconds, batches, initial,
                                         Path(scratch) / f"{mode}.sqlite", log)
    eager = run_alone("milstm", "eager", sizes=sizes, steps=2 * BATCHES, blocks=5)
    eager_ms = eager["median_ms"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    png = plot_step_times({m: r["history"] for m, r in runs.items()}, out / "demo.png",
                          lines={"PyTorch eager": eager_ms},
                          title=f"MI-LSTM {_describe(sizes)}: ms per training step")
    _summary(runs, eager, png, log)
    return {"runs": runs, "eager_ms": eager_ms, "png": str(png)}


def _describe(sizes):
    return (f"(batch {sizes['batch']}, {sizes['steps']} steps, input {sizes['n_in']}, "
            f"hidden {sizes['hidden']})")


def _learnable_batch(rng, batch, steps, n_in, classes, **_):
    """Standard-normal sequences; the class is the argmax of the last step's first features."""
    x = rng.standard_normal((batch, steps, n_in)).astype(np.float32)
    return {"x": x, "y": x[:, -1, :classes].argmax(1).astype(np.int64)}


def _train(nf, model, mode, seconds, batches, initial, database, log):
    """Train `model` under tuning `mode` until `seconds` have passed since the
    Trainer was made, from the parameters `initial` (None: its own seeded
    ones); (the figures of the run, the initial parameters)."""
    options = nf.TuningOptions(budget_s=seconds * TUNING_SHARE)
    started = time.perf_counter()
    with nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=LR, momentum=0.9), tuning=mode,
                    database=database, tuning_options=options,
                    progress=(mode == "background")) as trainer:
        if initial is None:
            initial = trainer.parameters()
        else:
            trainer.load_parameters(initial)
        losses = []
        while len(losses) < 2 * TAIL or time.perf_counter() - started < seconds:
            losses.append(trainer.step(batches[len(losses) % len(batches)]))
        stats = trainer.stats()
    history = stats["step_history"]
    ms = [m for _, m in history]
    run = {"history": history, "first_step_s": stats["time_to_first_step_s"],
           "steps": len(losses), "loss_first": losses[0],
           "loss_last": statistics.mean(losses[-len(batches):]),
           "ms_start": statistics.median(ms[1:TAIL + 1] or ms),
           "ms_end": statistics.median(ms[-TAIL:]),
           "kernels_tuned": stats["kernels_tuned"], "kernels": stats["kernels_distinct"]}
    log(f"  {mode:>10}: first step after {run['first_step_s']:.1f} s, {run['steps']} steps, "
        f"loss {run['loss_first']:.3f} -> {run['loss_last']:.3f}, "
        f"{run['ms_start']:.2f} -> {run['ms_end']:.2f} ms/step, "
        f"{run['kernels_tuned']}/{run['kernels']} kernels tuned")
    return run, initial


def _summary(runs, eager, png, log):
    best = min(runs, key=lambda m: runs[m]["ms_end"])
    eager_ms, (low, high) = eager["median_ms"], eager["spread_ms"]
    log("")
    log(f"PyTorch eager: {eager_ms:.2f} ms/step (range {low:.2f}-{high:.2f} over "
        f"{len(eager['block_ms'])} blocks; same network, timed alone in its own process "
        "with default threading)")
    for mode, r in runs.items():
        log(f"NeoFlow {mode:>10}: {r['ms_end']:.2f} ms/step at the end = "
            f"{eager_ms / r['ms_end']:.2f}x PyTorch eager")
    log(f"fastest: {best}; ms/step over time: {png}")
