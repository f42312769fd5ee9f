"""The NeoFlow benchmark: the zoo's networks (neoflow.zoo) trained by
nf.Trainer against their PyTorch twins, eager and under torch.compile.

Per network, in one process on 2 threads (torch.set_num_threads(2),
OMP_NUM_THREADS=2), all from the same initial parameters:
  * parity: 5 SGD steps (momentum 0.9) of NeoFlow and of PyTorch eager on the
    same 5 batches; the largest relative difference of the losses, and a pass
    mark when it is within 1e-4; next to it the same difference between eager
    float32 and eager float64 ("fp32 noise": where it is large, the network
    amplifies float32 rounding and no float32 run can match to 1e-4);
  * speed: the median ms per training step (forward, backward, update) of
    NeoFlow, PyTorch eager and torch.compile on one batch; NeoFlow's build
    time (Trainer construction) and torch.compile's compile time (its first
    step) are reported apart; the parity steps warm NeoFlow and eager up,
    torch.compile gets 3 more steps before it is timed. The frameworks' timed
    steps are interleaved (one of each in turn), so that load from other
    processes on the machine hits all three alike. A torch.compile failure
    is reported in its cells instead of stopping the run.
Writes `networks.md` (a markdown table with geometric-mean speed-ups for the
novel networks and for the CNNs), `networks.png` (speed-up per network
against eager and against torch.compile) and `networks.json` to the output
directory.

    python bench/networks.py                      # the quick set (under 10 minutes here)
    python bench/networks.py --networks all --steps 10 --out bench/results
    python bench/networks.py --networks lltm capsnet --preset small
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")   # read when OpenMP starts: set before any import

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import neoflow as nf  # noqa: E402
from neoflow import zoo  # noqa: E402

THREADS = 2
PARITY_STEPS = 5
PARITY_RTOL = 1e-4
WARMUP_STEPS = 3      # torch.compile's steps after its first before timing (lazy work settles)
LR, MOMENTUM = 0.01, 0.9
QUICK = ("lltm", "sublstm", "scrnn", "transformer", "lenet", "shufflenet")
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def run_bench(networks=QUICK, steps=10, out_dir=DEFAULT_OUT, preset="default",
              torch_compile=True, tuning="off", log=print):
    """Benchmark `networks` (zoo names) with `steps` timed steps per framework
    (NeoFlow's Trainer with `tuning`); write networks.md, networks.png and
    networks.json under `out_dir` and return the report {"rows", "geomeans",
    "environment", "markdown", "files"}.

    >>> report = run_bench(["lltm"], steps=3, out_dir="/tmp/nf-bench", preset="small")
    >>> report["rows"][0]["parity"]
    True
    """
    torch.set_num_threads(THREADS)
    rows = []
    for name in networks:
        log(f"[bench] {name} ...")
        rows.append(bench_network(zoo.get(name), steps, preset, torch_compile, tuning))
        log(f"[bench] {name}: {_row_summary(rows[-1])}")
    report = {"rows": rows, "geomeans": geomeans(rows), "environment": environment(),
              "preset": preset, "steps": steps, "tuning": tuning}
    report["markdown"] = markdown(report)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {"markdown": out / "networks.md", "png": out / "networks.png",
             "json": out / "networks.json"}
    files["markdown"].write_text(report["markdown"])
    plot(report, files["png"])
    report["files"] = {k: str(v) for k, v in files.items()}
    files["json"].write_text(json.dumps(report, indent=1, default=str))
    return report


def bench_network(net, steps, preset="default", torch_compile=True, tuning="off"):
    """One row of the report for the zoo `Network` `net`."""
    model = net.build(preset)
    rng = np.random.default_rng(0)
    batches = [model.make_batch(rng) for _ in range(PARITY_STEPS)]
    torch_batches = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
    row = {"network": net.name, "kind": net.kind, "sizes": _sizes_text(model.sizes)}

    started = time.perf_counter()
    trainer = nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=LR, momentum=MOMENTUM),
                         tuning=tuning)
    row["nf_build_s"] = time.perf_counter() - started
    with trainer:
        initial = trainer.parameters()
        ours = [trainer.step(b) for b in batches]
        row["kernels"] = trainer.stats()["kernels"]
        eager = _torch_step(model, initial, compiled=False)
        theirs = [eager(b) for b in torch_batches]
        exact = _torch_step(model, _float64(initial), compiled=False)
        reference = [exact(_float64(b)) for b in torch_batches]
        row["parity_rel"] = _max_rel(ours, theirs)
        row["parity"] = bool(row["parity_rel"] <= PARITY_RTOL)
        row["fp32_noise_rel"] = _max_rel(theirs, reference)
        timed = {"nf_ms": lambda: trainer.step(batches[0]),
                 "eager_ms": lambda: eager(torch_batches[0])}
        if torch_compile:
            try:
                compiled = _torch_step(model, initial, compiled=True)
                started = time.perf_counter()
                compiled(torch_batches[0])
                row["compile_s"] = time.perf_counter() - started
                for _ in range(WARMUP_STEPS):
                    compiled(torch_batches[0])
                timed["compile_ms"] = lambda: compiled(torch_batches[0])
            except Exception as e:  # noqa: BLE001 -- any failure is reported, not fatal
                row["compile_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:60]}"
        row.update(_interleaved_median_ms(timed, steps))
    return row


def _torch_step(model, values, compiled):
    """A function running one PyTorch training step on a batch; returns the loss."""
    twin = model.torch_model(values)
    forward = torch.compile(twin, dynamic=False) if compiled else twin
    opt = torch.optim.SGD(twin.parameters(), lr=LR, momentum=MOMENTUM)

    def step(batch):
        opt.zero_grad()
        loss = forward(batch)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def _float64(arrays):
    """{name: array or tensor} with the floating ones converted to float64."""
    return {k: v.double() if torch.is_tensor(v) and v.is_floating_point()
            else v.astype(np.float64) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else v
            for k, v in arrays.items()}


def _max_rel(values, reference):
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(values, reference))


def _interleaved_median_ms(fns, steps):
    """{key: median ms} of `steps` calls of each function in `fns`, taken in
    turn, so that load from elsewhere on the machine hits all of them alike."""
    times = {key: [] for key in fns}
    for _ in range(steps):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(ts) * 1e3 for key, ts in times.items()}


def speedups(row):
    """(x vs eager, x vs torch.compile or None): the other's ms over NeoFlow's."""
    vs_compile = row["compile_ms"] / row["nf_ms"] if "compile_ms" in row else None
    return row["eager_ms"] / row["nf_ms"], vs_compile


def geomeans(rows):
    """{group: {"eager": x, "compile": x or None, "networks": n}} over the novel
    networks, the CNNs and all rows."""
    groups = {"novel": [r for r in rows if r["kind"] == "novel"],
              "cnn": [r for r in rows if r["kind"] == "cnn"], "all": rows}
    out = {}
    for group, members in groups.items():
        if not members:
            continue
        pairs = [speedups(r) for r in members]
        compiled = [c for _, c in pairs if c is not None]
        out[group] = {"eager": _geomean([e for e, _ in pairs]),
                      "compile": _geomean(compiled) if len(compiled) == len(pairs) else None,
                      "networks": len(members)}
    return out


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def environment():
    """Versions and machine facts printed under the table."""
    return {"neoflow": nf.__version__, "torch": torch.__version__, "threads": THREADS,
            "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count()}


def markdown(report):
    """The report as a markdown table with geometric means and notes."""
    head = ("network", "kind", "sizes", "NeoFlow ms", "eager ms", "compile ms", "x eager",
            "x compile", "NeoFlow build s", "compile s", "kernels", "parity (5 steps)",
            "fp32 noise")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        vs_eager, vs_compile = speedups(r)
        failed = r.get("compile_error")
        cells = (r["network"], r["kind"], r["sizes"], f"{r['nf_ms']:.2f}", f"{r['eager_ms']:.2f}",
                 f"failed ({failed})" if failed else _maybe(r.get("compile_ms"), "{:.2f}"),
                 f"{vs_eager:.2f}x", _maybe(vs_compile, "{:.2f}x"), f"{r['nf_build_s']:.1f}",
                 _maybe(r.get("compile_s"), "{:.1f}"), r["kernels"],
                 f"{'yes' if r['parity'] else 'NO'} ({r['parity_rel']:.1e})",
                 f"{r['fp32_noise_rel']:.1e}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    for group, g in report["geomeans"].items():
        lines.append(f"* geometric mean, {group} ({g['networks']} networks): "
                     f"{g['eager']:.2f}x vs eager, "
                     f"{_maybe(g['compile'], '{:.2f}x')} vs torch.compile")
    env = report["environment"]
    lines.append(f"* {report['steps']} timed steps per framework (median), preset "
                 f"'{report['preset']}', NeoFlow {env['neoflow']} (tuning "
                 f"{report['tuning']}), torch {env['torch']}, {env['threads']} threads on "
                 f"{env['cores']} cores; "
                 f"parity: largest relative loss difference to eager over {PARITY_STEPS} "
                 f"SGD steps, pass at {PARITY_RTOL:g}; fp32 noise: the same for eager "
                 "float32 against eager float64 (how far float32 rounding alone moves the "
                 "losses of this network)")
    return "\n".join(lines) + "\n"


def _maybe(value, fmt):
    return "n/a" if value is None else fmt.format(value)


def _sizes_text(sizes):
    return ", ".join(f"{k}={v}" for k, v in sizes.items() if not isinstance(v, tuple))


def _row_summary(r):
    vs_eager, vs_compile = speedups(r)
    return (f"NeoFlow {r['nf_ms']:.2f} ms, eager {r['eager_ms']:.2f} ms ({vs_eager:.2f}x), "
            f"compile {_maybe(r.get('compile_ms'), '{:.2f} ms')} "
            f"({_maybe(vs_compile, '{:.2f}x')}), parity {r['parity_rel']:.1e}")


def plot(report, path):
    """Bar chart of NeoFlow's speed-up per network against eager and torch.compile
    (log scale; a missing torch.compile bar means it failed or was skipped)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter, NullFormatter
    rows = report["rows"]
    pairs = [speedups(r) for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) + 2), 4.2))
    for shift, values, label in ((-0.2, [e for e, _ in pairs], "vs PyTorch eager"),
                                 (0.2, [c if c is not None else np.nan for _, c in pairs],
                                  "vs torch.compile")):
        bars = ax.bar(x + shift, values, 0.4, label=label)
        ax.bar_label(bars, labels=[f"{v:.2f}" if v == v else "" for v in values], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%gx"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(x)
    ax.set_xticklabels([f"{r['network']}\n({r['kind']})" for r in rows], fontsize=8)
    ax.set_ylabel("training-step speed-up of NeoFlow")
    means = "; ".join(f"{g}: {v['eager']:.2f}x eager, {_maybe(v['compile'], '{:.2f}x')} compile"
                      for g, v in report["geomeans"].items() if g != "all")
    threads = report["environment"]["threads"]
    ax.set_title(f"NeoFlow (tuning {report['tuning']}) vs PyTorch, {threads} threads\n"
                 f"geometric means: {means}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(QUICK),
                        help=f"zoo names, 'quick' ({' '.join(QUICK)}) or 'all'")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per framework")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="output directory")
    parser.add_argument("--preset", default="default", choices=("default", "small"))
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--tuning", default="off", choices=("off", "background", "ahead"),
                        help="nf.Trainer's tuning mode")
    args = parser.parse_args(argv)
    chosen = args.networks
    names = {"all": list(zoo.NETWORKS), "quick": list(QUICK)}.get(chosen[0], chosen)
    report = run_bench(names, args.steps, args.out, args.preset, not args.no_compile,
                       args.tuning)
    print(report["markdown"])
    print("written:", ", ".join(report["files"].values()))


if __name__ == "__main__":
    main()
