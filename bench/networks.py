"""The NeoFlow benchmark: the zoo's networks (neoflow.zoo) trained by
nf.Trainer against their PyTorch twins, eager and under torch.compile.

The same as `neoflow bench` (neoflow.zoo.benchmark measures, neoflow.zoo.report
writes; docs/zoo.md says what each column means), with the report written to
bench/results/ (not committed) by default: `networks.md` (the markdown table
with geometric-mean speed-ups for the novel networks and for the CNNs),
`networks.png` (speed-up per network against eager and against
torch.compile) and `networks.json`.

    python bench/networks.py                      # the quick set (under 10 minutes here)
    python bench/networks.py --networks all --steps 10 --out bench/results
    python bench/networks.py --networks lltm capsnet --preset small
"""
import argparse
from pathlib import Path

from neoflow.zoo.commands import add_bench_arguments, run_bench_command

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def main(argv=None):
    """Command line: parse `argv`, run the benchmark, print the table; returns the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_bench_arguments(parser, DEFAULT_OUT)
    return run_bench_command(parser.parse_args(argv))


if __name__ == "__main__":
    main()
