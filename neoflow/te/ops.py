"""The public scalar functions of the language: math intrinsics, reductions,
where, cast and const.

Hands on: checked `Expr` nodes.
"""
from ..errors import DTypeError, ExpressionError
from . import dtype as dt
from .expr import (Cast, Const, Expr, IterVar, Reduce, Select, _unify, as_expr,
                   binary, unary)


def _unary_fn(op, doc):
    def fn(x):
        return unary(op, as_expr(x))
    fn.__name__ = op
    fn.__doc__ = doc
    return fn


exp = _unary_fn("exp", "e**x. >>> nf.exp(A[i])")
log = _unary_fn("log", "Natural logarithm. >>> nf.log(A[i])")
tanh = _unary_fn("tanh", "Hyperbolic tangent. >>> nf.tanh(A[i])")
sigmoid = _unary_fn("sigmoid", "1 / (1 + exp(-x)). >>> nf.sigmoid(A[i])")
sqrt = _unary_fn("sqrt", "Square root. >>> nf.sqrt(A[i])")
rsqrt = _unary_fn("rsqrt", "1 / sqrt(x). >>> nf.rsqrt(A[i])")
abs = _unary_fn("abs", "Absolute value. >>> nf.abs(A[i])")  # noqa: A001 (API name)
erf = _unary_fn("erf", "The error function. >>> nf.erf(A[i])")
floor = _unary_fn("floor", "Largest integer not above x (float result). >>> nf.floor(A[i])")


def pow(a, b):  # noqa: A001 (API name)
    """a ** b for float operands. >>> nf.pow(A[i], 2.0)"""
    return binary("pow", a, b)


def maximum(a, b):
    """Elementwise larger of a and b. >>> nf.maximum(A[i], 0.0)"""
    return binary("max", a, b)


def minimum(a, b):
    """Elementwise smaller of a and b. >>> nf.minimum(A[i], B[i])"""
    return binary("min", a, b)


def where(cond, a, b):
    """`a` where `cond` holds, else `b`; only the chosen side is evaluated.

    >>> nf.where(i >= 1, A[i - 1], 0.0)   # a guarded (padded) read
    """
    cond = as_expr(cond)
    if cond.dtype != dt.BOOL:
        raise DTypeError(f"nf.where: the condition {cond!r} must be bool, got {cond.dtype}")
    a, b = _unify("where", a, b)
    return Select(cond, a, b)


def cast(x, dtype):
    """`x` converted to `dtype` (C conversion rules: float to int truncates).

    >>> nf.cast(i, "float32")
    """
    x = as_expr(x)
    dtype = dt.canonical(dtype, "nf.cast")
    return x if x.dtype == dtype else Cast(dtype, x)


def const(value, dtype="float32"):
    """A literal of an explicit dtype. >>> nf.const(0.5, "float64")"""
    return Const(value, dt.canonical(dtype, "nf.const"))


def _reduce(op, expr, axis, where=None):
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    if not axes:
        raise ExpressionError(f"nf.{op}: axis must name at least one reduce axis")
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise ExpressionError(
                f"nf.{op}: axis must be reduce axes made by nf.reduce_axis, got {a!r}")
    if len({id(a) for a in axes}) != len(axes):
        raise ExpressionError(f"nf.{op}: axis lists a reduce axis twice")
    expr = as_expr(expr)
    if expr.dtype == dt.BOOL:
        raise DTypeError(f"nf.{op} over a condition {expr!r}; use nf.cast to a number first")
    if where is not None:
        where = as_expr(where)
        if where.dtype != dt.BOOL:
            raise DTypeError(f"nf.{op}: where= must be a condition, got {where.dtype}")
    return Reduce(op, expr, axes, where)


def sum(expr, axis, where=None):  # noqa: A001 (API name)
    """Sum of `expr` over the reduce axes `axis` (only where `where` holds).

    >>> k = nf.reduce_axis(K, name="k")
    >>> C = nf.compute((M, N), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k))
    """
    return _reduce("sum", expr, axis, where)


def max(expr, axis, where=None):  # noqa: A001 (API name)
    """Maximum of `expr` over `axis` (-inf, or the int minimum, when nothing is selected).

    >>> nf.max(A[i, k], axis=k)
    """
    return _reduce("max", expr, axis, where)


def min(expr, axis, where=None):  # noqa: A001 (API name)
    """Minimum of `expr` over `axis` (+inf, or the int maximum, when nothing is selected).

    >>> nf.min(A[i, k], axis=k)
    """
    return _reduce("min", expr, axis, where)


__all__ = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "erf", "floor", "pow",
           "maximum", "minimum", "where", "cast", "const", "sum", "max", "min", "Expr"]
