"""zoo/solo: the fair way to time a framework -- alone, in a process of its
own, with the threading settings it gets by default.

Two frameworks timed in one process disturb each other: both keep an OpenMP
thread pool, and one pool's spinning threads steal the cores the other's
step needs. Making the pools sleep (OMP_WAIT_POLICY=PASSIVE) removes that,
but slows PyTorch's many small kernels about 2x on this machine, so a ratio
taken that way flatters NeoFlow. The figure reported first is therefore
taken with each framework alone: `run_alone` starts

    python -m neoflow.zoo.solo NETWORK --framework neoflow|eager|compile ...

("neoflow-unfused": nf.Trainer with fusion=False, one kernel per compute)

in a fresh process (the environment as given: no OpenMP variable is set),
which builds the network, warms it up, then times `blocks` blocks of
`steps` training steps and prints one JSON line. A block's median is one
sample; the figure is the median of the blocks' medians, with their range
(`spread`) beside it, because this machine drifts from one second to the
next. `run_interleaved` gives the old figure, labelled: all frameworks in
one process under PASSIVE OpenMP, one step of each in turn.

Hands on: {"median_ms", "spread_ms", "block_ms", "setup_s"} per framework
(and the child's OpenMP variables, "omp_env").
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

FRAMEWORKS = ("neoflow", "neoflow-unfused", "eager", "compile")
LR, MOMENTUM = 0.01, 0.9
WARMUP_STEPS = 3                  # steps before timing (lazy work of every framework settles)
PASSIVE_ENV = {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"}   # the interleaved figure's
TIMEOUT_S = 1800


def summarize(block_ms):
    """The figure of a list of per-block medians: their median and range.

    >>> summarize([2.0, 1.0, 4.0])
    {'median_ms': 2.0, 'spread_ms': [1.0, 4.0], 'block_ms': [2.0, 1.0, 4.0]}
    """
    return {"median_ms": statistics.median(block_ms),
            "spread_ms": [min(block_ms), max(block_ms)], "block_ms": list(block_ms)}


def time_blocks(fn, steps, blocks):
    """Per block, the median ms of `steps` calls of `fn`.

    >>> len(time_blocks(lambda: None, steps=3, blocks=2))
    2
    """
    medians = []
    for _ in range(blocks):
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        medians.append(1e3 * statistics.median(times))
    return medians


def make_step(models, framework, tuning="off"):
    """(one training step of the phase Models `models` (a network's
    `build_phases`) under `framework` as a function, the seconds it took to
    set up, a close function). The step is SGD with momentum (the network's
    own lr where it has one) from the parameters the Trainer's seed 0 gives,
    on one batch -- a round of every phase for a network of several;
    "compile"'s set-up includes its first (compiling) step.

    >>> step, setup_s, close = make_step(zoo.get("lltm").build_phases("small"), "eager")
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, got {framework!r}")
    batch = models[0].make_batch(np.random.default_rng(0))
    lr = models[0].network.lr or LR
    if not framework.startswith("neoflow"):
        import torch                        # imported before the clock starts
    started = time.perf_counter()
    if framework.startswith("neoflow"):
        from ..optim import SGD
        from ..runtime import Trainer
        from .alternating import AlternatingTrainers
        trainer = AlternatingTrainers(models, SGD(lr=lr, momentum=MOMENTUM), Trainer,
                                      tuning=tuning, fusion=framework == "neoflow")
        return (lambda: trainer.step(batch)), time.perf_counter() - started, trainer.close
    from ..runtime.init import initial_value
    from .alternating import torch_alternating
    values = {name: initial_value(p, 0) for m in models for name, p in m.params.items()}
    step, _ = torch_alternating(
        models, values, "inductor" if framework == "compile" else None,
        make_optimizer=lambda ps: torch.optim.SGD(ps, lr=lr, momentum=MOMENTUM))
    tensors = {k: torch.from_numpy(v) for k, v in batch.items()}
    if framework == "compile":
        step(tensors)
    return (lambda: step(tensors)), time.perf_counter() - started, (lambda: None)


def measure(network, framework, preset="default", sizes=None, steps=10, blocks=5,
            tuning="off"):
    """Time `framework` on zoo `network` in this process (see the module
    docstring); {"median_ms", "spread_ms", "block_ms", "setup_s"}.

    >>> measure("lltm", "eager", "small", steps=2, blocks=2)["median_ms"] > 0
    True
    """
    from . import get
    models = get(network).build_phases(preset, **(sizes or {}))
    step, setup_s, close = make_step(models, framework, tuning)
    try:
        for _ in range(WARMUP_STEPS):
            step()
        return {**summarize(time_blocks(step, steps, blocks)), "setup_s": setup_s}
    finally:
        close()


def measure_interleaved(network, frameworks, preset="default", sizes=None, steps=10, blocks=5,
                        tuning="off"):
    """Time `frameworks` on zoo `network` in this process, one step of each
    in turn; {framework: figure as `measure` gives}.

    >>> sorted(measure_interleaved("lltm", ["neoflow", "eager"], "small", steps=2, blocks=1))
    ['eager', 'neoflow']
    """
    from . import get
    models = get(network).build_phases(preset, **(sizes or {}))
    made = {fw: make_step(models, fw, tuning) for fw in frameworks}
    try:
        for _ in range(WARMUP_STEPS):
            for step, _, _ in made.values():
                step()
        medians = {fw: [] for fw in frameworks}
        for _ in range(blocks):
            times = {fw: [] for fw in frameworks}
            for _ in range(steps):
                for fw, (step, _, _) in made.items():
                    start = time.perf_counter()
                    step()
                    times[fw].append(time.perf_counter() - start)
            for fw in frameworks:
                medians[fw].append(1e3 * statistics.median(times[fw]))
        return {fw: {**summarize(medians[fw]), "setup_s": made[fw][1]} for fw in frameworks}
    finally:
        for _, _, close in made.values():
            close()


def run_alone(network, framework, preset="default", sizes=None, steps=10, blocks=5,
              tuning="off", timeout=TIMEOUT_S):
    """`measure` in a fresh process with the environment as it is (the fair
    figure).

    >>> run_alone("lltm", "eager", "small", steps=2, blocks=2)["median_ms"] > 0
    True
    """
    return _run_child(["--framework", framework], network, preset, sizes, steps, blocks,
                      tuning, dict(os.environ), timeout)


def run_interleaved(network, frameworks, preset="default", sizes=None, steps=10, blocks=5,
                    tuning="off", timeout=TIMEOUT_S):
    """`measure_interleaved` in a fresh process under PASSIVE_ENV (the old,
    labelled figure); {framework: figure}.

    >>> run_interleaved("lltm", ["neoflow", "eager"], "small", steps=2, blocks=1)["eager"]
    """
    return _run_child(["--interleaved", *frameworks], network, preset, sizes, steps, blocks,
                      tuning, {**os.environ, **PASSIVE_ENV}, timeout)


def run_side(script, side, args=(), timeout=TIMEOUT_S):
    """Run a benchmark script's one side alone -- `python SCRIPT --side SIDE
    ARGS` in a fresh process, the environment as it is -- and return the
    JSON its last output line holds (the scripts of bench/ that compare
    NeoFlow with torch kernel by kernel time each side this way).

    >>> run_side("bench/ops.py", "torch", ["--blocks", "2"])          # doctest: +SKIP
    """
    return _json_of([sys.executable, str(script), "--side", side, *args], dict(os.environ),
                    timeout, f"{script} --side {side}")


def _run_child(what, network, preset, sizes, steps, blocks, tuning, env, timeout):
    command = [sys.executable, "-m", "neoflow.zoo.solo", network, *what, "--preset", preset,
               "--sizes", json.dumps(sizes or {}), "--steps", str(steps), "--blocks",
               str(blocks), "--tuning", tuning]
    return _json_of(command, env, timeout, f"timing {network} with {' '.join(what)}")


def _json_of(command, env, timeout, what):
    """The JSON on the last stdout line of `command`; RuntimeError with the
    last stderr line when it fails."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise RuntimeError(f"{what} failed: {tail[0]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    """Command line of the timing child (see the module docstring)."""
    parser = argparse.ArgumentParser(description="time one framework on a zoo network alone")
    parser.add_argument("network")
    how = parser.add_mutually_exclusive_group(required=True)
    how.add_argument("--framework", choices=FRAMEWORKS)
    how.add_argument("--interleaved", nargs="+", choices=FRAMEWORKS)
    parser.add_argument("--preset", default="default")
    parser.add_argument("--sizes", default="{}", help="size overrides as JSON")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--tuning", default="off")
    args = parser.parse_args(argv)
    common = dict(preset=args.preset, sizes=json.loads(args.sizes), steps=args.steps,
                  blocks=args.blocks, tuning=args.tuning)
    if args.framework:
        result = measure(args.network, args.framework, **common)
    else:
        result = measure_interleaved(args.network, args.interleaved, **common)
    result["omp_env"] = {key: os.environ.get(key) for key in PASSIVE_ENV}
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
