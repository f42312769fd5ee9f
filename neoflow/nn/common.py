"""Shared argument handling of the operator library: type and dtype checks,
torch-style dim normalisation, int-or-tuple arguments, rejecting unsupported
torch options, and small builders of clean index expressions.

Hands on: normalised Python values and `Expr` index arithmetic for `nn` ops.
"""
import numbers

from ..errors import DTypeError, NeoFlowError, ShapeError
from .. import te
from ..te import Tensor
from ..te import dtype as dt

__all__ = ["check_tensor", "check_float", "check_same_dtype", "norm_dim", "norm_dims",
           "int_tuple", "reject", "affine", "conjunction", "is_int", "cast_tensor"]


def is_int(v):
    """True for a Python/NumPy integer that is not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_tensor(x, op, what):
    """Raise unless `x` is a Tensor; `what` names the argument (e.g. "input")."""
    if not isinstance(x, Tensor):
        raise NeoFlowError(f"{op}: {what} must be a neoflow Tensor, got {type(x).__name__}")
    return x


def check_float(x, op, what):
    """Raise DTypeError unless the tensor `x` has a floating dtype."""
    check_tensor(x, op, what)
    if not dt.is_float(x.dtype):
        raise DTypeError(f"{op}: {what} '{x.name}' must be float32 or float64, got {x.dtype}")
    return x


def check_same_dtype(op, ref_what, ref, **others):
    """Raise DTypeError unless every tensor in `others` (name -> tensor or None)
    has the dtype of `ref`."""
    for what, t in others.items():
        if t is not None:
            check_tensor(t, op, what)
            if t.dtype != ref.dtype:
                raise DTypeError(f"{op}: {what} '{t.name}' is {t.dtype} but {ref_what} "
                                 f"'{ref.name}' is {ref.dtype}; they must match (use a cast)")


def norm_dim(dim, ndim, op, what="dim"):
    """`dim` as a non-negative axis of a tensor with `ndim` dims (torch rules:
    -ndim <= dim < ndim; a 0-d tensor accepts 0 and -1).

    >>> norm_dim(-1, 3, "softmax")
    2
    """
    if not is_int(dim):
        raise NeoFlowError(f"{op}: {what} must be an int, got {dim!r}")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise ShapeError(f"{op}: {what}={dim} is out of range for a tensor with {ndim} "
                         f"dimension(s) (expected {-n}..{n - 1})")
    return dim % n if ndim else 0


def norm_dims(dim, ndim, op, what="dim"):
    """A sorted tuple of distinct axes; None or () means every axis (torch's
    rule for sum/mean/var).

    >>> norm_dims((-1, 0), 3, "sum")
    (0, 2)
    """
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if is_int(dim) else dim
    if not isinstance(dims, (tuple, list)):
        raise NeoFlowError(f"{op}: {what} must be an int, a tuple of ints or None, got {dim!r}")
    if len(dims) == 0:
        return tuple(range(ndim))
    out = [norm_dim(d, ndim, op, what) for d in dims]
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: {what}={tuple(dims)} names a dimension more than once")
    return tuple(sorted(set(out))) if ndim else ()


def int_tuple(value, n, op, what, minimum=0):
    """`value` (an int or a sequence of n ints, each >= minimum) as an n-tuple.

    >>> int_tuple(2, 2, "conv2d", "stride", 1)
    (2, 2)
    """
    vals = (value,) * n if is_int(value) else value
    if not isinstance(vals, (tuple, list)) or len(vals) not in (1, n) \
            or not all(is_int(v) for v in vals):
        raise NeoFlowError(f"{op}: {what} must be an int or a tuple of {n} ints, got {value!r}")
    vals = tuple(int(v) for v in vals) * (n if len(vals) == 1 else 1)
    for v in vals:
        if v < minimum:
            raise NeoFlowError(f"{op}: {what} must be >= {minimum} in every dimension, "
                               f"got {value!r}")
    return vals


def reject(op, **options):
    """Raise NeoFlowError for a torch option given a value NeoFlow does not
    support; `options` maps name -> (value, supported default)."""
    for name, (value, default) in options.items():
        same = value is default if default is None or isinstance(default, bool) \
            else value == default
        if not same:
            raise NeoFlowError(f"{op}: {name}={value!r} is not supported by NeoFlow "
                               f"(only {name}={default!r})")


def affine(*terms, const=0):
    """sum(coeff * expr) + const as a small expression: drops zero terms and
    unit coefficients, so `affine((o, 1), const=0)` is just `o`.
    Each term is (expr, coeff); expr may be None (skipped) or a Python int.

    >>> affine((oh, 2), (kh, 1), const=-1)   # oh*2 + kh - 1
    """
    expr = None
    for e, c in terms:
        if e is None or c == 0:
            continue
        if is_int(e):
            const += e * c
            continue
        if expr is None:
            expr = e if c == 1 else e * c
        elif c < 0:
            expr = expr - (e if c == -1 else e * -c)
        else:
            expr = expr + (e if c == 1 else e * c)
    if expr is None:
        return const
    return expr + const if const > 0 else expr - (-const) if const < 0 else expr


def conjunction(conds):
    """The `&` of a list of conditions, or None for an empty list."""
    out = None
    for c in conds:
        out = c if out is None else out & c
    return out


def cast_tensor(x, dtype, op):
    """`x` converted elementwise to `dtype` (x itself when it already has it)."""
    dtype = dt.canonical(dtype, op)
    if x.dtype == dtype:
        return x
    return te.compute(x.shape, lambda *i: te.cast(x[i], dtype), name=f"{op}_cast")
