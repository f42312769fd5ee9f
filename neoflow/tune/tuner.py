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
from .progress import Progress
from .runner import LocalRunner, Runner
from .search import Search

BATCH = 8
MIN_TRIALS = 4        # per kernel, when a budget is shared
CONFIRM_ROUNDS = 3    # head-to-head measurements of a new best against the default schedule
MIN_GAIN = 0.03       # the fraction of the default's time a new best must save to be kept


class TuneError(NeoFlowError):
    """Tuning cannot start as asked (bad budget, unknown target)."""


def tune(outputs, inputs, target="cpu", trials=200, seconds=None, database=None, *,
         seed=0, timeout=10.0, prune=True, progress=True, source_hook=None, runner=None):
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
    `runner`: where candidates are measured -- None (this machine) or an
    nf.RayRunner (every node of a Ray cluster, each on its own hardware and
    under its own fingerprint; the Record returned is this machine's if it
    measured, else the first hardware class's: see docs/tuning.md).
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
    if runner is not None and not isinstance(runner, Runner):
        raise TuneError(f"runner must be None or a runner such as nf.RayRunner(address), got "
                        f"{type(runner).__name__}")
    kernels, _ = plan_kernels(outputs, inputs)
    db = open_database(database)
    try:
        if target == "cuda":    # tune/gpu_tune.py: the hardware model's best, measured
            from .gpu_tune import tune_gpu_kernel
            recs = [tune_gpu_kernel(k, db, trials=trials or 16, seed=seed) for k in kernels]
            return recs[0] if len(recs) == 1 else tuple(recs)
        return _tune_all(kernels, db, target, trials, seconds, seed, timeout, prune, progress,
                         source_hook, runner)
    finally:
        if db is not database:     # opened here
            db.close()


def _tune_all(kernels, db, target, trials, seconds, seed, timeout, prune, progress,
              source_hook, runner):
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
                seed=seed, timeout=timeout, prune=prune, bar=bar, source_hook=source_hook,
                runner=runner)
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
                stop=None, pause=None, runner=None, only=None, threads=None):
    """Tune one Kernel; returns its best Record (also stored in `db`, as soon
    as it is found). `jobs`: compiles at once (default one per core);
    `stop`: a threading.Event that, when set, drops the batch in flight and
    raises tune.measure.Cancelled (the bests found before stay stored);
    `pause()`, called before each batch, returns when the batch may start
    (the background tuner waits there for an idle core); `runner`: where
    candidates are measured (default: LocalRunner(hw), this machine);
    `threads`: OpenMP threads to time kernels with where the runner does
    not fix them (default: the runner's choice).

    Each hardware class the runner's session offers is tuned with its own
    search and budget, in lock-step batches (`batch` per machine of the
    class: its machines share them), its trials and best stored
    under its own fingerprint; `only` (a fingerprint) measures on that
    class alone. The Record returned is that of `only`, else of `hw` (this
    machine) when it measured, else of the first class.

    >>> rec = tune_kernel(kernel, db=Database("/tmp/t.sqlite"), trials=16)   # doctest: +SKIP
    """
    hw = hw or detect()
    runner = runner or LocalRunner(hw)
    deadline = None if seconds is None else time.monotonic() + seconds
    info = _KernelInfo(kernel, db, target, seed, prune)
    if pause is not None:          # before the measurer compiles the default schedule
        pause()
    with runner.session(kernel, timeout=timeout, seed=seed, source_hook=source_hook, jobs=jobs,
                        stop=stop, hardware=only, threads=threads) as session:
        lanes = {fp: _Lane(info, node_hw, fp) for fp, node_hw in session.hardware.items()}
        spent_per_trial = None
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            sizes = {}
            for fp, lane in lanes.items():
                size = lane.wanted(trials, batch * session.width(fp), left, spent_per_trial)
                if size and fp in session.hardware:
                    sizes[fp] = size
            batches = {fp: lanes[fp].propose(size) for fp, size in sizes.items()}
            batches = {fp: configs for fp, configs in batches.items() if configs}
            if not batches:
                break
            if pause is not None:
                pause()
            t0 = time.monotonic()
            results = session.measure(batches)
            spent_per_trial = (time.monotonic() - t0) / max(len(c) for c in batches.values())
            for fp, configs in batches.items():
                lanes[fp].done += len(configs)
            for fp, group in _by_hardware(results).items():
                if fp not in lanes:         # a lost node's batch measured elsewhere
                    lanes[fp] = _Lane(info, session.hardware.get(fp) or hw, fp)
                lanes[fp].record(group)
            if bar is not None:
                best = _pick(lanes, only or hw.fingerprint)
                bar.update(len(results), None if best is None or best.best is None
                           else best.best.gflops,
                           None if deadline is None else deadline - time.monotonic())
        for fp, lane in lanes.items():
            if lane.found and lane.best.config.to_json() != lane.default.to_json():
                lane.best = _confirm(session, fp, db, lane.best, lane.default)
    lane = _pick(lanes, only or hw.fingerprint)
    if lane is None or lane.best is None:
        raise TuneError(f"no schedule of {kernel} could be measured (see the trials in "
                        f"{db.path})")
    for other in lanes.values():
        if other is not lane and other.best is not None:
            db.offer(other.best)
    return db.offer(lane.best)


class _KernelInfo:
    """What every hardware class's search of one kernel shares."""

    def __init__(self, kernel, db, target, seed, prune):
        self.kernel, self.db, self.target, self.seed, self.prune = kernel, db, target, seed, prune
        self.work = flops(list(kernel.outputs), given=kernel.inputs)
        self.name = " ".join(t.name for t in kernel.stages)


class _Lane:
    """The search of one kernel for one hardware class (`fingerprint`): its
    Search (pruned and modelled for that class's Hardware `hw`), trial
    count and best Record."""

    def __init__(self, info, hw, fingerprint):
        self.info, self.hw, self.fingerprint = info, hw, fingerprint
        k = info.kernel
        self.search = Search(k, hw, seed=info.seed, prune=info.prune)
        self.search.observe(_past_trials(info.db, k, info.target, self.fingerprint))
        self.best = info.db.best(k.key, info.target, self.fingerprint)
        self.default = default_config(k)
        self.pending = [] if self.default.to_json() in self.search.seen else [self.default]
        self.found = False         # a new best in this call (confirmed at the end)
        self.done = 0

    def wanted(self, trials, batch, left, spent_per_trial):
        """How many candidates the next batch should hold (0: this lane is done)."""
        if trials is not None and self.done >= trials:
            return 0
        if left is not None and self.best is not None and (
                left <= 0 or spent_per_trial and left < spent_per_trial):
            return 0                   # (a kernel with no record gets one batch anyway)
        size = batch if trials is None else min(batch, trials - self.done)
        if left is not None and spent_per_trial:
            size = max(1, min(size, int(left / spent_per_trial)))
        return size

    def propose(self, size):
        configs = self.pending + self.search.propose(size - len(self.pending))
        self.pending = []
        return configs

    def record(self, results):
        """Store and learn from Measurements made on this lane's hardware."""
        info = self.info
        key = info.kernel.key
        info.db.add_trials(key, info.target, self.fingerprint,
                           [(r.config, r.status, r.median_s, r.detail) for r in results])
        self.search.observe([(r.config, r.median_s) for r in results])
        improved = False
        for r in results:
            if r.status == "ok" and (self.best is None or r.median_s < self.best.median_s):
                self.best = Record(key, info.target, self.fingerprint, r.config, r.median_s,
                                   info.work, 0, info.name)
                improved = True
        if improved:
            info.db.offer(self.best)
            self.found = True


def _by_hardware(results):
    out = {}
    for r in results:
        out.setdefault(r.hardware, []).append(r)
    return out


def _pick(lanes, fingerprint):
    """The lane of `fingerprint`, else the first that has a best, else None."""
    if fingerprint in lanes:
        return lanes[fingerprint]
    return next((lane for lane in lanes.values() if lane.best is not None), None)


def _confirm(session, fingerprint, db, best, default):
    """Measure `best` and the `default` schedule CONFIRM_ROUNDS times in turn
    on `fingerprint`'s machines; keep `best` if its median time beats the
    default's by MIN_GAIN, else drop it from `db`. Returns the Record to
    store: `best`, or the default with its confirmed time."""
    times = ([], [])
    for _ in range(CONFIRM_ROUNDS):
        if fingerprint not in session.hardware:
            break                      # its machines are gone: keep what was found
        results = session.measure({fingerprint: [best.config, default]})
        for n, r in enumerate(results):
            if r.status == "ok" and r.hardware == fingerprint:
                times[n].append(r.median_s)
    if not times[1]:
        return best
    default_s = statistics.median(times[1])
    if times[0] and statistics.median(times[0]) <= default_s * (1 - MIN_GAIN):
        return best
    db.forget(best.kernel, best.target, best.hardware)
    return Record(best.kernel, best.target, best.hardware, default, default_s, best.flops, 0,
                  best.name)


def _past_trials(db, kernel, target, fingerprint):
    """(Config, seconds or None) of the trials stored for this kernel that
    still fit it (a schedule space may have changed since)."""
    out = []
    for text, status, median_s, _ in db.trials(kernel.key, target, fingerprint):
        try:
            config = Config.from_json(text)
            validate(config, kernel)
        except (ConfigError, ValueError):
            continue
        out.append((config, median_s if status == "ok" else None))
    return out

