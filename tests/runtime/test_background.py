"""Tuning beside training (tuning="background"), before it ("ahead"), and
the database's schedules with tuning off: hot swaps never change what a
step computes; tuner faults, close() and unusable databases never stop
training; a second run starts from the database."""
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import neoflow as nf
from neoflow.schedule import default_config, sample_config
from neoflow.tune import Database, DatabaseWarning, Record, detect

BATCH, N_IN, HIDDEN, N_OUT = 16, 12, 24, 5
ENTRY = "int64_t nf_main(void* const* args, int64_t* err) {"
SLOW = ENTRY + " for (volatile int z = 0; z < 3000000; ++z) {}"
CRASH = "#include <signal.h>\n" + ENTRY + " raise(SIGSEGV);"
HANG = ENTRY + " for (volatile int z = 0; ; ++z) {}"


def mlp():
    x = nf.placeholder((BATCH, N_IN), name="x")
    y = nf.placeholder((BATCH,), "int64", name="y")
    w1 = nf.parameter((HIDDEN, N_IN), init="kaiming", name="w1")
    b1 = nf.parameter((HIDDEN,), init="zeros", name="b1")
    w2 = nf.parameter((N_OUT, HIDDEN), init="xavier", name="w2")
    logits = nf.nn.dense(nf.nn.relu(nf.nn.dense(x, w1, b1)), w2)
    return nf.nn.cross_entropy(logits, y)


def batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((BATCH, N_IN)).astype(np.float32),
             "y": rng.integers(0, N_OUT, BATCH).astype(np.int64)} for _ in range(n)]


def trainer(tuning="off", **kwargs):
    kwargs.setdefault("database", False)
    return nf.Trainer(mlp(), optimizer=nf.optim.SGD(lr=0.1, momentum=0.9), tuning=tuning,
                      **kwargs)


def losses_off(data):
    with trainer() as t:
        return [t.step(b) for b in data]


def options(**kwargs):
    kwargs.setdefault("workers", 1)
    kwargs.setdefault("timeout", 5.0)
    kwargs.setdefault("steps", 10 ** 9)     # a long run: in-step trials pay
    return nf.TuningOptions(**kwargs)


def train_while_tuning(t, data, limit_s=120.0):
    """Step through `data`; from step 4 on, each step waits (up to a few
    seconds) for the tuner to finish one more kernel, or to hand a candidate
    to the step (an in-step trial needs steps to be judged), so swaps land
    at many different steps. Returns the losses."""
    losses = []
    deadline = time.monotonic() + limit_s
    for n, b in enumerate(data):
        losses.append(t.step(b))
        tuned = t.stats()["kernels_tuned"]
        while n >= 3 and not t.stats()["tuning_done"] and time.monotonic() < deadline:
            if t.stats()["kernels_tuned"] > tuned or t._checks or not t._ready.empty():
                break
            time.sleep(0.05)
    return losses


def proc_stat(pid):
    """The fields of /proc/`pid`/stat after the command name, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid):
    fields = proc_stat(pid)
    return fields is not None and fields[0] != "Z"


def descendants(pid=None):
    """Pids of the live processes below `pid` (default: this process). A test
    compares them with those alive before it: an earlier test in the same
    worker may leave one that lives as long as the process (multiprocessing's
    resource tracker, after tests/toolchain's two-process build)."""
    parents = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = proc_stat(entry)
        if fields is not None and fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid or os.getpid()]
    while todo:
        below = parents.get(todo.pop(), [])
        found += below
        todo += below
    return found


def measuring_workers(pid=None):
    """Pids of the tuner's measuring workers below `pid` (tune/worker.py)."""
    out = []
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as f:
                if b"worker.py" in f.read():
                    out.append(child)
        except OSError:
            continue
    return out


def wait_for(condition, limit_s=60.0):
    """Poll `condition()` until it is true (returns its value) or `limit_s` passes."""
    deadline = time.monotonic() + limit_s
    while not (value := condition()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def hook(defaults, default_fault, other_fault):
    """A source hook: `default_fault` for the kernels' default schedules,
    `other_fault` (a function of the config's position) for the rest."""
    seen = []

    def rewrite(config, source):
        if config.to_json() in defaults:
            return source.replace(ENTRY, default_fault) if default_fault else source
        seen.append(config.to_json())
        fault = other_fault(len(seen))
        return source.replace(ENTRY, fault) if fault else source
    return rewrite


def test_swapped_schedules_give_the_same_losses():
    """Every kernel swapped to random schedules three times during 50 steps."""
    data = batches(50)
    expected = losses_off(data)
    with trainer() as t:
        step = t._executor.program
        with ThreadPoolExecutor(2) as pool:
            rounds = [list(pool.map(lambda n, r=r: step.prepare(n, sample_config(
                t.kernels[n], 10 * r + n)), range(len(t.kernels)))) for r in range(3)]
        got = []
        for n, b in enumerate(data):
            if n in (5, 20, 35):
                for candidate in rounds.pop(0):
                    t._ready.put(candidate)
            got.append(t.step(b))
        assert t.stats()["swaps"] == 3 * len(t.kernels)
        assert len(t.stats()["swap_times_s"]) == 3
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_a_swap_slower_in_the_step_is_swapped_back(tmp_path):
    """A candidate that busy-waits is profiled after the swap and undone, and
    the database forgets it as the kernel's best schedule."""
    from neoflow.toolchain import compile_c
    from neoflow.runtime.native import Candidate, kernels_source
    from neoflow.schedule.lower import lower_kernel
    from neoflow.tune import Database, Record, detect
    data = batches(12)
    expected = losses_off(data)
    with trainer() as t:
        got = [t.step(b) for b in data[:5]]             # profiled: steps 2-4
        step = t._executor.program
        n = 0
        key, hardware = t.kernels[n].key, detect().fingerprint
        t._db_path = tmp_path / "tuning.sqlite"         # as if the tuner had stored it there
        with Database(t._db_path) as db:
            db.offer(Record(key, "cpu", hardware, step.configs[n], 1e-6, 1, 1))
        func = lower_kernel(t.kernels[n], step.configs[n], [])
        source = kernels_source([func], [step._aliased[n]])
        head = next(line for line in source.splitlines()
                    if line.startswith("static void nf_kernel0("))
        slow = source.replace(head, head + " for (volatile int z = 0; z < 2000000; ++z) {}")
        before = step._running[n]
        t._ready.put(Candidate(n, step.configs[n], compile_c(slow)))
        got += [t.step(b) for b in data[5:]]
        assert t.stats()["swaps"] == 1 and t.stats()["swaps_reverted"] == 1
        assert step._running[n] is before
        with Database(t._db_path) as db:
            assert db.best(key, "cpu", hardware) is None
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_background_tuning_swaps_and_keeps_the_losses(tmp_path):
    """The default schedules measure slow (a test hook), so every kernel the
    tuner finishes is swapped: 50 steps still match tuning off."""
    data = batches(50)
    expected = losses_off(data)
    defaults = set()
    opts = options(trials=2, budget_s=60, source_hook=hook(defaults, SLOW, lambda n: None),
                   measure="isolated")
    with trainer("background", database=tmp_path / "t.sqlite", tuning_options=opts) as t:
        defaults.update(default_config(k).to_json() for k in t.kernels)
        got = train_while_tuning(t, data)
        stats = t.stats()
    assert stats["swaps"] >= 1, stats
    assert stats["kernels_tuned"] >= 1 and not stats["tuning_errors"]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_in_step_trials_swap_and_keep_the_losses(tmp_path):
    """In-step tuning: screened candidates run inside the step, each judged
    by the step's own timing against the schedule it replaced; winners
    stay and become the database's best, losers are swapped back; the
    losses still match tuning off."""
    data = batches(400)
    expected = losses_off(data)
    path = tmp_path / "t.sqlite"
    with trainer("background", database=path, tuning_options=options(trials=3)) as t:
        got = [t.step(b) for b in data[:4]]
        budget = wait_for(lambda: t._tuner.budget, 30)
        deadline = time.monotonic() + 120
        for b in data[4:]:
            got.append(t.step(b))
            judged = budget.trials_run - len(budget._pending)
            if judged >= 2 or t.stats()["tuning_done"] or time.monotonic() > deadline:
                break
            # until a trial is in the step, steps wait for it (a fast network would
            # otherwise run out of batches first)
            while not t._checks and t._ready.empty() and time.monotonic() < deadline \
                    and not t.stats()["tuning_done"]:
                time.sleep(0.01)
        stats, budget = t.stats(), t._tuner.budget
        kept = dict(budget.kept)
        running = {k.key: c.to_json() for k, c in zip(t.kernels, t._executor.program.configs)}
    assert budget.trials_run >= 1 and stats["swaps"] >= budget.trials_run, stats
    assert not stats["tuning_errors"]
    assert all(running[key] == text for key, text in kept.items())
    with Database(path) as db:
        for key, text in kept.items():
            assert db.best(key, "cpu", detect().fingerprint).config.to_json() == text
    np.testing.assert_allclose(got, expected[:len(got)], rtol=1e-4, atol=1e-6)


def test_crashing_and_hanging_workers_do_not_stop_training(tmp_path):
    before = set(descendants())
    data = batches(20)
    expected = losses_off(data)
    defaults = set()
    opts = options(trials=3, budget_s=30, timeout=1.0,
                   source_hook=hook(defaults, None, lambda n: CRASH if n % 2 else HANG))
    path = tmp_path / "t.sqlite"
    with trainer("background", database=path, tuning_options=opts) as t:
        defaults.update(default_config(k).to_json() for k in t.kernels)
        got = train_while_tuning(t, data, limit_s=60)
        stats = t.stats()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    assert stats["swaps"] == 0 and not stats["tuning_errors"]
    with Database(path) as db:
        statuses = {s for k in t.kernels
                    for _, s, _, _ in db.trials(k.key, "cpu", detect().fingerprint)}
    assert {"crash", "timeout"} <= statuses, statuses
    assert set(descendants()) <= before


def test_close_stops_the_workers_at_once(tmp_path):
    """A worker hanging in a candidate is killed by close(); nothing is left."""
    before = set(descendants())
    opts = options(trials=4, budget_s=60, timeout=60.0,
                   source_hook=hook(set(), None, lambda n: HANG))
    t = trainer("background", database=tmp_path / "t.sqlite", tuning_options=opts)
    for b in batches(4):
        t.step(b)
    workers = wait_for(measuring_workers)
    assert workers, "the tuner started no worker"
    t0 = time.monotonic()
    t.close()
    assert time.monotonic() - t0 < 30
    assert set(descendants()) <= before and not any(map(alive, workers))
    with Database(tmp_path / "t.sqlite") as db:      # consistent, readable
        assert db.schema_version >= 1


def test_keyboard_interrupt_in_a_with_block_stops_the_workers(tmp_path):
    before = set(descendants())
    opts = options(trials=4, budget_s=60, timeout=60.0,
                   source_hook=hook(set(), None, lambda n: HANG))
    with pytest.raises(KeyboardInterrupt):
        with trainer("background", database=tmp_path / "t.sqlite", tuning_options=opts) as t:
            for b in batches(4):
                t.step(b)
            workers = wait_for(measuring_workers)
            raise KeyboardInterrupt
    assert workers and set(descendants()) <= before and not any(map(alive, workers))


@pytest.mark.parametrize("priority, policy", [("idle", os.SCHED_IDLE),
                                              ("normal", os.SCHED_OTHER)])
def test_the_tuner_runs_in_a_child_process_at_its_priority(tmp_path, priority, policy):
    """Isolated measuring, by default, never takes CPU time training needs:
    its process, compilers and measuring workers run under SCHED_IDLE;
    training keeps its own policy. (In-step trials run at normal priority
    when their budget pays for it: test_in_step_trials_run_at_normal_priority.)"""
    opts = options(trials=4, budget_s=60, timeout=60.0, priority=priority,
                   source_hook=hook(set(), None, lambda n: HANG), measure="isolated")
    with trainer("background", database=tmp_path / "t.sqlite", tuning_options=opts) as t:
        for b in batches(4):
            t.step(b)
        workers = wait_for(measuring_workers)
        tuner = t._tuner._process.pid
        assert tuner != os.getpid() and workers
        assert os.sched_getscheduler(tuner) == policy
        assert all(os.sched_getscheduler(w) == policy for w in workers)
        assert os.sched_getscheduler(0) == os.SCHED_OTHER


class FakeLoad:
    """A load signal: CPU seconds of a process that keeps `level` cores busy
    (settable), integrated over the clock `clock` (default: real time)."""

    def __init__(self, level, clock=time.monotonic):
        self.level, self.clock = level, clock
        self.cpu, self.at = 0.0, clock()

    def __call__(self):
        now = self.clock()
        self.cpu += self.level * (now - self.at)
        self.at = now
        return self.cpu


class StepClock:
    """A clock that moves SAMPLE_S on each reading (no real time needed)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        from neoflow.runtime.tuner_process import SAMPLE_S
        self.t += SAMPLE_S
        return self.t


def test_in_step_trials_run_at_normal_priority(tmp_path):
    """In-step tuning works only on trials the budget pays for, at normal
    priority (at idle priority a busy machine would never run them); its
    measuring worker with it."""
    opts = options(trials=4, timeout=60.0, source_hook=hook(set(), None, lambda n: HANG))
    with trainer("background", database=tmp_path / "t.sqlite", tuning_options=opts) as t:
        for b in batches(4):
            t.step(b)
        workers = wait_for(measuring_workers)
        assert workers and t._tuner._process.pid != os.getpid()
        assert all(os.sched_getscheduler(w) == os.SCHED_OTHER for w in workers)


def test_the_idle_gate_waits_while_training_keeps_every_core_busy():
    """IdleGate opens at once beside a process that leaves a core free and
    stays shut beside one that keeps (as many cores as it is told there are)
    busy, until stopped; the load signal and the clock are injected, so
    the machine's own load does not matter."""
    import threading
    from neoflow.runtime.tuner_process import IdleGate
    from neoflow.tune.measure import Cancelled
    stop = threading.Event()
    clock = StepClock()
    t0 = time.monotonic()
    IdleGate(0, stop, cores=1, reader=FakeLoad(0.0, clock), clock=clock).wait()
    IdleGate(0, stop, cores=2, reader=FakeLoad(1.0, clock), clock=clock).wait()
    assert time.monotonic() - t0 < 5
    threading.Timer(1.5, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(Cancelled):
        IdleGate(0, stop, cores=1, reader=FakeLoad(1.0, clock), clock=clock).wait()
    assert time.monotonic() - t0 >= 1.0
    busy = IdleGate(0, stop, cores=2, reader=FakeLoad(2.0, clock), clock=clock)
    assert [busy.busy() for _ in range(3)] == [False, True, True]   # (no interval at first)


def test_the_idle_gates_load_signal_is_the_processes_cpu_time():
    """The default load signal reads /proc: a sleeping process gains no CPU
    time, this one gains what it spends spinning (CPU time, not wall time:
    the machine's load does not change it)."""
    import subprocess
    import sys
    import threading
    from neoflow.runtime.tuner_process import IdleGate
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert wait_for(lambda: (proc_stat(sleeper.pid) or ["R"])[0] == "S", 30)
        gate = IdleGate(sleeper.pid, threading.Event())
        before = gate.reader()
        time.sleep(0.3)
        assert gate.reader() - before <= 0.02
    finally:
        sleeper.kill()
        sleeper.wait()
    gate = IdleGate(os.getpid(), threading.Event())
    before, spent = gate.reader(), time.process_time()
    while time.process_time() - spent < 0.3:
        pass
    assert gate.reader() - before >= 0.2


def test_the_in_step_load_signal_counts_the_whole_machine():
    """The in-step budget's load signal is the machine's busy CPU time (all
    processes), so it grows by at least what this process spends spinning."""
    from neoflow.runtime.tuner_process import machine_cpu_seconds
    before, spent = machine_cpu_seconds(), time.process_time()
    while time.process_time() - spent < 0.3:
        pass
    assert machine_cpu_seconds() - before >= 0.2
    assert machine_cpu_seconds(exclude=os.getpid()) < machine_cpu_seconds()


def test_a_busy_trainer_starts_no_tuner_process_until_a_core_is_free(tmp_path, monkeypatch):
    """Isolated measuring: while training keeps every core busy (the load
    signal says so) the tuner process is not even forked; once a core is
    free, it starts."""
    from neoflow.runtime.tuner_process import TunerProcess
    load = FakeLoad(2.0)
    monkeypatch.setattr(TunerProcess, "load_signal", staticmethod(load))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    data = batches(8)
    with trainer("background", database=tmp_path / "t.sqlite",
                 tuning_options=options(trials=2, budget_s=60, measure="isolated")) as t:
        for n in range(8):
            t.step(data[n])
        assert t._tuner.started_at is not None, "the profile did not start the tuner"
        time.sleep(1.0)
        assert t._tuner._process is None, "the tuner forked beside a busy trainer"
        load.level = 0.5
        assert wait_for(lambda: t._tuner._process is not None, 30), "no start once idle"


def test_a_trial_that_does_not_pay_is_not_started(tmp_path, monkeypatch):
    """In-step tuning of a tiny network: a speed-up of a few microseconds a
    step never pays for a compile in a run of unknown length, so no tuner
    process starts; told the run is long (TuningOptions.steps), it does."""
    from neoflow.runtime.tuner_process import TunerProcess
    monkeypatch.setattr(TunerProcess, "load_signal", staticmethod(FakeLoad(2.0)))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    data = batches(8)
    for steps, forks in ((None, False), (10 ** 9, True)):
        with trainer("background", database=tmp_path / "t.sqlite",
                     tuning_options=options(trials=2, steps=steps)) as t:
            for n in range(8):
                t.step(data[n])
            assert t._tuner.started_at is not None
            forked = wait_for(lambda: t._tuner._process is not None, 1.0 if not forks else 30)
            assert bool(forked) == forks, steps
            assert t._tuner.budget is not None and t._tuner.in_step


KILLED_TRAINER = """
import sys, time
sys.path.insert(0, {tests!r})
from test_background import HANG, ENTRY, batches, options, trainer
opts = options(trials=4, budget_s=60, timeout=60.0,
               source_hook=lambda config, source: source.replace(ENTRY, HANG))
t = trainer("background", database={db!r}, tuning_options=opts)
for b in batches(4):
    t.step(b)
time.sleep(120)
"""


def test_the_tuner_stops_when_the_trainer_is_killed(tmp_path):
    """SIGKILL of the training process (no close, no atexit) still ends the
    tuner process and its worker hung in a candidate."""
    import signal
    import subprocess
    import sys
    script = tmp_path / "train.py"
    script.write_text(KILLED_TRAINER.format(tests=os.path.dirname(__file__),
                                            db=str(tmp_path / "t.sqlite")))
    proc = subprocess.Popen([sys.executable, str(script)])
    try:
        below = wait_for(lambda: measuring_workers(proc.pid) and descendants(proc.pid), 120)
        assert below, "the tuner started no worker"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert wait_for(lambda: not any(map(alive, below)), 30), "tuner processes outlived the trainer"


@pytest.mark.parametrize("kind", ["unopenable", "corrupt"])
def test_an_unusable_database_warns_once_and_tunes_in_memory(tmp_path, kind):
    if kind == "unopenable":       # its folder cannot be made: a file stands there
        (tmp_path / "file").write_text("not a folder")
        path = tmp_path / "file" / "t.sqlite"
    else:
        path = tmp_path / "t.sqlite"
        path.write_bytes(b"this is not an SQLite database" * 100)
    data = batches(6)
    expected = losses_off(data)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trainer("background", database=path,
                     tuning_options=options(trials=1, budget_s=5)) as t:
            got = [t.step(b) for b in data]
    warned = [w for w in caught if issubclass(w.category, DatabaseWarning)]
    assert len(warned) == 1, [str(w.message) for w in warned]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_ahead_then_a_second_run_starts_tuned(tmp_path):
    path = tmp_path / "t.sqlite"
    opts = options(trials=2, budget_s=60)
    data = batches(5)
    expected = losses_off(data)
    with trainer("ahead", database=path, tuning_options=opts) as first:
        stats = first.stats()
        assert stats["kernels_tuned"] == stats["kernels_distinct"]
        assert stats["tuning_s"] > 0
        assert stats["time_to_first_step_s"] is None
        got = [first.step(b) for b in data]
        assert first.stats()["time_to_first_step_s"] > stats["tuning_s"]
        tuned = {key: c.to_json() for key, c in first._tuner.results.items()}
        default = [default_config(k).to_json() for k in first.kernels]
        assert first.stats()["swaps"] == sum(tuned[k.key] != d for k, d in
                                             zip(first.kernels, default))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    with trainer("background", database=path, tuning_options=opts) as second:
        step = second._executor.program
        assert all(step.from_database)
        assert [c.to_json() for c in step.configs] == [tuned[k.key] for k in second.kernels]
        assert second.stats()["kernels_tuned"] >= 1       # those with `trials` stored
        more = batches(60, seed=1)      # in-step trials of the others need steps to be judged
        got = train_while_tuning(second, more)
        stats, budget = second.stats(), second._tuner.budget
        assert stats["tuning_done"]
        assert stats["swaps"] == (budget.trials_run if budget is not None else 0)
        assert stats["kernels_tuned"] == stats["kernels_distinct"]
    np.testing.assert_allclose(got, losses_off(more), rtol=1e-4, atol=1e-6)


def test_tuning_off_uses_the_databases_schedule(tmp_path):
    with trainer() as t:
        kernels = t.kernels
    n, kernel = max(enumerate(kernels), key=lambda nk: len(nk[1].stages))
    default = default_config(kernel).to_json()
    stored = next(c for c in (sample_config(kernel, s) for s in range(50))
                  if c.to_json() != default)
    hw = detect().fingerprint
    with Database(tmp_path / "t.sqlite") as db:
        db.offer(Record(kernel.key, "cpu", hw, stored, 1e-6, 1, 1, "stored"))
    data = batches(5)
    expected = losses_off(data)
    with trainer("off", database=tmp_path / "t.sqlite") as t:
        step = t._executor.program
        assert step.configs[n].to_json() == stored.to_json() and step.from_database[n]
        assert t.stats()["kernels_tuned"] == 1
        got = [t.step(b) for b in data]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_stats_report_time_shares_and_history():
    data = batches(6)
    with trainer() as t:
        for b in data:
            t.step(b)
        stats = t.stats()
    assert stats["time_to_first_step_s"] > 0 and stats["steps"] == 6
    times = [s for s, _ in stats["step_history"]]
    assert len(times) == 6 and times == sorted(times)
    profile = stats["kernel_profile"]
    assert len(profile) == stats["kernels"]
    assert sum(r["share"] for r in profile) == pytest.approx(1.0)
    assert [r["ms"] for r in profile] == sorted((r["ms"] for r in profile), reverse=True)


def test_progress_line(capsys):
    with trainer(progress=True) as t:
        for b in batches(3):
            t.step(b)
    err = capsys.readouterr().err
    assert "training" in err and "loss" in err and "ms/step" in err


@pytest.mark.parametrize("opts, message", [
    (dict(workers=64), "workers=64"),
    (dict(budget_s=0), "budget_s"),
    (dict(trials=0), "trials"),
    (dict(priority="high"), "priority"),
])
def test_bad_tuning_options(opts, message):
    with pytest.raises(nf.runtime.TuningOptionsError, match=message):
        trainer("background", tuning_options=nf.TuningOptions(**opts))
