"""tune_cli: what `neoflow tune` and `neoflow db` do (neoflow/cli.py
parses the arguments and calls these).

Hands on: text on stdout (tables, or JSON for `db export` and `db merge`).
"""
import sys
import time

from .tune import exchange
from .tune.database import Database, default_path
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
    parser.add_argument("--ray", metavar="ADDRESS", default=None, help="measure on every node "
                        "of a Ray cluster: 'auto' (the one running here), 'local' (a private "
                        "one on 127.0.0.1) or host:port; records are keyed by each node's "
                        "hardware (needs: pip install 'neoflow[ray]')")
    parser.add_argument("--threads", type=int, default=None, help="with --ray: OpenMP "
                        "threads every node times kernels with (default: each node's cores)")


def run_tune(args):
    """Tune every computation of the workload; print one line per kernel.

    >>> run_tune(parser.parse_args(["tune", "matmul:256,256,256"]))    # doctest: +SKIP
    """
    from .tune.tuner import tune
    runner = None
    if args.ray is not None:
        from .tune.ray_runner import RayRunner
        runner = RayRunner(args.ray, threads=args.threads)
    print(f"hardware: {detect().describe()}")
    try:
        for w in get(args.workload):
            started = time.monotonic()
            found = tune(w.outputs, w.inputs, trials=args.trials, seconds=args.seconds,
                         database=args.database, seed=args.seed, timeout=args.timeout,
                         prune=not args.no_prune, runner=runner)
            records = found if isinstance(found, tuple) else (found,)
            print(f"{w.label}: {len(records)} kernel(s) in {time.monotonic() - started:.0f} s")
            _table(records)
    finally:
        if runner is not None:
            runner.close()
    if runner is not None:
        with Database(args.database) as db:
            print("records of every hardware (neoflow db list --all-hardware):")
            _table(db.records())


def add_db_arguments(parser):
    """The options of `neoflow db` on an argparse parser."""
    parser.add_argument("action", nargs="?", choices=("list", "export", "import", "merge"),
                        default="list", help="list the best records (default); export them "
                        "as JSON; import JSON files into the database; merge JSON files into "
                        "one (import and merge keep the fastest record per kernel, target and "
                        "hardware, and every trial)")
    parser.add_argument("files", nargs="*", help="import, merge: JSON files written by export")
    parser.add_argument("--database", default=None, help=f"tuning database (default "
                        f"{default_path()})")
    parser.add_argument("--all-hardware", action="store_true",
                        help="list, export: include records of other machines")
    parser.add_argument("--trials", action="store_true",
                        help="export: include every trial of each record")
    parser.add_argument("-o", "--output", default=None, help="export, merge: write to this file")


def run_db(args):
    """List, export, import or merge tuning records.

    >>> run_db(parser.parse_args(["db", "export"]))          # doctest: +SKIP
    """
    if args.action in ("list", "export") and args.files:
        raise exchange.ExchangeError(f"db {args.action} takes no files (got {args.files})")
    if args.action in ("import", "merge") and not args.files:
        raise exchange.ExchangeError(f"db {args.action}: give the JSON file(s) to read")
    if args.action == "merge":
        _write(args, exchange.merge(*[exchange.load(f) for f in args.files]))
        return
    loaded = [exchange.load(f) for f in args.files]      # all checked before any is imported
    with Database(args.database) as db:
        if args.action == "import":
            for path, entries in zip(args.files, loaded):
                n, kept, added = exchange.import_entries(db, entries)
                print(f"{path}: {n} record(s), {kept} now the best of their key, {added} "
                      f"trial(s) added to {db.path}")
            return
        records = db.records(None if args.all_hardware else detect().fingerprint)
        if args.action == "list":
            print(f"{db.path}: {len(records)} record(s)"
                  f"{'' if args.all_hardware else ' for this machine'}")
            _table(records)
            return
        entries = exchange.export_entries(
            db, None if args.all_hardware else detect().fingerprint, trials=args.trials)
    _write(args, entries)


def _write(args, entries):
    text = exchange.dumps(entries)
    if args.output:
        with open(args.output, "w") as out:
            out.write(text + "\n")
        print(f"wrote {len(entries)} record(s) to {args.output}", file=sys.stderr)
    else:
        print(text)


def _table(records):
    if not records:
        return
    print(f"  {'kernel':<14} {'name':<28} {'median ms':>10} {'GFLOP/s':>9} {'trials':>7}")
    for r in records:
        print(f"  {r.kernel[:12]:<14} {r.name[:28]:<28} {r.median_s * 1e3:>10.3f} "
              f"{r.gflops:>9.2f} {r.trials:>7}")
