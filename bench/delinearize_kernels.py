"""Kernel by kernel, the A/B of schedule/delinearize.py: every kernel of a
network's training step that holds a stage seen through its delinearised
view, timed scheduled that way (`on`) and as written (`off`, the view
turned off while it is built), both under their default schedules.

The two builds run in one process, in turn, ROUNDS times CALLS calls each;
a figure is the median over the rounds of each round's fastest call, so
that a loaded machine disturbs both sides alike. Outputs of the two are
checked equal first. GFLOP/s counts each stage's own flops.

    python bench/delinearize_kernels.py custom          # bench/attention.py's networks
    python bench/delinearize_kernels.py transformer shufflenet capsnet   # zoo networks
    python bench/delinearize_kernels.py --smoke custom
"""
import argparse
import contextlib
import importlib.util
import statistics
import time
from pathlib import Path

import numpy as np

import neoflow as nf
from neoflow import zoo
from neoflow.graph.ops_class import own_flops
from neoflow.graph.partition import fuse_training_graph
from neoflow.graph.training import training_graph
from neoflow.runtime.native import compile_kernels
from neoflow.schedule import default_config
from neoflow.schedule import stage as stage_module

ROUNDS, CALLS = 7, 20


def attention_networks():
    spec = importlib.util.spec_from_file_location(
        "bench_attention", Path(__file__).with_name("attention.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def flat():
    """Stages scheduled as written (no delinearised view) inside the block."""
    saved = stage_module.scheduled_view
    stage_module.scheduled_view = lambda tensor: tensor
    try:
        yield
    finally:
        stage_module.scheduled_view = saved


def step_kernels(name, smoke):
    """The kernels of `name`'s training step (a zoo network or bench/attention.py's)."""
    attention = attention_networks()
    if name in attention.NETWORKS:
        loss = attention.NETWORKS[name](**(attention.SMOKE_SIZES if smoke else attention.SIZES))[0]
    else:
        loss = zoo.get(name).build("small" if smoke else "default").loss
    _, part = fuse_training_graph(training_graph(loss, nf.optim.SGD(lr=0.1)))
    return part.kernels


def compare(kernel, rounds, calls, rng):
    """(flops, ms off, ms on) of one kernel."""
    values = [rng.standard_normal(t.shape).astype(t.dtype) if t.dtype.startswith("float")
              else np.zeros(t.shape, t.dtype) for t in kernel.inputs]
    args = ([kernel], list(kernel.inputs), list(kernel.outputs), list(kernel.outputs))
    on = compile_kernels(*args, [default_config(kernel)])
    with flat():
        off = compile_kernels(*args, [default_config(kernel)])
    for a, b in zip(on(*values), off(*values)):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-3)
    best = {"on": [], "off": []}
    for _ in range(rounds):
        for side, f in (("off", off), ("on", on)):
            times = []
            for _ in range(calls):
                start = time.perf_counter()
                f(*values)
                times.append(time.perf_counter() - start)
            best[side].append(min(times))
    flops = sum(own_flops(t) for t in kernel.stages)
    return flops, 1e3 * statistics.median(best["off"]), 1e3 * statistics.median(best["on"])


def main(argv=None):
    """Command line; returns [(network, kernel, flops, ms off, ms on)]."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("networks", nargs="+")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--smoke", action="store_true", help="small sizes, 1 round of 2 calls")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.calls = 1, 2
    rows = []
    print("| network | kernel | off ms | off GFLOP/s | on ms | on GFLOP/s | off / on |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for name in args.networks:
        for k in step_kernels(name, args.smoke):
            if all(stage_module.Stage(t).tensor is t for t in k.stages):
                continue
            flops, off, on = compare(k, args.rounds, args.calls, np.random.default_rng(0))
            label = " ".join(t.name for t in k.stages)
            rows.append((name, label, flops, off, on))
            print(f"| {name} | {label[:60]} | {off:.3f} | {flops / off / 1e6:.2f} | {on:.3f} | "
                  f"{flops / on / 1e6:.2f} | {off / on:.2f} |")
    return rows


if __name__ == "__main__":
    main()
