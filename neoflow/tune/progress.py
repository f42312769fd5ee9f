"""tune/progress: the tuner's progress bar -- trials done, best GFLOP/s so
far, time left -- through tqdm when it is installed, else one plain line per
update on stderr, at most one a second (NeoFlow's core needs only numpy).
The Trainer's live line (steps, loss, ms/step, kernels tuned) is the same
bar counting steps.

Hands on: a `Progress` the tuner updates after each measured batch.
"""
import sys
import time


class Progress:
    """A progress bar over `total` trials (None: open-ended) counted in
    `unit`s; `enabled=False` shows nothing.

    >>> with Progress(200, "matmul") as bar:
    ...     bar.update(8, best_gflops=12.5, left_s=30.0)
    >>> with Progress(None, "training", unit="step") as bar:
    ...     bar.update(1, facts={"loss": "2.3026"})
    """

    def __init__(self, total, desc="tuning", enabled=True, unit="trial"):
        self.total, self.desc, self.enabled, self.unit = total, desc, enabled, unit
        self.done, self._bar, self._last = 0, None, 0.0
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True,
                             leave=True)

    def describe(self, desc):
        """Name what is being tuned now (e.g. the kernel)."""
        self.desc = desc
        if self._bar is not None:
            self._bar.set_description(desc, refresh=False)

    def update(self, n, best_gflops=None, left_s=None, facts=None):
        """`n` more trials done; the best speed so far, the time left and any
        other `facts` ({name: text}) to show."""
        self.done += n
        if not self.enabled:
            return
        facts = dict(facts or {})
        if best_gflops is not None:
            facts["best"] = f"{best_gflops:.2f} GFLOP/s"
        if left_s is not None:
            facts["left"] = f"{max(0.0, left_s):.0f}s"
        if self._bar is not None:
            self._bar.set_postfix(facts, refresh=False)
            self._bar.update(n)
        elif (time.monotonic() - self._last > 1.0
              or self.total is not None and self.done >= self.total):
            self._last = time.monotonic()
            text = ", ".join(f"{k} {v}" for k, v in facts.items())
            count = self.done if self.total is None else f"{self.done}/{self.total}"
            print(f"{self.desc}: {count} {self.unit}s{', ' if text else ''}{text}",
                  file=sys.stderr)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
