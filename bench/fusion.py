"""Fusion benchmark: a training step with NeoFlow's fusion on and off, against PyTorch.

What partitioning the training step into fused kernels buys (issue 5), on
the zoo's novel networks and a small CNN.

Per network (neoflow.zoo; SGD with momentum 0.9), for one training step
(forward, backward, optimizer update):
  * NeoFlow kernels: `len(trainer.kernels)` of nf.Trainer with fusion on and
    with `fusion=False` (one kernel per compute);
  * ATen ops: every call that reaches a TorchDispatchMode during one PyTorch
    eager step of the twin -- `zero_grad()` (grads set to None: no ops), the
    forward, `loss.backward()` and `optimizer.step()` (torch's default
    per-parameter SGD loop on CPU). These are the ATen ops after autograd and
    after composite ops are decomposed, views and in-place ops included, the
    backward's gradient accumulation included. The step counted is the
    second one, after the momentum buffers exist;
  * torch.compile kernels: `torch._inductor.metrics.generated_kernel_count`
    for a fresh twin (its momentum buffers made by one eager step), with
    `torch._dynamo.reset()`, the FX-graph and AOT-autograd caches off (a cache
    hit would generate no kernels) and the metrics reset before; counted
    once after the first forward + backward of `torch.compile(twin,
    dynamic=False)` ("fwd+bwd") and once after the first call of
    `torch.compile(optimizer.step)` ("opt"). A failure is reported in the
    cell and the run goes on;
  * bytes moved: the estimate of neoflow.graph.traffic -- per kernel, the
    bytes of its inputs read plus its outputs written (kernel-local stages
    free) -- summed over the step, fusion on and off;
  * ms/step: NeoFlow fusion on, fusion off and PyTorch eager, each timed
    alone in its own process with default threading (neoflow.zoo.solo: the
    median of --blocks blocks' medians of --steps steps); the speed-ups are
    eager ms / NeoFlow ms and fusion-off ms / fusion-on ms.
Writes `fusion.md` (the markdown table, also printed) and `fusion.json` to
the output directory (default bench/results/, not committed).

    python bench/fusion.py                              # all five, the zoo's paper sizes (minutes)
    python bench/fusion.py --preset small --steps 3     # test sizes, ~30 s per network
    python bench/fusion.py --networks lltm milstm --steps 20 --no-compile
"""
import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import neoflow as nf
from neoflow import zoo
from neoflow.graph.traffic import step_bytes
from neoflow.zoo.benchmark import sizes_text
from neoflow.zoo.solo import LR, MOMENTUM, run_alone

NETWORKS = ("lltm", "milstm", "sublstm", "scrnn", "lenet")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


class AtenOpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched while it is active (`ops`)."""

    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def run_bench(networks=NETWORKS, steps=10, out_dir=DEFAULT_OUT, preset="default",
              torch_compile=True, log=print, blocks=5):
    """Benchmark the zoo networks `networks` with `steps` timed steps each;
    write fusion.md and fusion.json under `out_dir` and return the report
    {"rows", "environment", "preset", "steps", "markdown", "files"}.

    >>> report = run_bench(["lltm"], steps=1, out_dir="/tmp/nf-fusion", preset="small")
    >>> report["rows"][0]["kernels_fused"] <= report["rows"][0]["kernels_unfused"]
    True
    """
    rows = []
    for name in networks:
        log(f"[fusion] {name} ...")
        rows.append(bench_network(zoo.get(name), steps, preset, torch_compile, blocks))
        log(f"[fusion] {name}: {_row_summary(rows[-1])}")
    report = {"rows": rows, "environment": environment(), "preset": preset, "steps": steps,
              "blocks": blocks}
    report["markdown"] = markdown(report)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"markdown": out / "fusion.md", "json": out / "fusion.json"}
    files["markdown"].write_text(report["markdown"])
    report["files"] = {k: str(v) for k, v in files.items()}
    files["json"].write_text(json.dumps(report, indent=1, default=str))
    return report


def bench_network(net, steps, preset="default", torch_compile=True, blocks=5):
    """One row of the report for the zoo `Network` `net`."""
    model = net.build(preset)
    batch = model.make_batch(np.random.default_rng(0))
    torch_batch = {k: torch.from_numpy(v) for k, v in batch.items()}
    row = {"network": net.name, "kind": net.kind, "sizes": sizes_text(model.sizes)}
    with nf.Trainer(model.loss, _sgd(), tuning="off") as fused, \
            nf.Trainer(model.loss, _sgd(), tuning="off", fusion=False) as unfused:
        for key, trainer in (("fused", fused), ("unfused", unfused)):
            row[f"kernels_{key}"] = len(trainer.kernels)
            row[f"bytes_{key}"] = step_bytes(trainer.kernels)
        initial = fused.parameters()
        eager = _torch_step(model.torch_model(initial))
        row["aten_ops"] = count_aten_ops(eager, torch_batch)
        if torch_compile:
            row.update(compile_kernels(model.torch_model(initial), torch_batch))
    for key, framework in (("fused", "neoflow"), ("unfused", "neoflow-unfused"),
                           ("eager", "eager")):
        figure = run_alone(net.name, framework, preset, steps=steps, blocks=blocks)
        row[f"{key}_ms"], row[f"{key}_spread_ms"] = figure["median_ms"], figure["spread_ms"]
    return row


def _sgd():
    return nf.optim.SGD(lr=LR, momentum=MOMENTUM)


def _torch_step(twin):
    """A function running one PyTorch SGD step of the twin module on a batch."""
    opt = _torch_sgd(twin)

    def step(batch):
        opt.zero_grad()
        twin(batch).backward()
        opt.step()
    return step


def _torch_sgd(twin):
    return torch.optim.SGD(twin.parameters(), lr=LR, momentum=MOMENTUM)


def count_aten_ops(step, batch):
    """ATen ops dispatched by the second call of `step(batch)` (see the module
    docstring for what is counted)."""
    step(batch)
    with AtenOpCounter() as counter:
        step(batch)
    return counter.ops


def compile_kernels(twin, batch):
    """{"compile_fwd_bwd": n, "compile_opt": n} kernels torch.compile's
    inductor generates for the twin's forward + backward and for the SGD
    step, or {"compile_error": text} when compiling fails."""
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor import metrics
    opt = _torch_sgd(twin)
    twin(batch).backward()
    opt.step()                         # momentum buffers exist: the steady-state update
    try:
        with inductor_config.patch(fx_graph_cache=False), \
                functorch_config.patch(enable_autograd_cache=False):
            torch._dynamo.reset()
            metrics.reset()
            opt.zero_grad()
            torch.compile(twin, dynamic=False)(batch).backward()
            counts = {"compile_fwd_bwd": metrics.generated_kernel_count}
            metrics.reset()
            torch.compile(opt.step)()
            counts["compile_opt"] = metrics.generated_kernel_count
        return counts
    except Exception as e:  # noqa: BLE001 -- any failure is reported, not fatal
        return {"compile_error": f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"}
    finally:
        torch._dynamo.reset()


def speedups(row):
    """(fused x eager, unfused x eager, fused x unfused): ms ratios, > 1 when
    the first named is faster."""
    return (row["eager_ms"] / row["fused_ms"], row["eager_ms"] / row["unfused_ms"],
            row["unfused_ms"] / row["fused_ms"])


def environment():
    """Versions and machine facts printed under the table."""
    return {"neoflow": nf.__version__, "torch": torch.__version__, "cores": os.cpu_count(),
            "timing": "each framework alone in its own process, default threading"}


def markdown(report):
    """The report as a markdown table with notes."""
    head = ("network", "sizes", "NF kernels fused", "NF kernels unfused", "eager ATen ops",
            "compile kernels fwd+bwd + opt", "NF bytes fused", "NF bytes unfused", "NF fused ms",
            "NF unfused ms", "eager ms", "fused x eager", "unfused x eager",
            "fused x unfused")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        cells = (r["network"], r["sizes"], r["kernels_fused"], r["kernels_unfused"],
                 r["aten_ops"], _compile_cell(r), _size_text(r["bytes_fused"]),
                 _size_text(r["bytes_unfused"]), _ms(r, "fused"), _ms(r, "unfused"),
                 _ms(r, "eager"),
                 *(f"{x:.2f}x" for x in speedups(r)))
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    env = report["environment"]
    lines += ["",
              f"* preset '{report['preset']}', SGD momentum {MOMENTUM}; ms: each column timed "
              f"alone in its own process with default threading, the median of "
              f"{report['blocks']} blocks' medians of {report['steps']} steps (the blocks' "
              f"range in brackets); NeoFlow {env['neoflow']} (tuning off), torch "
              f"{env['torch']}, {env['cores']} cores",
              "* NF kernels: `len(trainer.kernels)`, fusion on and `fusion=False`; NF bytes: "
              "estimated bytes moved per step (neoflow.graph.traffic: inputs read + outputs "
              "written per kernel; kB, MB = 1e3, 1e6 bytes)",
              "* eager ATen ops: ops reaching a TorchDispatchMode in one eager step "
              "(forward, backward, SGD step); compile kernels: "
              "`torch._inductor.metrics.generated_kernel_count` for torch.compile of the "
              "twin's forward + backward, + that of `torch.compile(optimizer.step)`",
              "* x: ratio of ms/step (eager / NeoFlow; unfused / fused), > 1 = NeoFlow "
              "(fused) faster"]
    return "\n".join(lines) + "\n"


def _ms(row, key):
    low, high = row[f"{key}_spread_ms"]
    return f"{row[f'{key}_ms']:.2f} ({low:.2f}-{high:.2f})"


def _compile_cell(row):
    if "compile_error" in row:
        return f"failed ({row['compile_error']})"
    if "compile_fwd_bwd" not in row:
        return "n/a"
    return f"{row['compile_fwd_bwd']} + {row['compile_opt']}"


def _size_text(nbytes):
    """Bytes as text in kB or MB (powers of ten).

    >>> _size_text(11940020)
    '11.9 MB'
    """
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:.1f} kB"


def _row_summary(r):
    fused_x_eager, _, fused_x_unfused = speedups(r)
    return (f"kernels {r['kernels_fused']} (unfused {r['kernels_unfused']}), "
            f"ATen ops {r['aten_ops']}, compile {_compile_cell(r)}; "
            f"fused {r['fused_ms']:.2f} ms, unfused {r['unfused_ms']:.2f} ms, "
            f"eager {r['eager_ms']:.2f} ms ({fused_x_eager:.2f}x eager, "
            f"{fused_x_unfused:.2f}x unfused)")


def main(argv=None):
    """Command line: parse `argv`, run the benchmark, print the table; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS), choices=NETWORKS)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per block")
    parser.add_argument("--blocks", type=int, default=5, help="timed blocks per column")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--preset", default="default", choices=("default", "small"),
                        help="the zoo's paper sizes (default) or its test sizes (small)")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip torch.compile's kernel counts")
    args = parser.parse_args(argv)
    report = run_bench(args.networks, args.steps, args.out, args.preset, not args.no_compile,
                       blocks=args.blocks)
    print(report["markdown"])
    print("written:", ", ".join(report["files"].values()))
    return report


if __name__ == "__main__":
    main()
