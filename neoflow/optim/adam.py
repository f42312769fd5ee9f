"""Adam with L2 weight decay, as update expressions with torch.optim.Adam's
rule (amsgrad off):

    g' = g + weight_decay * p
    m  = m + (1 - beta1) * (g' - m)          (torch's lerp)
    v  = beta2 * v + (1 - beta2) * g' * g'
    p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)

with step_size = lr / (1 - beta1**t) and bias_correction2_sqrt =
sqrt(1 - beta2**t) computed in double precision per step t and fed as 0-d
scalar inputs, as torch computes them in Python floats.

Hands on: an `Optimizer` for graph.training.
"""
import math

from ..te import sqrt
from ..errors import NeoFlowError
from .base import Optimizer, check_number


class Adam(Optimizer):
    """Adam; the same numbers as torch.optim.Adam (amsgrad=False).

    >>> opt = nf.optim.Adam(lr=1e-3, betas=(0.9, 0.999), weight_decay=1e-4)
    >>> opt.scalar_values(1)["step_size"]           # lr / (1 - 0.9)
    0.01
    """

    slots = ("exp_avg", "exp_avg_sq")
    scalar_names = ("step_size", "bias_correction2_sqrt")

    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 clip_grad_norm=None, lr_schedule=None):
        name = type(self).__name__
        self.lr = check_number(name, "lr", lr)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise NeoFlowError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        self.betas = (check_number(name, "betas[0]", betas[0], 0.0, 1.0),
                      check_number(name, "betas[1]", betas[1], 0.0, 1.0))
        self.eps = check_number(name, "eps", eps)
        self.weight_decay = check_number(name, "weight_decay", weight_decay)
        self.set_common(clip_grad_norm, lr_schedule)

    def scalar_values(self, step):
        beta1, beta2 = self.betas
        return {"step_size": self.lr_at(step) / (1 - beta1 ** step),
                "bias_correction2_sqrt": math.sqrt(1 - beta2 ** step)}

    def slot_expr(self, slot, p, g, state, new_state, scalars, i):
        beta1, beta2 = self.betas
        grad = self.decayed_grad(p, g, i)
        if slot == "exp_avg":
            m = state["exp_avg"][i]
            return m + (1 - beta1) * (grad - m)
        return beta2 * state["exp_avg_sq"][i] + (1 - beta2) * grad * grad

    def param_expr(self, p, g, state, new_state, scalars, i):
        denom = sqrt(new_state["exp_avg_sq"][i]) / scalars["bias_correction2_sqrt"][()] + self.eps
        return p[i] - scalars["step_size"][()] * (new_state["exp_avg"][i] / denom)
