"""The public scalar functions of the language: math intrinsics, reductions,
where, clamp, cast and const.

Applied to a whole `Tensor` (not an expression), every intrinsic, `where`,
`clamp` and `cast` returns a new Tensor, elementwise with NumPy
broadcasting: `nf.exp(t)`, `nf.where(mask, a, 0.0)`.

Hands on: checked `Expr` nodes (or, for whole tensors, compute Tensors).
"""
from ..errors import DTypeError, ExpressionError
from . import dtype as dt
from .expr import (Cast, Const, Expr, IterVar, Reduce, Select, _unify, as_expr,
                   binary, unary)
from .tensor import Tensor, elementwise_map


def _whole(op, fn, *args):
    """fn(*args) on scalars, or, when an argument is a whole Tensor, the Tensor
    of fn applied elementwise (None when no argument is a Tensor)."""
    if not any(isinstance(a, Tensor) for a in args):
        return None
    for a in args:
        if isinstance(a, Expr):
            raise ExpressionError(
                f"nf.{op}: cannot mix a whole tensor with the scalar expression {a!r}; "
                "index the tensor (t[i, j]) or pass whole tensors and numbers only")
    return elementwise_map(fn, args, op)


def _unary_fn(op, doc):
    def fn(x):
        whole = _whole(op, fn, x)
        return whole if whole is not None else unary(op, as_expr(x))
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
floor = _unary_fn("floor", "Largest integer not above x (float result; gradient 0). "
                           ">>> nf.floor(A[i])")
ceil = _unary_fn("ceil", "Smallest integer not below x (float result; gradient 0). "
                         ">>> nf.ceil(A[i])")
round = _unary_fn(  # noqa: A001 (API name)
    "round", "x rounded to the nearest integer, halves to even as torch.round "
             "(round(2.5) == 2, round(-0.5) == -0); gradient 0. >>> nf.round(A[i])")
sign = _unary_fn("sign", "-1, 0 or 1 as x is negative, zero or positive (torch.sign: "
                         "sign(NaN) == 0); any number dtype; gradient 0. >>> nf.sign(A[i])")
log1p = _unary_fn("log1p", "log(1 + x), accurate for small x (C's log1p). >>> nf.log1p(A[i])")
expm1 = _unary_fn("expm1", "exp(x) - 1, accurate for small x (C's expm1). >>> nf.expm1(A[i])")
sin = _unary_fn("sin", "Sine (radians). >>> nf.sin(A[i])")
cos = _unary_fn("cos", "Cosine (radians). >>> nf.cos(A[i])")


def pow(a, b):  # noqa: A001 (API name)
    """a ** b for float operands. >>> nf.pow(A[i], 2.0)"""
    whole = _whole("pow", pow, a, b)
    return whole if whole is not None else binary("pow", a, b)


def maximum(a, b):
    """Elementwise larger of a and b. >>> nf.maximum(A[i], 0.0)"""
    whole = _whole("maximum", maximum, a, b)
    return whole if whole is not None else binary("max", a, b)


def minimum(a, b):
    """Elementwise smaller of a and b. >>> nf.minimum(A[i], B[i])"""
    whole = _whole("minimum", minimum, a, b)
    return whole if whole is not None else binary("min", a, b)


def where(cond, a, b):
    """`a` where `cond` holds, else `b`; only the chosen side is evaluated.

    >>> nf.where(i >= 1, A[i - 1], 0.0)   # a guarded (padded) read
    >>> nf.where(mask, x, 0.0)            # whole tensors: a Tensor, broadcast
    """
    whole = _whole("where", where, cond, a, b)
    if whole is not None:
        return whole
    cond = as_expr(cond)
    if cond.dtype != dt.BOOL:
        raise DTypeError(f"nf.where: the condition {cond!r} must be bool, got {cond.dtype}")
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = as_expr(a)   # two numbers (whole-tensor where over constants)
    a, b = _unify("where", a, b)
    return Select(cond, a, b)


def clamp(x, lo=None, hi=None):
    """torch.clamp: min(max(x, lo), hi); `lo` or `hi` may be None (no bound),
    a number or an expression (a Tensor, for a whole tensor `x`).

    Gradients as torch's: x gets its adjoint where lo <= x <= hi, lo where
    x < lo, hi where x > hi or hi < lo (then the result is hi everywhere).
    The one difference: where lo == hi and x < lo torch gives no gradient to
    anyone, NeoFlow gives it to lo.

    >>> nf.clamp(A[i], 0.0, 6.0)
    >>> nf.clamp(x, lo=-1.0)              # a whole tensor: a Tensor
    """
    if lo is None and hi is None:
        raise ExpressionError("nf.clamp: give at least one of lo and hi (torch: min, max)")
    whole = _whole("clamp", clamp, x, lo, hi)
    if whole is not None:
        return whole
    x = as_expr(x)
    if x.dtype == dt.BOOL:
        raise DTypeError(f"nf.clamp of a condition {x!r}; use nf.cast first")
    if lo is not None:
        lo = as_expr(lo, like=x)
    if hi is not None:
        hi = as_expr(hi, like=x)
    if hi is None:
        return where(x < lo, lo, x)
    if lo is None:
        return where(x > hi, hi, x)
    if isinstance(lo, Const) and isinstance(hi, Const):
        if hi.value < lo.value:   # torch: hi everywhere (NaN stays NaN)
            return where(x != x, x, hi)
        high = x > hi
    else:
        high = (x > hi) | (hi < lo)
    return where(high, hi, where(x < lo, lo, x))


def cast(x, dtype):
    """`x` converted to `dtype` (C conversion rules: float to int truncates).

    >>> nf.cast(i, "float32")
    """
    whole = _whole("cast", lambda v: cast(v, dtype), x)
    if whole is not None:
        return whole
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


__all__ = ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "abs", "erf", "floor", "ceil",
           "round", "sign", "log1p", "expm1", "sin", "cos", "pow", "maximum", "minimum",
           "where", "clamp", "cast", "const", "sum", "max", "min", "Expr"]
