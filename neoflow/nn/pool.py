"""Pooling (F.max_pool2d/3d, F.avg_pool2d/3d, F.adaptive_avg_pool2d/3d,
F.adaptive_max_pool2d) with torch's window geometry: kernel_size, stride
(default: kernel_size), padding, dilation (max), ceil_mode,
count_include_pad and divisor_override (avg); adaptive windows
[floor(o * I / O), ceil((o + 1) * I / O)) per output size O.

Windows are reductions masked with the reduction's `where=` (only positions
inside the input take part); the mask is emitted only where a window can
leave the input. A max pooling's window instead guards its value (a
position outside the input reads as -inf): its reduce loops keep constant
bounds, loop partitioning cuts the edges, and the default schedule
vectorises across the output row (schedule/default.py, `_small_window`;
max_pool2d 3x3/2 pad 1, 8x64x112x112: about 7x faster than with where=,
loaded machine). The average's divisor is a constant when every window
has the same one, else an index expression. One N-d builder serves 2-D and 3-D.

A max pooling carries its input gradient as an adjoint rule (first-maximum
positions and a gather over the windows holding each point: nn/pool_grad.py).

Hands on: one compute Tensor per pooling.
"""
from .. import te
from ..errors import NeoFlowError, ShapeError
from ..te import dtype as dt
from ..te.simplify import reduce_identity
from . import pool_grad
from .pool_grad import guarded
from .common import affine, check_float, check_tensor, conjunction, int_tuple, is_int, reject
from .conv import SPATIAL

__all__ = ["max_pool2d", "avg_pool2d", "max_pool3d", "avg_pool3d", "adaptive_avg_pool2d",
           "adaptive_avg_pool3d", "adaptive_max_pool2d"]


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """F.max_pool2d over (N, C, H, W) or (C, H, W); padding never wins the max.

    >>> x = nf.placeholder((2, 3, 7, 7), name="x")
    >>> nf.nn.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True).shape
    (2, 3, 4, 4)
    """
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """F.max_pool3d over (N, C, D, H, W) or (C, D, H, W).

    >>> x = nf.placeholder((2, 3, 5, 7, 7), name="x")
    >>> nf.nn.max_pool3d(x, 3, stride=2, padding=1).shape
    (2, 3, 3, 4, 4)
    """
    return _max_pool("max_pool3d", 3, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """F.avg_pool2d over (N, C, H, W) or (C, H, W), with torch's divisors:
    the window clipped to the padded input (count_include_pad=True) or to the
    input itself (False), or `divisor_override`.

    >>> nf.nn.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False).shape
    (2, 3, 4, 4)
    """
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """F.avg_pool3d over (N, C, D, H, W) or (C, D, H, W), torch's divisors as
    in avg_pool2d.

    >>> nf.nn.avg_pool3d(nf.placeholder((2, 3, 5, 7, 7), name="x"), 2).shape
    (2, 3, 2, 3, 3)
    """
    return _avg_pool("avg_pool3d", 3, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def adaptive_avg_pool2d(input, output_size):
    """F.adaptive_avg_pool2d: output_size an int, or a pair whose None entries
    keep the input's size.

    >>> nf.nn.adaptive_avg_pool2d(nf.placeholder((2, 3, 7, 9), name="x"), (3, None)).shape
    (2, 3, 3, 9)
    """
    return _adaptive("adaptive_avg_pool2d", 2, "sum", input, output_size)


def adaptive_avg_pool3d(input, output_size):
    """F.adaptive_avg_pool3d over (N, C, D, H, W) or (C, D, H, W).

    >>> nf.nn.adaptive_avg_pool3d(nf.placeholder((2, 3, 4, 7, 7), name="x"), 1).shape
    (2, 3, 1, 1, 1)
    """
    return _adaptive("adaptive_avg_pool3d", 3, "sum", input, output_size)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """F.adaptive_max_pool2d (return_indices=True is not supported).

    >>> nf.nn.adaptive_max_pool2d(nf.placeholder((2, 3, 7, 9), name="x"), 4).shape
    (2, 3, 4, 4)
    """
    op = "adaptive_max_pool2d"
    reject(op, return_indices=(return_indices, False))
    return _adaptive(op, 2, "max", input, output_size)


def _max_pool(op, nd, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices):
    x = check_tensor(input, op, "input")
    if x.dtype == dt.BOOL:
        raise NeoFlowError(f"{op}: input '{x.name}' is bool; cast it to a number first")
    reject(op, return_indices=(return_indices, False))
    geo = _geometry(op, nd, x, kernel_size, stride, padding, dilation, ceil_mode)
    axes = geo.axes()

    def body(*idx):
        pos, cond = geo.window(idx[-nd:], axes)
        return te.max(guarded(x[idx[:-nd] + pos], cond, reduce_identity("max", x.dtype)),
                      axis=axes)

    y = te.compute(x.shape[:-nd] + geo.out, body, name=op)
    pool_grad.attach(y, x, geo)
    return y


def _avg_pool(op, nd, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    x = check_float(input, op, "input")
    if divisor_override is not None and (not is_int(divisor_override)
                                         or divisor_override == 0):
        raise NeoFlowError(f"{op}: divisor_override must be a non-zero int, got "
                           f"{divisor_override!r}")
    geo = _geometry(op, nd, x, kernel_size, stride, padding, 1, ceil_mode)
    axes = geo.axes()

    def divisor(o):
        """(constant, expression or None) factors of the divisor at output o.
        Never 0: every window starts inside the input or its left padding."""
        const, expr = 1, None
        for d in range(nd):
            counts, fn = geo.counts(d, include_pad=count_include_pad)
            if len(set(counts)) == 1:
                const *= counts[0]
            else:
                e = fn(o[d])
                expr = e if expr is None else expr * e
        return const, expr

    def body(*idx):
        pos, cond = geo.window(idx[-nd:], axes)
        total = te.sum(x[idx[:-nd] + pos], axis=axes, where=cond)
        if divisor_override is not None:
            return total * (1.0 / divisor_override)
        const, expr = divisor(idx[-nd:])
        if expr is None:
            return total * (1.0 / const)
        return total / te.cast(expr * const if const != 1 else expr, x.dtype)

    return te.compute(x.shape[:-nd] + geo.out, body, name=op)


class _Geometry:
    """Per-dimension kernel, stride, padding, dilation and output size of a pooling."""

    def __init__(self, k, s, p, d, sizes, out):
        self.k, self.s, self.p, self.d, self.sizes, self.out = k, s, p, d, sizes, out

    def axes(self):
        """One reduce axis per window dimension."""
        names = SPATIAL[len(self.k)]
        return [te.reduce_axis(k, name=f"r{n[0]}") for k, n in zip(self.k, names)]

    def window(self, o, axes):
        """Input positions of window element `axes` at output `o`, and the
        condition that they lie inside the input (None when they always do)."""
        pos, conds = [], []
        for d in range(len(self.k)):
            p = affine((o[d], self.s[d]), (axes[d], self.d[d]), const=-self.p[d])
            last = (self.out[d] - 1) * self.s[d] - self.p[d] + (self.k[d] - 1) * self.d[d]
            if self.p[d] > 0:
                conds.append(p >= 0)
            if last >= self.sizes[d]:
                conds.append(p < self.sizes[d])
            pos.append(p)
        return tuple(pos), conjunction(conds)

    def counts(self, d, include_pad):
        """torch's divisor factor in dimension d for every output position, and
        a function building it as an expression of the output index (clipping
        only at the ends some window crosses)."""
        k, s, p, n = self.k[d], self.s[d], self.p[d], self.sizes[d]
        starts = [o * s - p for o in range(self.out[d])]
        hi = n + p if include_pad else n          # a window is clipped to [lo, hi)
        lo = -p if include_pad else 0
        values = [min(a + k, hi) - max(a, lo) for a in starts]
        clip_hi = any(a + k > hi for a in starts)
        clip_lo = any(a < lo for a in starts)

        def fn(o):
            start = affine((o, s), const=-p)
            end = affine((o, s), const=k - p)
            return (te.minimum(end, hi) if clip_hi else end) - \
                (te.maximum(start, lo) if clip_lo else start)
        return values, fn


def _check_rank(op, nd, x):
    names = SPATIAL[nd]
    if x.ndim not in (nd + 1, nd + 2):
        short = ", ".join(n[0].upper() for n in names)
        raise ShapeError(f"{op}: input '{x.name}' must be {nd + 2}-d (N, C, {short}) or "
                         f"{nd + 1}-d (C, {short}), got shape {x.shape}")


def _geometry(op, nd, x, kernel_size, stride, padding, dilation, ceil_mode):
    _check_rank(op, nd, x)
    names = SPATIAL[nd]
    k = int_tuple(kernel_size, nd, op, "kernel_size", 1)
    s = k if stride is None or stride == () or stride == [] else \
        int_tuple(stride, nd, op, "stride", 1)
    p = int_tuple(padding, nd, op, "padding", 0)
    d = int_tuple(dilation, nd, op, "dilation", 1)
    if not isinstance(ceil_mode, bool):
        raise NeoFlowError(f"{op}: ceil_mode must be a bool, got {ceil_mode!r}")
    sizes = x.shape[-nd:]
    out = []
    for i in range(nd):
        if p[i] > k[i] // 2:
            raise NeoFlowError(f"{op}: padding {p[i]} in the {names[i]} is more than half "
                               f"the kernel size {k[i]}; expected at most {k[i] // 2}")
        num = sizes[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1 + (s[i] - 1 if ceil_mode else 0)
        n = num // s[i] + 1
        if ceil_mode and (n - 1) * s[i] >= sizes[i] + p[i]:
            n -= 1   # the last window must start inside the input or its left padding
        if n < 1:
            raise ShapeError(
                f"{op}: input {names[i]} is {sizes[i]} (input.shape[{x.ndim - nd + i}]), too "
                f"small for kernel {k[i]} with dilation {d[i]} and padding {p[i]}; expected at "
                f"least {d[i] * (k[i] - 1) + 1 - 2 * p[i]}")
        out.append(n)
    return _Geometry(k, s, p, d, sizes, tuple(out))


def _adaptive_sizes(op, nd, x, output_size):
    """The output size per spatial dimension (None entries: the input's)."""
    sizes = x.shape[-nd:]
    vals = (output_size,) * nd if is_int(output_size) else output_size
    if not isinstance(vals, (tuple, list)) or len(vals) not in (1, nd) or not all(
            v is None or is_int(v) for v in vals):
        raise NeoFlowError(f"{op}: output_size must be an int or a tuple of {nd} ints or "
                           f"None, got {output_size!r}")
    vals = tuple(vals) * (nd if len(vals) == 1 else 1)
    out = tuple(sizes[i] if v is None else int(v) for i, v in enumerate(vals))
    for i, o in enumerate(out):
        if o < 1:
            raise ShapeError(f"{op}: output_size must be >= 1 in every dimension, got "
                             f"{output_size!r} (the {SPATIAL[nd][i]})")
    return out


def _adaptive(op, nd, kind, input, output_size):
    """Adaptive pooling: output o of a dimension of size I pooled to O covers
    [floor(o * I / O), ceil((o + 1) * I / O)). Where O divides I that is a
    plain window (kernel = stride = I / O); otherwise the window starts at
    (o * I) // O and its length, at most `span`, bounds the reduce axis."""
    x = check_float(input, op, "input") if kind == "sum" else check_tensor(input, op, "input")
    _check_rank(op, nd, x)
    if x.dtype == dt.BOOL:
        raise NeoFlowError(f"{op}: input '{x.name}' is bool; cast it to a number first")
    sizes, out = x.shape[-nd:], _adaptive_sizes(op, nd, x, output_size)
    spans = [max(-(-((o + 1) * n) // m) - (o * n) // m for o in range(m))
             for n, m in zip(sizes, out)]
    axes = [te.reduce_axis(k, name=f"r{nm[0]}") for k, nm in zip(spans, SPATIAL[nd])]

    def body(*idx):
        pos, conds, counts = [], [], []
        for d, o in enumerate(idx[-nd:]):
            n, m, r = sizes[d], out[d], axes[d]
            if n % m == 0:
                pos.append(affine((o, n // m), (r, 1)))
                counts.append(n // m)
                continue
            start = (o * n) // m
            length = ((o + 1) * n + m - 1) // m - start
            pos.append(start + r)
            conds.append(r < length)
            counts.append(length)
        cond = conjunction(conds)
        value = x[idx[:-nd] + tuple(pos)]
        if kind == "max":
            return te.max(value, axis=axes, where=cond)
        total = te.sum(value, axis=axes, where=cond)
        const = 1
        expr = None
        for c in counts:
            if is_int(c):
                const *= c
            else:
                expr = c if expr is None else expr * c
        if expr is None:
            return total * (1.0 / const)
        return total / te.cast(expr * const if const != 1 else expr, x.dtype)

    y = te.compute(x.shape[:-nd] + out, body, name=op)
    if kind == "max" and all(n % m == 0 for n, m in zip(sizes, out)):   # plain windows
        k = tuple(n // m for n, m in zip(sizes, out))
        pool_grad.attach(y, x, _Geometry(k, k, (0,) * nd, (1,) * nd, sizes, out))
    return y
