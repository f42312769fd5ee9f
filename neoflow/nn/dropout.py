"""Dropout (F.dropout), built on nf.random_uniform: each step (and each call
of a built function) zeroes every element with probability p and scales the
rest by 1 / (1 - p). The mask is never stored: the forward and the backward
both recompute it from the random tensor's counter (te/random.py).

Hands on: a compute Tensor shaped like the input (or the input itself).
"""
import numbers

from .. import te
from ..errors import NeoFlowError
from ..te.random import random_uniform
from .common import check_float, reject

__all__ = ["dropout"]


def dropout(input, p=0.5, training=True, inplace=False):
    """F.dropout: input * mask / (1 - p), mask ~ Bernoulli(1 - p) per element,
    drawn afresh every Trainer step; `training=False` or p=0 returns `input`,
    p=1 returns zeros (input * 0, as torch).

    >>> x = nf.placeholder((8, 16), name="x")
    >>> nf.nn.dropout(x, p=0.1).shape
    (8, 16)
    """
    x = check_float(input, "dropout", "input")
    reject("dropout", inplace=(inplace, False))
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0 <= p <= 1:
        raise NeoFlowError(f"dropout: probability p must be a number in [0, 1], got {p!r}")
    if not isinstance(training, bool):
        raise NeoFlowError(f"dropout: training must be True or False, got {training!r}")
    p = float(p)
    if not training or p == 0:
        return x
    if p == 1:
        return te.compute(x.shape, lambda *i: x[i] * 0.0, name="dropout")
    u = random_uniform(x.shape, x.dtype, name="dropout.u")
    scale, zero = te.const(1.0 / (1.0 - p), x.dtype), te.const(0.0, x.dtype)
    return te.compute(x.shape, lambda *i: x[i] * te.where(u[i] < 1.0 - p, scale, zero),
                      name="dropout")
