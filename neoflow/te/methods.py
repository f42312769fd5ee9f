"""Tensor methods with torch's meanings: slicing views (`t[:, 1:3]`,
`t[..., None]`), `a @ b`, `t.sum/mean/max`, `t.reshape/permute/transpose`,
`t.T` and `t.float()/t.double()`.

Views are written here (a compute that reads the tensor at the sliced
index); the operators reuse the operator library's own definitions
(`nn.matmul`, `nn.sum`, ...), imported when first called, since `te` sits
below `nn` in the pipeline.

Hands on: compute Tensors.
"""
import numbers

from ..errors import ExpressionError, ShapeError


def is_view_index(indices, ndim):
    """Whether a tuple given to `t[...]` asks for a view: only Python ints,
    slices, None and ..., with at least one of the last three, or fewer ints
    than `ndim` (torch's t[2]: the rest of the dimensions)."""
    view = len(indices) < ndim
    for x in indices:
        if x is None or x is Ellipsis or isinstance(x, slice):
            view = True
        elif not _is_int(x):
            return False
    return view


def _is_int(x):
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def view(t, indices):
    """The Tensor `t[indices]` for a view index (see is_view_index): ints pick
    (negative ones count from the end), slices keep a dimension (Python's
    rules; steps must be positive, as in torch), None inserts a dimension of
    size 1, ... stands for every dimension not named.

    >>> x = nf.placeholder((4, 6), name="x")
    >>> x[:, 1:5:2].shape, x[-1, None].shape, x[..., None].shape
    ((4, 2), (1, 6), (4, 6, 1))
    """
    from .tensor import compute
    if sum(x is Ellipsis for x in indices) > 1:
        raise ShapeError(f"indexing tensor '{t.name}': an index may hold one ... only")
    named = sum(x is not None and x is not Ellipsis for x in indices)
    if named > t.ndim:
        raise ShapeError(f"tensor '{t.name}' has {t.ndim} dimension(s) {t.shape} but was "
                         f"indexed with {named} index(es)")
    at = next((n for n, x in enumerate(indices) if x is Ellipsis), None)
    if at is not None:
        indices = indices[:at] + (slice(None),) * (t.ndim - named) + indices[at + 1:]
    else:
        indices = tuple(indices) + (slice(None),) * (t.ndim - named)
    # per output dimension: (input dim or None for an inserted one, start, step)
    out_shape, plan, picks, d = [], [], {}, 0
    for x in indices:
        if x is None:
            out_shape.append(1)
            plan.append(None)
            continue
        n = t.shape[d]
        if isinstance(x, slice):
            for what, v in (("start", x.start), ("stop", x.stop), ("step", x.step)):
                if v is not None and not _is_int(v):
                    raise ExpressionError(f"slice {what} {v!r} in dimension {d} of tensor "
                                          f"'{t.name}' must be an int or None")
            if x.step is not None and x.step <= 0:
                raise ShapeError(f"slicing dimension {d} of tensor '{t.name}': step must be "
                                 f"positive, got {x.step} (as in torch)")
            lo, hi, step = x.indices(n)
            length = max(0, -(-(hi - lo) // step))
            if length < 1:
                raise ShapeError(f"slice {lo}:{hi}:{step} selects nothing from dimension {d} "
                                 f"of tensor '{t.name}' (size {n}); NeoFlow has no zero-size "
                                 "tensors")
            out_shape.append(length)
            plan.append((d, lo, step))
        else:
            if not -n <= x < n:
                raise ShapeError(f"index {x} is out of range for dimension {d} of tensor "
                                 f"'{t.name}' (size {n})")
            picks[d] = x % n
        d += 1

    def body(*out):
        idx = dict(picks)
        for o, p in zip(out, plan):
            if p is not None:
                dim, lo, step = p
                e = o * step if step != 1 else o
                idx[dim] = e + lo if lo else e
        return t[tuple(idx[k] for k in range(t.ndim))]

    return compute(tuple(out_shape), body, name=f"{t.name}_view")


def _nn():
    from .. import nn
    return nn


def _sizes(args):
    """`f(2, 3)` or `f((2, 3))` as a tuple."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def matmul(a, b):
    return _nn().matmul(a, b)


def rmatmul(a, b):
    return _nn().matmul(b, a)


def tensor_sum(t, dim=None, keepdim=False, dtype=None):
    return _nn().sum(t, dim=dim, keepdim=keepdim, dtype=dtype)


def tensor_mean(t, dim=None, keepdim=False, dtype=None):
    return _nn().mean(t, dim=dim, keepdim=keepdim, dtype=dtype)


def tensor_max(t, dim=None, keepdim=False):
    """torch's t.max(dim) as values only (torch also returns the indices);
    t.max() is the maximum of every element."""
    if dim is not None and not _is_int(dim):
        raise ExpressionError(f"{t.name}.max: dim must be an int or None, got {dim!r} "
                              "(torch's max takes one dim; use nf.nn.amax for several)")
    return _nn().amax(t, dim=() if dim is None else dim, keepdim=keepdim)


def reshape(t, args):
    return _nn().reshape(t, _sizes(args))


def permute(t, args):
    return _nn().permute(t, _sizes(args))


def transpose(t, dim0, dim1):
    return _nn().transpose(t, dim0, dim1)


def matrix_t(t):
    """t.T: the transpose of a 2-d tensor (a 0-d or 1-d tensor is itself)."""
    if t.ndim <= 1:
        return t
    if t.ndim != 2:
        raise ShapeError(f"{t.name}.T is for 2-d tensors; '{t.name}' has shape {t.shape} "
                         "(use .permute(...) or .transpose(d0, d1))")
    return transpose(t, 0, 1)


def to_dtype(t, dtype):
    """t as `dtype` (t itself when it already has it), as torch's t.float()."""
    from .ops import cast
    return t if t.dtype == dtype else cast(t, dtype)


__all__ = ["is_view_index", "view", "matmul", "rmatmul", "tensor_sum", "tensor_mean",
           "tensor_max", "reshape", "permute", "transpose", "matrix_t", "to_dtype"]
