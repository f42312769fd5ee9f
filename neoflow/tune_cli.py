"""tune_cli: what `neoflow tune` and `neoflow db` do (neoflow/cli.py
parses the arguments and calls these).

Hands on: text on stdout (tables, or JSON for `db export`).
"""
import json
import sys
import time

from .tune.database import Database, as_json, default_path
from .tune.hardware import detect
from .zoo.workloads import WORKLOADS, get


def add_tune_arguments(parser):
    """The options of `neoflow tune` on an argparse parser."""
    parser.add_argument("workload", help=f"{', '.join(WORKLOADS)}, with sizes after a colon "
                        "(matmul:2048,1024,1024), or zoo:<network>[:small]")
    parser.add_argument("--trials", type=int, default=64, help="trials per computation "
                        "(default 64)")
    parser.add_argument("--seconds", type=float, default=None, help="time budget per "
                        "computation")
    parser.add_argument("--database", default=None, help=f"tuning database (default "
                        f"{default_path()})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds one candidate "
                        "may run")
    parser.add_argument("--no-prune", action="store_true", help="measure schedules the "
                        "hardware model would drop")


def run_tune(args):
    """Tune every computation of the workload; print one line per kernel.

    >>> run_tune(parser.parse_args(["tune", "matmul:256,256,256"]))    # doctest: +SKIP
    """
    from .tune.tuner import tune
    print(f"hardware: {detect().describe()}")
    for w in get(args.workload):
        started = time.monotonic()
        found = tune(w.outputs, w.inputs, trials=args.trials, seconds=args.seconds,
                     database=args.database, seed=args.seed, timeout=args.timeout,
                     prune=not args.no_prune)
        records = found if isinstance(found, tuple) else (found,)
        print(f"{w.label}: {len(records)} kernel(s) in {time.monotonic() - started:.0f} s")
        _table(records)


def add_db_arguments(parser):
    """The options of `neoflow db` on an argparse parser."""
    parser.add_argument("action", nargs="?", choices=("list", "export"), default="list",
                        help="list the best records (default) or export them as JSON")
    parser.add_argument("--database", default=None, help=f"tuning database (default "
                        f"{default_path()})")
    parser.add_argument("--all-hardware", action="store_true",
                        help="include records of other machines")
    parser.add_argument("--trials", action="store_true",
                        help="export: include every trial of each record")
    parser.add_argument("-o", "--output", default=None, help="export: write to this file")


def run_db(args):
    """List or export the records of a tuning database.

    >>> run_db(parser.parse_args(["db", "export"]))          # doctest: +SKIP
    """
    with Database(args.database) as db:
        records = db.records(None if args.all_hardware else detect().fingerprint)
        if args.action == "list":
            print(f"{db.path}: {len(records)} record(s)"
                  f"{'' if args.all_hardware else ' for this machine'}")
            _table(records)
            return
        text = as_json(records)
        if args.trials:
            data = json.loads(text)
            for entry in data:
                entry["trials_run"] = [
                    {"config": json.loads(c), "status": s, "median_s": t, "detail": d}
                    for c, s, t, d in db.trials(entry["kernel"], entry["target"],
                                                entry["hardware"])]
            text = json.dumps(data, indent=2, sort_keys=True)
    if args.output:
        with open(args.output, "w") as out:
            out.write(text + "\n")
        print(f"wrote {len(records)} record(s) to {args.output}", file=sys.stderr)
    else:
        print(text)


def _table(records):
    if not records:
        return
    print(f"  {'kernel':<14} {'name':<28} {'median ms':>10} {'GFLOP/s':>9} {'trials':>7}")
    for r in records:
        print(f"  {r.kernel[:12]:<14} {r.name[:28]:<28} {r.median_s * 1e3:>10.3f} "
              f"{r.gflops:>9.2f} {r.trials:>7}")
