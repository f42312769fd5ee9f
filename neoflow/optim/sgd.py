"""SGD with momentum, Nesterov momentum and L2 weight decay, as update
expressions with torch.optim.SGD's rule (dampening 0):

    g' = g + weight_decay * p
    buf = momentum * buf + g'            (buf starts at 0, so step 1 gives g')
    p  -= lr * (g' + momentum * buf)     (nesterov)   or   p -= lr * buf

Hands on: an `Optimizer` for graph.training.
"""
from ..errors import NeoFlowError
from .base import Optimizer, check_number


class SGD(Optimizer):
    """Stochastic gradient descent; the same numbers as torch.optim.SGD.

    `lr` is fed as a 0-d scalar input each step, so changing `opt.lr` between
    steps takes effect without recompiling.

    >>> opt = nf.optim.SGD(lr=0.1, momentum=0.9, nesterov=True)
    >>> trainer = nf.Trainer(loss, optimizer=opt)                # doctest: +SKIP
    """

    scalar_names = ("lr",)

    def __init__(self, lr, momentum=0.0, weight_decay=0.0, nesterov=False, *,
                 clip_grad_norm=None, lr_schedule=None):
        self.lr = check_number("SGD", "lr", lr)
        self.set_common(clip_grad_norm, lr_schedule)
        self.momentum = check_number("SGD", "momentum", momentum)
        self.weight_decay = check_number("SGD", "weight_decay", weight_decay)
        self.nesterov = bool(nesterov)
        if self.nesterov and self.momentum == 0:
            raise NeoFlowError("SGD: nesterov=True needs momentum > 0 (as in torch.optim.SGD)")
        self.slots = ("momentum_buffer",) if self.momentum else ()

    def scalar_values(self, step):
        return {"lr": self.lr_at(step)}

    def slot_expr(self, slot, p, g, state, new_state, scalars, i):
        return self.momentum * state[slot][i] + self.decayed_grad(p, g, i)

    def param_expr(self, p, g, state, new_state, scalars, i):
        lr = scalars["lr"][()]
        if not self.momentum:
            return p[i] - lr * self.decayed_grad(p, g, i)
        buf = new_state["momentum_buffer"][i]
        if self.nesterov:
            return p[i] - lr * (self.decayed_grad(p, g, i) + self.momentum * buf)
        return p[i] - lr * buf
