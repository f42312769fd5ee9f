"""The `neoflow` command line: `neoflow demo`, `neoflow tune`, `neoflow db`,
`neoflow bench`.

Importing this module (and the modules of the subcommands it parses for)
neither imports torch nor loads a generated library, so a subcommand still
controls OpenMP before it starts (the benchmarks time each framework in a
process of its own, zoo.solo); keep new top-level imports here free of
torch and of building.

Hands on: nothing; each subcommand calls the public API.
"""
import argparse
import sys

from .errors import NeoFlowError
from .tune_cli import add_db_arguments, add_tune_arguments, run_db, run_tune
from .zoo import commands as zoo_commands


def _demo(args):
    from .demo import run_demo
    run_demo(seconds=args.seconds, quick=args.quick, out_dir=args.out)


def main(argv=None):
    """Entry point of the `neoflow` command.

    >>> main(["--help"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(
        prog="neoflow",
        description="NeoFlow: compile novel deep-learning operators written as tensor expressions.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="train a novel network (MI-LSTM) while NeoFlow tunes it "
                                       "(background, ahead, off); compare with PyTorch eager")
    demo.add_argument("--seconds", type=float, default=40.0,
                      help="wall-clock seconds of training per tuning mode (default 40)")
    demo.add_argument("--quick", action="store_true", help="a tiny network (for a smoke test)")
    demo.add_argument("--out", default="neoflow-demo",
                      help="directory for demo.png (default ./neoflow-demo)")
    demo.set_defaults(run=_demo)
    tune = sub.add_parser("tune", help="search fast schedules for a built-in workload and "
                                       "record them in the tuning database")
    add_tune_arguments(tune)
    tune.set_defaults(run=run_tune)
    db = sub.add_parser("db", help="list, export, import or merge tuning records (JSON)")
    add_db_arguments(db)
    db.set_defaults(run=run_db)
    bench = sub.add_parser("bench", help=zoo_commands.HELP,
                           description=zoo_commands.DESCRIPTION)
    zoo_commands.add_bench_arguments(bench)
    bench.set_defaults(run=zoo_commands.run_bench_command)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    try:
        args.run(args)
    except NeoFlowError as e:        # a user's mistake: the message, not a traceback
        parser.exit(2, f"neoflow {args.command}: error: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
