"""Losses: cross_entropy (integer class labels, with ignore_index and class
weights) and mse_loss; 'mean' (default), 'sum' or 'none' reduction.

Cross-entropy reads the logits directly: per position, max and sum of
exponentials over the classes (shared with softmax), then one reduction of
m + log(s) - logit[label]. A mean loss is a 0-d Tensor.

Hands on: compute Tensors (0-d for 'mean' and 'sum').
"""
import math

from .. import te
from ..errors import DTypeError, NeoFlowError, ShapeError
from ..te import dtype as dt
from ..te.tensor import broadcast_shapes
from .activation import max_and_sumexp
from .common import check_float, check_same_dtype, check_tensor, is_int, reject
from .reduce import reduce_over

__all__ = ["cross_entropy", "mse_loss"]

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
    if not is_int(ignore_index):
        raise NeoFlowError(f"cross_entropy: ignore_index must be an int, got {ignore_index!r}")
    if x.ndim == 0:
        raise ShapeError(f"cross_entropy: input '{x.name}' is 0-d; expected (C,), (N, C) or "
                         "(N, C, d1, ...)")
    cdim = 0 if x.ndim == 1 else 1
    expected = x.shape[:cdim] + x.shape[cdim + 1:]
    if t.shape != expected:
        raise ShapeError(f"cross_entropy: target '{t.name}' has shape {t.shape} but input "
                         f"{x.shape} needs {expected} (input's shape without the class "
                         f"dimension {cdim})")
    check_same_dtype(op, "input", x, weight=weight)
    n_classes = x.shape[cdim]
    if weight is not None and weight.shape != (n_classes,):
        raise ShapeError(f"cross_entropy: weight '{weight.name}' has shape {weight.shape}, "
                         f"expected ({n_classes},) (input.shape[{cdim}], the classes)")
    m, s = max_and_sumexp(x, cdim, "cross_entropy")

    def nll(p):      # -log_softmax(x)[label] at position p of the target
        value = m[p] + te.log(s[p]) - x[p[:cdim] + (t[p],) + p[cdim:]]
        return value * weight[t[p]] if weight is not None else value

    valid = lambda p: t[p] != ignore_index   # noqa: E731
    if reduction == "none":
        return te.compute(t.shape, lambda *p: te.where(valid(p), nll(p), 0),
                          name="cross_entropy")
    total = _masked_total(t.shape, nll, valid, x.dtype)
    if reduction == "sum":
        return te.compute((), total, name="cross_entropy")
    one = lambda p: te.const(1, x.dtype)     # noqa: E731
    norm = _masked_total(t.shape, one if weight is None else lambda p: weight[t[p]], valid,
                         x.dtype)
    return te.compute((), lambda: total() / norm(), name="cross_entropy")


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
    shape = broadcast_shapes(x.shape, target.shape,
                             what=f"mse_loss: input {x.shape} and target {target.shape}")

    def at(tensor, idx):
        lead = len(shape) - tensor.ndim
        return tensor[tuple(0 if s == 1 else idx[lead + d] for d, s in enumerate(tensor.shape))]

    def sq(idx):
        diff = at(x, idx) - at(target, idx)
        return diff * diff

    if reduction == "none":
        return te.compute(shape, lambda *i: sq(i), name="mse_loss")
    scale = (lambda acc, o: acc / math.prod(shape)) if reduction == "mean" else None
    return reduce_over(shape, tuple(range(len(shape))), False, lambda f, o: sq(f), "mse_loss",
                       post=scale)
