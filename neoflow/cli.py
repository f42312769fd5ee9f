"""The `neoflow` command line: `neoflow demo` and friends.

Hands on: nothing; each subcommand calls the public API.
"""
import argparse
import sys


def _demo(args):
    from .demo import run_demo
    run_demo(quick=args.quick)


def main(argv=None):
    """Entry point of the `neoflow` command.

    >>> main(["--help"])  # doctest: +SKIP
    """
    parser = argparse.ArgumentParser(
        prog="neoflow",
        description="NeoFlow: compile novel deep-learning operators written as tensor expressions.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = sub.add_parser("demo", help="build and run novel operators; compare with NumPy and PyTorch")
    demo.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
    demo.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 0
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
