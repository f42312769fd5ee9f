"""How much faster than PyTorch can any implementation train the zoo's
networks on this machine? The bound behind issue 18's targets.

A training step must at least do its contractions (the matmuls and
convolutions of the forward and the backward pass), and no code does them
faster than the machine's fused multiply-add peak. So for each network:

    floor ms   = contraction flops / peak
    ceiling    = eager ms / floor ms       (likewise against torch.compile)

is the most any implementation -- NeoFlow included, with every other
operation, every byte moved and every call free -- can be faster than
PyTorch. The flops are the smaller of two counts: PyTorch's own count of
the twin's forward and backward (torch.utils.flop_counter: matmuls and
convolutions only) and NeoFlow's count of every operation of its own
kernels (nf.flops's rule; SGD's update included), so the floor is the
lowest either framework's work allows and the ceiling the most generous. The peak is measured
here: 12 independent chains of vector FMAs per core, all cores, at the
compiler's native width (a chain a vector wide; no loads, so it is above
what a GEMM can reach) -- and the best GEMM rate beside it (torch.mm and
NeoFlow's matmul, 1024^3, each alone in its own process).

The step times are taken by the fair method (each framework alone in its
own process, default threading; neoflow.zoo.solo), or read from a
`neoflow bench` run's networks.json (`--from`).

    python bench/ceiling.py                                  # the novel networks
    python bench/ceiling.py --from neoflow-bench/networks.json
    python bench/ceiling.py --networks lltm capsnet --no-compile
    python bench/ceiling.py --smoke                          # small sizes, seconds (tested)

Prints a markdown table: per network the times, NeoFlow's speed-up, the
contraction GFLOP (torch's count; NeoFlow's), the floor at the peak, the
ceilings against eager and torch.compile, and their geometric means.
"""
import argparse
import ctypes
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

NOVEL = ("lltm", "milstm", "sublstm", "scrnn", "capsnet", "transformer")
CHAINS = 12   # independent FMA chains per core: enough to hide the FMA latency

PEAK_C = r"""
#include <stdint.h>
#include <omp.h>
typedef float nf_v __attribute__((vector_size(%(bytes)d)));
/* GFLOP/s of `iters` rounds of %(chains)d independent vector FMA chains on
   every thread of the team (distinct starting values: no two chains fold) */
double nf_fma_peak(int64_t iters) {
    double start = omp_get_wtime();
    float sink = 0.0f;
    #pragma omp parallel reduction(+:sink)
    {
        nf_v a[%(chains)d], b, c;
        for (int j = 0; j < %(chains)d; ++j)
            for (int l = 0; l < %(lanes)d; ++l)
                a[j][l] = 1.0f + 0.01f * j + 0.001f * l + omp_get_thread_num();
        for (int l = 0; l < %(lanes)d; ++l) { b[l] = 0.999999f; c[l] = 1e-7f; }
        for (int64_t i = 0; i < iters; ++i)
            for (int j = 0; j < %(chains)d; ++j)
                a[j] = a[j] * b + c;          /* one FMA (-ffp-contract=fast) */
        for (int j = 0; j < %(chains)d; ++j)
            for (int l = 0; l < %(lanes)d; ++l)
                sink += a[j][l];
    }
    double seconds = omp_get_wtime() - start;
    int threads = omp_get_max_threads();
    return sink == 12345.0f ? 0.0 :
        2.0 * %(chains)d * %(lanes)d * (double)iters * threads / seconds / 1e9;
}
"""


def fma_peak(seconds=0.5, rounds=5):
    """The machine's FMA peak, GFLOP/s of float32 on all OpenMP threads: the
    best of `rounds` runs of about `seconds` each.

    >>> fma_peak(0.05, 1) > 1
    True
    """
    from neoflow.toolchain import compile_c
    from neoflow.toolchain.target import target
    t = target()
    source = PEAK_C % {"bytes": t.vector_bytes, "lanes": t.lanes("float32"), "chains": CHAINS}
    fn = compile_c(source).get("nf_fma_peak", [ctypes.c_int64], ctypes.c_double)
    iters = 1 << 16
    while True:                                       # calibrate to about `seconds`
        started = time.perf_counter()
        fn(iters)
        if time.perf_counter() - started > seconds / 4 or iters > 1 << 34:
            break
        iters *= 4
    return max(fn(iters * 4) for _ in range(rounds))


def gemm_rate(side, n=1024, calls=10):
    """GFLOP/s of an n^3 float32 matmul: "torch" (torch.mm) or "neoflow"
    (nf.build of nn.matmul, default schedule); the median of `calls`."""
    import numpy as np
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    if side == "torch":
        import torch
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fn = lambda: torch.mm(ta, tb)                                   # noqa: E731
    else:
        import neoflow as nf
        A, B = nf.placeholder((n, n), name="A"), nf.placeholder((n, n), name="B")
        f = nf.build(nf.nn.matmul(A, B), [A, B], database=False)
        fn = lambda: f(a, b)                                            # noqa: E731
    from neoflow.zoo.solo import time_blocks
    for _ in range(3):
        fn()
    (median_ms,) = time_blocks(fn, calls, 1)
    return 2 * n ** 3 / median_ms / 1e6


def contraction_flops(network, preset="default"):
    """PyTorch's count of the matmul and convolution flops of one training
    step (forward and backward of the loss) of zoo `network`'s twin."""
    import numpy as np
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from neoflow import zoo
    from neoflow.runtime.init import initial_value
    models = zoo.get(network).build_phases(preset)
    total = 0
    for model in models:
        values = {name: initial_value(p, 0) for name, p in model.params.items()}
        twin = model.torch_model(values)
        data = {k: torch.from_numpy(v) for k, v in model.make_batch(np.random.default_rng(0)).items()}
        with FlopCounterMode(display=False) as counter:
            twin(data).backward()
        total += counter.get_total_flops()
    return total


def neoflow_flops(network, preset="default"):
    """NeoFlow's count of its own kernels' flops for one training step (every
    arithmetic operation, nf.flops's rule; SGD's update included)."""
    from neoflow import zoo
    from neoflow.graph.ops_class import own_flops
    from neoflow.graph.plan import plan_kernels
    from neoflow.graph.training import training_graph
    from neoflow.optim import SGD
    total = 0
    for model in zoo.get(network).build_phases(preset):
        g = training_graph(model.loss, SGD(lr=0.01, momentum=0.9))
        kernels, _ = plan_kernels(g.outputs, g.leaves)
        total += sum(own_flops(t) for k in kernels for t in k.stages)
    return total


def step_times(networks, preset, steps, blocks, compile_):
    """{network: {framework: median ms}}, each framework alone in its own process."""
    from neoflow.zoo.solo import run_alone
    frameworks = ("neoflow", "eager") + (("compile",) if compile_ else ())
    out = {}
    for name in networks:
        out[name] = {fw: run_alone(name, fw, preset, steps=steps, blocks=blocks)["median_ms"]
                     for fw in frameworks}
        print(f"[ceiling] {name}: " + ", ".join(f"{fw} {ms:.2f} ms" for fw, ms in out[name].items()),
              file=sys.stderr, flush=True)
    return out


def from_bench(path, networks):
    """{network: {framework: ms}} from a `neoflow bench` networks.json."""
    rows = {r["network"]: r for r in json.loads(Path(path).read_text())["rows"]}
    missing = [n for n in networks if n not in rows]
    if missing:
        raise SystemExit(f"{path} has no row for {', '.join(missing)}")
    return {n: {"neoflow": rows[n]["nf_ms"], "eager": rows[n]["eager_ms"],
                **({"compile": rows[n]["compile_ms"]} if rows[n].get("compile_ms") else {})}
            for n in networks}


def report(times, flops, peak, gemm):
    """The markdown table and the geometric means."""
    from neoflow.zoo.report import geomean
    lines = ["| network | NeoFlow ms | eager ms | compile ms | x eager | GFLOP (torch's "
             "contractions; NeoFlow's kernels) | floor ms at peak (the smaller) | ceiling x eager | "
             "ceiling x compile | NeoFlow's x eager / ceiling |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ceil_e, ceil_c, ours = [], [], []
    for name, t in times.items():
        torch_count, own = flops[name]
        floor = min(torch_count, own) / (peak * 1e9) * 1e3
        ce = t["eager"] / floor
        cc = t["compile"] / floor if "compile" in t else None
        x = t["eager"] / t["neoflow"]
        ceil_e.append(ce)
        ours.append(x)
        if cc is not None:
            ceil_c.append(cc)
        lines.append(f"| {name} | {t['neoflow']:.2f} | {t['eager']:.2f} | "
                     f"{t.get('compile', float('nan')):.2f} | {x:.2f}x | "
                     f"{torch_count / 1e9:.3f}; {own / 1e9:.3f} | {floor:.2f} | {ce:.2f}x | "
                     + (f"{cc:.2f}x" if cc is not None else "n/a") + f" | {x / ce:.0%} |")
    lines += ["",
              f"* geometric mean: NeoFlow {geomean(ours):.2f}x eager; ceiling "
              f"{geomean(ceil_e):.2f}x eager"
              + (f", {geomean(ceil_c):.2f}x torch.compile" if len(ceil_c) == len(times) else ""),
              f"* FMA peak {peak:.1f} GFLOP/s (float32, all threads); best GEMM 1024^3: "
              + ", ".join(f"{k} {v:.1f}" for k, v in gemm.items()) + " GFLOP/s"]
    return "\n".join(lines), {"ceiling_eager": geomean(ceil_e),
                              "ceiling_compile": geomean(ceil_c) if len(ceil_c) == len(times)
                              else None, "neoflow_eager": geomean(ours)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", nargs="+", default=list(NOVEL))
    ap.add_argument("--from", dest="source", help="a `neoflow bench` networks.json to take "
                    "the step times from (else each framework is timed alone here)")
    ap.add_argument("--preset", default="default", choices=("default", "small"))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--side", choices=("torch", "neoflow"), help=argparse.SUPPRESS)
    ap.add_argument("--smoke", action="store_true", help="lltm at the small preset, seconds")
    args = ap.parse_args(argv)
    if args.side:                       # one GEMM side, alone in this process
        print(json.dumps({"gflops": gemm_rate(args.side)}))
        return
    if args.smoke:
        args.networks, args.preset, args.steps, args.blocks = ["lltm"], "small", 2, 2
        args.no_compile = True
    from neoflow.zoo.solo import run_side
    peak = fma_peak(0.05, 1) if args.smoke else fma_peak()
    gemm = {} if args.smoke else {side: run_side(__file__, side)["gflops"]
                                  for side in ("torch", "neoflow")}
    times = from_bench(args.source, args.networks) if args.source else step_times(
        args.networks, args.preset, args.steps, args.blocks, not args.no_compile)
    flops = {n: (contraction_flops(n, args.preset), neoflow_flops(n, args.preset))
             for n in args.networks}
    table, means = report(times, flops, peak, gemm)
    print(table)
    return means


if __name__ == "__main__":
    main()
