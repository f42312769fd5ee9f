"""Reductions over tensor dimensions: sum, mean, var, amax, amin,
logsumexp, and the helper every reducing operator (softmax, norms, losses)
builds on.

Hands on: compute Tensors; dims follow torch (int, tuple, negative, None).
"""
from .. import te
from ..errors import DTypeError, NeoFlowError
from ..te import dtype as dt
from .common import cast_tensor, check_float, check_tensor, norm_dims

__all__ = ["sum", "mean", "var", "amax", "amin", "logsumexp"]

_REDUCERS = {"sum": te.sum, "max": te.max, "min": te.min}


def reduce_over(shape, dims, keepdim, body, name, reducer="sum", post=None):
    """A compute reducing `body` over the (normalised) `dims` of an index
    space `shape` (usually the shape of the tensor read).

    `body(full, out)` gets the full index of `x` (reduce axes in `dims`) and
    the output index; `post(acc, out)` may finish the result (e.g. scale it).
    Dimensions of size 1 need no reduce axis; with no axis left there is no
    reduction at all.

    >>> m = reduce_over(x.shape, (1,), False, lambda f, o: x[f], "rowmax", "max")
    """
    axes = {d: te.reduce_axis(shape[d], name=f"r{d}") for d in dims if shape[d] > 1}
    out_shape = tuple(1 if d in dims else s for d, s in enumerate(shape)
                      if keepdim or d not in dims)

    def fcompute(*out):
        it = iter(out)
        full = []
        for d in range(len(shape)):
            if d in dims:
                full.append(axes.get(d, 0))
                if keepdim:
                    next(it)
            else:
                full.append(next(it))
        acc = body(tuple(full), tuple(out))
        if axes:
            acc = _REDUCERS[reducer](acc, axis=list(axes.values()))
        return post(acc, tuple(out)) if post is not None else acc

    return te.compute(out_shape, fcompute, name=name)


def count(x, dims):
    """How many elements of `x` one reduction over `dims` combines."""
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def moments(x, dims, keepdim, correction, name):
    """(mean, variance) of `x` over `dims` as two computes (two-pass, stable);
    the variance divides by count - correction (0: biased, 1: unbiased)."""
    n = count(x, dims)
    mu = reduce_over(x.shape, dims, keepdim, lambda f, o: x[f], f"{name}_mean",
                     post=lambda acc, o: acc * (1.0 / n))

    def sq(f, o):
        diff = x[f] - mu[o]   # mu is shaped like the output
        return diff * diff

    denom = n - correction
    scale = (lambda acc, o: acc * (1.0 / denom)) if denom > 0 else \
        (lambda acc, o: acc / te.const(0.0, x.dtype))   # torch: inf or nan, with a warning
    v = reduce_over(x.shape, dims, keepdim, sq, f"{name}_var", post=scale)
    return mu, v


def sum(input, dim=None, keepdim=False, dtype=None):  # noqa: A001 (torch name)
    """torch.sum: the sum over `dim` (int, tuple, negative, or None for all).
    Integer and bool inputs sum to int64, as in torch.

    >>> x = nf.placeholder((4, 5), name="x")
    >>> nf.nn.sum(x, dim=-1).shape
    (4,)
    """
    x = check_tensor(input, "sum", "input")
    out_dtype = dt.canonical(dtype, "sum") if dtype is not None else \
        ("int64" if x.dtype in dt.INT_DTYPES + (dt.BOOL,) else x.dtype)
    dims = norm_dims(dim, x.ndim, "sum")
    return reduce_over(x.shape, dims, keepdim, lambda f, o: te.cast(x[f], out_dtype), "sum")


def mean(input, dim=None, keepdim=False, dtype=None):
    """torch.mean: the mean over `dim` (float inputs only, as in torch).

    >>> nf.nn.mean(x, dim=(0, 1), keepdim=True).shape
    (1, 1)
    """
    x = check_tensor(input, "mean", "input")
    if dtype is not None:
        dtype = dt.canonical(dtype, "mean")
        if not dt.is_float(dtype):
            raise DTypeError(f"mean: dtype={dtype} is not a float dtype")
        x = cast_tensor(x, dtype, "mean")
    check_float(x, "mean", "input")
    dims = norm_dims(dim, x.ndim, "mean")
    n = count(x, dims)
    return reduce_over(x.shape, dims, keepdim, lambda f, o: x[f], "mean",
                       post=lambda acc, o: acc / n)   # divided, as torch: one rounding


def var(input, dim=None, unbiased=True, keepdim=False, *, correction=None):
    """torch.var: the variance over `dim`; divides by n - 1 when `unbiased`
    (torch's default), by n otherwise; `correction` (an int) overrides.

    >>> nf.nn.var(x, dim=1, unbiased=False).shape
    (4,)
    """
    x = check_float(input, "var", "input")
    if correction is None:
        correction = 1 if unbiased else 0
    if not isinstance(correction, int) or isinstance(correction, bool) or correction < 0:
        raise NeoFlowError(f"var: correction must be a non-negative int, got {correction!r}")
    dims = norm_dims(dim, x.ndim, "var")
    return moments(x, dims, keepdim, correction, "var")[1]


def amax(input, dim=(), keepdim=False):
    """torch.amax: the maximum over `dim` (() or None: every dimension).

    >>> nf.nn.amax(x, dim=1).shape
    (4,)
    """
    x = check_tensor(input, "amax", "input")
    return _extreme(x, dim, keepdim, "max", "amax")


def amin(input, dim=(), keepdim=False):
    """torch.amin: the minimum over `dim` (() or None: every dimension).

    >>> nf.nn.amin(x, dim=(0, 1)).shape
    ()
    """
    x = check_tensor(input, "amin", "input")
    return _extreme(x, dim, keepdim, "min", "amin")


def _extreme(x, dim, keepdim, reducer, op):
    if x.dtype == dt.BOOL:
        raise DTypeError(f"{op}: input '{x.name}' is bool; cast it to a number first")
    dims = norm_dims(dim, x.ndim, op)
    return reduce_over(x.shape, dims, keepdim, lambda f, o: x[f], op, reducer=reducer)


def logsumexp(input, dim, keepdim=False):
    """torch.logsumexp: log(sum(exp(x))) over `dim` (an int or a tuple),
    computed as m + log(sum(exp(x - m))) with m the maximum (0 where it is
    infinite, as torch).

    >>> nf.nn.logsumexp(x, dim=1).shape
    (4,)
    """
    x = check_float(input, "logsumexp", "input")
    if dim is None:
        raise NeoFlowError("logsumexp: dim must be given (an int or a tuple of ints)")
    dims = norm_dims(dim, x.ndim, "logsumexp")
    m = reduce_over(x.shape, dims, True, lambda f, o: x[f], "logsumexp_max", reducer="max")
    safe = te.compute(m.shape, lambda *i: te.where(te.abs(m[i]) == float("inf"), 0.0, m[i]),
                      name="logsumexp_shift")
    kept = lambda f: tuple(0 if d in dims else v for d, v in enumerate(f))   # noqa: E731
    return reduce_over(x.shape, dims, keepdim, lambda f, o: te.exp(x[f] - safe[kept(f)]),
                       "logsumexp",
                       post=lambda acc, o: te.log(acc) + safe[_expand(o, dims, keepdim,
                                                                      x.ndim)])


def _expand(out, dims, keepdim, ndim):
    """The keepdim index of an output index `out` of a reduction over `dims`."""
    if keepdim:
        return out
    it = iter(out)
    return tuple(0 if d in dims else next(it) for d in range(ndim))
