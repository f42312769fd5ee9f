"""RMSprop, as update expressions with torch.optim.RMSprop's rule:

    g' = g + weight_decay * p
    square_avg = alpha * square_avg + (1 - alpha) * g' * g'
    grad_avg   = grad_avg + (1 - alpha) * (g' - grad_avg)        (centered)
    avg = sqrt(square_avg - grad_avg * grad_avg) + eps         (centered)
          sqrt(square_avg) + eps                               (otherwise)
    buf = momentum * buf + g' / avg;  p -= lr * buf             (momentum > 0)
    p  -= lr * g' / avg                                        (otherwise)

Hands on: an `Optimizer` for graph.training.
"""
from ..te import sqrt
from .base import Optimizer, check_number


class RMSprop(Optimizer):
    """RMSprop; the same numbers as torch.optim.RMSprop.

    >>> opt = nf.optim.RMSprop(lr=1e-2, momentum=0.9, centered=True)
    >>> opt.slots
    ('square_avg', 'grad_avg', 'momentum_buffer')
    """

    scalar_names = ("lr",)

    def __init__(self, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, *, clip_grad_norm=None, lr_schedule=None):
        self.lr = check_number("RMSprop", "lr", lr)
        self.alpha = check_number("RMSprop", "alpha", alpha, hi=1.0, hi_open=False)
        self.eps = check_number("RMSprop", "eps", eps)
        self.weight_decay = check_number("RMSprop", "weight_decay", weight_decay)
        self.momentum = check_number("RMSprop", "momentum", momentum)
        self.centered = bool(centered)
        self.set_common(clip_grad_norm, lr_schedule)
        self.slots = ("square_avg",) + (("grad_avg",) if self.centered else ()) + \
            (("momentum_buffer",) if self.momentum else ())

    def scalar_values(self, step):
        return {"lr": self.lr_at(step)}

    def slot_expr(self, slot, p, g, state, new_state, scalars, i):
        grad = self.decayed_grad(p, g, i)
        if slot == "square_avg":
            return self.alpha * state[slot][i] + (1 - self.alpha) * grad * grad
        if slot == "grad_avg":
            old = state[slot][i]
            return old + (1 - self.alpha) * (grad - old)
        return self.momentum * state[slot][i] + grad / self._avg(new_state, i)

    def _avg(self, new_state, i):
        """sqrt of the new (centered) second moment, plus eps."""
        square = new_state["square_avg"]
        if self.centered:
            mean = new_state["grad_avg"]
            return sqrt(square[i] - mean[i] * mean[i]) + self.eps
        return sqrt(square[i]) + self.eps

    def param_expr(self, p, g, state, new_state, scalars, i):
        lr = scalars["lr"][()]
        if self.momentum:
            return p[i] - lr * new_state["momentum_buffer"][i]
        return p[i] - lr * (self.decayed_grad(p, g, i) / self._avg(new_state, i))
