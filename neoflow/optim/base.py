"""The optimizer interface: what an optimizer tells the training graph.

An optimizer is a recipe of update *expressions*. For every trainable
parameter the training graph asks for its state slots (tensors shaped like
the parameter, kept by the Trainer between steps, zero at the start) and for
the update: te computes of the new parameter and the new state from the
parameter, its gradient, the old state and the optimizer's 0-d scalar inputs
(values that change per step, such as the learning rate or Adam's bias
corrections, fed by the runtime each step so the compiled step never
changes). Being ordinary computes, the updates fuse like any other op.

Every optimizer also takes `clip_grad_norm` (the training graph scales all
gradients by min(1, max_norm / (global norm + 1e-6)) before the update, as
torch.nn.utils.clip_grad_norm_) and `lr_schedule` (an optim.schedule
LRSchedule: `lr_at(step)` is the rate fed for that step).

Hands on: `Update`s (new parameter, new state per slot) for graph.training.
"""
import abc
import numbers

from ..errors import NeoFlowError
from ..te import compute
from .schedule import LRSchedule


class Update:
    """The te computes that replace one parameter and its state slots."""

    def __init__(self, param, state):
        self.param = param     # Tensor: the new parameter value
        self.state = state     # {slot name: Tensor}: the new state values


class Optimizer(abc.ABC):
    """Base class: subclasses define `slots`, `scalar_names`, `scalar_values`
    and `update_exprs`.

    >>> opt = nf.optim.SGD(lr=0.1, momentum=0.9)
    >>> opt.slots, opt.scalar_names
    (('momentum_buffer',), ('lr',))
    """

    slots = ()          # names of the per-parameter state tensors
    scalar_names = ()   # names of the per-step 0-d scalar inputs
    weight_decay = 0.0  # L2 penalty added to the gradient (torch's weight_decay)
    clip_grad_norm = None   # max global gradient norm (None: no clipping)
    lr_schedule = None      # an LRSchedule (None: the constant `lr`)

    def set_common(self, clip_grad_norm, lr_schedule):
        """Check and keep the options every optimizer takes."""
        name = type(self).__name__
        if clip_grad_norm is not None:
            clip_grad_norm = check_number(name, "clip_grad_norm", clip_grad_norm, lo_open=True)
        if lr_schedule is not None and not isinstance(lr_schedule, LRSchedule):
            raise NeoFlowError(f"{name}: lr_schedule must be an nf.optim schedule (StepLR, "
                               f"CosineAnnealingLR, LinearLR, OneCycleLR), got {lr_schedule!r}")
        self.clip_grad_norm, self.lr_schedule = clip_grad_norm, lr_schedule

    def lr_at(self, step):
        """The learning rate of the 1-based step `step` (the schedule's, else `lr`).

        >>> nf.optim.SGD(lr=0.1, lr_schedule=nf.optim.StepLR(1, gamma=0.5)).lr_at(2)
        0.05
        """
        return self.lr if self.lr_schedule is None else self.lr_schedule.lr(self.lr, step)

    @abc.abstractmethod
    def scalar_values(self, step):
        """{scalar name: float} for the 1-based optimizer step `step`."""

    @abc.abstractmethod
    def slot_expr(self, slot, p, g, state, new_state, scalars, i):
        """The new value of state `slot` at index `i` (a scalar expression).

        `p`, `g` and `state[slot]` are Tensors shaped like the parameter;
        `new_state` holds the new values of the slots before `slot` in
        `slots`; `scalars[name]` are 0-d Tensors."""

    @abc.abstractmethod
    def param_expr(self, p, g, state, new_state, scalars, i):
        """The new parameter value at index `i`; it may read `new_state`."""

    def update(self, p, g, state, scalars):
        """The `Update` of parameter `p` with gradient `g` (te computes).

        >>> W = nf.parameter((3,), name="W"); dW = nf.placeholder((3,), name="dW")
        >>> opt = nf.optim.SGD(lr=0.1)
        >>> lr = nf.placeholder((), name="lr")
        >>> opt.update(W, dW, {}, {"lr": lr}).param.shape
        (3,)
        """
        new_state = {}
        for slot in self.slots:
            new_state[slot] = compute(
                p.shape, lambda *i, slot=slot: self.slot_expr(slot, p, g, state, new_state,
                                                              scalars, i),
                name=f"{p.name}.{slot}.new")
        new_p = compute(p.shape, lambda *i: self.param_expr(p, g, state, new_state, scalars, i),
                        name=f"{p.name}.new")
        return Update(new_p, new_state)

    def decayed_grad(self, p, g, i):
        """g + weight_decay * p at index `i` (torch's L2 weight decay)."""
        return g[i] + self.weight_decay * p[i] if self.weight_decay else g[i]

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


def check_number(opt, what, value, lo=0.0, hi=None, lo_open=False, hi_open=True):
    """`value` as a float inside [lo, hi) (or the stated bounds), else NeoFlowError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NeoFlowError(f"{opt}: {what} must be a number, got {value!r}")
    value = float(value)
    bad = value < lo or (lo_open and value == lo) or (hi is not None and (
        value > hi or (hi_open and value == hi)))
    if bad:
        left = "(" if lo_open else "["
        right = ")" if hi_open else "]"
        raise NeoFlowError(f"{opt}: {what}={value!r} is out of range; expected a value in "
                           f"{left}{lo}, {'inf' if hi is None else hi}{right}")
    return value
