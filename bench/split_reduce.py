"""Split sums (schedule/split_reduce.py): for every kernel of a zoo network's
training step (or of the LSTM weight gradients of bench/scan.py) whose default
schedule splits a reduction into partial sums, the ms of one call split and
unsplit -- each compiled alone on random inputs, the two timed in alternation
(A B A B ...) in one process, medians.

    python bench/split_reduce.py --networks yolo lenet
    python bench/split_reduce.py --lstm 64 256        # dW[4H, I] over T x B, B=32 I=H=128
    python bench/split_reduce.py --steps yolo lenet   # whole training steps, ms/step
    python bench/split_reduce.py --smoke              # tiny sizes, one round (tests)

--steps builds two nf.Trainers per network in this process, one with the
default schedules and one with the default rule's splits turned off
(split_reduce.default_splits_off), then times blocks of steps of each in
alternation: medians of the blocks' ms/step, and the min..max.
"""
import argparse
import statistics
import time

import numpy as np


def lstm_grad(T, B=32, I=128, H=128):
    """The weight gradients dW = sum over (t, b) of dgates[t, b, 4H] x[t, b, I] (and of h)."""
    import neoflow as nf
    dg = nf.placeholder((T, B, 4 * H), name="dgates")
    x = nf.placeholder((T, B, I), name="x")
    t, b = nf.reduce_axis(T, name="t"), nf.reduce_axis(B, name="b")
    dW = nf.compute((4 * H, I), lambda j, k: nf.sum(dg[t, b, j] * x[t, b, k], axis=[t, b]),
                    name=f"dW T={T}")
    return [dW], [dg, x]


def network_step(name, preset):
    from neoflow.zoo.workloads import zoo_step
    [w] = zoo_step(name, preset)
    return w.outputs, w.inputs


def split_kernels(outputs, inputs):
    """(kernel, default config) for each kernel whose default config splits."""
    from neoflow.graph.plan import plan_kernels
    from neoflow.schedule import default_config
    kernels, _ = plan_kernels(outputs, inputs)
    out = []
    for k in kernels:
        config = default_config(k)
        if any(sc.split for sc in config.stages):
            out.append((k, config))
    return out


def ab(kernel, config, rounds):
    """(ms split, ms unsplit): medians of `rounds` alternated calls of `kernel`
    under `config` and under the default made without the rule."""
    from neoflow.runtime.native import compile_kernels
    from neoflow.te import dtype as dt
    from neoflow.schedule import default_config
    from neoflow.schedule.split_reduce import default_splits_off
    with default_splits_off():           # the default as it would be without the rule
        plain = default_config(kernel)
    rng = np.random.default_rng(0)
    args = [np.full(t.shape, 1, np.int64) if t.dtype == dt.INDEX else
            rng.normal(size=t.shape).astype(dt.to_numpy(t.dtype)) for t in kernel.inputs]
    fns = [compile_kernels([kernel], list(kernel.inputs), list(kernel.outputs),
                           list(kernel.outputs), [c]) for c in (config, plain)]
    times = [[], []]
    for fn in fns:
        fn(*args)
    for _ in range(rounds):
        for fn, ts in zip(fns, times):
            t0 = time.perf_counter()
            fn(*args)
            ts.append(time.perf_counter() - t0)
    return tuple(statistics.median(ts) * 1e3 for ts in times)


def report(label, outputs, inputs, rounds, only=None):
    rows = split_kernels(outputs, inputs)
    print(f"{label}: {len(rows)} kernel(s) split by default")
    if only:                         # one of each kind of kernel (by its stages' names)
        rows = list({"+".join(t.name for t in k.stages): (k, c) for k, c in rows}.values())
    total = [0.0, 0.0]
    for k, config in rows:
        split, plain = ab(k, config, rounds)
        total[0] += split
        total[1] += plain
        parts = [sc.split for sc in config.stages if sc.split]
        names = "+".join(t.name for t in k.stages)
        print(f"  {names[:44]:44s} parts {str(parts):8s} split {split:9.3f} ms  "
              f"unsplit {plain:9.3f} ms  x{plain / split:5.2f}")
    if rows:
        print(f"  {'total':44s} {'':14s} split {total[0]:9.3f} ms  unsplit {total[1]:9.3f} ms")


def steps_ab(name, preset, steps, blocks):
    """{"split": (median, min, max) ms/step, "unsplit": (...)}, alternated blocks."""
    import neoflow as nf
    from neoflow.schedule import split_reduce
    from neoflow.zoo import get
    from neoflow.zoo.benchmark import LR, MOMENTUM
    net = get(name)
    model = net.build(preset)
    batch = model.make_batch(np.random.default_rng(0))

    def trainer():                  # the zoo benchmark's optimizer (a stable lr)
        return nf.Trainer(model.loss, nf.optim.SGD(lr=net.lr or LR, momentum=MOMENTUM))
    trainers = {"split": trainer()}
    with split_reduce.default_splits_off():
        trainers["unsplit"] = trainer()
    from neoflow.schedule import default_config
    counts = {"split": sum(bool(sc.split) for k in trainers["split"].kernels
                           for sc in default_config(k).stages), "unsplit": 0}
    times = {k: [] for k in trainers}
    try:
        for t in trainers.values():
            t.step(batch)
        for _ in range(blocks):
            for k, t in trainers.items():
                t0 = time.perf_counter()
                for _ in range(steps):
                    t.step(batch)
                times[k].append((time.perf_counter() - t0) / steps * 1e3)
    finally:
        for t in trainers.values():
            t.close()
    return {k: (statistics.median(v), min(v), max(v), counts[k]) for k, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--networks", nargs="*", default=[])
    ap.add_argument("--lstm", nargs="*", type=int, default=[])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", nargs="*", default=[], metavar="NETWORK")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--distinct", action="store_true",
                    help="time only the last kernel of each name (a quicker look)")
    args = ap.parse_args(argv)
    if args.smoke:
        report("LSTM dW T=128 B=32 I=H=32 (smoke)", *lstm_grad(128, I=32, H=32), rounds=1)
        report("lenet (small)", *network_step("lenet", "small"), rounds=1)
        _print_steps("lenet", steps_ab("lenet", "small", 1, 1))
        return
    for T in args.lstm:
        report(f"LSTM dW T={T} B=32 I=H=128", *lstm_grad(T), rounds=args.rounds)
    for name in args.networks:
        report(f"{name} training step", *network_step(name, "default"), rounds=args.rounds,
               only=args.distinct)
    for name in args.steps:
        _print_steps(name, steps_ab(name, "default", 3, args.blocks))


def _print_steps(name, result):
    for k, (med, lo, hi, count) in result.items():
        print(f"{name} step {k:8s} {med:9.2f} ms/step ({lo:.2f}..{hi:.2f}); "
              f"{count} split stage(s)")


if __name__ == "__main__":
    main()
