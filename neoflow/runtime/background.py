"""runtime/background: the schedule tuner that runs beside (or before) training.

Tuner threads, each driving one measuring worker process through
`tune.tune_kernel` (search, cost model, isolated measurement), take the
step's distinct kernels one at a time, largest share of the step time
first, and tune each to its share of the time budget; no kernel is started
once the budget is spent (those left keep their schedules). tune_kernel writes
every trial and each better schedule to the tuning database as soon as it
is measured; the result of a kernel goes to `on_result(key, config)` (the
trainer compiles it and queues a swap). A kernel whose database record
already holds `trials` trials counts as tuned and is skipped, so a second
run of the same model starts tuned.

Faults stay inside: a candidate that crashes or hangs its worker is
recorded and the worker restarted (tune.measure); any error while tuning a
kernel is kept in `errors` and the next kernel is taken. `close()` sets the
stop event (a measurement in flight ends within a fraction of a second, its
worker killed) and joins the threads; SQLite transactions keep the
database consistent. Tuners still running at interpreter exit are closed.

Hands on: tuned Configs (via `on_result`, and `results`) and progress
counts (`tuned`, `total`, `errors`).
"""
import atexit
import os
import sqlite3
import threading
import time
import warnings
import weakref
from dataclasses import dataclass

from ..errors import NeoFlowError
from ..tune.database import Database, DatabaseWarning, open_database
from ..tune.hardware import detect
from ..tune.measure import Cancelled
from ..tune.runner import Runner
from ..tune.tuner import tune_kernel

JOIN_S = 120.0           # longest close() waits for a thread (a compile in flight ends)
PRIORITIES = ("idle", "normal")
MEASURES = ("step", "isolated")


class TuningOptionsError(NeoFlowError):
    """TuningOptions that cannot be used (a negative budget, too many workers)."""


@dataclass
class TuningOptions:
    """How the Trainer tunes (tuning="background" or "ahead").

    `workers`: tuner worker processes, at most the cores training leaves
    free (default half the cores, at least 1); `budget_s`: seconds of tuning
    in all (ahead: before the first step; background: beside training);
    `priority`: "idle" (background tuning waits for a core training leaves
    free and runs at idle priority, so it does not slow training) or
    "normal" (it competes with training for the cores);
    `trials`: most trials per kernel (a kernel with that many stored counts
    as tuned); `timeout`: seconds one candidate may run; `seed`: the
    search's seed; `source_hook(config, c_source) -> c_source`: rewrites
    candidates before they are measured (a test hook, as in nf.tune);
    `runner`: where candidates are measured (None: this machine; an
    nf.RayRunner: the Ray nodes whose hardware fingerprint -- thread count
    included -- is this machine's, since only their schedules fit the
    training here; none such, and it measures here, with a warning);
    `measure`: how background tuning times candidates -- "step" (default:
    screened alone, then timed inside the training step, one trial at a
    time, each started only when its expected gain pays for the CPU time
    it takes from training: runtime/step_tuning.py) or "isolated" (searched
    and timed alone to `budget_s`, as nf.tune does; always so with a
    runner); `steps`: the training steps the run will take in all, which
    the "step" budget weighs a speed-up by (None: as many again as done so
    far).

    >>> nf.Trainer(loss, opt, tuning="background",
    ...            tuning_options=nf.TuningOptions(workers=1, budget_s=60))  # doctest: +SKIP
    """
    workers: int = None
    budget_s: float = 120.0
    trials: int = 32
    timeout: float = 10.0
    seed: int = 0
    priority: str = "idle"
    source_hook: object = None
    runner: object = None
    measure: str = "step"
    steps: int = None

    def worker_count(self):
        """The number of tuner workers: `workers`, checked, or the default.

        >>> TuningOptions(workers=1).worker_count()
        1
        """
        cores = os.cpu_count() or 1
        free = max(1, cores - 1)
        if self.workers is None:
            return max(1, cores // 2)
        if not isinstance(self.workers, int) or not 1 <= self.workers <= free:
            raise TuningOptionsError(f"TuningOptions.workers={self.workers!r}: expected an int "
                                     f"from 1 to {free} (the cores training leaves free on "
                                     f"this {cores}-core machine)")
        return self.workers

    def check(self):
        """Raise TuningOptionsError if a field is out of range.

        >>> TuningOptions(budget_s=0).check()                # doctest: +SKIP
        TuningOptionsError: TuningOptions.budget_s=0: expected a positive number
        """
        self.worker_count()
        for name in ("budget_s", "timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise TuningOptionsError(f"TuningOptions.{name}={value!r}: expected a positive "
                                         "number of seconds")
        if self.priority not in PRIORITIES:
            raise TuningOptionsError(f"TuningOptions.priority={self.priority!r}: expected one "
                                     f"of {PRIORITIES}")
        if self.measure not in MEASURES:
            raise TuningOptionsError(f"TuningOptions.measure={self.measure!r}: expected one "
                                     f"of {MEASURES}")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise TuningOptionsError(f"TuningOptions.steps={self.steps!r}: expected None or a "
                                     "positive int (the training steps of the run)")
        if not isinstance(self.trials, int) or self.trials < 1:
            raise TuningOptionsError(f"TuningOptions.trials={self.trials!r}: expected a "
                                     "positive int")
        if self.runner is not None and not isinstance(self.runner, Runner):
            raise TuningOptionsError(f"TuningOptions.runner={self.runner!r}: expected None or "
                                     "a runner such as nf.RayRunner(address)")


def database_path(database):
    """The path of the tuning database the tuner threads open (each opens
    its own connection), or None when it cannot be opened (read-only
    folder, a file it cannot replace): then tuning happens in memory, with
    one DatabaseWarning.

    >>> database_path("/tmp/tuning.sqlite")
    PosixPath('/tmp/tuning.sqlite')
    """
    where = getattr(database, "path", database)
    try:
        db = open_database(database)
        if db is not database:
            db.close()
        return db.path
    except (NeoFlowError, OSError, sqlite3.Error) as e:
        warnings.warn(f"tuning database {where or 'in the per-user cache'} cannot be opened "
                      f"({e}); tuning in memory, results are not kept", DatabaseWarning,
                      stacklevel=3)
        return None


class BackgroundTuner:
    """Tunes `kernels` (distinct by key) in worker threads.

    `path`: the tuning database (None: in memory); `jobs`: compiles at once
    per worker; `on_result(key, config)` is called from a tuner thread with
    each kernel's best schedule, `on_error(message)` with each error kept;
    `pause()` before each batch of trials returns when it may start.

    >>> tuner = BackgroundTuner(kernels, path, TuningOptions(), on_result=print)
    >>> tuner.start({k.key: 1.0 for k in kernels}); tuner.wait(); tuner.close()
    """

    def __init__(self, kernels, path, options, target="cpu", jobs=1, on_result=None,
                 on_error=None, progress=None, pause=None):
        self.kernels = {k.key: k for k in kernels}
        self.path, self.options, self.target, self.jobs = path, options, target, jobs
        self.on_result, self.on_error, self.progress = on_result, on_error, progress
        self.pause = pause
        self.hw = detect()
        self.results = {}          # key -> best Config found (or stored)
        self.tuned, self.errors = set(), []
        self.started_at = self.finished_at = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queue, self._shares, self._threads = [], {}, []
        self._already_tuned()
        _live.add(self)

    @property
    def total(self):
        """Distinct kernels to tune."""
        return len(self.kernels)

    @property
    def stop_event(self):
        """The threading.Event that stops the workers when set (close() sets it)."""
        return self._stop

    @property
    def done(self):
        """True when every worker thread has finished (or none was started)."""
        return not any(t.is_alive() for t in self._threads)

    def start(self, shares):
        """Start the workers; `shares` {key: share of the step time} sets the
        order (largest first) and each kernel's part of the budget."""
        self.started_at = time.monotonic()
        self._deadline = self.started_at + self.options.budget_s
        todo = [k for k in self.kernels if k not in self.tuned]
        self._shares = {k: max(shares.get(k, 0.0), 1e-9) for k in todo}
        self._queue = sorted(todo, key=lambda k: -self._shares[k])
        for n in range(self.options.worker_count()):
            thread = threading.Thread(target=self._work, name=f"neoflow-tuner-{n}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def wait(self):
        """Block until every worker thread has finished."""
        for thread in self._threads:
            while thread.is_alive():
                thread.join(0.2)

    def close(self):
        """Stop the workers (a measurement in flight is dropped) and join them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(JOIN_S)
        _live.discard(self)

    # -- worker threads ---------------------------------------------------------
    def _already_tuned(self):
        """Mark the kernels whose stored record has `options.trials` trials."""
        if self.path is None:
            return
        try:
            with Database(self.path) as db:
                for key in self.kernels:
                    rec = db.best(key, self.target, self.hw.fingerprint)
                    if rec is not None and rec.trials >= self.options.trials:
                        self.tuned.add(key)
                        self.results[key] = rec.config
        except (NeoFlowError, OSError, sqlite3.Error) as e:
            self._error(f"reading {self.path}: {e}")

    def _next(self):
        """(key, seconds for it) of the next kernel, or None when all are
        taken or the budget is spent."""
        with self._lock:
            left = self._deadline - time.monotonic()
            if not self._queue or self._stop.is_set() or left <= 0:
                return None
            key = self._queue.pop(0)
            rest = self._shares[key] + sum(self._shares[k] for k in self._queue)
            return key, left * len(self._threads) * self._shares[key] / rest

    def _open(self):
        if self.path is not None:
            try:
                return Database(self.path)
            except (NeoFlowError, OSError, sqlite3.Error) as e:
                self._error(f"opening {self.path}: {e}; tuning in memory")
        return Database(":memory:")

    def _work(self):
        db = self._open()
        try:
            while True:
                job = self._next()
                if job is None:
                    return
                key, seconds = job
                if not self._tune(db, key, seconds):
                    return
        finally:
            db.close()
            with self._lock:
                self.finished_at = time.monotonic()

    def _tune(self, db, key, seconds):
        """Tune one kernel; False when stopped."""
        kernel = self.kernels[key]
        try:
            rec = db.best(key, self.target, self.hw.fingerprint)
            trials = max(1, self.options.trials - (rec.trials if rec is not None else 0))
            rec = tune_kernel(kernel, db=db, target=self.target, hw=self.hw, trials=trials,
                              seconds=seconds, seed=self.options.seed,
                              timeout=self.options.timeout, jobs=self.jobs, stop=self._stop,
                              source_hook=self.options.source_hook, bar=self.progress,
                              pause=self.pause, runner=self.options.runner,
                              only=self.hw.fingerprint, threads=self.hw.threads)
            self.results[key] = rec.config
            if self.on_result is not None:
                self.on_result(key, rec.config)
            with self._lock:
                self.tuned.add(key)
        except Cancelled:
            return False
        except Exception as e:  # noqa: BLE001 -- a kernel that fails must not stop training
            self._error(f"{kernel}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        return not self._stop.is_set()

    def _error(self, message):
        self.errors.append(message)
        if self.on_error is not None:
            self.on_error(message)


_live = weakref.WeakSet()    # tuners not yet closed


@atexit.register
def _close_all():
    for tuner in list(_live):
        tuner.close()
