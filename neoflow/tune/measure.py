"""tune/measure: build candidate schedules and time them in an isolated
worker process (tune/worker.py).

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


class Measurer:
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

    def __init__(self, kernel, *, timeout=10.0, repeats=5, min_time=0.05, seed=0,
                 jobs=None, source_hook=None, stop=None):
        self.kernel, self.timeout, self.stop = kernel, float(timeout), stop
        self.repeats, self.min_time, self.seed = repeats, min_time, seed
        self.jobs = jobs or max(1, os.cpu_count() or 1)
        self.source_hook = source_hook
        self._proc, self._runs, self._buffer = None, 0, b""
        try:
            self._reference = self._build(default_config(kernel), hook=False)
        except NeoFlowError as e:
            raise MeasureError(f"the default schedule of {kernel} does not build: {e}") from None

    # -- building ----------------------------------------------------------
    def source(self, config):
        """The C source of the kernel alone under `config` (nf_main: inputs, outputs)."""
        k = self.kernel
        return generate_c(lower_program([k], [config], list(k.inputs), list(k.outputs)))

    def _build(self, config, hook=True):
        source = self.source(config)
        if hook and self.source_hook is not None:
            source = self.source_hook(config, source)
        return str(compile_c(source).path)

    def build_all(self, configs):
        """[(library path or None, error text)] for `configs`, compiled in parallel."""
        def one(config):
            try:
                return self._build(config), ""
            except NeoFlowError as e:
                return None, str(e).splitlines()[0][:300]
        if len(configs) == 1 or self.jobs == 1:
            return [one(c) for c in configs]
        with ThreadPoolExecutor(self.jobs) as pool:
            return list(pool.map(one, configs))

    # -- measuring -----------------------------------------------------------
    def measure(self, configs):
        """Build then time `configs`; one Measurement each, in order."""
        out = []
        self._check_stop()
        for config, (path, error) in zip(configs, self.build_all(list(configs))):
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
        k = self.kernel
        self._proc = subprocess.Popen(
            [sys.executable, "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True)
        self._buffer, self._runs = b"", 0
        setup = {"op": "setup", "seed": self.seed, "reference": self._reference,
                 "inputs": [[list(t.shape), dt.to_numpy(t.dtype).name] for t in k.inputs],
                 "outputs": [[list(t.shape), dt.to_numpy(t.dtype).name] for t in k.outputs]}
        reply = self._exchange(setup, max(60.0, self.timeout))
        if isinstance(reply, Measurement) or not reply.get("ok"):
            detail = reply.detail if isinstance(reply, Measurement) else reply.get("detail")
            self.close()
            raise MeasureError(f"the default schedule of {k} does not run in the measuring "
                               f"worker: {detail}")

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
            raise Cancelled(f"measuring {self.kernel} was stopped")

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
