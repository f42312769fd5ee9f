"""Overlapping tuning with training: the wall time to finish N training steps
including every compile and all tuning, per network, for NeoFlow's Trainer
with tuning "background", "ahead" and "off", and for PyTorch eager and
torch.compile (their compile time included).

Each (network, mode) runs in a fresh child process with an empty kernel
cache and tuning database (NEOFLOW_CACHE_DIR in a temp folder), with each
framework's default threading (no OpenMP variable set), all from the same
initial parameters and batches; MI-LSTM and LeNet run at reduced sizes
(SIZES) so that a run takes minutes, not hours, on 2 cores. Every step's
wall-clock time is recorded,
so ms/step can be drawn against time (neoflow.runtime.plot). Writes
`overlap.md` (the table), `overlap.json` and `overlap_<network>.png` to the
output directory.

Step times on this machine swing by 20% and more between processes and
within one, so the final ms/step of two runs says little about the schedules
they ended with. After a network's runs, the schedules each NeoFlow mode
ended with (its run's tuning database) are therefore also timed side by
side: one tuning-off Trainer per mode in one process, stepping in
alternating blocks (compare_final).

    python bench/overlap.py                               # lltm, milstm, lenet
    python bench/overlap.py --networks lltm --steps 2000 --budget 60
    python bench/overlap.py --repeats 3       # medians of 3 runs per mode
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NETWORKS = ("lltm", "milstm", "lenet")
SIZES = {"milstm": dict(n_in=128, hidden=128), "lenet": dict(batch=16)}  # seconds, not minutes
STEPS = {"lltm": 4000, "milstm": 800, "lenet": 1500}                      # per run, by default
NEOFLOW_MODES = ("background", "ahead", "off")
TORCH_MODES = ("eager", "torch.compile")
LR, MOMENTUM = 0.01, 0.9
BATCHES = 4           # distinct batches, used in turn
TAIL = 50             # steps the final ms/step is the median of
BLOCK = 10            # side by side: steps per block, the modes' blocks in turn
MIN_ROUNDS = 30       # side by side: at least this many blocks per mode
MIN_SECONDS = 30.0    # side by side: and at least this long
DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def run_mode(network, mode, steps, preset, budget_s, trials):
    """One run in this process: {"wall_s", "first_step_s", "history": [(s, ms)],
    "final_ms", ...}. Times count from before the Trainer (or the PyTorch
    module) is made."""
    import neoflow as nf
    model, batches = _model(network, preset)
    if mode in TORCH_MODES:
        return _run_torch(model, batches, mode, steps)
    options = nf.TuningOptions(budget_s=budget_s, trials=trials)
    started = time.perf_counter()
    trainer = nf.Trainer(model.loss, optimizer=nf.optim.SGD(lr=LR, momentum=MOMENTUM),
                         tuning=mode, tuning_options=options)
    for n in range(steps):
        trainer.step(batches[n % BATCHES])
    wall = time.perf_counter() - started
    stats = trainer.stats()
    trainer.close()
    history = stats["step_history"]
    return {"wall_s": wall, "first_step_s": stats["time_to_first_step_s"],
            "history": history, "final_ms": _tail_ms(history), "kernels": stats["kernels"],
            "kernels_tuned": stats["kernels_tuned"], "kernels_distinct": stats["kernels_distinct"],
            "swaps": stats["swaps"], "tuning_s": stats["tuning_s"],
            "compile_s": stats["compile_s"], "tuning_errors": stats["tuning_errors"]}


def _model(network, preset):
    """The zoo model at the benchmark's size and its BATCHES batches (seed 0)."""
    from neoflow import zoo
    model = zoo.get(network).build(preset, **SIZES.get(network, {}))
    rng = np.random.default_rng(0)
    return model, [model.make_batch(rng) for _ in range(BATCHES)]


def compare_final(network, databases, preset):
    """ms/step of the schedules each mode's run ended with, side by side.

    `databases` {mode: tuning database of its run}: one Trainer per mode,
    tuning off, so it runs the best schedules that database holds (the
    defaults where it holds none), as the run's last steps did. All step in
    this process, in blocks of BLOCK steps, the modes' blocks in turn (the
    order rotated every round), for MIN_ROUNDS rounds and MIN_SECONDS at
    least; a mode's ms/step is the median over its steps after the first
    round. "retuned": its distinct kernels whose schedule is not the default.
    """
    import neoflow as nf
    from neoflow.schedule import default_config
    from neoflow.tune.database import best_configs
    model, batches = _model(network, preset)
    trainers, retuned = {}, {}
    for mode, path in databases.items():
        trainers[mode] = nf.Trainer(model.loss, tuning="off", database=path,
                                    optimizer=nf.optim.SGD(lr=LR, momentum=MOMENTUM))
        kernels = list({k.key: k for k in trainers[mode].kernels}.values())
        retuned[mode] = sum(c is not None and c.to_json() != default_config(k).to_json()
                            for k, c in zip(kernels, best_configs(kernels, "cpu", path)))
    modes, times = list(trainers), {mode: [] for mode in trainers}
    started, round_ = time.perf_counter(), 0
    while round_ < MIN_ROUNDS or time.perf_counter() - started < MIN_SECONDS:
        for k in range(len(modes)):
            mode = modes[(round_ + k) % len(modes)]
            for n in range(BLOCK):
                t0 = time.perf_counter()
                trainers[mode].step(batches[n % BATCHES])
                times[mode].append(time.perf_counter() - t0)
        round_ += 1
    for trainer in trainers.values():
        trainer.close()
    return {mode: {"ms": statistics.median(times[mode][BLOCK:]) * 1e3,
                   "retuned": retuned[mode], "distinct": len(kernels)} for mode in modes}


def _run_torch(model, batches, mode, steps):
    import torch
    from neoflow.runtime.init import initial_value
    values = {name: initial_value(p, 0) for name, p in model.params.items()}
    data = [{k: torch.from_numpy(v) for k, v in b.items()} for b in batches]
    started = time.perf_counter()
    twin = model.torch_model(values)
    forward = torch.compile(twin, dynamic=False) if mode == "torch.compile" else twin
    opt = torch.optim.SGD(twin.parameters(), lr=LR, momentum=MOMENTUM)
    history = []
    for n in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = forward(data[n % BATCHES])
        loss.backward()
        opt.step()
        loss.item()
        done = time.perf_counter()
        history.append((done - started, (done - t0) * 1e3))
    return {"wall_s": time.perf_counter() - started, "first_step_s": history[0][0],
            "history": history, "final_ms": _tail_ms(history)}


def _tail_ms(history):
    return statistics.median(ms for _, ms in history[-TAIL:])


def run_child(network, mode, args, cache):
    """run_mode in a fresh process whose kernel cache and tuning database
    are in `cache` (a new, empty folder, kept for compare_final)."""
    cache.mkdir(parents=True)
    command = ["--child", network, mode, "--steps", str(steps(network, args)), "--budget",
               str(args.budget), "--trials", str(args.trials)]
    return _child(command, args, cache)


def compare_child(network, databases, args, cache):
    """compare_final in a fresh process (kernel cache in `cache`)."""
    cache.mkdir(parents=True)
    command = ["--compare", network, json.dumps({m: str(p) for m, p in databases.items()})]
    return _child(command, args, cache)


def _child(command, args, cache):
    env = dict(os.environ, NEOFLOW_CACHE_DIR=str(cache))
    done = subprocess.run([sys.executable, __file__, *command, "--preset", args.preset],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr else "failed"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_run(runs):
    """The run with the median wall time (the first error, if any failed),
    with every run's wall time in "walls_s"."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    ranked = sorted(runs, key=lambda r: r["wall_s"])
    return dict(ranked[len(ranked) // 2], walls_s=[r["wall_s"] for r in runs])


def steps(network, args):
    """Training steps of a run of `network`: --steps, else STEPS."""
    return args.steps or STEPS.get(network, 300)


def markdown(results, finals, margins, args):
    """The table (wall time to finish, time to first step, final ms/step in
    the run and side by side) and, per network, background's margins."""
    head = ("network", "steps", "mode", "wall s (all steps)", "wall s of each run",
            "first step s", "final ms/step", "final ms/step side by side",
            "tuned / distinct kernels", "swaps")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for network, modes in results.items():
        final = finals.get(network, {})
        for mode, r in modes.items():
            if "error" in r:
                lines.append(f"| {network} | {steps(network, args)} | {mode} | failed: "
                             f"{r['error'][:80]} |" + " |" * (len(head) - 4))
                continue
            tuned = (f"{r['kernels_tuned']} / {r['kernels_distinct']}"
                     if "kernels_tuned" in r else "")
            side = f"{final[mode]['ms']:.2f}" if "ms" in final.get(mode, {}) else ""
            walls = ", ".join(f"{w:.1f}" for w in r["walls_s"])
            lines.append(f"| {network} | {steps(network, args)} | {mode} | {r['wall_s']:.1f} "
                         f"| {walls} | {r['first_step_s']:.2f} | {r['final_ms']:.2f} | {side} "
                         f"| {tuned} | {r.get('swaps', '')} |")
    lines.append("")
    for network in results:
        lines.extend(_verdict(network, finals.get(network, {}), margins.get(network, [])))
    lines.append("")
    sizes = "; ".join(f"{n}: {', '.join(f'{k}={v}' for k, v in kw.items())}"
                      for n, kw in SIZES.items() if n in results)
    lines.append(f"* SGD (momentum {MOMENTUM}), preset '{args.preset}' (changed: "
                 f"{sizes or 'none'}), default threading; NeoFlow tuning budget {args.budget:g} s, "
                 f"at most {args.trials} trials per kernel, 1 tuner worker; every run starts "
                 "from an empty kernel cache and tuning database; wall time includes all "
                 f"compiling and tuning; {args.repeats} run(s) per mode, modes in turn (the order "
                 "rotated each repeat), the "
                 "run with the median wall time shown (its first step, final ms/step and "
                 f"plot); final ms/step: median of the last {TAIL} steps.")
    lines.append(f"* Side by side: the schedules each mode's median run ended with (its "
                 f"tuning database), one tuning-off Trainer per mode in one process, blocks "
                 f"of {BLOCK} steps in turn, at least {MIN_ROUNDS} rounds and "
                 f"{MIN_SECONDS:g} s; the median step.")
    return "\n".join(lines) + "\n"


def _verdict(network, final, margins):
    """The lines on background against the other NeoFlow modes that ran."""
    out = []
    if margins:
        out.append(f"* {network}: background's wall time minus the better of the other "
                   f"NeoFlow modes', per repeat: "
                   + ", ".join(f"{m:+.1f} s" for m in margins)
                   + f" (median {statistics.median(margins):+.1f} s"
                   + (f"; mean {statistics.mean(margins):+.2f} ± "
                      f"{statistics.stdev(margins) / len(margins) ** 0.5:.2f} s, standard error"
                      if len(margins) > 1 else "") + ")")
    if "error" in final:
        out.append(f"* {network}: side by side failed: {final['error'][:120]}")
    elif "background" in final and len(final) > 1:
        bg = final["background"]
        ratios = ", ".join(f"{bg['ms'] / r['ms']:.3f}x {m}'s" for m, r in final.items()
                           if m != "background")
        counts = ", ".join(f"{m} {r['retuned']}" for m, r in final.items())
        out.append(f"* {network}: side by side, background's final schedules run at {ratios} "
                   f"ms/step (kernels with a non-default schedule: {counts}, of "
                   f"{bg['distinct']})")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="+", default=list(NETWORKS))
    parser.add_argument("--modes", nargs="+", default=list(NEOFLOW_MODES + TORCH_MODES))
    parser.add_argument("--steps", type=int, default=None,
                        help="training steps per run (default: per network, STEPS)")
    parser.add_argument("--preset", default="default", help="zoo size preset")
    parser.add_argument("--budget", type=float, default=45.0, help="tuning seconds")
    parser.add_argument("--trials", type=int, default=16, help="most trials per kernel")
    parser.add_argument("--repeats", type=int, default=1,
                        help="runs per mode (modes in turn, the order rotated each repeat); "
                             "the median run is reported")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", nargs=2, metavar=("NETWORK", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--compare", nargs=2, metavar=("NETWORK", "DATABASES"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_mode(*args.child, args.steps, args.preset, args.budget,
                                  args.trials)))
        return
    if args.compare:
        network, databases = args.compare
        print(json.dumps(compare_final(network, json.loads(databases), args.preset)))
        return
    from neoflow.runtime.plot import plot_step_times
    from neoflow.tune.database import FILENAME
    args.out.mkdir(parents=True, exist_ok=True)
    results, finals, margins = {}, {}, {}
    for network in args.networks:
        with tempfile.TemporaryDirectory(prefix="nf-overlap-") as root:
            tries = run_all(network, args, Path(root))
            results[network] = {mode: median_run(runs) for mode, runs in tries.items()}
            margins[network] = background_margins(tries)
            caches = {m: Path(r.pop("cache")) for m, r in results[network].items()}
            databases = {m: caches[m] / FILENAME for m in NEOFLOW_MODES
                         if m in caches and "error" not in results[network][m]}
            if databases:
                print(f"[overlap] {network}: final schedules side by side ...", flush=True)
                finals[network] = compare_child(network, databases, args, Path(root) / "compare")
        runs = {m: r["history"] for m, r in results[network].items()
                if "error" not in r and m != "eager"}
        eager = results[network].get("eager", {})
        plot_step_times(runs, args.out / f"overlap_{network}.png",
                        lines={"PyTorch eager": eager["final_ms"]} if "final_ms" in eager else None,
                        title=f"{network}: ms/step over wall-clock time "
                              f"({steps(network, args)} steps)")
    (args.out / "overlap.json").write_text(json.dumps(
        {"args": {k: str(v) for k, v in vars(args).items()}, "results": results,
         "side_by_side": finals, "background_margins_s": margins}))
    table = markdown(results, finals, margins, args)
    (args.out / "overlap.md").write_text(table)
    print(table)


def run_all(network, args, root):
    """{mode: [run of each repeat]}: the modes in turn, the order rotated each
    repeat (drift and position effects hit them alike); each run's kernel
    cache and database in its own folder under `root` (its "cache")."""
    tries = {mode: [] for mode in args.modes}
    for n in range(args.repeats):
        turn = n % len(args.modes)
        for mode in args.modes[turn:] + args.modes[:turn]:
            print(f"[overlap] {network} {mode} ({n + 1}/{args.repeats}) ...", flush=True)
            cache = root / f"{mode}-{n}"
            r = dict(run_child(network, mode, args, cache), cache=str(cache))
            tries[mode].append(r)
            print(f"[overlap] {network} {mode}: " + (r["error"] if "error" in r else
                  f"{r['wall_s']:.1f} s, first step {r['first_step_s']:.2f} s, "
                  f"final {r['final_ms']:.2f} ms/step"), flush=True)
    return tries


def background_margins(tries):
    """Per repeat: background's wall time minus the better of off's and
    ahead's (those of them that ran) in the same repeat; negative:
    background finished first. [] without background or both others, or
    when a run failed."""
    others = [m for m in ("off", "ahead") if m in tries]
    runs = [tries[m] for m in ["background"] + others if m in tries]
    if "background" not in tries or not others or any("error" in r for rs in runs for r in rs):
        return []
    return [bg["wall_s"] - min(r["wall_s"] for r in rest)
            for bg, *rest in zip(*runs)]


if __name__ == "__main__":
    main()
