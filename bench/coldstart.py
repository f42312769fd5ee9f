"""Cold start: the time from a freshly defined network to the end of its first training step.

What a user waits for before training starts (issue 16, item 8), on the
zoo's recurrent cells and its small CNN. Per network, in a process of its
own (so nothing of one network's build -- imports, the compiler probe, loaded
libraries -- helps the next), with tuning off and no tuning database:
  * cold: an empty kernel cache (NEOFLOW_CACHE_DIR a fresh directory): the
    network is defined, `nf.Trainer(loss, SGD)` is built and one step runs;
  * warm: in the same process and cache, the network defined again from
    scratch (new tensors) and trained one step: every C library is a cache
    hit, what remains is NeoFlow's own Python work;
  * phases, seconds of each: autodiff (`nf.grad` inside the training graph),
    fusion (partition and kernel grouping), lowering (schedules to loop IR),
    codegen (loop IR to C), compile (the wait for the C compiler: its
    translation units run in parallel, in the background from the end of
    lowering, so what the trainer does meanwhile -- parameter
    initialisation, the first batch -- is not counted here; cache look-ups
    when warm), the first step's kernels, and the rest (buffer planning,
    parameter initialisation, checks);
  * cc cpu: the CPU seconds (user + system) of the compiler processes of the
    cold build up to its first step -- the work the cold start asks of the
    machine, which other load on it barely changes (wall-clock time it does);
  * `--quick-start` builds the trainers with quick_start=True
    (docs/training.md, "Quick start"): the first step runs on quick builds while the
    optimised ones compile in the background; "optimised s" is the time from
    the definition until every kernel runs its optimised build (the cold
    trainer keeps stepping until then), "steps" how many steps had run by
    then (without it, the first step's time and 1);
  * steps in H s: the cold trainer keeps stepping until H seconds
    (`--horizon`, default 10) after the definition began, and this counts
    its steps -- what an earlier first step on slower kernels is worth
    against waiting for the optimised ones.
The compiler's fixed costs are printed once too: one process on an empty
file, and on the prelude every generated file starts with.
Writes `coldstart.md` (the table, also printed) and `coldstart.json` to the
output directory (default bench/results/, not committed). Time is wall-clock
(time.perf_counter) on whatever else the machine is doing: on a shared
machine, label the figures as such.

    python bench/coldstart.py                              # the five, the zoo's paper sizes
    python bench/coldstart.py --networks lltm lenet --preset small
    python bench/coldstart.py --in-process --preset small  # one process (smoke test)
    python bench/coldstart.py --quick-start                # the Trainer's quick_start=True
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

NETWORKS = ("milstm", "scrnn", "sublstm", "lltm", "lenet")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"
UPGRADE_LIMIT_S = 60.0   # the longest the cold trainer steps waiting for its optimised builds
HORIZON_S = 10.0
PHASES = ("autodiff", "fusion", "lowering", "codegen", "compile", "first_step", "other")
# phase -> the functions whose time it is (module, attribute where the trainer calls it)
TIMED = {
    "autodiff": [("neoflow.graph.training", "grad")],
    "fusion": [("neoflow.runtime.trainer", "fuse_training_graph")],
    "lowering": [("neoflow.runtime.native", "lower_program")],
    "codegen": [("neoflow.runtime.native", "generate_c"),
                ("neoflow.runtime.native", "generate_entry")],
    "compile": [("neoflow.runtime.native", "await_libraries")],
}


@contextmanager
def timed_phases(totals):
    """While active, the seconds spent in each phase's functions add up in
    `totals` ({phase: seconds}); nested calls of one phase count once."""
    import importlib
    saved, depth = [], {p: 0 for p in TIMED}

    def wrap(phase, fn):
        def timed(*args, **kwargs):
            depth[phase] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                depth[phase] -= 1
                if not depth[phase]:
                    totals[phase] = totals.get(phase, 0.0) + time.perf_counter() - t0
        return timed

    for phase, places in TIMED.items():
        for module, name in places:
            mod = importlib.import_module(module)
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, wrap(phase, getattr(mod, name)))
    try:
        yield totals
    finally:
        for mod, name, fn in reversed(saved):
            setattr(mod, name, fn)


def first_step(name, preset, quick=False, horizon=0.0):
    """(seconds to the end of the first step, {phase: seconds}, kernels,
    compiler CPU seconds, (seconds until every kernel runs its optimised
    build, steps by then)) for a fresh definition of zoo network `name` in
    this process, and its steps by `horizon` seconds after the definition."""
    import numpy as np
    import neoflow as nf
    from neoflow import zoo

    totals = {}
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with timed_phases(totals):
        t0 = time.perf_counter()
        model = zoo.get(name).build(preset)
        trainer = nf.Trainer(model.loss, nf.optim.SGD(lr=0.01), database=False,
                             quick_start=quick)
        batch = model.make_batch(np.random.default_rng(0))
        t1, waited = time.perf_counter(), totals.get("compile", 0.0)
        trainer.step(batch)
        total = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    # (the step first waits for the compilers: that wait is compile's)
    totals["first_step"] = total - (t1 - t0) - (totals.get("compile", 0.0) - waited)
    totals["other"] = max(0.0, total - sum(totals.get(p, 0.0) for p in PHASES if p != "other"))
    steps, deadline, by_horizon = 1, t0 + max(horizon, UPGRADE_LIMIT_S), None
    optimised = None if trainer.stats()["kernels_quick"] else (total, 1)
    while time.perf_counter() < deadline:
        if time.perf_counter() - t0 >= horizon:
            by_horizon = steps if by_horizon is None else by_horizon
            if optimised is not None:
                break
        trainer.step(batch)
        steps += 1
        if optimised is None and not trainer.stats()["kernels_quick"]:
            optimised = (time.perf_counter() - t0, steps)
    optimised = (*(optimised or (float("nan"), steps)), by_horizon or steps)
    kernels = len(trainer.kernels)
    trainer.close()
    return total, {p: totals.get(p, 0.0) for p in PHASES}, kernels, cpu, optimised


def measure(name, preset, quick=False, horizon=HORIZON_S):
    """One network cold then warm, in this process, under a fresh kernel cache."""
    before = os.environ.get("NEOFLOW_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="nf-coldstart-") as cache:
        os.environ["NEOFLOW_CACHE_DIR"] = cache
        try:
            cold, cold_phases, kernels, cc_cpu, optimised = first_step(name, preset, quick,
                                                                       horizon)
            warm, warm_phases, _, _, _ = first_step(name, preset, quick)
        finally:
            if before is None:
                os.environ.pop("NEOFLOW_CACHE_DIR")
            else:
                os.environ["NEOFLOW_CACHE_DIR"] = before
    return {"network": name, "preset": preset, "quick_start": quick, "kernels": kernels,
            "cc_cpu_s": cc_cpu, "cold_s": cold, "warm_s": warm, "optimised_s": optimised[0],
            "steps_to_optimised": optimised[1], "horizon_s": horizon,
            "steps_in_horizon": optimised[2], "cold": cold_phases, "warm": warm_phases}


def _in_subprocess(name, preset, quick, horizon):
    command = [sys.executable, __file__, "--one", name, "--preset", preset,
               "--horizon", str(horizon)] + (["--quick-start"] if quick else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(__file__).resolve().parents[1])] + sys.path))
    out = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"coldstart of {name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def compiler_costs(repeats=3):
    """{"empty", "prelude": median seconds} of one compiler process with the
    kernels' flags, on a one-line file and on the prelude every generated
    file starts with: what each translation unit pays before its kernels."""
    from neoflow.codegen.c.prelude import PRELUDE
    from neoflow.toolchain.compiler import compile_flags, compile_shared, find_compiler
    cc = find_compiler()
    flags = compile_flags(cc, openmp=True, sanitize=False)
    stub = "int nf_stub(void) { return 0; }\n"
    costs = {}
    with tempfile.TemporaryDirectory(prefix="nf-coldstart-cc-") as tmp:
        for label, text in (("empty", stub), ("prelude", PRELUDE + stub)):
            source = Path(tmp, f"{label}.c")
            source.write_text(text)
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                compile_shared(cc, flags, source, Path(tmp, f"{label}.so"))
                times.append(time.perf_counter() - t0)
            costs[label] = sorted(times)[len(times) // 2]
    return costs


def markdown(rows):
    head = ["network", "kernels", "cold s", "warm s", "optimised s", "steps",
            f"steps in {rows[0]['horizon_s']:g} s" if rows else "steps in H s", "cc cpu s"] \
        + [f"cold {p}" for p in PHASES] + [f"warm {p}" for p in PHASES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["network"], str(r["kernels"]), f"{r['cold_s']:.2f}", f"{r['warm_s']:.2f}",
                 f"{r['optimised_s']:.2f}", str(r["steps_to_optimised"]),
                 str(r["steps_in_horizon"]), f"{r['cc_cpu_s']:.2f}"]
        cells += [f"{r['cold'][p]:.2f}" for p in PHASES] + [f"{r['warm'][p]:.2f}" for p in PHASES]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_bench(networks=NETWORKS, preset="default", out_dir=DEFAULT_OUT, in_process=False,
              log=print, quick=False, horizon=HORIZON_S):
    """Cold and warm start of `networks` (`quick`: the Trainer's quick_start);
    writes coldstart.md / .json under `out_dir` and returns {"rows",
    "compiler", "markdown", "files"}."""
    rows = []
    for name in networks:
        row = measure(name, preset, quick, horizon) if in_process \
            else _in_subprocess(name, preset, quick, horizon)
        log(f"[coldstart] {name}: cold {row['cold_s']:.2f} s, warm {row['warm_s']:.2f} s "
            f"(compile {row['cold']['compile']:.2f} s cold)")
        rows.append(row)
    costs = compiler_costs()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    mode = "quick_start=True" if quick else "quick_start=False (the default)"
    table = f"{mode}\n\n" + markdown(rows) + (f"\none compiler process: {costs['empty']:.3f} s on an empty file, "
                              f"{costs['prelude']:.3f} s on the prelude alone\n")
    files = {"markdown": str(out / "coldstart.md"), "json": str(out / "coldstart.json")}
    Path(files["markdown"]).write_text(table)
    Path(files["json"]).write_text(json.dumps({"rows": rows, "compiler": costs}, indent=1))
    return {"rows": rows, "compiler": costs, "markdown": table, "files": files}


def main(argv=None):
    """Command line: parse `argv`, run, print the table; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS))
    parser.add_argument("--preset", default="default", choices=("default", "small"))
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--in-process", action="store_true",
                        help="measure every network in this process (quick; not cold for "
                             "the Python side)")
    parser.add_argument("--quick-start", dest="quick", action="store_true",
                        help="build the trainers with quick_start=True")
    parser.add_argument("--horizon", type=float, default=HORIZON_S,
                        help="seconds after the definition the cold trainer steps for")
    parser.add_argument("--one", help=argparse.SUPPRESS)   # a child process: one network, JSON out
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.preset, args.quick, args.horizon)))
        return None
    report = run_bench(args.networks, args.preset, args.out, args.in_process, quick=args.quick,
                       horizon=args.horizon)
    print(report["markdown"])
    print("written:", ", ".join(report["files"].values()))
    return report


if __name__ == "__main__":
    main()
