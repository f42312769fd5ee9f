"""AdamW (decoupled weight decay), as update expressions with
torch.optim.AdamW's rule (amsgrad off):

    p  = p * (1 - lr * weight_decay)         (before the Adam step)
    m  = m + (1 - beta1) * (g - m)
    v  = beta2 * v + (1 - beta2) * g * g
    p -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)

The decay factor, step_size and bias_correction2_sqrt are fed per step (a
schedule changes the first two without recompiling).

Hands on: an `Optimizer` for graph.training.
"""
from ..te import sqrt
from .adam import Adam


class AdamW(Adam):
    """AdamW; the same numbers as torch.optim.AdamW (amsgrad=False).

    >>> opt = nf.optim.AdamW(lr=1e-3, weight_decay=0.01)
    >>> round(opt.scalar_values(1)["decay"], 6)        # 1 - lr * weight_decay
    0.99999
    """

    scalar_names = Adam.scalar_names + ("decay",)

    def __init__(self, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, *,
                 clip_grad_norm=None, lr_schedule=None):
        super().__init__(lr, betas, eps, weight_decay, clip_grad_norm=clip_grad_norm,
                         lr_schedule=lr_schedule)

    def scalar_values(self, step):
        values = super().scalar_values(step)
        values["decay"] = 1 - self.lr_at(step) * self.weight_decay
        return values

    def decayed_grad(self, p, g, i):
        return g[i]          # decoupled: the decay scales the parameter, not the gradient

    def param_expr(self, p, g, state, new_state, scalars, i):
        denom = sqrt(new_state["exp_avg_sq"][i]) / scalars["bias_correction2_sqrt"][()] + self.eps
        return p[i] * scalars["decay"][()] - scalars["step_size"][()] * (
            new_state["exp_avg"][i] / denom)
