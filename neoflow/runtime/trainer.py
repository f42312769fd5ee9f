"""nf.Trainer: trains a loss with an optimizer, one compiled step at a time.

At construction the trainer builds the training graph (graph.training),
plans its buffers (graph.memory), initialises the parameters and compiles
the step through an execution backend (the executor), each kernel under the
best schedule the tuning database knows. `step(feed)` first swaps in the
kernels the background tuner has made ready, then copies the batch into
the input buffers, sets the optimizer's per-step scalars, runs the step,
checks the loss and returns it. Steps 2 and 3 run kernel by kernel to
measure each one's share of the step time; so do the four after a swap,
which run the new and the replaced kernels in turn: a new kernel slower in
the step than the one it replaced (the tuner measured it alone) is
swapped back. With
tuning="background" the tuner (runtime.background, in a child process at
idle priority: runtime.tuner_process) then starts on the largest shares;
with "ahead" it has run to its budget before the step is compiled, and its
results are swapped in (and checked) like the tuner's.

Hands on: the public `Trainer` (API.md, "Training").
"""
import math
import os
import queue
import sqlite3
import statistics
import time
import warnings
from collections import deque
from contextlib import closing

import numpy as np

from ..errors import CompilerNotFoundError, InputError, NeoFlowError
from ..graph.memory import plan_buffers
from ..graph.partition import fuse_training_graph
from ..graph.training import training_graph
from ..te import Tensor
from ..te.feed import as_input_array
from ..te.random import random_states, state_feed
from ..te.scan import is_scan
from ..te.tensor import ParameterOp, PlaceholderOp
from ..te.visit import topo_tensors
from ..tune.database import Database, DatabaseWarning, best_configs
from ..tune.hardware import detect
from ..tune.progress import Progress
from ..tune.tuner import estimated_shares
from . import checkpoint
from .background import BackgroundTuner, TuningOptions, database_path
from .executor import Executor
from .feeds import FeedCheck, check_feed
from .init import initial_value
from .reference import ReferenceBackend
from .scan_function import ScanBackend
from .tuner_process import TunerProcess

TUNING = ("off", "background", "ahead")
TARGETS = ("cpu", "cuda")
PRECISIONS = ("fp32", "bf16")
NAN_CHECKS = ("warn", "error", "off")
BACKENDS = ("auto", "native", "reference")
RECENT_STEPS = 50  # steps the median "step_ms" is taken over
PROFILE_STEPS = 2  # steps timed kernel by kernel from step 2
CHECK_STEPS = 4    # steps after a swap, timed kernel by kernel: new, replaced, new, replaced
REVERT_SLOWER = 1.1  # a swapped-in kernel this much slower in the step is swapped back
RUN_COUNTERS = 1 << 63  # random draws of run() count from here (steps from 1)
HISTORY = 20000    # (time, ms) points kept in "step_history"; beyond, every other is dropped


class NonFiniteLossError(NeoFlowError):
    """The loss of a step was NaN or infinite (nan_check="error")."""


class NonFiniteLossWarning(RuntimeWarning):
    """The loss of a step was NaN or infinite (nan_check="warn")."""


class Trainer:
    """Trains every nf.parameter that `loss` depends on (except requires_grad=False
    ones) with `optimizer`.

    `seed` seeds the parameter initialisers (see runtime.init) and the
    random tensors (te/random.py: step n draws with counter n); `nan_check`
    says what a NaN or infinite loss does: "warn" (NonFiniteLossWarning with
    the step number), "error" (NonFiniteLossError, raised after that step's
    update) or "off". `backend` picks the execution backend: "native"
    (generated code), "reference" (nf.evaluate; exact and slow) or "auto".
    `target="cuda"` runs the step as Triton kernels over device buffers and
    `precision="bf16"` (cuda only) follows torch.autocast (docs/gpu.md);
    `fusion=False` runs one kernel per compute (no inlining; for debugging);
    `nf.explain(trainer)` lists the kernels and the fusion decisions.
    `tuning`: "off" (the database's schedules, else defaults), "background"
    (train at once; tuned kernels swapped in between steps) or "ahead"
    (tune to a budget, then train); `tuning_options`: an nf.TuningOptions
    (workers, budget, trials per kernel); `progress=True` shows a live line
    (step, loss, ms/step, kernels tuned / total).
    `quick_start=True` (native backend): kernels not in the disk cache yet
    start on quick builds (a third of the compile time, slower code) while
    the optimised builds compile in the background and replace them between
    steps -- an earlier first step, usually fewer steps in the first ten
    seconds, and float32 results of the first steps that can differ in the
    last bits from the default's, which waits for the optimised builds and
    is reproducible bit for bit (docs/training.md, "Quick start").

    >>> with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), tuning="off") as trainer:
    ...     for xb, yb in batches:
    ...         loss_value = trainer.step({x: xb, y: yb})
    """

    def __init__(self, loss, optimizer, target="cpu", tuning="off", database=None, seed=0,
                 nan_check="warn", backend="auto", fusion=True, *, tuning_options=None,
                 progress=False, precision="fp32", quick_start=False):
        started = time.perf_counter()
        self._started = started
        self._closed, self._tuner, self._bar = False, None, None
        options = tuning_options if tuning_options is not None else TuningOptions()
        _check_options(target, tuning, nan_check, backend, options, precision)
        self.target, self.tuning, self.database = target, tuning, database
        self.precision = precision
        self.nan_check, self.seed = nan_check, seed
        self.fusion = bool(fusion)
        self.unfused_graph = training_graph(loss, optimizer)
        if target == "cuda" and self.unfused_graph.randoms:
            raise NeoFlowError(f"Trainer: random tensor '{self.unfused_graph.randoms[0].name}' "
                               "(e.g. dropout) is not supported on target='cuda' yet; train it "
                               "on target='cpu'")
        self.graph, self.partition = fuse_training_graph(self.unfused_graph, self.fusion)
        self.optimizer = optimizer
        self.kernels = self.partition.kernels
        self.plan = plan_buffers(self.graph, self.kernels)
        scans = any(is_scan(t) for t in topo_tensors(self.graph.outputs))
        if scans and tuning != "off":
            raise NeoFlowError(f"Trainer: tuning={tuning!r} does not cover a loss with nf.scan "
                               "yet; use tuning='off'")
        if scans and target == "cuda":
            raise NeoFlowError("Trainer: a loss with nf.scan runs on target='cpu' only (the "
                               "Triton backend has no scan loop yet)")
        self._ready = queue.Queue()     # Candidates compiled by the tuner, swapped in by step()
        self._tuning_s = 0.0
        lookup, start = database, {}
        self._db_path = None
        if tuning != "off":
            path = self._db_path = database_path(database)
            lookup = path if path is not None else False
            self._tuner = self._make_tuner(path, options, tuning, progress)
        if tuning == "ahead":   # start from the schedules before tuning; swap the tuned in
            found = best_configs(self.kernels, target, lookup)
            start = {k.key: c for k, c in zip(self.kernels, found) if c is not None}
            lookup = False
            self._tune_ahead()
        self._backend = _make_backend(backend, target, lookup, start, precision,
                                      quick_start and tuning != "ahead")
        self._convert = getattr(self._backend, "feed_value", as_input_array)
        if scans:
            self._backend = ScanBackend(self.graph, self._backend)
        if tuning != "off" and self._backend.name != "native":
            self._tuner.close()
            raise NeoFlowError(f"Trainer: tuning={tuning!r} needs the native backend (a C "
                               "compiler); use tuning='off' with the reference backend")
        self._executor = Executor(self.graph, self.kernels, self.plan, self._backend)
        self._params = {p.name: p for p in self.graph.params + self.graph.frozen}
        self._state = {t.name: t for slots in self.graph.state.values() for t in slots.values()}
        for p in self._params.values():
            self._executor.write(p, initial_value(p, seed))
        for t in self._state.values():
            self._executor.write(t, 0)
        self._forward = {}
        self._check_step_feed = FeedCheck(self.graph.inputs, self.graph.inputs, "step",
                                          self._convert)
        views = self._executor.buffer   # (steps write these arrays; built once)
        self._input_views = [(id(t), views(t)) for t in self.graph.inputs]
        self._scalar_views = [(name, views(t)) for (name, _), t in self.graph.scalars.items()]
        self._steps = self._runs = 0
        self._step_times = deque(maxlen=RECENT_STEPS)
        self._history, self._history_every = [], 1
        self._profile_left, self._profile = PROFILE_STEPS, None
        self._kernel_s = None
        self._swaps, self._swap_times = 0, []
        self._checks, self._reverts = {}, 0   # index -> [replaced, new, times of each]
        self._compile_s = time.perf_counter() - started - self._tuning_s
        self._first_step_s = None
        if progress:
            self._bar = Progress(None, "training", unit="step")
        if tuning == "ahead":
            for key, config in self._tuner.results.items():
                self._compile_swap(key, config)

    def _make_tuner(self, path, options, tuning, progress):
        unique = list({k.key: k for k in self.kernels}.values())
        workers = options.worker_count()
        if tuning == "ahead":   # nothing else runs: the workers share the cores for compiling
            bar = Progress(None, "tuning ahead", enabled=progress)
            return BackgroundTuner(unique, path, options, self.target,
                                   jobs=max(1, (os.cpu_count() or 1) // workers), progress=bar)
        return TunerProcess(BackgroundTuner(unique, path, options, self.target, jobs=1),
                            prepare=self._compile, on_result=self._compile_swap,
                            view=self._tuning_view)

    def _tuning_view(self):
        """(steps done, {kernel key: [Config of each kernel of that structure]}):
        what the background tuner's budget reads (runtime/step_tuning.py)."""
        running = {}
        for kernel, config in zip(self.kernels, self._executor.program.configs):
            running.setdefault(kernel.key, []).append(config)
        return self._steps, running

    def _tune_ahead(self):
        """Tune every kernel to the budget (order and shares by the analytic
        estimate); the results are in the tuner's `results`."""
        t0 = time.perf_counter()
        tuner = self._tuner
        kernels = list(tuner.kernels.values())
        try:
            tuner.start(dict(zip(tuner.kernels, estimated_shares(kernels, detect()))))
            tuner.wait()
        except BaseException:
            tuner.close()
            raise
        finally:
            if tuner.progress is not None:
                tuner.progress.close()
        self._tuning_s = time.perf_counter() - t0

    def _compile_swap(self, key, config):
        """(The tuner's listener thread, or construction with "ahead".)
        Compile the kernels of `key` under `config` and queue them for
        step() to swap in."""
        for candidate in self._compile(key, config):
            self._ready.put(candidate)

    def _compile(self, key, config):
        """The kernels of `key` that do not run `config` yet, compiled under it."""
        step = self._executor.program
        return [step.prepare(n, config) for n, kernel in enumerate(self.kernels)
                if kernel.key == key and step.configs[n].to_json() != config.to_json()]

    # -- training ----------------------------------------------------------
    def step(self, feed):
        """One training step on the batch `feed` ({placeholder or name: array});
        returns the loss before the update, as a float.

        >>> trainer.step({x: xb, "labels": yb})
        2.302...
        """
        self._check_open()
        t0 = time.perf_counter()
        ex, graph = self._executor, self.graph
        values = self._check_step_feed(feed)
        scalars = self.optimizer.scalar_values(self._steps + 1)  # may raise: a schedule's end
        if not self._ready.empty():
            self._apply_swaps(t0)
        write = ex.memory.write
        for key, target in self._input_views:
            write(target, values[key])
        self._steps += 1
        for name, target in self._scalar_views:
            write(target, scalars[name])
        if graph.randoms:
            for t, state in zip(graph.randoms, self._random_states(graph.randoms, self._steps)):
                ex.write(t, state)
        profile = (self._steps > 1 and self._profile_left > 0 and self._backend.name == "native"
                   and not ex.program.upgrading)    # (profile the optimised kernels)
        if profile:
            self._check_phase()
        times = ex.step(profile=profile)
        loss = float(ex.buffer(graph.loss))
        done = time.perf_counter()
        if profile:
            self._record_profile(times)
        self._record_time(t0, done, loss)
        if not math.isfinite(loss) and self.nan_check != "off":
            message = f"step {self._steps}: the loss '{graph.loss.name}' is {loss}"
            if self.nan_check == "error":
                raise NonFiniteLossError(message + " (the step's update has been applied)")
            warnings.warn(message, NonFiniteLossWarning, stacklevel=2)
        return loss

    def _apply_swaps(self, now):
        """Swap in every kernel the tuner has made ready (between two steps),
        once the kernels running have been profiled (to compare with)."""
        if self._kernel_s is None:
            return
        step, swapped = self._executor.program, 0
        while True:
            try:
                candidate = self._ready.get_nowait()
            except queue.Empty:
                break
            old = step.swap(candidate)
            check = self._checks.get(candidate.index)
            if check is None:
                self._checks[candidate.index] = [old, candidate, [], []]
            else:
                check[1:] = [candidate, [], []]
            swapped += 1
        if swapped:
            self._swaps += swapped
            self._swap_times.append(now - self._started)
            self._profile_left, self._profile = CHECK_STEPS, None

    def _check_phase(self):
        """On a checking step, run the new kernels (even count left) or the
        ones they replaced (odd)."""
        step, new = self._executor.program, self._profile_left % 2 == 0
        for old, candidate, _, _ in self._checks.values():
            step.swap(candidate if new else old)

    def _record_profile(self, times):
        """Keep each kernel's fastest time over the profiled steps; when they
        are done, start the background tuner on the largest shares."""
        new = self._profile_left % 2 == 0
        for n, check in self._checks.items():
            check[3 if new else 2].append(times[n])
        self._profile = times if self._profile is None else list(map(min, self._profile, times))
        self._profile_left -= 1
        if self._profile_left:
            return
        self._kernel_s = self._profile
        self._settle_checks()
        tuner = self._tuner
        if self.tuning == "background" and tuner.started_at is None:
            shares = {}
            for kernel, seconds in zip(self.kernels, self._kernel_s):
                shares[kernel.key] = shares.get(kernel.key, 0.0) + seconds
            tuner.start(shares)

    def _settle_checks(self):
        """Keep each new kernel unless it ran slower in the checking steps
        than the one it replaced (fastest time of each); then that one runs."""
        step = self._executor.program
        judge = getattr(self._tuner, "judge", None)   # in-step trials: the tuner's verdict
        verdicts = judge([(n, self.kernels[n].key, c.config, min(o), min(s))
                          for n, (_, c, o, s) in self._checks.items()]) if judge else {}
        for n, (old, candidate, old_s, new_s) in self._checks.items():
            keep = verdicts.get(n, min(new_s) <= min(old_s) * REVERT_SLOWER)
            step.swap(candidate if keep else old)
            self._kernel_s[n] = min(new_s if keep else old_s)
            self._reverts += not keep
            if not keep and n not in verdicts:
                self._forget(self.kernels[n].key)
        self._checks = {}

    def _forget(self, key):
        """Drop the database's best schedule of kernel `key`: it lost inside
        the step, so later runs should not start from it."""
        if self._db_path is None:
            return
        try:
            with closing(Database(self._db_path)) as db:
                db.forget(key, self.target, detect().fingerprint)
        except (NeoFlowError, OSError, sqlite3.Error) as e:
            warnings.warn(f"tuning database {self._db_path}: could not drop a schedule that "
                          f"lost in the step ({e})", DatabaseWarning, stacklevel=2)

    def _record_time(self, t0, done, loss):
        self._step_times.append(done - t0)
        if self._first_step_s is None:
            self._first_step_s = done - self._started
        if self._steps % self._history_every == 0:
            self._history.append((done - self._started, (done - t0) * 1e3))
            if len(self._history) >= HISTORY:
                self._history, self._history_every = self._history[::2], self._history_every * 2
        if self._bar is not None:
            facts = {"loss": f"{loss:.4f}", "ms/step": f"{(done - t0) * 1e3:.2f}"}
            if self._tuner is not None:
                facts["tuned"] = f"{len(self._tuner.tuned)}/{self._tuner.total}"
            self._bar.update(1, facts=facts)

    def run(self, tensors, feed):
        """Compute `tensors` (a Tensor or a list) with the current parameters;
        returns an array, or a tuple of arrays for a list. Nothing is updated.

        Parameters are matched by identity, else by name (same shape and
        dtype), so a copy of the network built for another batch size runs
        with the trained values.

        >>> (logits_value,) = trainer.run([logits], {x: xb})
        """
        self._check_open()
        single = isinstance(tensors, Tensor)
        outs = [tensors] if single else list(tensors)
        for t in outs:
            if not isinstance(t, Tensor):
                raise InputError(f"run: expected Tensors to compute, got {t!r}")
        key = tuple(id(t) for t in outs)
        entry = self._forward.get(key)
        if entry is None:
            entry = self._forward[key] = self._forward_program(outs)
        _, fn, sources, placeholders = entry
        randoms = random_states(t for t, _ in sources)
        names = {t.name for t in placeholders}
        known = placeholders + [t for t in self.graph.inputs if t.name not in names]
        values = check_feed(feed, placeholders, known, "run", self._convert)
        self._runs += 1
        drawn = dict(zip(map(id, randoms), self._random_states(randoms, RUN_COUNTERS + self._runs)))
        args = [values[id(t)] if isinstance(t.op, PlaceholderOp) else drawn[id(t)]
                if id(t) in drawn else self._executor.buffer(src) for t, src in sources]
        results = tuple(fn(*args))
        return results[0] if single else results

    def _random_states(self, randoms, counter):
        """The state arrays of `randoms` for draw `counter` under the trainer's seed."""
        feed = state_feed(randoms, self.seed, counter)
        return [feed[id(t)] for t in randoms]

    def _forward_program(self, outs):
        """(outs, function, [(leaf, trainer tensor holding its value)], placeholders)."""
        leaves = [t for t in topo_tensors(outs) if not t.is_compute and not is_scan(t)]
        sources = []
        for t in leaves:
            src = t
            if isinstance(t.op, ParameterOp):
                src = self._params.get(t.name)
                if src is None:
                    raise InputError(f"run: parameter '{t.name}' is not part of this "
                                     "trainer's loss; the trainer holds no value for it")
                if (src.shape, src.dtype) != (t.shape, t.dtype):
                    raise InputError(f"run: parameter '{t.name}' is {t.shape} {t.dtype} but "
                                     f"the trainer's is {src.shape} {src.dtype}")
            sources.append((t, src))
        placeholders = [t for t in leaves if isinstance(t.op, PlaceholderOp)]
        return outs, self._backend.function(outs, leaves), sources, placeholders

    # -- parameters and checkpoints -----------------------------------------
    def parameters(self):
        """{name: ndarray} copies of every parameter (trainable, then requires_grad=False).

        >>> trainer.parameters()["w"].shape
        (10, 64)
        """
        self._check_open()
        return {name: self._executor.host(p) for name, p in self._params.items()}

    def load_parameters(self, values):
        """Overwrite parameters by name ({name: ndarray}); the shape and dtype must match.

        >>> trainer.load_parameters({"w": np.zeros((10, 64), np.float32)})
        """
        self._check_open()
        self._load(values, self._params, "load_parameters", "parameter")

    def save(self, path):
        """Write parameters, optimizer state and step count to `path` (.npz).

        >>> trainer.save("mlp.npz")
        """
        self._check_open()
        state = {name: self._executor.host(t) for name, t in self._state.items()}
        checkpoint.write(path, self.parameters(), state, self._steps)

    def load(self, path):
        """Restore what `save` wrote; the graph must have the same parameters.

        >>> trainer.load("mlp.npz")
        """
        self._check_open()
        params, state, steps = checkpoint.read(path)
        for names, expected, kind in ((params, self._params, "parameter"),
                                      (state, self._state, "optimizer state")):
            missing = sorted(set(expected) - set(names))
            if missing:
                raise InputError(f"load: checkpoint {path!s} has no {kind} "
                                 f"'{missing[0]}' (missing: {', '.join(missing)})")
        self._load(params, self._params, f"load {path!s}", "parameter")
        self._load(state, self._state, f"load {path!s}", "optimizer state")
        self._steps = steps

    def _load(self, values, known, what, kind):
        arrays = {}
        for name, value in values.items():
            t = known.get(name)
            if t is None:
                raise InputError(f"{what}: no {kind} named '{name}' in this trainer "
                                 f"(known: {', '.join(sorted(known))})")
            arrays[name] = as_input_array(t, value)
        for name, array in arrays.items():
            self._executor.write(known[name], array)

    # -- reports -------------------------------------------------------------
    def stats(self):
        """Counters and timings: "kernels" (run per step), "steps",
        "time_to_first_step_s", "step_ms" (median of recent steps),
        "step_history" ([(seconds since construction began, ms of that
        step)]), "kernel_profile" (per kernel: ms and share of the step,
        largest first), tuning progress ("kernels_tuned" of
        "kernels_distinct", "swaps", "swaps_reverted", "swap_times_s",
        "tuning_errors"),
        "compile_s", "tuning_s", "backend", "kernels_quick" (kernels still on
        their quick build: quick_start).

        >>> trainer.stats()["step_ms"]
        0.42
        """
        times = list(self._step_times)
        tuner = self._tuner
        if tuner is not None:
            tuned, errors = len(tuner.tuned), list(tuner.errors)
        else:
            step = self._executor.program if self._executor is not None else None
            used = getattr(step, "from_database", [])
            tuned, errors = len({k.key for k, db in zip(self.kernels, used) if db}), []
        tuning_s = self._tuning_s
        program = self._executor.program if self._executor is not None else None
        quick = getattr(program, "quick_kernels", None)
        if self.tuning == "background" and tuner.started_at is not None:
            tuning_s = (tuner.finished_at if tuner.done else time.monotonic()) - tuner.started_at
        return {"kernels": len(self.kernels), "kernels_unfused": len(self.unfused_graph.order),
                "kernels_distinct": len({k.key for k in self.kernels}),
                "steps": self._steps,
                "time_to_first_step_s": self._first_step_s,
                "step_ms": statistics.median(times) * 1e3 if times else None,
                "step_history": list(self._history),
                "kernel_profile": self._profile_report(),
                "tuning": self.tuning, "kernels_tuned": tuned, "swaps": self._swaps,
                "swaps_reverted": self._reverts,
                "swap_times_s": list(self._swap_times), "tuning_errors": errors,
                "tuning_done": tuner is None or (tuner.started_at is not None and tuner.done),
                "tuning_s": tuning_s, "compile_s": self._compile_s,
                "kernels_quick": quick() if quick is not None else 0,
                "backend": self._backend.name}

    def _profile_report(self):
        if self._kernel_s is None:
            return []
        total = sum(self._kernel_s) or 1.0
        rows = [{"index": n, "kernel": _kernel_name(k), "ms": s * 1e3,
                 "share": s / total} for n, (k, s) in enumerate(zip(self.kernels, self._kernel_s))]
        return sorted(rows, key=lambda r: -r["ms"])

    def memory_stats(self):
        """Planned bytes: "peak_bytes" and its parts (parameters, optimizer
        state, inputs, activations), and the activations a plan without
        buffer reuse would need.

        >>> trainer.memory_stats()["peak_bytes"]
        1234560
        """
        return self.plan.stats(self.graph)

    # -- lifetime ------------------------------------------------------------
    def close(self):
        """Stop the background tuner (its worker processes end; the database
        keeps every result stored so far) and release the buffers; the
        trainer cannot be used afterwards."""
        self._closed = True
        if self._executor is not None and hasattr(self._executor.program, "cancel_upgrade"):
            self._executor.program.cancel_upgrade()
        if self._tuner is not None:
            self._tuner.close()
        if self._bar is not None:
            self._bar.close()
        self._executor = None
        self._forward = {}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check_open(self):
        if self._closed:
            raise NeoFlowError("this Trainer is closed")


def _kernel_name(kernel):
    """A short name: its stages, or the first and last of many."""
    names = [t.name for t in kernel.stages]
    if len(names) <= 3:
        return " ".join(names)
    return f"{names[0]} .. {names[-1]} ({len(names)} stages)"


def _check_options(target, tuning, nan_check, backend, options, precision):
    if target not in TARGETS:
        raise NeoFlowError(f"Trainer: target={target!r}; expected one of {TARGETS}")
    if precision not in PRECISIONS:
        raise NeoFlowError(f"Trainer: precision={precision!r}; expected one of {PRECISIONS}")
    if precision != "fp32" and target != "cuda":
        raise NeoFlowError(f"Trainer: precision={precision!r} needs target='cuda' (bf16 "
                           "mixed precision is a GPU policy; the CPU backend computes in fp32)")
    if target == "cuda" and (tuning != "off" or backend == "reference"):
        raise NeoFlowError(f"Trainer: target='cuda' runs the Triton backend with "
                           f"tuning='off' (got tuning={tuning!r}, backend={backend!r}); "
                           "GPU kernels are tuned ahead with nf.tune(target='cuda')")
    for what, value, allowed in (("tuning", tuning, TUNING), ("nan_check", nan_check, NAN_CHECKS),
                                 ("backend", backend, BACKENDS)):
        if value not in allowed:
            raise NeoFlowError(f"Trainer: {what}={value!r}; expected one of {allowed}")
    if not isinstance(options, TuningOptions):
        raise NeoFlowError(f"Trainer: tuning_options must be an nf.TuningOptions, got "
                           f"{type(options).__name__}")
    if tuning != "off" and backend == "reference":
        raise NeoFlowError(f"Trainer: tuning={tuning!r} needs the native backend; the "
                           "reference backend runs no schedules (use tuning='off')")
    options.check()


def _make_backend(name, target, database, start, precision="fp32", quick=False):
    """The execution backend `name`; "auto" is native unless no C compiler is
    found (on target "cuda": the Triton backend, runtime/cuda.py). Native
    kernels take their schedule from `start` ({key: Config}),
    else from the tuning `database`, else the default; `quick`: they start
    on quick builds where the optimised ones are not cached (runtime/native.py)."""
    if target == "cuda":
        from .cuda import CudaBackend
        return CudaBackend(database, tuned=start, precision=precision)
    if name == "auto":
        from ..toolchain.compiler import find_compiler
        try:
            find_compiler()
        except CompilerNotFoundError as e:
            warnings.warn(f"Trainer: running on the (slow) reference backend: {e}",
                          RuntimeWarning, stacklevel=3)
            name = "reference"
    if name == "reference":
        return ReferenceBackend()
    from .native import NativeBackend
    return NativeBackend(target, database, tuned=start, quick=quick)
