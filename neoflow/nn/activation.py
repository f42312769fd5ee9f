"""Activations and normalised exponentials: relu, gelu, elu, sigmoid, tanh
(elementwise computes) and softmax, log_softmax (max, sum of exponentials,
normalise: three computes, numerically stable).

Hands on: compute Tensors shaped like their input.
"""
import math
import numbers

from .. import te
from ..errors import NeoFlowError
from .common import cast_tensor, check_float, norm_dim, reject
from .reduce import reduce_over

__all__ = ["relu", "gelu", "elu", "sigmoid", "tanh", "softmax", "log_softmax"]


def _elementwise(x, fn, name):
    return te.compute(x.shape, lambda *i: fn(x[i]), name=name)


def relu(input, inplace=False):
    """F.relu: max(x, 0), written as where(x <= 0, 0, x): NaN passes through and
    the gradient at 0 is 0, as in torch.

    >>> x = nf.placeholder((4, 5), name="x")
    >>> nf.nn.relu(x).shape
    (4, 5)
    """
    x = check_float(input, "relu", "input")
    reject("relu", inplace=(inplace, False))
    return _elementwise(x, lambda v: te.where(v <= 0, 0, v), "relu")


def gelu(input, approximate="none"):
    """F.gelu: x * Phi(x) with the exact erf form, or the tanh approximation.

    >>> nf.nn.gelu(x, approximate="tanh").shape
    (4, 5)
    """
    x = check_float(input, "gelu", "input")
    if approximate == "none":
        return _elementwise(x, lambda v: v * 0.5 * (1.0 + te.erf(v * (1.0 / math.sqrt(2.0)))),
                            "gelu")
    if approximate == "tanh":
        c = math.sqrt(2.0 / math.pi)
        return _elementwise(
            x, lambda v: v * 0.5 * (1.0 + te.tanh(c * (v + 0.044715 * v * v * v))), "gelu")
    raise NeoFlowError(f"gelu: approximate={approximate!r} is not supported; expected 'none' "
                       "or 'tanh'")


def elu(input, alpha=1.0, inplace=False):
    """F.elu: x for x > 0, alpha * (exp(x) - 1) otherwise.

    >>> nf.nn.elu(x, alpha=0.5).shape
    (4, 5)
    """
    x = check_float(input, "elu", "input")
    reject("elu", inplace=(inplace, False))
    if not isinstance(alpha, numbers.Real):
        raise NeoFlowError(f"elu: alpha must be a float, got {alpha!r}")
    a = float(alpha)
    return _elementwise(x, lambda v: te.where(v > 0, v, a * (te.exp(v) - 1.0)), "elu")


def sigmoid(input):
    """torch.sigmoid: 1 / (1 + exp(-x)).

    >>> nf.nn.sigmoid(x).shape
    (4, 5)
    """
    x = check_float(input, "sigmoid", "input")
    return _elementwise(x, te.sigmoid, "sigmoid")


def tanh(input):
    """torch.tanh.

    >>> nf.nn.tanh(x).shape
    (4, 5)
    """
    x = check_float(input, "tanh", "input")
    return _elementwise(x, te.tanh, "tanh")


def max_and_sumexp(x, d, name):
    """The two reductions behind softmax over dim `d`: m = max over d and
    s = sum over d of exp(x - m), both shaped like x without dim d."""
    m = reduce_over(x.shape, (d,), False, lambda f, o: x[f], f"{name}_max", reducer="max")
    s = reduce_over(x.shape, (d,), False, lambda f, o: te.exp(x[f] - m[o]), f"{name}_sum")
    return m, s


def _prepare(op, input, dim, dtype):
    if dim is None:
        raise NeoFlowError(f"{op}: dim must be given (torch's implicit choice of dim is "
                           "deprecated and not supported)")
    x = input
    if dtype is not None:
        check_float(x, op, "input")
        x = cast_tensor(x, dtype, op)
    check_float(x, op, "input")
    return x, norm_dim(dim, x.ndim, op)


def softmax(input, dim, dtype=None):
    """F.softmax along `dim`: exp(x - max) / sum(exp(x - max)).

    >>> nf.nn.softmax(x, dim=-1).shape
    (4, 5)
    """
    x, d = _prepare("softmax", input, dim, dtype)
    if x.ndim == 0:
        return te.compute((), lambda: te.exp(x[()] - x[()]), name="softmax")
    m, s = max_and_sumexp(x, d, "softmax")
    drop = lambda i: i[:d] + i[d + 1:]   # noqa: E731
    return te.compute(x.shape, lambda *i: te.exp(x[i] - m[drop(i)]) / s[drop(i)],
                      name="softmax")


def log_softmax(input, dim, dtype=None):
    """F.log_softmax along `dim`: x - max - log(sum(exp(x - max))).

    >>> nf.nn.log_softmax(x, dim=1).shape
    (4, 5)
    """
    x, d = _prepare("log_softmax", input, dim, dtype)
    if x.ndim == 0:
        return te.compute((), lambda: x[()] - x[()], name="log_softmax")
    m, s = max_and_sumexp(x, d, "log_softmax")
    drop = lambda i: i[:d] + i[d + 1:]   # noqa: E731
    return te.compute(x.shape, lambda *i: x[i] - m[drop(i)] - te.log(s[drop(i)]),
                      name="log_softmax")
