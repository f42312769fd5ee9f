"""Learning-rate schedules with torch.optim.lr_scheduler's formulas.

A schedule maps the 1-based Trainer step to the learning rate that step
uses: step k runs with the rate torch's scheduler gives after k - 1 calls of
`scheduler.step()` (one per optimizer step, as in a loop that calls
`optimizer.step(); scheduler.step()`). The optimizer feeds the rate (or a
scalar made from it, e.g. Adam's step size) as a 0-d input each step, so a
schedule never recompiles anything.

Hands on: `LRSchedule`s for the optimizers (`lr_schedule=`).
"""
import abc
import math
import numbers

from ..errors import NeoFlowError


class LRSchedule(abc.ABC):
    """Base class: `lr(base_lr, step)` is the rate of the 1-based `step`."""

    @abc.abstractmethod
    def rate(self, base_lr, epoch):
        """torch's rate after `epoch` scheduler steps (epoch 0: the start)."""

    def lr(self, base_lr, step):
        """The learning rate of Trainer step `step` (1-based).

        >>> nf.optim.StepLR(step_size=2, gamma=0.5).lr(1.0, 3)
        0.5
        """
        return self.rate(base_lr, step - 1)

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def _int(name, what, value, lo=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < lo:
        raise NeoFlowError(f"{name}: {what} must be an int >= {lo}, got {value!r}")
    return int(value)


def _float(name, what, value, lo=None, hi=None, lo_open=False):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise NeoFlowError(f"{name}: {what} must be a finite number, got {value!r}")
    value = float(value)
    if (lo is not None and (value < lo or lo_open and value == lo)) or \
            (hi is not None and value > hi):
        raise NeoFlowError(f"{name}: {what}={value!r} is out of range; expected a value in "
                           f"{'(' if lo_open else '['}{lo}, {'inf' if hi is None else hi}]")
    return value


class StepLR(LRSchedule):
    """torch's StepLR: lr * gamma ** (epoch // step_size).

    >>> opt = nf.optim.SGD(lr=0.1, lr_schedule=nf.optim.StepLR(step_size=30, gamma=0.1))
    """

    def __init__(self, step_size, gamma=0.1):
        self.step_size = _int("StepLR", "step_size", step_size)
        self.gamma = _float("StepLR", "gamma", gamma, lo=0.0)

    def rate(self, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRSchedule):
    """torch's CosineAnnealingLR: eta_min + (lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.

    >>> nf.optim.CosineAnnealingLR(T_max=10).lr(1.0, 11)
    0.0
    """

    def __init__(self, T_max, eta_min=0.0):
        self.T_max = _int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = _float("CosineAnnealingLR", "eta_min", eta_min, lo=0.0)

    def rate(self, base_lr, epoch):
        return self.eta_min + (base_lr - self.eta_min) * (
            1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LinearLR(LRSchedule):
    """torch's LinearLR (warm-up): lr * factor, the factor going linearly from
    start_factor to end_factor over total_iters steps, then staying.

    >>> nf.optim.LinearLR(start_factor=0.5, total_iters=4).lr(1.0, 1)
    0.5
    """

    def __init__(self, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        self.start_factor = _float("LinearLR", "start_factor", start_factor, lo=0.0, hi=1.0,
                                   lo_open=True)
        self.end_factor = _float("LinearLR", "end_factor", end_factor, lo=0.0, hi=1.0)
        self.total_iters = _int("LinearLR", "total_iters", total_iters)

    def rate(self, base_lr, epoch):
        done = min(self.total_iters, epoch) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * done)


class OneCycleLR(LRSchedule):
    """torch's OneCycleLR (with cycle_momentum=False: momentum and betas stay
    as the optimizer sets them). It sets the rate itself (from max_lr); the
    optimizer's lr is ignored. Valid for total_steps + 1 Trainer steps, like
    torch's (a later step raises NeoFlowError).

    >>> s = nf.optim.OneCycleLR(max_lr=1.0, total_steps=10)
    >>> s.lr(0.1, 1)                     # max_lr / div_factor
    0.04
    """

    STRATEGIES = ("cos", "linear")

    def __init__(self, max_lr, total_steps, pct_start=0.3, anneal_strategy="cos",
                 div_factor=25.0, final_div_factor=1e4, three_phase=False):
        name = "OneCycleLR"
        self.max_lr = _float(name, "max_lr", max_lr, lo=0.0)
        self.total_steps = _int(name, "total_steps", total_steps)
        self.pct_start = _float(name, "pct_start", pct_start, lo=0.0, hi=1.0)
        if anneal_strategy not in self.STRATEGIES:
            raise NeoFlowError(f"{name}: anneal_strategy must be one of {self.STRATEGIES}, "
                               f"got {anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        self.div_factor = _float(name, "div_factor", div_factor, lo=0.0, lo_open=True)
        self.final_div_factor = _float(name, "final_div_factor", final_div_factor, lo=0.0,
                                       lo_open=True)
        self.three_phase = bool(three_phase)
        initial = self.max_lr / self.div_factor
        low = initial / self.final_div_factor
        up = float(self.pct_start * self.total_steps) - 1
        if self.three_phase:
            self._phases = [(up, initial, self.max_lr),
                            (float(2 * self.pct_start * self.total_steps) - 2, self.max_lr,
                             initial),
                            (self.total_steps - 1, initial, low)]
        else:
            self._phases = [(up, initial, self.max_lr), (self.total_steps - 1, self.max_lr, low)]
        ends = [0.0] + [end for end, _, _ in self._phases]
        if any(b == a for a, b in zip(ends, ends[1:])):
            raise NeoFlowError(f"{name}: total_steps={self.total_steps} with pct_start="
                               f"{self.pct_start} leaves a phase of no steps (torch divides "
                               "by zero there); use more steps or another pct_start")

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def rate(self, base_lr, epoch):
        if epoch > self.total_steps:
            raise NeoFlowError(f"OneCycleLR: step {epoch + 1} is past the schedule's "
                               f"total_steps={self.total_steps} (+1, as torch)")
        start_step = 0.0
        for n, (end_step, start, end) in enumerate(self._phases):
            if epoch <= end_step or n == len(self._phases) - 1:
                return self._anneal(start, end, (epoch - start_step) / (end_step - start_step))
            start_step = end_step
        raise AssertionError("unreachable")
