"""zoo/commands: what `neoflow bench` does (neoflow/cli.py and
bench/networks.py put the options on their parsers with
`add_bench_arguments` and call `run_bench_command`).

Hands on: progress lines, the markdown table and the paths written, on
stdout; the report files in the output directory.
"""
import functools

from . import NETWORKS
from .benchmark import BLOCKS, PARITY_STEPS, QUICK, TUNING, network_names, run_bench

DEFAULT_OUT = "neoflow-bench"
HELP = ("train the zoo's networks with NeoFlow, PyTorch eager and torch.compile; write a "
        "markdown table and a plot of the speed-ups")
DESCRIPTION = (f"Train zoo networks with nf.Trainer, PyTorch eager and torch.compile, each "
               f"timed alone in its own process with default threading; report ms per step, "
               f"speed-ups, geometric means and loss parity over {PARITY_STEPS} steps. Writes networks.md, networks.png and "
               f"networks.json to --out (default ./{DEFAULT_OUT}/). Needs torch and "
               "matplotlib.")


def add_bench_arguments(parser, default_out=DEFAULT_OUT):
    """The options of `neoflow bench` on an argparse parser; `default_out`
    is the output directory when --out is not given.

    >>> add_bench_arguments(argparse.ArgumentParser(), "bench/results")  # doctest: +SKIP
    """
    parser.add_argument("--networks", nargs="+", default=["quick"], metavar="NAME",
                        help=f"zoo networks to run: {', '.join(NETWORKS)}; 'quick' (the "
                        f"default: {' '.join(QUICK)}, under 10 minutes on 2 cores) or "
                        "'all'")
    parser.add_argument("--preset", default="default", choices=("default", "small"),
                        help="the zoo's benchmark sizes (default) or its tiny test sizes")
    parser.add_argument("--steps", type=int, default=10,
                        help="timed steps per block (default 10)")
    parser.add_argument("--blocks", type=int, default=BLOCKS,
                        help=f"blocks of timed steps; the median of the blocks' medians is "
                        f"reported with their range (default {BLOCKS})")
    parser.add_argument("--interleaved", action="store_true",
                        help="also time the frameworks interleaved in one process under "
                        "OMP_WAIT_POLICY=PASSIVE (labelled; it flatters NeoFlow)")
    parser.add_argument("--out", default=str(default_out),
                        help="directory for networks.md (table), networks.png (plot) and "
                        f"networks.json (everything measured); default: {default_out}")
    parser.add_argument("--no-compile", action="store_true",
                        help="skip torch.compile (its compiles take most of a default run)")
    parser.add_argument("--tuning", default="off", choices=TUNING,
                        help="nf.Trainer's tuning mode (default off: the database's "
                        "schedules, else defaults)")


def run_bench_command(args):
    """Run the benchmark with progress per network, print the table and the
    paths written; returns the report.

    >>> run_bench_command(parser.parse_args(["bench", "--networks", "lltm"]))  # doctest: +SKIP
    """
    report = run_bench(network_names(args.networks), args.steps, args.out, args.preset,
                       not args.no_compile, args.tuning, log=functools.partial(print, flush=True),
                       blocks=args.blocks, interleaved=args.interleaved)
    print(report["markdown"])
    print("written:", ", ".join(report["files"].values()))
    return report
