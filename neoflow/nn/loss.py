"""Losses: cross_entropy and nll_loss (integer class labels, with
ignore_index and class weights), mse_loss, l1_loss, smooth_l1_loss,
huber_loss, binary_cross_entropy(_with_logits) and kl_div; 'mean'
(default), 'sum' or 'none' reduction (kl_div also 'batchmean').

Cross-entropy reads the logits directly: per position, max and sum of
exponentials over the classes (shared with softmax), then one reduction of
m + log(s) - logit[label]. A mean loss is a 0-d Tensor.

Hands on: compute Tensors (0-d for 'mean' and 'sum').
"""
import math
import numbers

from .. import te
from ..errors import DTypeError, NeoFlowError, ShapeError
from ..te import dtype as dt
from ..te.tensor import broadcast_shapes
from .activation import max_and_sumexp
from .common import check_float, check_same_dtype, check_tensor, is_int, reject
from .reduce import reduce_over

__all__ = ["cross_entropy", "mse_loss", "nll_loss", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "l1_loss", "smooth_l1_loss", "huber_loss",
           "kl_div"]

_REDUCTIONS = ("mean", "sum", "none")


def _check_reduction(op, reduction, size_average, reduce):
    reject(op, size_average=(size_average, None), reduce=(reduce, None))
    if reduction not in _REDUCTIONS:
        raise NeoFlowError(f"{op}: reduction={reduction!r} is not supported; expected one of "
                           f"{_REDUCTIONS}")


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    """F.cross_entropy with integer class labels: input (N, C) or (N, C, d1, ...)
    or (C,), target (N,) / (N, d1, ...) / () of int32 or int64. Labels equal to
    `ignore_index` count for nothing (the mean divides by the rest, or by their
    total class weight when `weight` is given).

    >>> logits = nf.placeholder((32, 10), name="logits")
    >>> labels = nf.placeholder((32,), dtype="int64", name="labels")
    >>> nf.nn.cross_entropy(logits, labels).shape
    ()
    """
    op = "cross_entropy"
    x = check_float(input, op, "input")
    t = check_tensor(target, op, "target")
    _check_reduction(op, reduction, size_average, reduce)
    reject(op, label_smoothing=(label_smoothing, 0.0))
    if not dt.is_int(t.dtype):
        raise DTypeError(f"cross_entropy: target '{t.name}' must hold int32/int64 class "
                         f"labels, got {t.dtype} (class-probability targets are not supported)")
    cdim = _check_labels(op, x, t, weight, ignore_index)
    m, s = max_and_sumexp(x, cdim, "cross_entropy")

    def nll(p):      # -log_softmax(x)[label] at position p of the target
        value = m[p] + te.log(s[p]) - x[p[:cdim] + (t[p],) + p[cdim:]]
        return value * weight[t[p]] if weight is not None else value

    return _label_reduction(op, x, t, nll, weight, ignore_index, reduction)


def _masked_total(shape, value, valid, dtype):
    """A function building the sum of value(p) over every index p of `shape`
    where valid(p) holds (a fresh reduction each call)."""
    def build():
        p = tuple(te.reduce_axis(n, name=f"r{d}") for d, n in enumerate(shape))
        if not p:
            return te.where(valid(p), value(p), te.const(0, dtype))
        return te.sum(value(p), axis=list(p), where=valid(p))
    return build


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    """F.mse_loss: mean (or sum, or elementwise) of (input - target)**2; shapes
    broadcast as in torch.

    >>> a = nf.placeholder((4, 5), name="a"); b = nf.placeholder((4, 5), name="b")
    >>> nf.nn.mse_loss(a, b).shape
    ()
    """
    op = "mse_loss"
    x = check_float(input, op, "input")
    check_tensor(target, op, "target")
    check_same_dtype(op, "input", x, target=target)
    _check_reduction(op, reduction, size_average, reduce)
    reject(op, weight=(weight, None))

    def sq(a, b, idx):
        diff = a - b
        return diff * diff
    return _pointwise(op, x, target, sq, reduction)


# ------------------------------------- losses over labels, pairs, distributions

def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    """F.nll_loss: input holds log-probabilities (C,), (N, C) or (N, C, d1, ...),
    target integer class labels shaped like input without dim 1; the loss at
    a position is -weight[label] * input[label]; labels equal to `ignore_index`
    count for nothing (the mean divides by the total weight of the rest).

    >>> logp = nf.nn.log_softmax(nf.placeholder((32, 10), name="x"), dim=1)
    >>> nf.nn.nll_loss(logp, nf.placeholder((32,), dtype="int64", name="y")).shape
    ()
    """
    op = "nll_loss"
    x = check_float(input, op, "input")
    t = check_tensor(target, op, "target")
    _check_reduction(op, reduction, size_average, reduce)
    cdim = _check_labels(op, x, t, weight, ignore_index)

    def nll(p):
        value = -x[p[:cdim] + (t[p],) + p[cdim:]]
        return value * weight[t[p]] if weight is not None else value

    return _label_reduction(op, x, t, nll, weight, ignore_index, reduction)


def _check_labels(op, x, t, weight, ignore_index):
    """The checks of a loss over integer class labels; returns the class dim."""
    if not dt.is_int(t.dtype):
        raise DTypeError(f"{op}: target '{t.name}' must hold int32/int64 class labels, got "
                         f"{t.dtype}")
    if not is_int(ignore_index):
        raise NeoFlowError(f"{op}: ignore_index must be an int, got {ignore_index!r}")
    if x.ndim == 0:
        raise ShapeError(f"{op}: input '{x.name}' is 0-d; expected (C,), (N, C) or "
                         "(N, C, d1, ...)")
    cdim = 0 if x.ndim == 1 else 1
    expected = x.shape[:cdim] + x.shape[cdim + 1:]
    if t.shape != expected:
        raise ShapeError(f"{op}: target '{t.name}' has shape {t.shape} but input {x.shape} "
                         f"needs {expected} (input's shape without the class dimension "
                         f"{cdim})")
    check_same_dtype(op, "input", x, weight=weight)
    if weight is not None and weight.shape != (x.shape[cdim],):
        raise ShapeError(f"{op}: weight '{weight.name}' has shape {weight.shape}, expected "
                         f"({x.shape[cdim]},) (input.shape[{cdim}], the classes)")
    return cdim


def _label_reduction(op, x, t, loss, weight, ignore_index, reduction):
    """loss(p) over the label positions p, reduced as torch reduces a loss over
    class labels (the mean divides by the total weight of the labels kept)."""
    valid = lambda p: t[p] != ignore_index   # noqa: E731
    if reduction == "none":
        return te.compute(t.shape, lambda *p: te.where(valid(p), loss(p), 0), name=op)
    total = _masked_total(t.shape, loss, valid, x.dtype)
    if reduction == "sum":
        return te.compute((), total, name=op)
    one = lambda p: te.const(1, x.dtype)     # noqa: E731
    norm = _masked_total(t.shape, one if weight is None else lambda p: weight[t[p]], valid,
                         x.dtype)
    return te.compute((), lambda: total() / norm(), name=op)


def _pointwise(op, x, target, value, reduction, weight=None, name=None):
    """value(a, b, idx) over the broadcast shape of x and target (torch: the
    same shape for most losses), times weight where given, reduced."""
    shape = broadcast_shapes(x.shape, target.shape,
                             what=f"{op}: input {x.shape} and target {target.shape}")
    if weight is not None:
        shape = broadcast_shapes(shape, weight.shape,
                                 what=f"{op}: weight {weight.shape} and input {shape}")

    def at(tensor, idx):
        lead = len(shape) - tensor.ndim
        return tensor[tuple(0 if s == 1 else idx[lead + d] for d, s in enumerate(tensor.shape))]

    def point(idx):
        v = value(at(x, idx), at(target, idx), idx)
        return v * at(weight, idx) if weight is not None else v

    if reduction == "none":
        return te.compute(shape, lambda *i: point(i), name=op)
    scale = (lambda acc, o: acc / math.prod(shape)) if reduction == "mean" else None
    return reduce_over(shape, tuple(range(len(shape))), False, lambda f, o: point(f), op,
                       post=scale)


def _pair(op, input, target, reduction, size_average, reduce, same_shape=True, **others):
    x = check_float(input, op, "input")
    check_tensor(target, op, "target")
    check_same_dtype(op, "input", x, target=target, **others)
    _check_reduction(op, reduction, size_average, reduce)
    if same_shape and target.shape != x.shape:
        raise ShapeError(f"{op}: target '{target.name}' has shape {target.shape} but input "
                         f"'{x.name}' has {x.shape}; they must be equal (as in torch)")
    return x


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    """F.binary_cross_entropy: -w * (t * log(x) + (1 - t) * log(1 - x)) with
    each log clamped to >= -100 (as torch); input holds probabilities.

    >>> p = nf.nn.sigmoid(nf.placeholder((8, 3), name="z"))
    >>> nf.nn.binary_cross_entropy(p, nf.placeholder((8, 3), name="t")).shape
    ()
    """
    op = "binary_cross_entropy"
    x = _pair(op, input, target, reduction, size_average, reduce, weight=weight)

    def value(a, b, idx):
        log_a = te.clamp(te.log(a), -100.0)
        log_1a = te.clamp(te.log(1.0 - a), -100.0)
        return -(b * log_a + (1.0 - b) * log_1a)
    return _pointwise(op, x, target, value, reduction, weight)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None,
                                     reduce=None, reduction="mean", pos_weight=None):
    """F.binary_cross_entropy_with_logits: binary cross-entropy of sigmoid(x),
    computed stably: (1 - t) * x + (1 + (pos_weight - 1) * t) * log(1 + exp(-x));
    weight and pos_weight broadcast against input (pos_weight along the last
    dim, the classes).

    >>> z = nf.placeholder((8, 3), name="z")
    >>> nf.nn.binary_cross_entropy_with_logits(z, nf.placeholder((8, 3), name="t")).shape
    ()
    """
    op = "binary_cross_entropy_with_logits"
    x = _pair(op, input, target, reduction, size_average, reduce, weight=weight,
              pos_weight=pos_weight)
    if pos_weight is not None:
        broadcast_shapes(x.shape, pos_weight.shape,
                         what=f"{op}: pos_weight {pos_weight.shape} and input {x.shape}")

    def value(a, b, idx):
        # log(1 + exp(-a)), stable for either sign and with the exact gradient
        sp = te.where(a < 0, te.log1p(te.exp(a)) - a, te.log1p(te.exp(-a)))
        if pos_weight is None:
            return (1.0 - b) * a + sp
        lead = len(idx) - pos_weight.ndim
        pw = pos_weight[tuple(0 if s == 1 else idx[lead + d]
                              for d, s in enumerate(pos_weight.shape))]
        return (1.0 - b) * a + (1.0 + (pw - 1.0) * b) * sp
    return _pointwise(op, x, target, value, reduction, weight)


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """F.l1_loss: |input - target|, reduced (gradient 0 where they are equal).

    >>> nf.nn.l1_loss(a, b).shape
    ()
    """
    op = "l1_loss"
    x = _pair(op, input, target, reduction, size_average, reduce, same_shape=False)
    return _pointwise(op, x, target, lambda a, b, i: te.abs(a - b), reduction)


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    """F.smooth_l1_loss: 0.5 * d**2 / beta where |d| < beta, |d| - 0.5 * beta
    elsewhere (d = input - target; beta == 0 is the L1 loss).

    >>> nf.nn.smooth_l1_loss(a, b, beta=0.5).shape
    ()
    """
    op = "smooth_l1_loss"
    x = _pair(op, input, target, reduction, size_average, reduce, same_shape=False)
    beta = _nonnegative(op, "beta", beta)

    def value(a, b, idx):
        d = a - b
        if beta == 0:
            return te.abs(d)
        return te.where(te.abs(d) < beta, d * d * (0.5 / beta), te.abs(d) - 0.5 * beta)
    return _pointwise(op, x, target, value, reduction)


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    """F.huber_loss: 0.5 * d**2 where |d| <= delta, delta * (|d| - 0.5 * delta)
    elsewhere (d = input - target).

    >>> nf.nn.huber_loss(a, b, delta=2.0).shape
    ()
    """
    op = "huber_loss"
    x = _pair(op, input, target, reduction, None, None, same_shape=False)
    reject(op, weight=(weight, None))
    delta = _nonnegative(op, "delta", delta)
    if delta == 0:
        raise NeoFlowError(f"{op}: delta must be positive, got {delta}")

    def value(a, b, idx):
        d = a - b
        return te.where(te.abs(d) <= delta, d * d * 0.5, (te.abs(d) - 0.5 * delta) * delta)
    return _pointwise(op, x, target, value, reduction)


_KL_REDUCTIONS = ("mean", "batchmean", "sum", "none")


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """F.kl_div: input holds log-probabilities; pointwise target * (log(target)
    - input) (0 where target == 0), or exp(target) * (target - input) with
    log_target=True; reduction 'mean' (over every element, torch's default),
    'batchmean' (divided by input.shape[0]), 'sum' or 'none'.

    >>> nf.nn.kl_div(logq, p, reduction="batchmean").shape
    ()
    """
    op = "kl_div"
    x = check_float(input, op, "input")
    check_tensor(target, op, "target")
    check_same_dtype(op, "input", x, target=target)
    reject(op, size_average=(size_average, None), reduce=(reduce, None))
    if reduction not in _KL_REDUCTIONS:
        raise NeoFlowError(f"{op}: reduction={reduction!r} is not supported; expected one of "
                           f"{_KL_REDUCTIONS}")
    if not isinstance(log_target, bool):
        raise NeoFlowError(f"{op}: log_target must be a bool, got {log_target!r}")

    def value(a, b, idx):
        if log_target:
            return te.exp(b) * (b - a)
        return te.where(b == 0, 0.0, b * te.log(b)) - b * a

    if reduction != "batchmean":
        return _pointwise(op, x, target, value, reduction)
    total = _pointwise(op, x, target, value, "sum")
    batch = x.shape[0] if x.ndim else 1
    return te.compute((), lambda: total[()] * (1.0 / batch), name=op)


def _nonnegative(op, what, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
        raise NeoFlowError(f"{op}: {what} must be a non-negative number, got {value!r}")
    return float(value)
