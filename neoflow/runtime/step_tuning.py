"""runtime/step_tuning: background tuning whose candidates are timed inside
the real training step, on a budget that pays for itself.

Two halves, one in each process of runtime/tuner_process.py:

* `TrialMaker` (the tuner's child process): per kernel
  structure a tune/search.py Search (seeded with the trials the database
  holds) proposes one schedule at a time; the candidate is screened in the
  isolated measuring worker (tune/measure.py: it must build, run, agree
  with the default schedule, and not run more than SCREEN_SLOWER times the
  running schedule's time there -- a candidate that crashes or hangs never
  reaches the step), then compiled for the step (`prepare`, into the shared
  build cache). The step's own verdict comes back and trains the search's
  cost model (log of the in-step time).
* `StepBudget` (the trainer's process, the tuner's listener thread and the
  training thread): decides, each time the child asks, which kernel's next
  trial pays for itself (tune/payoff.py: expected speed-up x remaining steps
  against the core-seconds a trial takes from training), or that none does
  (the child waits; with no kernel left, it stops); `judge` is called by the
  Trainer when the checking steps after a swap are done (each new kernel
  timed in the step against the one it replaced, steps in turn): a trial's
  candidate stays only if it saved MIN_GAIN of its kernel's time in the
  step, and the verdict goes back to the child. Kept candidates become the
  database's best for their kernel (timed in the step, they replace any
  isolated record).

With a free core (training leaves one idle: data loading, evaluation,
fewer threads, a quiet machine) a trial costs little (tune/payoff.py's
FREE_COST); while the machine keeps every core busy it costs its full CPU
time. The child runs at normal priority -- at idle priority a busy
machine would never run a trial, nor let it answer -- and works only on
trials the budget pays for, sleeping otherwise.

Hands on: the "ask" replies, verdicts and counts the TunerProcess serves.
"""
import os
import resource
import threading
import time

from ..schedule import Config
from ..te.flops import flops
from ..graph.memory import nbytes
from ..tune.database import Database, Record
from ..tune.measure import Measurer
from ..tune.payoff import KernelPayoff, Payoff, roofline_s
from ..tune.search import Search
from ..tune.tuner import _past_trials

SCREEN_SLOWER = 1.5   # a candidate this much slower than the running schedule alone is dropped
PROPOSE = 8           # the search proposes this many; the first is tried
WAIT_S = 0.5          # the child asks again after this long when no trial pays


def cpu_seconds(live=()):
    """CPU seconds of this process, its reaped children (compilers, workers
    it restarted) and the live processes `live` (pids: the measuring workers
    running now).

    >>> cpu_seconds() > 0
    True
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return total + sum(filter(None, map(proc_cpu_seconds, live)))


def proc_cpu_seconds(path):
    """User + system CPU seconds of /proc/`path` (a process: all its
    threads; `pid/task/tid`: one thread), or None.

    >>> proc_cpu_seconds(os.getpid()) > 0
    True
    """
    try:
        with open(f"/proc/{path}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class TrialMaker:
    """The child's half: proposes, screens and compiles one candidate at a time.

    `kernels` {key: Kernel}; `db` an open Database (trials are stored in it);
    `prepare(key, config)` compiles it for the step.

    >>> maker = TrialMaker(kernels, db, options, "cpu", hw, stop)      # doctest: +SKIP
    >>> config, status = maker.make(key, running_config)               # doctest: +SKIP
    """

    def __init__(self, kernels, db, options, target, hw, stop):
        self.kernels, self.db, self.options = kernels, db, options
        self.target, self.hw, self.stop = target, hw, stop
        self._search, self._measurer, self._running_s = {}, {}, {}

    def _open(self, key):
        kernel = self.kernels[key]
        search = self._search.get(key)
        if search is None:
            search = self._search[key] = Search(kernel, self.hw, seed=self.options.seed)
            search.observe(_past_trials(self.db, kernel, self.target, self.hw.fingerprint))
            env = {"OMP_NUM_THREADS": str(self.hw.threads)} if self.hw.threads else None
            self._measurer[key] = Measurer(kernel, timeout=self.options.timeout,
                                           seed=self.options.seed, repeats=1, min_time=0.01,
                                           jobs=1, stop=self.stop, env=env,
                                           source_hook=self.options.source_hook)
        return search

    def make(self, key, running):
        """(a screened candidate for kernel `key`, "ok") or (candidate or
        None, why it was dropped); `running`: the Config the step runs now."""
        search = self._open(key)
        measurer = self._measurer[key]
        if key not in self._running_s:
            [r] = measurer.measure([running])
            self._running_s[key] = r.median_s if r.status == "ok" else None
            self._store(key, [r])
            search.observe([(running, r.median_s)])
        configs = search.propose(PROPOSE)[:1]   # (a batch's worth of tries finds one)
        if not configs:
            return None, "the schedule space has nothing left to try"
        [r] = measurer.measure(configs)
        self._store(key, [r])
        if r.status != "ok":
            search.observe([(r.config, None)])
            return r.config, r.status
        base = self._running_s[key]
        if base is not None and r.median_s > SCREEN_SLOWER * base:
            search.observe([(r.config, r.median_s)])
            return r.config, "slower alone"
        return r.config, "ok"

    def cpu_seconds(self):
        """CPU seconds the tuner has taken so far, its live workers' included."""
        return cpu_seconds([m._proc.pid for m in self._measurer.values()
                            if m._proc is not None])

    def observe(self, key, config, old_s, new_s):
        """The step's verdict on `config`: its time there (`new_s`) against
        the schedule it replaced (`old_s`), seconds per step."""
        search = self._search[key]
        base = self._running_s.get(key)
        # the model learns times on one scale: the in-step ratio applied to the
        # running schedule's time alone
        scale = base / old_s if base and old_s > 0 else 1.0
        search.observe([(config, new_s * scale)])
        if new_s < old_s and base:
            self._running_s[key] = new_s * scale

    def _store(self, key, results):
        self.db.add_trials(key, self.target, self.hw.fingerprint,
                           [(r.config, r.status, r.median_s, r.detail or "screen")
                            for r in results])

    def close(self):
        for measurer in self._measurer.values():
            measurer.close()


class StepBudget:
    """The trainer's half: the budget (tune/payoff.py) and the in-step verdicts.

    `kernels` {key: Kernel}; `shares` {key: seconds per step}; `view()` ->
    (steps done, {key: [the Config each kernel of that structure runs]}); `busy()` -> True while training keeps
    every core busy; `path` the tuning database (None: in memory).

    >>> budget = StepBudget(kernels, shares, options, view, busy, path, "cpu", hw)  # doctest: +SKIP
    >>> budget.decide()                                                            # doctest: +SKIP
    ('tune', key, config_json)
    """

    def __init__(self, kernels, shares, options, view, busy, path, target, hw):
        self.kernels, self.options, self.view, self.busy = kernels, options, view, busy
        self.path, self.target, self.hw = path, target, hw
        payoffs, (_, running) = {}, view()
        for key, seconds in shares.items():
            if key in kernels and key in running:
                k = kernels[key]
                work = flops(list(k.outputs), given=k.inputs)
                moved = sum(nbytes(t) for t in list(k.inputs) + list(k.outputs))
                payoffs[key] = KernelPayoff(seconds, len(running[key]) * roofline_s(work, moved))
        self.payoff = Payoff(payoffs, options.steps, options.trials)
        self.kept, self.trials_run, self.dropped = {}, 0, 0
        self._pending = {}          # (key, config json) -> core-seconds it took
        self._verdicts = {}         # (key, config json) -> kept?
        self._lock = threading.Lock()
        self.reply = None           # set by the TunerProcess: sends a message to the child

    def finished_keys(self):
        """The kernels with no trial left (their tuning is over)."""
        p = self.payoff
        return {key for key, k in p.kernels.items()
                if k.done or k.wins + k.losses >= p.max_trials}

    @property
    def finished(self):
        """True when no kernel has a trial left."""
        return len(self.finished_keys()) == len(self.payoff.kernels)

    def pays(self):
        """True when some kernel's next trial pays (before the child is forked)."""
        steps, _ = self.view()
        return self.payoff.next_kernel(steps, self.busy()) is not None

    def decide(self):
        """The reply to the child's "ask": ("tune", key, running config
        JSON, whether every core is busy), ("wait", seconds) or ("stop",)."""
        with self._lock:
            if self.finished:
                return ("stop",)
            steps, running = self.view()
            busy = self.busy()
            key = self.payoff.next_kernel(steps, busy)
            if key is None:
                return ("wait", WAIT_S)
            return ("tune", key, running[key][0].to_json(), busy)

    def screened(self, key, status, core_s):
        """A candidate of `key` dropped before the step (or the space ran dry)."""
        with self._lock:
            self.payoff.spend(key, core_s, self.busy())
            k = self.payoff.kernels[key]
            if status == "the schedule space has nothing left to try":
                k.done = True
            else:
                k.losses += 1
            self.dropped += 1

    def trial(self, key, text, core_s):
        """A candidate of `key` is on its way into the step."""
        with self._lock:
            self.payoff.spend(key, core_s, self.busy())
            self._pending[(key, text)] = core_s
            self.trials_run += 1

    def judge(self, rows):
        """The Trainer's checking steps are done: `rows` [(index, key, Config,
        old seconds, new seconds)]; returns {index: keep?} for the trials among
        them (the others are not the budget's to judge)."""
        out, sums = {}, {}
        with self._lock:
            for n, key, config, old_s, new_s in rows:
                text = config.to_json()
                if (key, text) in self._verdicts:
                    out[n] = self._verdicts[(key, text)]
                elif (key, text) in self._pending:
                    old, new, count = sums.get((key, text), (0.0, 0.0, 0))
                    sums[(key, text)] = (old + old_s, new + new_s, count + 1)
            for (key, text), (old_s, new_s, count) in sums.items():
                del self._pending[(key, text)]
                won = self.payoff.outcome(key, old_s, new_s, calls=count)
                self._verdicts[(key, text)] = won
                if won:
                    self.kept[key] = text
                    self._store(key, Config.from_json(text), new_s / count)
                if self.reply is not None:
                    self.reply(("timing", key, text, old_s, new_s))
            for n, key, config, _, _ in rows:
                if n not in out and (key, config.to_json()) in self._verdicts:
                    out[n] = self._verdicts[(key, config.to_json())]
        return out

    def _store(self, key, config, seconds):
        """The step's winner becomes the kernel's best record (`seconds` per
        call, timed in the step)."""
        if self.path is None:
            return
        k = self.kernels[key]
        try:
            with Database(self.path) as db:
                db.forget(key, self.target, self.hw.fingerprint)
                db.offer(Record(key, self.target, self.hw.fingerprint, config, seconds,
                                flops(list(k.outputs), given=k.inputs), 0,
                                " ".join(t.name for t in k.stages)))
        except Exception:  # noqa: BLE001 -- the database is a cache; training goes on
            pass
