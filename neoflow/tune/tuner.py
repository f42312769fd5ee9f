"""tune/tuner: `nf.tune` -- search, measure and record the best schedule of
every kernel of a computation.

Per kernel: the trials already in the database train the cost model and are
not measured again; the default schedule is measured first (it is the
baseline and, in the worker, the reference every candidate is checked
against); then batches proposed by tune/search.py are measured by
tune/measure.py until the trial or time budget is spent. Every trial goes
into the database; the best schedule replaces the stored one as soon as
a batch finds one faster. At the end a new best is measured again against
the default schedule, in turn (CONFIRM_ROUNDS): unless it wins by MIN_GAIN,
the default is stored as the best instead -- one lucky measurement among
many candidates must not replace a default schedule that is as fast.
A computation of several kernels shares the budget among them in
proportion to their estimated time (each gets at least a few trials).

Hands on: `Record`s (tune/database.py).
"""
import statistics
import time

from ..errors import NeoFlowError
from ..schedule import Config, ConfigError, default_config, validate
from ..te.flops import flops
from .database import Record, open_database
from .estimate import kernel_estimate
from .hardware import detect
from .measure import Measurer
from .progress import Progress
from .search import Search

BATCH = 8
MIN_TRIALS = 4        # per kernel, when a budget is shared
CONFIRM_ROUNDS = 3    # head-to-head measurements of a new best against the default schedule
MIN_GAIN = 0.03       # the fraction of the default's time a new best must save to be kept


class TuneError(NeoFlowError):
    """Tuning cannot start as asked (bad budget, unknown target)."""


def tune(outputs, inputs, target="cpu", trials=200, seconds=None, database=None, *,
         seed=0, timeout=10.0, prune=True, progress=True, source_hook=None):
    """Search schedules for the kernels that compute `outputs` from `inputs`,
    keep every trial and the best schedules in the tuning database, and
    return the best Record (a tuple of Records, in kernel order, when the
    outputs make several kernels).

    `trials` and `seconds` bound the search (both when both are given);
    `database` is a path or a Database (default: the per-user one);
    `seed` makes the search repeatable; `timeout` bounds one candidate's
    run; `prune=False` measures schedules the hardware model would drop;
    `source_hook(config, c_source) -> c_source` rewrites candidates before
    they are compiled (a test hook: inject a crash, a hang, a wrong result).
    `nf.build` of the same computation then uses the schedules found.
    `target="cuda"` measures the `trials` GPU schedules the hardware model
    ranks best (tune/gpu_tune.py; `seconds` and the other knobs are CPU-only).

    >>> A = nf.placeholder((256, 256), name="A"); B = nf.placeholder((256, 256), name="B")
    >>> k = nf.reduce_axis(256, name="k")
    >>> C = nf.compute((256, 256), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k))
    >>> rec = nf.tune(C, [A, B], trials=16)                  # doctest: +SKIP
    >>> rec.config, rec.median_s, rec.trials                 # doctest: +SKIP
    """
    from ..graph.plan import plan_kernels
    if target not in ("cpu", "cuda"):
        raise TuneError(f"target {target!r}: expected 'cpu' or 'cuda'")
    if trials is not None and (not isinstance(trials, int) or trials < 1):
        raise TuneError(f"trials must be a positive int or None, got {trials!r}")
    if seconds is not None and not seconds > 0:
        raise TuneError(f"seconds must be positive or None, got {seconds!r}")
    if trials is None and seconds is None:
        raise TuneError("give a budget: trials, seconds or both")
    kernels, _ = plan_kernels(outputs, inputs)
    db = open_database(database)
    try:
        if target == "cuda":    # tune/gpu_tune.py: the hardware model's best, measured
            from .gpu_tune import tune_gpu_kernel
            recs = [tune_gpu_kernel(k, db, trials=trials or 16, seed=seed) for k in kernels]
            return recs[0] if len(recs) == 1 else tuple(recs)
        return _tune_all(kernels, db, target, trials, seconds, seed, timeout, prune, progress,
                         source_hook)
    finally:
        if db is not database:     # opened here
            db.close()


def _tune_all(kernels, db, target, trials, seconds, seed, timeout, prune, progress,
              source_hook):
    hw = detect()
    unique = list({k.key: k for k in kernels}.values())
    share = estimated_shares(unique, hw)
    allotted = None if trials is None else split_trials(trials, share)
    found = {}
    started = time.monotonic()
    total = trials if trials is not None else len(unique) * BATCH * 4
    with Progress(total, "tuning", enabled=progress) as bar:
        for n, (kernel, part) in enumerate(zip(unique, share)):
            k_trials = None if trials is None else allotted[n]
            k_seconds = None
            if seconds is not None:
                left = seconds - (time.monotonic() - started)
                rest = sum(share[n:])
                k_seconds = max(0.0, left * part / rest)
            bar.describe(f"tuning {kernel.stages[-1].name} ({n + 1}/{len(unique)})")
            found[kernel.key] = tune_kernel(
                kernel, db=db, target=target, hw=hw, trials=k_trials, seconds=k_seconds,
                seed=seed, timeout=timeout, prune=prune, bar=bar, source_hook=source_hook)
    records = tuple(found[k.key] for k in kernels)
    return records[0] if len(records) == 1 else records


def estimated_shares(kernels, hw):
    """Each kernel's share of their summed time, by the analytic estimate of
    its default schedule (tune/estimate.py).

    >>> estimated_shares([k1, k2], detect())         # doctest: +SKIP
    [0.8, 0.2]
    """
    weights = [max(1.0, sum(e.cycles for e in kernel_estimate(k, default_config(k), hw)))
               for k in kernels]
    return [w / sum(weights) for w in weights]


def split_trials(total, shares):
    """`total` trials shared in proportion to `shares` (largest remainders),
    each at least MIN_TRIALS where the total allows, and at least 1.

    >>> split_trials(20, [0.7, 0.2, 0.1])
    [9, 6, 5]
    """
    n = len(shares)
    floor = min(MIN_TRIALS, total // n)
    rest = total - floor * n
    exact = [rest * s for s in shares]
    out = [floor + int(e) for e in exact]
    by_remainder = sorted(range(n), key=lambda i: int(exact[i]) - exact[i])
    for i in by_remainder[:total - sum(out)]:
        out[i] += 1
    return [max(1, t) for t in out]


def tune_kernel(kernel, *, db, target="cpu", hw=None, trials=64, seconds=None, seed=0,
                timeout=10.0, prune=True, bar=None, source_hook=None, batch=BATCH, jobs=None,
                stop=None, pause=None):
    """Tune one Kernel; returns its best Record (also stored in `db`, as soon
    as it is found). `jobs`: compiles at once (default one per core);
    `stop`: a threading.Event that, when set, drops the batch in flight and
    raises tune.measure.Cancelled (the bests found before stay stored);
    `pause()`, called before each batch, returns when the batch may start
    (the background tuner waits there for an idle core).

    >>> rec = tune_kernel(kernel, db=Database("/tmp/t.sqlite"), trials=16)   # doctest: +SKIP
    """
    hw = hw or detect()
    deadline = None if seconds is None else time.monotonic() + seconds
    search = Search(kernel, hw, seed=seed, prune=prune)
    search.observe(_past_trials(db, kernel, target, hw))
    work = flops(list(kernel.outputs), given=kernel.inputs)
    name = " ".join(t.name for t in kernel.stages)
    best = db.best(kernel.key, target, hw.fingerprint)
    found = False                  # a new best in this call (confirmed at the end)
    done, spent_per_trial = 0, None
    if pause is not None:          # before the measurer compiles the default schedule
        pause()
    with Measurer(kernel, timeout=timeout, seed=seed, source_hook=source_hook, jobs=jobs,
                  stop=stop) as measurer:
        pending = []
        default = default_config(kernel)
        if default.to_json() not in search.seen:
            pending = [default]
        while trials is None or done < trials:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and best is not None and (
                    left <= 0 or spent_per_trial and left < spent_per_trial):
                break                  # (a kernel with no record gets one batch anyway)
            size = batch if trials is None else min(batch, trials - done)
            if left is not None and spent_per_trial:
                size = max(1, min(size, int(left / spent_per_trial)))
            configs = pending + search.propose(size - len(pending))
            pending = []
            if not configs:
                break
            if pause is not None:
                pause()
            t0 = time.monotonic()
            results = measurer.measure(configs)
            spent_per_trial = (time.monotonic() - t0) / len(configs)
            done += len(results)
            db.add_trials(kernel.key, target, hw.fingerprint,
                          [(r.config, r.status, r.median_s, r.detail) for r in results])
            search.observe([(r.config, r.median_s) for r in results])
            improved = False
            for r in results:
                if r.status == "ok" and (best is None or r.median_s < best.median_s):
                    best = Record(kernel.key, target, hw.fingerprint, r.config, r.median_s,
                                  work, 0, name)
                    improved = True
            if improved:
                db.offer(best)
                found = True
            if bar is not None:
                bar.update(len(results), None if best is None else best.gflops,
                           None if deadline is None else deadline - time.monotonic())
        if found and best.config.to_json() != default.to_json():
            best = _confirm(measurer, db, best, default)
    if best is None:
        raise TuneError(f"no schedule of {kernel} could be measured (see the trials in "
                        f"{db.path})")
    return db.offer(best)


def _confirm(measurer, db, best, default):
    """Measure `best` and the `default` schedule CONFIRM_ROUNDS times in turn;
    keep `best` if its median time beats the default's by MIN_GAIN, else
    drop it from `db`. Returns the Record to store: `best`, or the default
    with its confirmed time."""
    times = ([], [])
    for _ in range(CONFIRM_ROUNDS):
        for n, r in enumerate(measurer.measure([best.config, default])):
            if r.status == "ok":
                times[n].append(r.median_s)
    if not times[1]:
        return best
    default_s = statistics.median(times[1])
    if times[0] and statistics.median(times[0]) <= default_s * (1 - MIN_GAIN):
        return best
    db.forget(best.kernel, best.target, best.hardware)
    return Record(best.kernel, best.target, best.hardware, default, default_s, best.flops, 0,
                  best.name)


def _past_trials(db, kernel, target, hw):
    """(Config, seconds or None) of the trials stored for this kernel that
    still fit it (a schedule space may have changed since)."""
    out = []
    for text, status, median_s, _ in db.trials(kernel.key, target, hw.fingerprint):
        try:
            config = Config.from_json(text)
            validate(config, kernel)
        except (ConfigError, ValueError):
            continue
        out.append((config, median_s if status == "ok" else None))
    return out

