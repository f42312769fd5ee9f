"""zoo/report: the zoo benchmark's report (zoo.benchmark measures) as text,
a plot and files -- speed-ups, geometric means, the markdown table, the
PNG of speed-up per network. matplotlib is imported only when the plot is
drawn.

Hands on: networks.md, networks.png and networks.json in the output
directory (and the markdown text, which `neoflow bench` prints).
"""
import json
import math

import numpy as np

FILES = {"markdown": "networks.md", "png": "networks.png", "json": "networks.json"}


def write_report(report, out_dir):
    """Write the report's markdown (report["markdown"]), plot and JSON under
    `out_dir` (made if missing); record their paths in report["files"] and
    return them.

    >>> write_report(report, Path("neoflow-bench"))["png"]          # doctest: +SKIP
    'neoflow-bench/networks.png'
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {key: out_dir / name for key, name in FILES.items()}
    paths["markdown"].write_text(report["markdown"])
    plot(report, paths["png"])
    report["files"] = {key: str(path) for key, path in paths.items()}
    paths["json"].write_text(json.dumps(report, indent=1, default=str))
    return report["files"]


def speedups(row):
    """(x vs eager, x vs torch.compile or None): the other's ms over NeoFlow's.

    >>> speedups({"nf_ms": 2.0, "eager_ms": 6.0})
    (3.0, None)
    """
    vs_compile = row["compile_ms"] / row["nf_ms"] if "compile_ms" in row else None
    return row["eager_ms"] / row["nf_ms"], vs_compile


def geomeans(rows):
    """{group: {"eager": x, "compile": x or None, "networks": n}} over the novel
    networks, the CNNs and all rows ("compile" is None unless every row of
    the group has a torch.compile time).

    >>> geomeans([{"kind": "cnn", "nf_ms": 1.0, "eager_ms": 4.0}])["cnn"]["eager"]
    4.0
    """
    groups = {"novel": [r for r in rows if r["kind"] == "novel"],
              "cnn": [r for r in rows if r["kind"] == "cnn"], "all": rows}
    out = {}
    for group, members in groups.items():
        if not members:
            continue
        pairs = [speedups(r) for r in members]
        compiled = [c for _, c in pairs if c is not None]
        out[group] = {"eager": geomean([e for e, _ in pairs]),
                      "compile": geomean(compiled) if len(compiled) == len(pairs) else None,
                      "networks": len(members)}
    return out


def geomean(values):
    """The geometric mean of positive numbers.

    >>> geomean([1.0, 4.0])
    2.0
    """
    return math.exp(sum(math.log(v) for v in values) / len(values))


def markdown(report):
    """The report as a markdown table with geometric means and notes.

    >>> print(markdown(run_bench(["lltm"], preset="small")))        # doctest: +SKIP
    """
    passive = report.get("interleaved", False)
    head = ("network", "kind", "sizes", "NeoFlow ms", "eager ms", "compile ms", "x eager",
            "x compile") + (("interleaved PASSIVE x eager", "x compile") if passive else ()) + (
            "NeoFlow build s", "compile s", "kernels",
            f"parity ({report['parity_steps']} steps)", "fp32 noise")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["rows"]:
        vs_eager, vs_compile = speedups(r)
        failed = r.get("compile_error")
        cells = (r["network"], r["kind"], r["sizes"], _ms(r, "nf"), _ms(r, "eager"),
                 f"failed ({failed})" if failed else _ms(r, "compile"),
                 f"{vs_eager:.2f}x", _maybe(vs_compile, "{:.2f}x"))
        if passive:
            cells += tuple(_maybe(r[f"passive_{k}_ms"] / r["passive_nf_ms"]
                                  if f"passive_{k}_ms" in r else None, "{:.2f}x")
                           for k in ("eager", "compile"))
        cells += (f"{r['nf_build_s']:.1f}", _maybe(r.get("compile_s"), "{:.1f}"), r["kernels"],
                  f"{'yes' if r['parity'] else 'NO'} ({r['parity_rel']:.1e})",
                  f"{r['fp32_noise_rel']:.1e}")
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    for group, g in report["geomeans"].items():
        lines.append(f"* geometric mean, {group} ({g['networks']} networks): "
                     f"{g['eager']:.2f}x vs eager, "
                     f"{_maybe(g['compile'], '{:.2f}x')} vs torch.compile")
    env = report["environment"]
    lines.append(f"* speed: each framework timed alone in its own process with its default "
                 f"threading (OMP_NUM_THREADS={env['omp_num_threads']}, "
                 f"OMP_WAIT_POLICY={env['omp_wait_policy']}); ms is the median of "
                 f"{report['blocks']} blocks' medians of {report['steps']} steps, the blocks' "
                 f"range in brackets; preset '{report['preset']}', NeoFlow {env['neoflow']} "
                 f"(tuning {report['tuning']}), torch {env['torch']}, {env['cores']} cores")
    if passive:
        lines.append("* interleaved PASSIVE: the three frameworks in one process under "
                     "OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS=2, one step of each in turn "
                     "(PASSIVE slows PyTorch's small kernels; this figure flatters NeoFlow)")
    lines.append(f"* parity: largest relative loss difference to eager over "
                 f"{report['parity_steps']} SGD steps, pass at {report['parity_rtol']:g}; "
                 "fp32 noise: the same for eager float32 against eager float64 (how far "
                 "float32 rounding alone moves the losses of this network)")
    return "\n".join(lines) + "\n"


def _ms(row, key):
    """A framework's ms with its blocks' range, "n/a" when it was not timed."""
    if f"{key}_ms" not in row:
        return "n/a"
    low, high = row.get(f"{key}_spread_ms", (row[f"{key}_ms"],) * 2)
    return f"{row[f'{key}_ms']:.2f} ({low:.2f}-{high:.2f})"


def _maybe(value, fmt):
    return "n/a" if value is None else fmt.format(value)


def row_summary(r):
    """One row as a line of progress text.

    >>> row_summary(bench_network(zoo.get("lltm"), 3, "small"))    # doctest: +SKIP
    'NeoFlow 0.41 ms, eager 1.20 ms (2.93x), compile ... parity 3.1e-07'
    """
    vs_eager, vs_compile = speedups(r)
    return (f"NeoFlow {r['nf_ms']:.2f} ms, eager {r['eager_ms']:.2f} ms ({vs_eager:.2f}x), "
            f"compile {_maybe(r.get('compile_ms'), '{:.2f} ms')} "
            f"({_maybe(vs_compile, '{:.2f}x')}), parity {r['parity_rel']:.1e}")


def plot(report, path):
    """Bar chart of NeoFlow's speed-up per network against eager and torch.compile
    (log scale; a missing torch.compile bar means it failed or was skipped),
    saved as a PNG at `path`.

    >>> plot(report, "networks.png")                                 # doctest: +SKIP
    """
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
    ax.set_title(f"NeoFlow (tuning {report['tuning']}) vs PyTorch, each alone, default threads\n"
                 f"geometric means: {means}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
