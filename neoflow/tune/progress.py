"""tune/progress: the tuner's progress bar -- trials done, best GFLOP/s so
far, time left -- through tqdm when it is installed, else one plain line per
update on stderr (NeoFlow's core needs only numpy).

Hands on: a `Progress` the tuner updates after each measured batch.
"""
import sys
import time


class Progress:
    """A progress bar over `total` trials; `enabled=False` shows nothing.

    >>> with Progress(200, "matmul") as bar:
    ...     bar.update(8, best_gflops=12.5, left_s=30.0)
    """

    def __init__(self, total, desc="tuning", enabled=True):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.done, self._bar, self._last = 0, None, 0.0
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, unit="trial", dynamic_ncols=True,
                             leave=True)

    def describe(self, desc):
        """Name what is being tuned now (e.g. the kernel)."""
        self.desc = desc
        if self._bar is not None:
            self._bar.set_description(desc, refresh=False)

    def update(self, n, best_gflops=None, left_s=None):
        """`n` more trials done; the best speed so far and the time left."""
        self.done += n
        if not self.enabled:
            return
        facts = {}
        if best_gflops is not None:
            facts["best"] = f"{best_gflops:.2f} GFLOP/s"
        if left_s is not None:
            facts["left"] = f"{max(0.0, left_s):.0f}s"
        if self._bar is not None:
            self._bar.set_postfix(facts, refresh=False)
            self._bar.update(n)
        elif time.monotonic() - self._last > 1.0 or self.done >= self.total:
            self._last = time.monotonic()
            text = ", ".join(f"{k} {v}" for k, v in facts.items())
            print(f"{self.desc}: {self.done}/{self.total} trials{', ' if text else ''}{text}",
                  file=sys.stderr)

    def close(self):
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
