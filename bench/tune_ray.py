"""Tuning on Ray against tuning here: trials per minute and the best GFLOP/s
found after a fixed time budget, for this machine's own workers, 1 Ray
node and 2 simulated Ray nodes; and the time one measurement costs through
Ray against a local worker.

The nodes are simulated on this machine (ray.cluster_utils.Cluster: a
head without CPUs, each measuring node num_cpus=1, all on 127.0.0.1, with
one hardware tag, so the two nodes form one class and share the search's
batches). Be honest about what that measures: the nodes share this
machine's cores (2 here) with each other and with the driver's search, so
"2 nodes" shows the fan-out's mechanics and its overhead, not the speed-up
of two real machines; kernels are timed on THREADS threads (default 1)
everywhere so that two nodes do not oversubscribe two cores.

    python bench/tune_ray.py                     # 60 s per setting, matmul 256^3
    python bench/tune_ray.py --seconds 120 --workload matmul:512,512,512
    python bench/tune_ray.py --smoke             # seconds: a check that it runs
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import neoflow as nf  # noqa: E402
from neoflow.graph.plan import plan_kernels  # noqa: E402
from neoflow.schedule import default_config, sample_config  # noqa: E402
from neoflow.tune import Database, tune_kernel  # noqa: E402
from neoflow.tune.hardware import TAG_ENV  # noqa: E402
from neoflow.tune.ray_runner import LOOPBACK as LOCAL  # noqa: E402
from neoflow.tune.ray_runner import (environment, keep_loopback, loopback_cluster,  # noqa: E402
                                     loopback_settings)
from neoflow.tune.runner import LocalRunner  # noqa: E402
from neoflow.zoo.workloads import get  # noqa: E402



class SimulatedCluster:
    """A head without CPUs and `nodes` measuring nodes on this machine."""

    def __init__(self, ray, nodes):
        self.ray = ray
        self.scratch = tempfile.mkdtemp(prefix="nfray-bench-", dir="/tmp")
        self.settings = loopback_settings(self.scratch)
        keep_loopback(ray)
        with environment(self.settings):
            self.cluster = loopback_cluster(self.scratch)
            for _ in range(nodes):
                self.cluster.add_node(num_cpus=1, node_ip_address=LOCAL,
                                      env_vars={TAG_ENV: "bench"})
            ray.init(address=self.cluster.address, _node_ip_address=LOCAL,
                     log_to_driver=False, configure_logging=False)

    def close(self):
        self.ray.shutdown()
        self.cluster.shutdown()


def tune_for(kernel, runner, seconds, threads, db_path):
    """(trials measured, best Record) after `seconds` of tuning `kernel`."""
    with Database(db_path) as db:
        rec = tune_kernel(kernel, db=db, trials=None, seconds=seconds, runner=runner,
                          threads=threads, timeout=5.0)
        return len(db.trials(kernel.key, "cpu", rec.hardware)), rec


def overhead(kernel, runner, threads, configs, rounds):
    """Median seconds per measurement of `configs` (compiled once before)."""
    with runner.session(kernel, timeout=5.0, threads=threads) as session:
        [fp] = list(session.hardware)[:1]
        session.measure({fp: configs})                      # compiles, starts the worker
        per = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            results = session.measure({fp: configs})
            per.append((time.perf_counter() - t0) / len(configs))
            assert all(r.status == "ok" for r in results), [r.detail for r in results]
    return statistics.median(per), min(per), max(per)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="budget per setting")
    parser.add_argument("--workload", default="matmul:256,256,256")
    parser.add_argument("--threads", type=int, default=1, help="OpenMP threads kernels are "
                        "timed with, everywhere (default 1: two nodes share two cores)")
    parser.add_argument("--rounds", type=int, default=5, help="overhead: rounds of the batch")
    parser.add_argument("--smoke", action="store_true", help="tiny budget and workload")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.smoke:
        args.seconds, args.workload, args.rounds = 4.0, "matmul:32,32,32", 1
    import ray
    [w] = get(args.workload)
    kernel = plan_kernels(w.outputs, w.inputs)[0][0]
    out = {"workload": args.workload, "seconds": args.seconds, "threads": args.threads,
           "cores": os.cpu_count(), "settings": {}}
    scratch = Path(tempfile.mkdtemp(prefix="nf-bench-db-"))
    rows = [("local workers", 0), ("Ray, 1 node", 1), ("Ray, 2 simulated nodes", 2)]
    for label, nodes in rows:
        cluster = SimulatedCluster(ray, nodes) if nodes else None
        runner = nf.RayRunner(threads=args.threads) if nodes else LocalRunner()
        try:
            started = time.monotonic()
            trials, rec = tune_for(kernel, runner, args.seconds, args.threads,
                                   scratch / f"{nodes}.sqlite")
            spent = time.monotonic() - started
            row = {"trials": trials, "trials_per_minute": trials / spent * 60,
                   "best_gflops": rec.gflops, "wall_s": spent}
            if nodes == 1 or not nodes:
                configs = [default_config(kernel)] + [sample_config(kernel, s)
                                                      for s in range(3 if args.smoke else 7)]
                configs = list({c.to_json(): c for c in configs}.values())
                row["per_measurement_s"] = overhead(kernel, runner, args.threads, configs,
                                                    args.rounds)
        finally:
            runner.close()
            if cluster is not None:
                cluster.close()
        out["settings"][label] = row
    local = out["settings"]["local workers"]["per_measurement_s"][0]
    via_ray = out["settings"]["Ray, 1 node"]["per_measurement_s"][0]
    out["ray_overhead_per_measurement_s"] = via_ray - local
    print(f"{w.label}, {args.seconds:g} s per setting, kernels on {args.threads} thread(s), "
          f"{os.cpu_count()} cores shared by every node and the driver\n")
    print("| setting | trials | trials/min | best GFLOP/s |")
    print("|---|---:|---:|---:|")
    for label, row in out["settings"].items():
        print(f"| {label} | {row['trials']} | {row['trials_per_minute']:.0f} | "
              f"{row['best_gflops']:.2f} |")
    print(f"\none measurement (same compiled candidates, median of {args.rounds} round(s)): "
          f"local worker {local * 1e3:.1f} ms, through Ray {via_ray * 1e3:.1f} ms, overhead "
          f"{(via_ray - local) * 1e3:+.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
