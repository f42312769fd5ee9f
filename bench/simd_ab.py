"""A/B of NeoFlow's default schedules under two settings of the environment
(by default the SIMD width, NEOFLOW_VECTOR_BYTES=32 against the machine's
own), on bench/ops.py's cases, alternated in one process so that a loaded
machine slows both alike.

Each case is built once per setting (the schedule and the C code read the
target when the kernel is built), each built function checked against the
other's result, then timed in ROUNDS alternating rounds of REPEATS calls;
a figure is the median of the rounds' medians, the rounds' range beside it
(on a loaded machine the best round, the range's top, is the steadier
figure; OMP_NUM_THREADS=1 steadier still: a lost time slice stalls one
thread, not a parallel loop; --cpu-time with it times the calling thread's
CPU time, which a loaded machine's waiting does not count).

    python bench/simd_ab.py --only matmul conv2d
    python bench/simd_ab.py --a NEOFLOW_VECTOR_BYTES=32 --b NEOFLOW_VECTOR_BYTES=64
    python bench/simd_ab.py --smoke   # tiny sizes, 2 rounds of 2 calls: checks the script runs
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops  # noqa: E402  (bench/ops.py: the cases)
from neoflow.tune.ray_runner import environment  # noqa: E402  (os.environ set, then restored)

REPEATS = 10
ROUNDS = 7


def _setting(text):
    """'NAME=VALUE,NAME2=VALUE2' (or '' for the environment as it is) -> dict."""
    return dict(part.split("=", 1) for part in text.split(",") if part)


def _build(make, setting):
    with environment(setting):
        return make()


def _time(fn, args, repeats, clock=time.perf_counter):
    times = []
    for _ in range(repeats):
        start = clock()
        fn(*args)
        times.append(clock() - start)
    return statistics.median(times)


def run(a, b, only, rounds=ROUNDS, repeats=REPEATS, smoke=False, clock=time.perf_counter):
    """[(case, rate A, (low, high), rate B, (low, high), unit)] for settings a, b (dicts)."""
    table = ops.SMOKE if smoke else ops.CASES
    rows = []
    for group in only:
        for make in table.get(group, ()):
            built = [_build(make, s) for s in (a, b)]
            name, work, unit = built[0][0], built[0][5], built[0][6]
            outs = [np.asarray(f(*args)) for _, f, args, *_ in built]
            np.testing.assert_allclose(outs[0], outs[1], rtol=1e-3, atol=1e-3 * float(
                np.abs(outs[0]).max()))
            times = ([], [])
            for _ in range(rounds):
                for side, (_, f, args, *_) in enumerate(built):
                    times[side].append(_time(f, args, repeats, clock))
            rates = [[work / t / 1e9 for t in ts] for ts in times]
            rows.append((name, statistics.median(rates[0]), (min(rates[0]), max(rates[0])),
                         statistics.median(rates[1]), (min(rates[1]), max(rates[1])), unit))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", default="NEOFLOW_VECTOR_BYTES=32",
                        help="setting A: NAME=VALUE[,NAME=VALUE] ('' for none)")
    parser.add_argument("--b", default="", help="setting B (default: the environment as is)")
    parser.add_argument("--only", nargs="+", default=["matmul", "conv2d", "conv3d",
                                                      "conv_transpose2d", "conv_input_grad"],
                        choices=list(ops.CASES))
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time this thread's CPU time (needs OMP_NUM_THREADS=1)")
    args = parser.parse_args(argv)
    if args.cpu_time and os.environ.get("OMP_NUM_THREADS") != "1":
        parser.error("--cpu-time counts the calling thread only: set OMP_NUM_THREADS=1")
    rounds, repeats = (2, 2) if args.smoke else (args.rounds, REPEATS)
    rows = run(_setting(args.a), _setting(args.b), args.only, rounds, repeats, args.smoke,
               time.thread_time if args.cpu_time else time.perf_counter)
    print(f"A: {args.a or '(environment)'}   B: {args.b or '(environment)'}; median of "
          f"{rounds} alternating rounds of {repeats} calls (rounds' range)\n")
    print("| op | A | B | unit | B / A |")
    print("|---|---:|---:|---|---:|")
    for name, ra, (la, ha), rb, (lb, hb), unit in rows:
        print(f"| {name} | {ra:.1f} ({la:.1f}-{ha:.1f}) | {rb:.1f} ({lb:.1f}-{hb:.1f}) | "
              f"{unit} | {rb / ra:.3g} |")
    return rows


if __name__ == "__main__":
    main()
