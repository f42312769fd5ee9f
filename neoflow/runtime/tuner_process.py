"""runtime/tuner_process: the background tuner in a child process of its own,
at the lowest CPU priority, so that tuning never slows the training it
runs beside.

In the trainer's own process the tuner's search and code generation
(Python) would hold the GIL the training thread needs around every step,
and its compiles and measurements would compete with the step's kernels
for the cores. So with tuning="background" the BackgroundTuner (built in
the trainer, where it read the database) is forked into a child whose
threads, compilers and measuring workers all run under SCHED_IDLE (nice 19
where that policy is missing; not with TuningOptions(priority="normal")):
they get only the CPU time training leaves idle, and training keeps every
core. Even so, work squeezed into the short gaps of a step evicts the
step's data from shared caches, so the tuner also waits until training
leaves a core free (IdleGate): the listener thread before it forks the
child at all, the child again before each batch of trials. The child
compiles each result for the step too (`prepare`, at idle priority, into
the shared build cache), then reports it on a pipe; a listener thread in
the trainer applies it (`on_result`, which then finds the library in the
cache) and keeps the counts stats() reads (`tuned`, `results`, `errors`).

In-step mode (TuningOptions(measure="step"), the default when measuring
on this machine; runtime/step_tuning.py): the listener thread holds the
budget (StepBudget) and forks the child only once a first trial pays;
the child then asks before each trial which kernel to try, runs that
trial at normal priority (it pays for the CPU it takes; at idle priority
a busy machine would never run it, nor answer), sleeps in between, and
hands over one screened, compiled candidate at a time; the Trainer's
checking steps time it in the step and `judge` gives the verdict, which
goes back to the child's search.

With a runner that cannot cross a fork -- an nf.RayRunner whose Ray
connection is already open in the trainer (a forked child cannot use
it) -- the tuner runs in the trainer's process instead, in threads: its
measurements happen on the Ray nodes, but its search still takes turns
with training for the interpreter lock.

`close()` asks the child to stop (SIGTERM: the measurement in flight ends,
its worker is killed) and reaps it. The child ignores Ctrl-C, which the
trainer handles, and stops by itself when the trainer dies
(PR_SET_PDEATHSIG).

Hands on: the BackgroundTuner's interface (start, done, close, tuned,
results, errors, started_at, finished_at) for the Trainer.
"""
import atexit
import ctypes
import multiprocessing
import os
import signal
import threading
import time
import weakref

from ..schedule import Config
from ..tune.measure import Cancelled
from .background import JOIN_S
from .step_tuning import StepBudget, TrialMaker, proc_cpu_seconds as _cpu_seconds

PR_SET_PDEATHSIG = 1
FREE_CORE = 0.75      # idle cores the tuner waits for (cores minus what training uses)
SAMPLE_S = 0.25       # seconds over which training's CPU use is sampled


class TunerProcess:
    """Runs `tuner` (a BackgroundTuner) in a forked child at idle priority.

    `prepare(key, config)` runs in the child for each result (compiles it
    for the step); `on_result(key, config)` runs in the trainer, from a
    listener thread, after it.

    >>> tuner = TunerProcess(BackgroundTuner(kernels, path, TuningOptions()),
    ...                      prepare=compile_only, on_result=queue_swap)
    >>> tuner.start(shares); ...; tuner.close()                  # doctest: +SKIP
    """

    def __init__(self, tuner, prepare=None, on_result=None, view=None):
        self.tuner, self.prepare, self.on_result, self.view = tuner, prepare, on_result, view
        self.started_at = self.finished_at = None
        self.budget = None          # the StepBudget, in-step mode
        self._process = self._listener = None
        self._stopping = False
        self._lock, self._send_lock = threading.Lock(), threading.Lock()
        self._conn = None
        _live.add(self)

    @property
    def in_step(self):
        """True when candidates are timed inside the training step
        (TuningOptions.measure "step", measured on this machine)."""
        options = self.tuner.options
        return self.view is not None and options.measure == "step" and options.runner is None

    load_signal = None    # CPU seconds of training so far, for the in-step budget (tests)
    kernels = property(lambda self: self.tuner.kernels)
    options = property(lambda self: self.tuner.options)
    results = property(lambda self: self.tuner.results)
    tuned = property(lambda self: self.tuner.tuned)
    errors = property(lambda self: self.tuner.errors)
    total = property(lambda self: self.tuner.total)
    progress = None

    @property
    def done(self):
        """True when the child has reported its end (or was never started)."""
        return self._listener is None or not self._listener.is_alive()

    def start(self, shares):
        """Start tuning, largest `shares` first: a listener thread waits for a
        free core (priority "idle"), then forks the child and serves it."""
        self.started_at = time.monotonic()
        self._listener = threading.Thread(target=self._run, args=(shares,),
                                          name="neoflow-tuner-listener", daemon=True)
        self._listener.start()

    def _run(self, shares):
        if not getattr(self.tuner.options.runner, "forkable", True):
            self._run_here(shares)
            return
        stop = self.tuner.stop_event
        if self.in_step:
            tuner = self.tuner
            # the load signal: the whole machine's busy cores, less the tuner's own
            gate = IdleGate(os.getpid(), stop, reader=self.load_signal or (
                lambda: machine_cpu_seconds(self._process and self._process.pid)))
            todo = {k: v for k, v in shares.items() if k not in tuner.tuned}
            self.budget = StepBudget(tuner.kernels, todo, tuner.options, self.view, gate.busy,
                                     tuner.path, tuner.target, tuner.hw)
            self.budget.reply = self._send
            while not self.budget.pays():   # nothing forks before a first trial pays
                if stop.wait(SAMPLE_S) or self.budget.finished:
                    self.finished_at = time.monotonic()
                    return
        elif self.tuner.options.priority == "idle":
            try:      # while training keeps every core busy, not even the fork happens
                IdleGate(os.getpid(), stop, exclude=threading.get_native_id(),
                         reader=self.load_signal).wait()
            except Cancelled:
                self.finished_at = time.monotonic()
                return
        context = multiprocessing.get_context("fork")
        reader, writer = context.Pipe(duplex=self.in_step)
        child = _step_child if self.in_step else _child
        process = context.Process(target=child, name="neoflow-tuner", daemon=True,
                                  args=(self.tuner, shares, writer, self.prepare))
        with self._lock:
            if stop.is_set():       # closed while the gate waited
                self.finished_at = time.monotonic()
                return
            process.start()         # from this thread, which lives as long as the child
            self._process, self._conn = process, reader
        writer.close()
        self._listen(reader)

    def _run_here(self, shares):
        """Tune in this process's threads (the runner measures elsewhere)."""
        def report(key, config):
            if self.prepare is not None:
                self.prepare(key, config)
            self._result(key, config.to_json())
        self.tuner.on_result = report
        try:
            self.tuner.start(shares)
            self.tuner.wait()
        finally:
            self.finished_at = time.monotonic()

    def close(self):
        """Stop the child (its measurement in flight is dropped) and reap it."""
        with self._lock:
            self._stopping = True
            self.tuner.stop_event.set()
            process = self._process
        if not getattr(self.tuner.options.runner, "forkable", True):
            self.tuner.close()
        if process is not None and process.is_alive():
            process.terminate()
            process.join(JOIN_S)
            if process.is_alive():
                process.kill()
                process.join()
        if self._listener is not None:
            self._listener.join(JOIN_S)
        _live.discard(self)

    def _listen(self, reader):
        try:
            while True:
                try:
                    kind, *payload = reader.recv()
                except (EOFError, OSError):
                    break
                if kind == "result":
                    self._result(*payload)
                elif kind == "error":
                    self.tuner.errors.append(payload[0])
                elif kind == "ask":
                    self._send(self.budget.decide())
                elif kind == "screened":
                    self.budget.screened(*payload)
                    self.tuner.tuned.update(self.budget.finished_keys())
                elif kind == "trial":
                    key, text, core_s = payload
                    self.budget.trial(key, text, core_s)
                    config = Config.from_json(text)
                    if all(c.to_json() == text for c in self.view()[1].get(key, [])):
                        self.budget.judge([(-1, key, config, 1.0, 1.0)])   # nothing to swap
                    else:
                        self._load(key, config)
        finally:
            reader.close()
            self._process.join(JOIN_S)
            code = self._process.exitcode
            if code not in (0, None) and not self._stopping:
                self.tuner.errors.append(f"the tuner process ended with exit code {code}")
            self.finished_at = time.monotonic()

    def _result(self, key, text):
        config = Config.from_json(text)
        self.tuner.results[key] = config
        self._load(key, config)
        self.tuner.tuned.add(key)

    def _load(self, key, config):
        """Hand `config` to the trainer (it compiles it and queues the swap)."""
        try:
            if self.on_result is not None:
                self.on_result(key, config)
        except Exception as e:  # noqa: BLE001 -- a result that fails to load must not stop training
            self.tuner.errors.append(f"loading the schedule of {key[:12]}: "
                                     f"{type(e).__name__}: {e}")
            if self.budget is not None:    # a trial that never reaches the step
                self.budget.judge([(-1, key, config, 1.0, 1.0)])

    def _send(self, message):
        """Send `message` to the child (any thread); dropped once it is gone."""
        with self._send_lock:
            try:
                if self._conn is not None:
                    self._conn.send(message)
            except (OSError, ValueError, BrokenPipeError):
                pass

    def judge(self, rows):
        """The Trainer's verdict hook, after the checking steps of a swap:
        `rows` [(kernel index, key, Config, seconds before, seconds with it)];
        returns {index: keep?} for in-step trials (runtime/step_tuning.py)."""
        if self.budget is None:
            return {}
        verdicts = self.budget.judge(rows)
        for n, key, config, _, _ in rows:
            if verdicts.get(n):
                self.tuner.results[key] = config
        self.tuner.tuned.update(self.budget.finished_keys() | set(self.budget.kept))
        return verdicts


def _child(tuner, shares, out, prepare):
    """The child process: tune at idle priority, report on `out`."""
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: tuner.stop_event.set())
    _die_with_parent()
    if os.getppid() != parent:          # the trainer died before the line above
        return
    if tuner.options.priority == "idle":
        lowest_priority()
        tuner.pause = IdleGate(parent, tuner.stop_event).wait

    def report(key, config):
        if prepare is not None:
            prepare(key, config)
        out.send(("result", key, config.to_json()))

    tuner.on_result = report
    tuner.on_error = lambda message: out.send(("error", message))
    try:
        tuner.start(shares)
        tuner.wait()
    finally:
        if tuner.options.runner is not None:    # a Ray connection made here
            tuner.options.runner.close()
        out.close()


def _step_child(tuner, shares, conn, prepare):
    """The child process in in-step mode: ask the trainer which kernel to
    try, make a screened candidate, hand it over, learn the step's verdict."""
    parent = os.getppid()
    stop = tuner.stop_event
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _die_with_parent()
    if os.getppid() != parent:
        return
    db = tuner._open()        # (normal priority: it works only on trials that pay)
    maker = TrialMaker(tuner.kernels, db, tuner.options, tuner.target, tuner.hw, stop)
    try:
        while not stop.is_set():
            conn.send(("ask",))
            reply = _receive(conn, stop)
            if reply is None or reply[0] == "stop":
                break
            if reply[0] == "wait":
                stop.wait(reply[1])
                continue
            _, key, text, _ = reply
            t0 = maker.cpu_seconds()
            try:
                config, status = maker.make(key, Config.from_json(text))
                if status == "ok" and prepare is not None:
                    prepare(key, config)
            except Cancelled:
                break
            except Exception as e:  # noqa: BLE001 -- a kernel that fails must not stop training
                conn.send(("error", f"{tuner.kernels[key]}: {type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:200]}"))
                config, status = None, "error"
            if status != "ok":
                conn.send(("screened", key, status, maker.cpu_seconds() - t0))
                continue
            conn.send(("trial", key, config.to_json(), maker.cpu_seconds() - t0))
            reply = _receive(conn, stop)
            if reply is None or reply[0] != "timing":
                break
            _, key, text, old_s, new_s = reply
            maker.observe(key, Config.from_json(text), old_s, new_s)
    except (EOFError, OSError):
        pass                     # the trainer is gone
    finally:
        maker.close()
        db.close()
        conn.close()


def _receive(conn, stop):
    """The next message on `conn`, or None once `stop` is set or it closes."""
    while not stop.is_set():
        try:
            if conn.poll(SAMPLE_S):
                return conn.recv()
        except (EOFError, OSError):
            return None
    return None


class IdleGate:
    """Holds the tuner back while the training process `pid` keeps every
    core busy. Idle priority alone is not enough there: a tuner squeezed
    into the gaps between a step's parallel loops (compiling, measuring)
    still evicts the step's data from the caches it shares, which cost
    LLTM about 10% of its step time on 2 cores. `wait()` returns once
    training has used at most `cores - FREE_CORE` cores over a sample of
    SAMPLE_S seconds (a core is free: training runs on fewer threads, or
    loads data, evaluates, checkpoints); it raises Cancelled when `stop` is
    set. `busy()` says, without waiting, whether training used more than
    that since the last call (the in-step budget's load signal).
    `exclude`: a thread of `pid` (the gate's own) left out of the count.
    `reader()` -> CPU seconds of the training process so far (default:
    from /proc; None: cannot tell) and `clock()` (default time.monotonic)
    are the load signal and the clock, replaceable (tests).

    >>> IdleGate(os.getppid(), threading.Event()).wait()     # doctest: +SKIP
    """

    def __init__(self, pid, stop, cores=None, exclude=None, reader=None, clock=None):
        self.pid, self.stop, self.exclude = pid, stop, exclude
        self.cores = cores or os.cpu_count() or 1
        self.reader = reader or self._cpu_seconds
        self.clock = clock or time.monotonic
        self._last = None

    def wait(self):
        while not self.stop.is_set():
            used = self._cores_used()
            if used is None or used <= self.cores - FREE_CORE:
                return
        raise Cancelled("tuning stopped while waiting for an idle core")

    def busy(self):
        """True when training used more than `cores - FREE_CORE` cores since
        the last call (the first call: since the gate was made)."""
        now = (self.reader(), self.clock())
        before, self._last = self._last, now
        if before is None:
            before = now
        used = self._rate(before, now)
        return used is not None and used > self.cores - FREE_CORE

    def _cores_used(self):
        """Cores the training process used over the next SAMPLE_S seconds
        (None if /proc cannot tell)."""
        before = (self.reader(), self.clock())
        self.stop.wait(SAMPLE_S)
        return self._rate(before, (self.reader(), self.clock()))

    @staticmethod
    def _rate(before, after):
        (cpu0, t0), (cpu1, t1) = before, after
        if cpu0 is None or cpu1 is None or t1 <= t0:
            return None
        return (cpu1 - cpu0) / (t1 - t0)

    def _cpu_seconds(self):
        own = 0.0 if self.exclude is None else _cpu_seconds(f"{self.pid}/task/{self.exclude}")
        total = _cpu_seconds(self.pid)
        return None if total is None or own is None else total - own


def machine_cpu_seconds(exclude=None):
    """CPU seconds the whole machine has been busy (all processes: on a
    shared machine a core training leaves is often taken by others), less
    those of process `exclude` and its reaped children (the tuner's own);
    None if /proc cannot tell.

    >>> machine_cpu_seconds() > 0                          # doctest: +SKIP
    True
    """
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
    own = 0.0
    if exclude is not None:
        try:
            with open(f"/proc/{exclude}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            own = sum(int(v) for v in stat[11:15])
        except (OSError, IndexError, ValueError):
            own = 0.0
    return (busy - own) / os.sysconf("SC_CLK_TCK")


def lowest_priority():
    """Put this process (its threads and children to come) under SCHED_IDLE,
    else at nice 19; returns the policy's name.

    >>> lowest_priority()                                   # doctest: +SKIP
    'SCHED_IDLE'
    """
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        os.nice(19 - os.nice(0))
        return "nice 19"


def _die_with_parent():
    """Linux: SIGTERM this process when the trainer exits, however it ends
    (strictly: when the thread that forked it, the one running steps, exits)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_live = weakref.WeakSet()    # tuner processes not yet closed


@atexit.register
def _close_all():
    for tuner in list(_live):
        tuner.close()
