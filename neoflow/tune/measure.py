"""tune/measure: build candidate schedules and time them in an isolated
worker process (tune/worker.py). `Measurer` does it for a kernel's
Configs; `SourceMeasurer`, the half that runs where the timing happens,
for C sources generated elsewhere (a Ray node, tune/ray_runner.py).

A batch is lowered and compiled first, several compiles at once (each is
a compiler subprocess), then run one by one in the worker, so nothing else
competes with a measurement. The worker runs every candidate on the same
random inputs, checks its outputs against the kernel's default schedule and
reports the median of repeated timings. A candidate that does not compile,
reports an error, computes a wrong result, crashes the worker (a signal) or
runs past the timeout is recorded with that status and dropped; the worker
is started again for the next one. The tuner never goes down with it.
A `stop` event (set from another thread) ends a measurement within a
fraction of a second: the worker is killed and `Cancelled` raised.

Hands on: `Measurement`s (config, status, median seconds, detail).
"""
import json
import os
import select
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..toolchain import compile_c
from ..codegen.c import generate_c
from ..errors import NeoFlowError
from ..schedule import default_config, lower_program
from ..te import dtype as dt

WORKER = Path(__file__).with_name("worker.py")
RESTART_EVERY = 200      # runs per worker process (loaded libraries stay mapped)
STOP_POLL_S = 0.1        # how often a waiting measurement looks at the stop event
STATUSES = ("ok", "build", "error", "wrong", "crash", "timeout")


class MeasureError(NeoFlowError):
    """The kernel's default schedule itself cannot be built or run."""


class Cancelled(NeoFlowError):
    """Measuring stopped because its stop event was set (the batch is dropped)."""


@dataclass
class Measurement:
    """One candidate's outcome; `median_s` only when status is "ok".

    >>> m = Measurement(config, "ok", 0.0123, "")
    """
    config: object
    status: str
    median_s: float = None
    detail: str = ""
    hardware: str = ""       # the fingerprint of the machine that measured it (runners set it)


def kernel_source(kernel, config):
    """The C source of `kernel` alone under `config` (nf_main: inputs, outputs).

    >>> "nf_main(" in kernel_source(kernel, default_config(kernel))
    True
    """
    return generate_c(lower_program([kernel], [config], list(kernel.inputs),
                                    list(kernel.outputs)))


def worker_specs(kernel):
    """{"inputs": [[shape, dtype name]...], "outputs": [...]} of `kernel`, what
    the measuring worker allocates (plain JSON: it travels to other nodes).

    >>> worker_specs(kernel)["inputs"]
    [[[32, 16], 'float32'], [[16, 24], 'float32']]
    """
    def specs(tensors):
        return [[list(t.shape), dt.to_numpy(t.dtype).name] for t in tensors]
    return {"inputs": specs(kernel.inputs), "outputs": specs(kernel.outputs)}


class SourceMeasurer:
    """Builds and times C sources of one kernel's entry on this machine; a
    context manager. The machine-side half of measuring: a Ray node runs it
    on sources the driver generated (tune/ray_runner.py).

    `reference`: the source of the default schedule, the check every
    candidate must agree with; `specs`: worker_specs(kernel); `label`
    names the kernel in errors; `env`: variables set for the worker process
    (OMP_NUM_THREADS: the threads kernels are timed with); the rest as in
    Measurer.

    >>> with SourceMeasurer(src, worker_specs(kernel), timeout=5) as m:
    ...     [r] = m.measure_sources([(config, src)])
    """

    def __init__(self, reference, specs, *, timeout=10.0, repeats=5, min_time=0.05, seed=0,
                 jobs=None, stop=None, env=None, label="the kernel"):
        self.timeout, self.stop, self.label = float(timeout), stop, label
        self.repeats, self.min_time, self.seed = repeats, min_time, seed
        self.jobs = jobs or max(1, os.cpu_count() or 1)
        self.specs, self.env = specs, env
        self._proc, self._runs, self._buffer = None, 0, b""
        try:
            self._reference = _compile(reference)
        except NeoFlowError as e:
            raise MeasureError(f"the default schedule of {label} does not build: {e}") from None

    # -- building ----------------------------------------------------------
    def build_all(self, sources):
        """[(library path or None, error text)] for C `sources`, compiled in parallel."""
        def one(source):
            try:
                return _compile(source), ""
            except NeoFlowError as e:
                return None, str(e).splitlines()[0][:300]
        if len(sources) == 1 or self.jobs == 1:
            return [one(s) for s in sources]
        with ThreadPoolExecutor(self.jobs) as pool:
            return list(pool.map(one, sources))

    # -- measuring -----------------------------------------------------------
    def measure_sources(self, items):
        """Build then time (config, C source) pairs; one Measurement each, in order."""
        items = list(items)
        out = []
        self._check_stop()
        for (config, _), (path, error) in zip(items, self.build_all([s for _, s in items])):
            self._check_stop()
            if path is None:
                out.append(Measurement(config, "build", None, error))
            else:
                out.append(self._run(config, path))
        return out

    def _run(self, config, path):
        reply = self._request({"op": "run", "path": path, "repeats": self.repeats,
                               "min_time": self.min_time}, self.timeout)
        if isinstance(reply, Measurement):
            reply.config = config
            return reply
        if reply.get("status") == "ok":
            return Measurement(config, "ok", float(reply["median_s"]), "")
        return Measurement(config, reply.get("status", "error"), None, reply.get("detail", ""))

    def _request(self, message, timeout):
        """The worker's reply to `message`, or a Measurement saying how it died."""
        if self._proc is None or self._runs >= RESTART_EVERY:
            self._start()
        self._runs += 1
        return self._exchange(message, timeout)

    def _start(self):
        self.close()
        env = None if self.env is None else {**os.environ, **self.env}
        self._proc = subprocess.Popen(
            [sys.executable, "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, env=env)
        self._buffer, self._runs = b"", 0
        setup = {"op": "setup", "seed": self.seed, "reference": self._reference, **self.specs}
        reply = self._exchange(setup, max(60.0, self.timeout))
        if isinstance(reply, Measurement) or not reply.get("ok"):
            detail = reply.detail if isinstance(reply, Measurement) else reply.get("detail")
            self.close()
            raise MeasureError(f"the default schedule of {self.label} does not run in the "
                               f"measuring worker: {detail}")

    def _exchange(self, message, timeout):
        proc = self._proc
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except OSError:
            return self._died()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            self._check_stop()
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return Measurement(None, "timeout", None, f"no result within {timeout:g} s")
            wait = left if self.stop is None else min(left, STOP_POLL_S)
            ready, _, _ = select.select([proc.stdout], [], [], wait)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return self._died()
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def _died(self):
        code = self._proc.wait()
        self._proc = None
        if code < 0:
            name = signal.Signals(-code).name if -code in signal.valid_signals() else -code
            return Measurement(None, "crash", None, f"the worker died of signal {name}")
        return Measurement(None, "crash", None, f"the worker exited with status {code}")

    def _check_stop(self):
        if self.stop is not None and self.stop.is_set():
            self.close()
            raise Cancelled(f"measuring {self.label} was stopped")

    def close(self):
        """Stop the worker process (if one runs)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()
            except OSError:   # a pipe the dead worker left unread
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Measurer(SourceMeasurer):
    """Builds and times Configs of one kernel; a context manager.

    `timeout` bounds one candidate's run (seconds); `jobs` compiles run at
    once (default: one per core); `stop`, a threading.Event, cancels the
    batch in flight when set (`Cancelled`); `source_hook(config, source) ->
    source` rewrites a candidate's C before it is compiled (a test hook:
    inject a crash, a hang, a wrong result).

    >>> with Measurer(kernel, timeout=5) as m:
    ...     [r] = m.measure([default_config(kernel)])
    >>> r.status
    'ok'
    """

    def __init__(self, kernel, *, source_hook=None, **options):
        self.kernel, self.source_hook = kernel, source_hook
        super().__init__(kernel_source(kernel, default_config(kernel)), worker_specs(kernel),
                         label=str(kernel), **options)

    def source(self, config):
        """The candidate's C source, rewritten by the source hook if there is one."""
        source = kernel_source(self.kernel, config)
        return source if self.source_hook is None else self.source_hook(config, source)

    def measure(self, configs):
        """Build then time `configs`; one Measurement each, in order."""
        return self.measure_sources([(c, self.source(c)) for c in configs])


def _compile(source):
    return str(compile_c(source).path)
