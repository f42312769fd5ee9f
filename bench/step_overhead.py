"""Where a small cell's training step goes (issue 18, item 3).

Per zoo network (SGD with momentum 0.9, nf.Trainer, tuning off), one
training step -- forward, backward, optimizer update:
  * ms/step: trainer.step(batch) (feed checks, scalars, the native step,
    the loss read back) and the native step alone (the executor's program:
    one call of the generated entry); their difference is the Python
    overhead per step;
  * Python calls/step (function calls, builtins included, in one step),
    kernels/step, native calls/step (calls of the step's generated entries,
    counted over steps that are not profiled), OpenMP parallel regions/step
    (calls of libgomp's GOMP_parallel, counted by a small shim preloaded
    into the timing process: a fork and a join each) and worksharing
    loops/step (the kernels' top-level parallel loops, counted in the loop
    IR; each is a parallel region of its own);
  * the roofline: flops / 150 GFLOP/s + bytes / 35 GB/s (flops: each
    kernel's stages, neoflow.graph.ops_class.own_flops; bytes: the
    estimate of neoflow.graph.traffic, as nf.explain prints them).
Each (tree, network) runs in a process of its own with default threading.
`--compare PATH` also runs the neoflow checkout at PATH (e.g. the main
branch) in the same way, alternating the two trees `--rounds` times; the
table gives the median over rounds of each figure, labelled by tree.

    python bench/step_overhead.py                           # lltm sublstm scrnn milstm, default sizes
    python bench/step_overhead.py --compare /work/main --rounds 5
    python bench/step_overhead.py --smoke                   # lltm, small sizes, seconds
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
NETWORKS = ("lltm", "sublstm", "scrnn", "milstm")
PEAK_FLOPS, BANDWIDTH = 150e9, 35e9     # the roofline issue 18 reports against

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
typedef void (*nf_gomp_parallel)(void (*)(void*), void*, unsigned, unsigned);
static int64_t nf_regions;
void GOMP_parallel(void (*fn)(void*), void* data, unsigned threads, unsigned flags) {
    static nf_gomp_parallel real;
    if (!real) {
        void* gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
        real = (nf_gomp_parallel)dlsym(gomp ? gomp : RTLD_NEXT, "GOMP_parallel");
    }
    if (threads != 1)   /* if(0) regions run on the calling thread: no fork */
        __atomic_add_fetch(&nf_regions, 1, __ATOMIC_RELAXED);
    real(fn, data, threads, flags);
}
int64_t nf_parallel_regions(void) { return nf_regions; }
"""


def shim_path():
    """The counting shim's shared library (built once, from the build cache)."""
    from neoflow.toolchain import compile_c
    return str(compile_c(SHIM, openmp=False).path)


def regions_counter():
    """A function returning GOMP_parallel calls so far, or None without the shim."""
    import ctypes
    try:
        fn = ctypes.CDLL(None).nf_parallel_regions
    except AttributeError:
        return None
    fn.restype = ctypes.c_int64
    return fn


def step_figures(network, preset, steps, blocks):
    """The figures of one network in this process (the module comment)."""
    import numpy as np
    import neoflow as nf
    from neoflow import zoo
    from neoflow.graph.ops_class import own_flops
    from neoflow.graph.traffic import step_bytes
    from neoflow.zoo.solo import LR, MOMENTUM, time_blocks
    model = zoo.get(network).build(preset, dtype="float32")
    batch = model.make_batch(np.random.default_rng(0))
    trainer = nf.Trainer(model.loss, nf.optim.SGD(lr=LR, momentum=MOMENTUM), tuning="off",
                         database=False)
    try:
        for _ in range(5):                 # past the profiled steps
            trainer.step(batch)
        program = trainer._executor.program
        calls = [0]
        for attr in ("_entry", "_range"):
            fn = getattr(program, attr, None)
            if fn is not None:
                setattr(program, attr, _counting(fn, calls))
        regions = regions_counter()
        before = regions() if regions else None
        trainer.step(batch)
        counted = {"native_calls": calls[0],
                   "parallel_regions": regions() - before if regions else None,
                   "python_calls": _python_calls(lambda: trainer.step(batch))}
        step_ms = time_blocks(lambda: trainer.step(batch), steps, blocks)
        native_ms = time_blocks(program, steps, blocks)
        kernels = trainer.kernels
        flops = sum(own_flops(t) for k in kernels for t in k.stages)
        moved = step_bytes(kernels)
        funcs = getattr(program, "_program").kernels
        return {"network": network, "kernels": len(kernels), **counted,
                "worksharing_loops": sum(_top_parallel(f.body) for f in funcs),
                "step_ms": statistics.median(step_ms), "native_ms": statistics.median(native_ms),
                "python_ms": statistics.median(step_ms) - statistics.median(native_ms),
                "flops": flops, "bytes": moved,
                "roofline_ms": 1e3 * (flops / PEAK_FLOPS + moved / BANDWIDTH)}
    finally:
        trainer.close()


def _python_calls(fn):
    """Python function calls (and calls of builtins) made while `fn()` runs."""
    count = [0]

    def hook(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0] - 1            # (not the call of setprofile itself)


def _counting(fn, calls):
    def call(*args):
        calls[0] += 1
        return fn(*args)
    return call


def _top_parallel(body):
    """Parallel loops not inside another parallel loop (the loop IR)."""
    from neoflow.schedule.loop_ir import For, nodes
    count, inner = 0, set()
    for n in nodes(body):
        if isinstance(n, For) and n.kind == "parallel":
            if id(n) not in inner:
                count += 1
            inner.update(id(m) for m in nodes(n.body) if isinstance(m, For))
    return count


def run_worker(tree, network, preset, steps, blocks, shim):
    """The figures of `network` from a process running the neoflow at `tree`."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if shim:
        env["LD_PRELOAD"] = " ".join(x for x in (env.get("LD_PRELOAD"), shim) if x)
    command = [sys.executable, str(HERE / "bench" / "step_overhead.py"), "--worker", network,
               "--preset", preset, "--steps", str(steps), "--blocks", str(blocks)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800,
                         cwd=str(tree))
    if out.returncode:
        raise RuntimeError(f"{network} under {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def table(results, trees):
    """Markdown: per network and tree, the median over rounds of each figure."""
    head = ("| network | tree | ms/step | native ms | Python ms | Python calls | kernels | "
            "native calls | parallel regions | worksharing loops | roofline ms | "
            "roofline share |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for network in dict.fromkeys(r["network"] for r in results):
        for tree in trees:
            rows = [r for r in results if r["network"] == network and r["tree"] == tree]
            if not rows:
                continue
            med = {k: statistics.median(r[k] for r in rows)
                   for k in ("step_ms", "native_ms", "python_ms", "roofline_ms")}
            r = rows[0]
            regions = "n/a" if r["parallel_regions"] is None else r["parallel_regions"]
            lines.append(f"| {network} | {tree} | {med['step_ms']:.3f} | {med['native_ms']:.3f} | "
                         f"{med['python_ms']:.3f} | {r['python_calls']} | {r['kernels']} | "
                         f"{r['native_calls']} | "
                         f"{regions} | {r['worksharing_loops']} | {med['roofline_ms']:.3f} | "
                         f"{med['roofline_ms'] / med['step_ms']:.0%} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", nargs="+", default=list(NETWORKS))
    ap.add_argument("--preset", default="default")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--compare", help="another neoflow checkout, run alternately")
    ap.add_argument("--no-shim", action="store_true", help="do not count parallel regions")
    ap.add_argument("--smoke", action="store_true", help="lltm, small sizes, one short round")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(step_figures(args.worker, args.preset, args.steps, args.blocks)))
        return None
    if args.smoke:
        args.networks, args.preset, args.steps, args.blocks, args.rounds = \
            ["lltm"], "small", 3, 2, 1
    trees = [str(HERE)] + ([str(Path(args.compare).resolve())] if args.compare else [])
    shim = None if args.no_shim else shim_path()
    results = []
    for network in args.networks:
        for _ in range(args.rounds):
            for tree in trees:
                row = run_worker(tree, network, args.preset, args.steps, args.blocks, shim)
                results.append(dict(row, tree=tree))
    print(f"loaded: {os.getloadavg()[0]:.1f} (1-min load average, {os.cpu_count()} cores); "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    print(table(results, trees))
    return results


if __name__ == "__main__":
    main()
