"""tune/payoff: whether one more trial of a kernel pays for itself in the
training run it happens in -- the background tuner's budget.

A trial (propose a schedule, compile it twice: once alone to screen it in
the measuring worker, once for the step; then run it inside the step for
a few steps) costs training time: the tuner's CPU time comes out of the
gaps training leaves, and on a machine where training keeps every core
busy each core-second it takes costs training about a second (caches
evicted, OpenMP barriers kept waiting; measured: an idle-priority tuner
working flat out beside training cost 8-11% of the step time while it
ran). It gains where it finds a faster schedule: the time saved per step
times the steps still to come.

So, per kernel, with `step_s` its time per step (summed over the step's
kernels of that structure):

    expected gain  = step_s * p_win * gain * remaining_steps
    expected cost  = core_s * (BUSY_COST if training keeps the cores busy else FREE_COST)
                     + (in-step loss of a losing candidate, ~ CHECK_STEPS/2 * step_s * LOSS)

`p_win`, the chance that the next trial beats the running schedule by more
than the step's noise, starts from PRIOR_WINS / (PRIOR_WINS + PRIOR_LOSSES)
= 2% (measured, docs/tuning.md "How often search finds a win": 30 s
searches of the zoo's largest kernels, one thread, loaded machine -- 23 of
224 trials ran 3% faster than the default alone, but the confirmation
kept one win in 16 kernels) and is updated with the kernel's own
outcomes; `gain`, the fraction of its time a win saves, starts from the
kernel's distance to its roofline (a kernel at 5% of peak has much to win,
one at 80% little) times PRIOR_GAIN, and moves to the mean of the wins
seen. `remaining_steps` is TuningOptions.steps minus the steps done, or,
when the run's length is not given, the steps done so far (a run that has
gone on for N steps is expected to go on for about N more). `core_s` is
the CPU time the tuner's trials have taken so far (an initial guess
before the first). A trial is started only when gain > cost.

Hands on: `Payoff.next_kernel()` -- the kernel whose next trial pays best,
or None.
"""
from dataclasses import dataclass, field

PRIOR_WINS, PRIOR_LOSSES = 1.0, 49.0  # p_win before any trial of the kernel: 2%
PRIOR_GAIN = 0.25       # share of the distance to the roofline a win is expected to save
MIN_GAIN = 0.02         # a win saves at least this share of the kernel's time
BUSY_COST = 1.0         # training seconds lost per tuner core-second, every core busy
FREE_COST = 0.1         # ... with a core training leaves free (caches still shared)
FIRST_CORE_S = 1.5      # core-seconds of a trial before one has been timed
LOSS = 0.2              # a losing candidate's expected excess time in the step (share)
CALL_NOISE_S = 2e-6     # a kernel call's timing in the step jitters by about this
CHECK_STEPS = 2         # steps a candidate runs in the step before it is judged
PEAK_FLOPS = 150e9      # the roofline of issue 18's machine: flop/s ...
PEAK_BYTES = 35e9       # ... and bytes/s of memory traffic


def roofline_s(flops, nbytes, peak_flops=PEAK_FLOPS, peak_bytes=PEAK_BYTES):
    """The least time a kernel of `flops` arithmetic and `nbytes` of
    inputs and outputs can take.

    >>> roofline_s(150e9, 0)
    1.0
    """
    return flops / peak_flops + nbytes / peak_bytes


@dataclass
class KernelPayoff:
    """What the budget knows of one kernel: its time per step, its roofline
    and the outcomes of its trials so far."""
    step_s: float
    roofline_s: float = 0.0
    wins: int = 0
    losses: int = 0
    gains: list = field(default_factory=list)
    done: bool = False

    def p_win(self):
        return (PRIOR_WINS + self.wins) / (PRIOR_WINS + PRIOR_LOSSES + self.wins + self.losses)

    def gain(self):
        """The share of the kernel's time the next win is expected to save."""
        if self.gains:
            return max(MIN_GAIN, sum(self.gains) / len(self.gains))
        headroom = max(0.0, 1.0 - self.roofline_s / self.step_s) if self.step_s > 0 else 0.0
        return max(MIN_GAIN, PRIOR_GAIN * headroom)


class Payoff:
    """The background tuner's budget (see the module docstring).

    `kernels` {key: KernelPayoff}; `total_steps`: the steps the run will
    take (None: unknown, assume as many again as done); `max_trials`: most
    trials per kernel.

    >>> pay = Payoff({"k": KernelPayoff(step_s=0.01, roofline_s=0.001)}, total_steps=10**6)
    >>> pay.next_kernel(steps_done=100, busy=True)
    'k'
    >>> pay.next_kernel(steps_done=100, busy=True, total=200) is None
    True
    """

    def __init__(self, kernels, total_steps=None, max_trials=32):
        self.kernels, self.total_steps, self.max_trials = dict(kernels), total_steps, max_trials
        self.core_s, self.trials = 0.0, 0
        self.spent_s = 0.0          # the expected training seconds the trials so far cost

    def remaining_steps(self, steps_done, total=None):
        total = total if total is not None else self.total_steps
        if total is None:
            return max(0, steps_done)
        return max(0, total - steps_done)

    def trial_core_s(self):
        """Core-seconds one trial takes (the mean so far, else a guess)."""
        return self.core_s / self.trials if self.trials else FIRST_CORE_S

    def gain_s(self, key, steps_done, total=None):
        """Expected training seconds the next trial of `key` saves."""
        k = self.kernels[key]
        return k.step_s * k.p_win() * k.gain() * self.remaining_steps(steps_done, total)

    def cost_s(self, key, busy):
        """Expected training seconds the next trial of `key` costs."""
        k = self.kernels[key]
        return (self.trial_core_s() * (BUSY_COST if busy else FREE_COST)
                + CHECK_STEPS * k.step_s * LOSS)

    def next_kernel(self, steps_done, busy, total=None):
        """The key whose next trial pays most (gain minus cost), or None when
        none pays. `busy`: training keeps every core busy."""
        best, margin = None, 0.0
        for key, k in self.kernels.items():
            if k.done or k.wins + k.losses >= self.max_trials:
                continue
            m = self.gain_s(key, steps_done, total) - self.cost_s(key, busy)
            if m > margin:
                best, margin = key, m
        return best

    def spend(self, key, core_s, busy):
        """Account a trial of `key` that took `core_s` CPU seconds."""
        self.spent_s += self.cost_s(key, busy)
        self.core_s += max(0.0, core_s)
        self.trials += 1

    def outcome(self, key, old_s, new_s, threshold=MIN_GAIN, calls=1):
        """Record the step's verdict on a trial of `key` (its time before and
        with the candidate, summed over `calls` kernels of the step); returns
        True when the candidate won: by `threshold` of the time, and by more
        than CALL_NOISE_S a call (a call's timing jitters by about that)."""
        k = self.kernels[key]
        won = new_s < old_s * (1 - threshold) and old_s - new_s > calls * CALL_NOISE_S
        if won:
            k.wins += 1
            k.gains.append(1 - new_s / old_s)
            k.step_s = k.step_s * new_s / old_s
        else:
            k.losses += 1
        return won
