"""torch.compile(backend="neoflow") against PyTorch eager and inductor on the
zoo's PyTorch twins (neoflow/zoo/*, zoo/twin.py), plus nf.Trainer on the
same network, and the call overhead of an nf.torch.op against a plain
torch.autograd.Function.

Per network and framework, in its own process with default threading (no
OpenMP variables set): the compile time (the first training step, which
compiles; nf.Trainer: its construction plus first step), then BLOCKS
blocks of STEPS timed training steps (forward, backward, SGD update; the
optimizer runs eagerly, the model is compiled) -- the median ms/step of the
blocks, with min..max -- and, for the backend, the share of FLOPs that ran
natively (nf.torch.report) and, for the backend and nf.Trainer, the
NeoFlow kernels run per step. A second figure, "interleaved", runs eager,
inductor and the backend in one process, one block of each in turn, so
that load from other processes hits all alike; it is labelled as such.

    python bench/torch_backend.py                          # default sizes
    python bench/torch_backend.py --networks lltm lenet --blocks 7 --steps 20
    python bench/torch_backend.py --smoke                  # tiny, for the tests
    python bench/torch_backend.py --networks yolo resnet3d dcgan   # the CNNs (DCGAN: a
                                                           # step is a round of both phases)
    python bench/torch_backend.py --breakdown lltm lenet   # where a backend step goes

--breakdown NET...: per network, in one process, where a training step
through backend="neoflow" goes, against nf.Trainer's step on the same
network and eager PyTorch (the three alternate block by block): the forward call (Dynamo's
guards, torch's AOT runtime wrappers, the native calls), loss.backward()
(the autograd engine, the AOT backward wrapper, the native calls),
zero_grad + the optimizer step, and inside the compiled graphs the
native calls' time (the generated entry points) and the Python around
them (the partition runners); with counts load does not disturb: Dynamo
graphs (graph breaks + 1), native calls, ATen ops left in PyTorch (views
taken at no cost, fallbacks), tensors the forward saves for the backward,
partition inputs copied to be contiguous, those read in place through
their strides, outputs restrided (a copy each), kernels; nf.Trainer: its step and its kernels'
own time (its kernel profile, taken once). `--clock cpu` times with the
thread's CPU time instead of the wall clock: on a loaded machine, run
single-threaded (OMP_NUM_THREADS=1), it leaves out the time the process
waits for a core.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "bench" / "results"
NETWORKS = ["lenet", "lltm", "milstm", "scrnn", "sublstm", "transformer"]
FRAMEWORKS = ["eager", "inductor", "neoflow", "trainer"]
INTERLEAVED = ["eager", "inductor", "neoflow"]
BACKENDS = {"eager": None, "inductor": "inductor", "neoflow": "neoflow"}   # torch.compile's
LR, MOMENTUM = 0.01, 0.9


# --- one framework, one network (runs in a worker process) --------------------------------
class _Run:
    """One framework training one zoo network: `step()` runs a training step."""

    def __init__(self, framework, network, preset):
        import torch
        from neoflow import zoo
        from neoflow.runtime.init import initial_value
        self.framework = framework
        self.model = zoo.get(network).build(preset, dtype="float32")
        self.batch = self.model.make_batch(np.random.default_rng(0))
        start = time.perf_counter()
        if framework == "trainer":
            import neoflow as nf
            self.trainer = nf.Trainer(self.model.loss, nf.optim.SGD(lr=LR, momentum=MOMENTUM))
            self.step()
        else:
            values = {k: initial_value(p, seed=1) for k, p in self.model.params.items()}
            self.twin = self.model.torch_model(values)
            self.opt = torch.optim.SGD(self.twin.parameters(), lr=LR, momentum=MOMENTUM)
            self.data = {k: torch.from_numpy(v) for k, v in self.batch.items()}
            self.fn = self.twin if framework == "eager" else torch.compile(
                self.twin, backend=BACKENDS[framework], dynamic=False)
            self.step()
        self.compile_s = time.perf_counter() - start

    def step(self):
        if self.framework == "trainer":
            return self.trainer.step(self.batch)
        loss = self.fn(self.data)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def block(self, steps):
        start = time.perf_counter()
        for _ in range(steps):
            self.step()
        return (time.perf_counter() - start) * 1e3 / steps

    def kernels(self):
        """NeoFlow kernels per training step (the backend: over its compiled
        graphs; nf.Trainer: its step), a count load does not disturb."""
        if self.framework == "trainer":
            return self.trainer.stats()["kernels"]
        if self.framework != "neoflow":
            return None
        import neoflow as nf
        return sum(g["kernels"] for g in nf.torch.report(self.fn).values())

    def native_share(self):
        if self.framework != "neoflow":
            return None
        import neoflow as nf
        rep = nf.torch.report(self.fn)
        native = sum(g["flops_native"] for g in rep.values())
        total = sum(g["flops_total"] for g in rep.values())
        return native / total if total else None


class _Rounds(_Run):
    """A network with phases (DCGAN): nf.Trainer is one Trainer per phase
    (zoo.alternating.AlternatingTrainers); eager, inductor and the backend run
    the twin's phases in turn through zoo.alternating.torch_alternating, the
    module compiled once for both phases."""

    def __init__(self, framework, network, preset):
        import torch
        import neoflow as nf
        from neoflow import zoo
        from neoflow.runtime.init import initial_value
        from neoflow.zoo.alternating import AlternatingTrainers, torch_alternating
        self.framework = framework
        models = zoo.get(network).build_phases(preset, dtype="float32")
        rng = np.random.default_rng(0)
        self.batch = {k: v for m in models for k, v in m.make_batch(rng).items()}
        start = time.perf_counter()
        if framework == "trainer":
            self.trainer = AlternatingTrainers(models, nf.optim.SGD(lr=LR, momentum=MOMENTUM))
        else:
            values = {k: initial_value(p, seed=1) for m in models for k, p in m.params.items()}
            self.round, _ = torch_alternating(
                models, values, BACKENDS[framework],
                make_optimizer=lambda ps: torch.optim.SGD(ps, lr=LR, momentum=MOMENTUM))
            self.fn = self.round.module
            self.data = {k: torch.from_numpy(v) for k, v in self.batch.items()}
        self.step()
        self.compile_s = time.perf_counter() - start

    def step(self):
        if self.framework == "trainer":
            return self.trainer.step(self.batch)
        return self.round(self.data)

    def kernels(self):
        if self.framework == "trainer":
            return sum(s["kernels"] for s in self.trainer.stats())
        return super().kernels()


def _make_run(framework, network, preset):
    """A `_Run`, or for a network with phases (DCGAN) a `_Rounds`: a step is a round."""
    from neoflow import zoo
    return (_Rounds if zoo.get(network).phases else _Run)(framework, network, preset)


def _summary(blocks):
    return {"ms_step": statistics.median(blocks), "min": min(blocks), "max": max(blocks)}


def worker(frameworks, network, preset, steps, blocks, warmup):
    """Time `frameworks` on `network` in this process (one block of each in
    turn when there are several); returns {framework: result}."""
    runs = {f: _make_run(f, network, preset) for f in frameworks}
    for run in runs.values():
        for _ in range(warmup):
            run.step()
    times = {f: [] for f in frameworks}
    for _ in range(blocks):
        for f, run in runs.items():
            times[f].append(run.block(steps))
    return {f: {**_summary(times[f]), "compile_s": run.compile_s,
                "native_share": run.native_share(), "kernels": run.kernels()}
            for f, run in runs.items()}


# --- call overhead of nf.torch.op ----------------------------------------------------------
def op_overhead(calls, now=time.perf_counter):
    """Microseconds per call of a tiny nf.torch.op and of the same work as a
    plain torch.autograd.Function, with and without grad and in inference mode
    (`now`: the clock, wall or this thread's CPU time)."""
    import torch
    import neoflow as nf

    @nf.torch.op("nfbench::scale")
    def scale(x):
        return nf.compute(x.shape, lambda i: x[i] * 2.0)

    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2.0

        @staticmethod
        def backward(ctx, g):
            return g * 2.0

    x = torch.randn(16)
    xg = x.clone().requires_grad_()
    out = {}
    for label, fn in (("nf.torch.op", scale), ("autograd.Function", Scale.apply)):
        for mode, arg, ctx in (("no_grad", x, torch.no_grad), ("grad", xg, _null),
                               ("inference_mode", x, torch.inference_mode)):
            with ctx():
                fn(arg)
                samples = []
                for _ in range(5):
                    start = now()
                    for _ in range(calls):
                        fn(arg)
                    samples.append((now() - start) * 1e6 / calls)
            out[f"{label} ({mode})"] = statistics.median(samples)
    return out


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# --- where a backend step goes ----------------------------------------------------------------
class _Clock:
    """Seconds accumulated per label."""

    def __init__(self):
        self.total = {}

    def add(self, label, seconds):
        self.total[label] = self.total.get(label, 0.0) + seconds


def _instrument(run, clock, counts, now):
    """Time the native calls and the partition runners of `run`'s compiled
    graphs (their Runner objects, patched on the instance's class), count
    the non-contiguous inputs and restrided outputs they see."""
    import importlib
    backend = importlib.import_module("neoflow.frontends.torch.backend")
    runner_call = backend.Runner.__call__

    def timed_runner(self, *tensors):
        layouts = getattr(self, "layouts", None) or [None] * len(tensors)   # older trees: none
        counts["copies_in"] = counts.get("copies_in", 0) + sum(
            not t.is_contiguous() if layout is None else t.stride() != layout[1]
            for t, layout in zip(tensors, layouts))
        counts["read_in_place"] = counts.get("read_in_place", 0) + sum(
            layout is not None and t.stride() == layout[1]
            for t, layout in zip(tensors, layouts))
        counts["copies_out"] = counts.get("copies_out", 0) + sum(
            s is not None for s in self.strides)
        start = now()
        out = runner_call(self, *tensors)
        clock.add("runner", now() - start)
        return out
    backend.Runner.__call__ = timed_runner
    for graph in _graph_records(run):
        for runner in graph.runners:
            direct = runner._direct
            if direct is None:
                continue
            entry = direct._entry

            def timed_entry(*a, _entry=entry):
                start = now()
                out = _entry(*a)
                clock.add("native", now() - start)
                return out
            direct._entry = timed_entry


def _graph_records(run):
    from neoflow.frontends.torch.report import compiled_for
    return [g for record in compiled_for(run.fn) for g in record.graphs]


def breakdown(network, preset, steps, blocks, now=time.perf_counter):
    """Where a backend training step goes on `network`, against nf.Trainer
    (see --breakdown in the module docstring); returns a dict of ms/step
    (medians over blocks; `now` is the clock: wall time, or this thread's
    CPU time) and counts per step."""
    import neoflow as nf
    from neoflow import zoo
    if zoo.get(network).phases:
        raise SystemExit(f"--breakdown times one training step; '{network}' trains in "
                         "phases (run it without --breakdown)")
    backend, trainer = _Run("neoflow", network, preset), _Run("trainer", network, preset)
    eager = _Run("eager", network, preset)
    for _ in range(3):
        for run in (backend, trainer, eager):
            run.step()
    clock, counts = _Clock(), {}
    _instrument(backend, clock, counts, now)
    parts = {k: [] for k in ("step", "forward", "backward", "optimizer", "native", "runner",
                             "trainer step", "eager step")}
    for _ in range(blocks):
        clock.total.clear()
        counts.clear()
        fw = bw = opt = 0.0
        start = now()
        for _ in range(steps):
            t0 = now()
            loss = backend.fn(backend.data)
            t1 = now()
            loss.backward()
            t2 = now()
            backend.opt.step()
            backend.opt.zero_grad()
            loss.item()
            t3 = now()
            fw, bw, opt = fw + t1 - t0, bw + t2 - t1, opt + t3 - t2
        parts["step"].append((now() - start) * 1e3 / steps)
        for k, v in (("forward", fw), ("backward", bw), ("optimizer", opt),
                     ("native", clock.total.get("native", 0.0)),
                     ("runner", clock.total.get("runner", 0.0))):
            parts[k].append(v * 1e3 / steps)
        for label, run in (("trainer step", trainer), ("eager step", eager)):
            start = now()
            for _ in range(steps):
                run.step()
            parts[label].append((now() - start) * 1e3 / steps)
    ms = {k: statistics.median(v) if v else None for k, v in parts.items()}
    profile = trainer.trainer.stats()["kernel_profile"]   # profiled once, per kernel
    ms["trainer kernels (profiled once, wall)"] = sum(k["ms"] for k in profile) \
        if profile else None
    ms["runner python"] = ms["runner"] - ms["native"]
    ms["outside graphs"] = ms["step"] - ms["runner"]
    graphs = _graph_records(backend)
    saved = [g["saved"] for g in graphs if g["kind"] == "backward"]
    out = {"ms_step": ms, "counts": {
        "dynamo graphs": len(nf.torch.report(backend.fn)) and
        len({name.split(".")[0] for name in nf.torch.report(backend.fn)}),
        "native calls": sum(len(g.runners) for g in graphs),
        "kernels": sum(g.kernels for g in graphs),
        "trainer kernels": trainer.kernels(),
        "torch views": sum(sum(g["views"].values()) for g in graphs),
        "fallback ops": sum(sum(g["fallback"].values()) for g in graphs),
        "saved for backward": sum(saved) if saved else None,
        "copies in per step": counts.get("copies_in", 0) // steps,
        "strided reads per step": counts.get("read_in_place", 0) // steps,
        "copies out per step": counts.get("copies_out", 0) // steps}}
    return out


# --- the driver ----------------------------------------------------------------------------
def _spawn(args):
    done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                          cwd=ROOT)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip()
                else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cell(result, key, fmt):
    if result is None or "error" in result:
        return "error" if result else "-"
    value = result.get(key)
    return "-" if value is None else fmt.format(value)


def table(results, frameworks):
    """The markdown table of `results` {network: {"alone": ..., "interleaved": ...}}."""
    head = ["network"] + [f"{f} ms/step" for f in frameworks] + \
        [f"{f} compile s" for f in frameworks if f != "eager"] + \
        ["FLOPs native", "kernels/step neoflow", "kernels/step trainer",
         "neoflow ms (interleaved)", "eager ms (interleaved)",
         "inductor ms (interleaved)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for net, r in results.items():
        alone, inter = r["alone"], r.get("interleaved", {})
        cells = [net]
        cells += [_cell(alone.get(f), "ms_step", "{:.2f}") + (
            _cell(alone.get(f), "min", " ({:.2f}") + _cell(alone.get(f), "max", "..{:.2f})")
            if alone.get(f) and "error" not in alone[f] else "") for f in frameworks]
        cells += [_cell(alone.get(f), "compile_s", "{:.1f}") for f in frameworks if f != "eager"]
        cells.append(_cell(alone.get("neoflow"), "native_share", "{:.1%}"))
        cells += [_cell(alone.get(f), "kernels", "{}") for f in ("neoflow", "trainer")]
        cells += [_cell(inter.get(f), "ms_step", "{:.2f}") if "error" not in inter else "error"
                  for f in ("neoflow", "eager", "inductor")]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv=None):
    """Command line: run the benchmark (or one worker), print the table;
    returns the results dict."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", nargs="+", default=NETWORKS)
    p.add_argument("--frameworks", nargs="+", default=FRAMEWORKS, choices=FRAMEWORKS)
    p.add_argument("--preset", default="default", choices=["default", "small"])
    p.add_argument("--steps", type=int, default=10, help="timed steps per block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000, help="calls per overhead sample")
    p.add_argument("--no-interleaved", action="store_true")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and counts (tests)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--overhead-worker", action="store_true",
                   help="print only the nf.torch.op call overhead (JSON)")
    p.add_argument("--breakdown", nargs="+", metavar="NET",
                   help="where a backend step goes on NET, against nf.Trainer")
    p.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="clock of --breakdown and --overhead-worker: wall time, or the "
                        "thread's CPU time (with OMP_NUM_THREADS=1 on a loaded machine: "
                        "descheduled time not counted)")
    a = p.parse_args(argv)
    if a.smoke:
        a.preset, a.steps, a.blocks, a.warmup, a.calls = "small", 2, 2, 1, 50
    now = time.perf_counter if a.clock == "wall" else time.thread_time
    if a.breakdown:
        found = {net: breakdown(net, a.preset, a.steps, a.blocks, now) for net in a.breakdown}
        for net, r in found.items():
            print(f"{net} ({a.preset}): ms/step ({a.clock} clock), median of {a.blocks} "
                  f"blocks of {a.steps}")
            for k, v in r["ms_step"].items():
                print(f"  {k:<20} " + ("-" if v is None else f"{v:8.3f}"))
            for k, v in r["counts"].items():
                print(f"  {k:<20} {v}")
        print(json.dumps(found))
        return found
    if a.overhead_worker:
        print(json.dumps(op_overhead(a.calls, now)))
        return None
    if a.worker:
        network, frameworks = a.worker[0], a.worker[1:]
        print(json.dumps(worker(frameworks, network, a.preset, a.steps, a.blocks, a.warmup)))
        return None
    common = ["--preset", a.preset, "--steps", str(a.steps), "--blocks", str(a.blocks),
              "--warmup", str(a.warmup)]
    results = {}
    for net in a.networks:
        alone = {}
        for f in a.frameworks:            # each framework alone in its own process
            r = _spawn(["--worker", net, f, *common])
            alone[f] = r.get(f, r)
        entry = {"alone": alone}
        together = [f for f in INTERLEAVED if f in a.frameworks]
        if not a.no_interleaved and len(together) > 1:
            entry["interleaved"] = _spawn(["--worker", net, *together, *common])
        results[net] = entry
        print(f"{net}: done", file=sys.stderr)
    overhead = _spawn(["--overhead-worker", "--calls", str(a.calls)])
    report = {"preset": a.preset, "steps": a.steps, "blocks": a.blocks, "networks": results,
              "op_overhead_us": overhead}
    print(table(results, a.frameworks))
    print("\ncall overhead, us per call (median of 5 samples):")
    for k, v in overhead.items():
        print(f"  {k:<36} {v:8.2f}" if isinstance(v, float) else f"  {k}: {v}")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "torch_backend.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
