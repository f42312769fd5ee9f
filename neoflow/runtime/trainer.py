"""nf.Trainer: trains a loss with an optimizer, one compiled step at a time.

At construction the trainer builds the training graph (graph.training),
plans its buffers (graph.memory), initialises the parameters and compiles
the step through an execution backend (the executor). `step(feed)` copies
the batch into the input buffers, sets the optimizer's per-step scalars,
runs the step, checks the loss and returns it.

Hands on: the public `Trainer` (API.md, "Training").
"""
import math
import statistics
import time
import warnings
from collections import deque

import numpy as np

from ..errors import CompilerNotFoundError, InputError, NeoFlowError
from ..graph.memory import plan_buffers
from ..graph.partition import fuse_training_graph
from ..graph.training import training_graph
from ..te import Tensor
from ..te.feed import as_input_array
from ..te.tensor import ParameterOp, PlaceholderOp
from ..te.visit import topo_tensors
from . import checkpoint
from .executor import Executor
from .feeds import check_feed
from .init import initial_value
from .reference import ReferenceBackend

TUNING = ("off", "background", "ahead")
NAN_CHECKS = ("warn", "error", "off")
BACKENDS = ("auto", "native", "reference")
RECENT_STEPS = 50  # steps the median "step_ms" is taken over


class NonFiniteLossError(NeoFlowError):
    """The loss of a step was NaN or infinite (nan_check="error")."""


class NonFiniteLossWarning(RuntimeWarning):
    """The loss of a step was NaN or infinite (nan_check="warn")."""


class Trainer:
    """Trains every nf.parameter that `loss` depends on (except requires_grad=False
    ones) with `optimizer`.

    `seed` seeds the parameter initialisers (see runtime.init); `nan_check`
    says what a NaN or infinite loss does: "warn" (NonFiniteLossWarning with
    the step number), "error" (NonFiniteLossError, raised after that step's
    update) or "off". `backend` picks the execution backend: "native"
    (generated code), "reference" (nf.evaluate; exact and slow) or "auto".
    `fusion=False` runs one kernel per compute (no inlining; for debugging);
    `nf.explain(trainer)` lists the kernels and the fusion decisions.

    >>> with nf.Trainer(loss, optimizer=nf.optim.SGD(lr=0.1), tuning="off") as trainer:
    ...     for xb, yb in batches:
    ...         loss_value = trainer.step({x: xb, y: yb})
    """

    def __init__(self, loss, optimizer, target="cpu", tuning="off", database=None, seed=0,
                 nan_check="warn", backend="auto", fusion=True):
        started = time.perf_counter()
        _check_options(target, tuning, nan_check, backend)
        self.target, self.tuning, self.database = target, tuning, database
        self.nan_check, self.seed = nan_check, seed
        self.fusion = bool(fusion)
        self.unfused_graph = training_graph(loss, optimizer)
        self.graph, self.partition = fuse_training_graph(self.unfused_graph, self.fusion)
        self.optimizer = optimizer
        self.kernels = self.partition.kernels
        self.plan = plan_buffers(self.graph, self.kernels)
        self._backend = _make_backend(backend)
        self._executor = Executor(self.graph, self.kernels, self.plan, self._backend)
        self._params = {p.name: p for p in self.graph.params + self.graph.frozen}
        self._state = {t.name: t for slots in self.graph.state.values() for t in slots.values()}
        for p in self._params.values():
            self._executor.buffer(p)[...] = initial_value(p, seed)
        for t in self._state.values():
            self._executor.buffer(t)[...] = 0
        self._forward = {}
        self._steps = 0
        self._step_times = deque(maxlen=RECENT_STEPS)
        self._started = started
        self._compile_s = time.perf_counter() - started
        self._first_step_s = None
        self._closed = False

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
        values = check_feed(feed, graph.inputs, graph.inputs, "step")
        for t in graph.inputs:
            np.copyto(ex.buffer(t), values[id(t)])
        self._steps += 1
        scalars = self.optimizer.scalar_values(self._steps)
        for (name, _), t in graph.scalars.items():
            ex.buffer(t)[...] = scalars[name]
        ex.step()
        loss = float(ex.buffer(graph.loss))
        done = time.perf_counter()
        self._step_times.append(done - t0)
        if self._first_step_s is None:
            self._first_step_s = done - self._started
        if not math.isfinite(loss) and self.nan_check != "off":
            message = f"step {self._steps}: the loss '{graph.loss.name}' is {loss}"
            if self.nan_check == "error":
                raise NonFiniteLossError(message + " (the step's update has been applied)")
            warnings.warn(message, NonFiniteLossWarning, stacklevel=2)
        return loss

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
        names = {t.name for t in placeholders}
        known = placeholders + [t for t in self.graph.inputs if t.name not in names]
        values = check_feed(feed, placeholders, known, "run")
        args = [values[id(t)] if isinstance(t.op, PlaceholderOp) else self._executor.buffer(src)
                for t, src in sources]
        results = tuple(fn(*args))
        return results[0] if single else results

    def _forward_program(self, outs):
        """(outs, function, [(leaf, trainer tensor holding its value)], placeholders)."""
        leaves = [t for t in topo_tensors(outs) if not t.is_compute]
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
        return {name: self._executor.buffer(p).copy() for name, p in self._params.items()}

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
        state = {name: self._executor.buffer(t).copy() for name, t in self._state.items()}
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
            np.copyto(self._executor.buffer(known[name]), array)

    # -- reports -------------------------------------------------------------
    def stats(self):
        """Counters and timings: "kernels" (run per step), "steps",
        "time_to_first_step_s", "step_ms" (median of recent steps),
        "kernels_tuned", "compile_s", "backend".

        >>> trainer.stats()["step_ms"]
        0.42
        """
        times = list(self._step_times)
        return {"kernels": len(self.kernels), "kernels_unfused": len(self.unfused_graph.order),
                "steps": self._steps,
                "time_to_first_step_s": self._first_step_s,
                "step_ms": statistics.median(times) * 1e3 if times else None,
                "kernels_tuned": 0, "compile_s": self._compile_s,
                "backend": self._backend.name}

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
        """Release the buffers; the trainer cannot be used afterwards."""
        self._closed = True
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


def _check_options(target, tuning, nan_check, backend):
    if target != "cpu":
        raise NeoFlowError(f"Trainer: target={target!r} is not supported; only 'cpu' for now")
    if tuning in ("background", "ahead"):
        raise NeoFlowError(f"Trainer: tuning={tuning!r} arrives with the runtime issue "
                           "(background tuning); use tuning='off' for now")
    for what, value, allowed in (("tuning", tuning, TUNING), ("nan_check", nan_check, NAN_CHECKS),
                                 ("backend", backend, BACKENDS)):
        if value not in allowed:
            raise NeoFlowError(f"Trainer: {what}={value!r}; expected one of {allowed}")


def _make_backend(name):
    """The execution backend `name`; "auto" is native unless no C compiler is found."""
    if name == "auto":
        from ..build.compiler import find_compiler
        try:
            find_compiler()
        except CompilerNotFoundError as e:
            warnings.warn(f"Trainer: running on the (slow) reference backend: {e}",
                          RuntimeWarning, stacklevel=3)
            name = "reference"
    if name == "reference":
        return ReferenceBackend()
    from .native import NativeBackend
    return NativeBackend()
