"""Activations and normalised exponentials: relu, gelu, elu, sigmoid, tanh,
silu, mish, softplus, leaky_relu, hardtanh, relu6, hardsigmoid, hardswish,
logsigmoid, selu, celu, prelu (elementwise computes, written so that the
derived gradient is torch's, ties and boundaries included) and softmax,
log_softmax (max, sum of exponentials, normalise: three computes,
numerically stable).

Hands on: compute Tensors shaped like their input.
"""
import math
import numbers

from .. import te
from ..errors import NeoFlowError, ShapeError
from .common import cast_tensor, check_float, check_same_dtype, check_tensor, norm_dim, reject
from .reduce import reduce_over

__all__ = ["relu", "gelu", "elu", "sigmoid", "tanh", "softmax", "log_softmax", "silu", "mish",
           "softplus", "leaky_relu", "hardtanh", "relu6", "hardsigmoid", "hardswish",
           "logsigmoid", "selu", "celu", "prelu"]


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
    return _elementwise(x, lambda v: te.where(v > 0, v, a * te.expm1(v)), "elu")


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


def _number(op, what, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise NeoFlowError(f"{op}: {what} must be a number, got {value!r}")
    return float(value)


def _softplus(v, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * v)) / beta, and v itself above the threshold (torch)."""
    bv = v * beta if beta != 1.0 else v
    soft = te.log1p(te.exp(bv))
    return te.where(bv > threshold, v, soft * (1.0 / beta) if beta != 1.0 else soft)


def silu(input, inplace=False):
    """F.silu: x * sigmoid(x).

    >>> nf.nn.silu(x).shape
    (4, 5)
    """
    x = check_float(input, "silu", "input")
    reject("silu", inplace=(inplace, False))
    return _elementwise(x, lambda v: v * te.sigmoid(v), "silu")


def mish(input, inplace=False):
    """F.mish: x * tanh(softplus(x)).

    >>> nf.nn.mish(x).shape
    (4, 5)
    """
    x = check_float(input, "mish", "input")
    reject("mish", inplace=(inplace, False))
    return _elementwise(x, lambda v: v * te.tanh(_softplus(v)), "mish")


def softplus(input, beta=1.0, threshold=20.0):
    """F.softplus: log(1 + exp(beta * x)) / beta, and x where beta * x > threshold.

    >>> nf.nn.softplus(x, beta=2.0).shape
    (4, 5)
    """
    x = check_float(input, "softplus", "input")
    beta, threshold = _number("softplus", "beta", beta), _number("softplus", "threshold",
                                                                  threshold)
    if beta == 0:
        raise NeoFlowError("softplus: beta must be non-zero")
    return _elementwise(x, lambda v: _softplus(v, beta, threshold), "softplus")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """F.leaky_relu: x for x > 0, negative_slope * x otherwise.

    >>> nf.nn.leaky_relu(x, 0.2).shape
    (4, 5)
    """
    x = check_float(input, "leaky_relu", "input")
    reject("leaky_relu", inplace=(inplace, False))
    slope = _number("leaky_relu", "negative_slope", negative_slope)
    return _elementwise(x, lambda v: te.where(v > 0, v, v * slope), "leaky_relu")


def _hardtanh(x, lo, hi, name):
    # torch: the gradient is 0 at both boundaries (unlike clamp's)
    return _elementwise(x, lambda v: te.where(v <= lo, lo, te.where(v >= hi, hi, v)), name)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """F.hardtanh: x clamped to [min_val, max_val]; gradient 1 strictly inside.

    >>> nf.nn.hardtanh(x, -2.0, 2.0).shape
    (4, 5)
    """
    x = check_float(input, "hardtanh", "input")
    reject("hardtanh", inplace=(inplace, False))
    lo, hi = _number("hardtanh", "min_val", min_val), _number("hardtanh", "max_val", max_val)
    if lo > hi:
        raise NeoFlowError(f"hardtanh: min_val {lo} is greater than max_val {hi} (torch "
                           "rejects it too)")
    return _hardtanh(x, lo, hi, "hardtanh")


def relu6(input, inplace=False):
    """F.relu6: hardtanh(x, 0, 6).

    >>> nf.nn.relu6(x).shape
    (4, 5)
    """
    x = check_float(input, "relu6", "input")
    reject("relu6", inplace=(inplace, False))
    return _hardtanh(x, 0.0, 6.0, "relu6")


def hardsigmoid(input, inplace=False):
    """F.hardsigmoid: 0 for x <= -3, 1 for x >= 3, x / 6 + 1/2 between.

    >>> nf.nn.hardsigmoid(x).shape
    (4, 5)
    """
    x = check_float(input, "hardsigmoid", "input")
    reject("hardsigmoid", inplace=(inplace, False))
    return _elementwise(x, lambda v: te.where(v <= -3.0, 0.0, te.where(
        v >= 3.0, 1.0, v * (1.0 / 6.0) + 0.5)), "hardsigmoid")


def hardswish(input, inplace=False):
    """F.hardswish: x * hardsigmoid(x) (gradient as torch's at -3 and 3).

    >>> nf.nn.hardswish(x).shape
    (4, 5)
    """
    x = check_float(input, "hardswish", "input")
    reject("hardswish", inplace=(inplace, False))
    return _elementwise(x, lambda v: te.where(v <= -3.0, 0.0, te.where(
        v >= 3.0, v, v * (v + 3.0) * (1.0 / 6.0))), "hardswish")


def logsigmoid(input):
    """F.logsigmoid: log(sigmoid(x)), stable for either sign of x.

    >>> nf.nn.logsigmoid(x).shape
    (4, 5)
    """
    x = check_float(input, "logsigmoid", "input")
    return _elementwise(x, lambda v: te.where(v < 0, v - te.log1p(te.exp(v)),
                                              -te.log1p(te.exp(-v))), "logsigmoid")


SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """F.selu: scale * (x for x > 0, alpha * (exp(x) - 1) otherwise).

    >>> nf.nn.selu(x).shape
    (4, 5)
    """
    x = check_float(input, "selu", "input")
    reject("selu", inplace=(inplace, False))
    return _elementwise(x, lambda v: te.where(v > 0, v * SELU_SCALE,
                                              te.expm1(v) * (SELU_ALPHA * SELU_SCALE)), "selu")


def celu(input, alpha=1.0, inplace=False):
    """F.celu: x for x > 0, alpha * (exp(x / alpha) - 1) otherwise.

    >>> nf.nn.celu(x, alpha=0.5).shape
    (4, 5)
    """
    x = check_float(input, "celu", "input")
    reject("celu", inplace=(inplace, False))
    a = _number("celu", "alpha", alpha)
    if a == 0:
        raise NeoFlowError("celu: alpha must be non-zero (torch: ZeroDivisionError)")
    return _elementwise(x, lambda v: te.where(v > 0, v, te.expm1(v * (1.0 / a)) * a), "celu")


def prelu(input, weight):
    """F.prelu: x for x > 0, weight * x otherwise; weight holds one slope or
    one per channel (input.shape[1]).

    >>> a = nf.parameter((5,), init="ones", name="a")
    >>> nf.nn.prelu(x, a).shape
    (4, 5)
    """
    x = check_float(input, "prelu", "input")
    check_tensor(weight, "prelu", "weight")
    check_same_dtype("prelu", "input", x, weight=weight)
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.ndim != 1 or weight.shape[0] not in (1, channels):
        raise ShapeError(f"prelu: weight '{weight.name}' has shape {weight.shape}; expected "
                         f"(1,) or ({channels},) (input.shape[1], the channels)")
    per_channel = weight.shape[0] != 1

    def body(*i):
        w = weight[i[1] if per_channel else 0]
        return te.where(x[i] > 0, x[i], w * x[i])
    return te.compute(x.shape, body, name="prelu")


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
    y = te.compute(x.shape, lambda *i: te.exp(x[i] - m[drop(i)]) / s[drop(i)],
                   name="softmax")
    _row_gradient(y, x, m, s, d, lambda g, t, i: y[i] * (g[i] - t))
    return y


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
    y = te.compute(x.shape, lambda *i: x[i] - m[drop(i)] - te.log(s[drop(i)]),
                   name="log_softmax")
    _row_gradient(y, x, m, s, d, lambda g, t, i: g[i] - te.exp(y[i]) * t, weighted=False)
    return y


def _row_gradient(y, x, m, s, d, dx, weighted=True):
    """Give softmax/log_softmax `y` of `x` (row max m, sum of exponentials s,
    over dim d) torch's gradient as its adjoint rule (autodiff/reverse.py,
    `_rules`): t = sum over d of g * y (`weighted`) or of g, then
    dx[i] = `dx(g, t[row of i], i)` -- one reduction and one elementwise pass.
    The derived gradient also differentiates the shift by the row max, which
    cancels (an argmax pass and two more sums for a zero); so m and s get
    nothing (rules returning None)."""
    drop = lambda i: i[:d] + i[d + 1:]   # noqa: E731

    def rule(g):
        t = reduce_over(y.shape, (d,), False,
                        lambda f, o: g[f] * y[f] if weighted else g[f], f"d{y.name}_sum")
        return te.compute(x.shape, lambda *i: dx(g, t[drop(i)], i), name=f"d{x.name}")

    nothing = lambda g: None   # noqa: E731
    y.op.adjoint_rules = ((x, rule, y.op.body), (m, nothing, y.op.body),
                          (s, nothing, y.op.body))
