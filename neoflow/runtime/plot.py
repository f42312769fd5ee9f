"""runtime/plot: ms per step against wall-clock time, one line per run (e.g.
tuning "background", "ahead", "off", torch.compile), as a PNG, from the
`step_history` of `Trainer.stats()` (or any [(seconds, ms)] list); a
framework's steady ms/step (PyTorch eager) can be drawn as a horizontal
line. matplotlib is imported only when a plot is drawn.

Hands on: the PNG file (bench/overlap.py and the demo draw with it).
"""
import numpy as np

SMOOTH = 9   # steps in the running median of each line


def plot_step_times(runs, path, lines=None, title=None):
    """Draw `runs` ({label: [(seconds since start, ms of that step)]}) as ms
    per step (running median of SMOOTH steps, log scale) against wall-clock
    seconds, `lines` ({label: ms}) as horizontal lines, and save a PNG at
    `path`. Each run's line begins where its first step ended, so the gap
    before it is its compile (and ahead-of-time tuning) time.

    >>> plot_step_times({"background": trainer.stats()["step_history"]}, "steps.png",
    ...                 lines={"PyTorch eager": 4.2})          # doctest: +SKIP
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, history in runs.items():
        if not history:
            continue
        t, ms = np.asarray(history, dtype=float).T
        ax.plot(t, running_median(ms, SMOOTH), label=label, linewidth=1.4)
        ax.plot(t[:1], ms[:1], "o", color=ax.lines[-1].get_color(), markersize=4)
    for n, (label, ms) in enumerate((lines or {}).items()):
        ax.axhline(ms, linestyle="--", linewidth=1.0, color=f"C{len(runs) + n}",
                   label=f"{label} ({ms:.2f} ms)")
    ax.set_yscale("log")
    ax.set_xlabel("wall-clock time since start (s)")
    ax.set_ylabel(f"ms per step (running median of {SMOOTH})")
    ax.set_title(title or "ms per training step over time")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def running_median(values, window):
    """The median of each value with the up to `window - 1` values before it.

    >>> running_median(np.array([1.0, 9.0, 2.0, 3.0]), 3).tolist()
    [1.0, 5.0, 2.0, 3.0]
    """
    values = np.asarray(values, dtype=float)
    return np.array([np.median(values[max(0, n - window + 1):n + 1])
                     for n in range(len(values))])
