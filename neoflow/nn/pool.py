"""2-D pooling (F.max_pool2d, F.avg_pool2d) with torch's window geometry:
kernel_size, stride (default: kernel_size), padding, dilation (max),
ceil_mode, count_include_pad and divisor_override (avg).

Windows are reductions masked with the reduction's `where=` (only positions
inside the input take part); the mask is emitted only where a window can
leave the input. The average's divisor is a constant when every window has
the same one, else an index expression.

Hands on: one compute Tensor per pooling.
"""
from .. import te
from ..errors import NeoFlowError, ShapeError
from ..te import dtype as dt
from .common import affine, check_float, check_tensor, conjunction, int_tuple, reject

__all__ = ["max_pool2d", "avg_pool2d"]

_NAMES = ("height", "width")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """F.max_pool2d over (N, C, H, W) or (C, H, W); padding never wins the max.

    >>> x = nf.placeholder((2, 3, 7, 7), name="x")
    >>> nf.nn.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True).shape
    (2, 3, 4, 4)
    """
    op = "max_pool2d"
    x = check_tensor(input, op, "input")
    if x.dtype == dt.BOOL:
        raise NeoFlowError(f"{op}: input '{x.name}' is bool; cast it to a number first")
    reject(op, return_indices=(return_indices, False))
    geo = _geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode)
    axes = [te.reduce_axis(k, name=f"r{n[0]}") for k, n in zip(geo.k, _NAMES)]

    def body(*idx):
        pos, cond = geo.window(idx[-2:], axes)
        return te.max(x[idx[:-2] + pos], axis=axes, where=cond)

    return te.compute(x.shape[:-2] + geo.out, body, name=op)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """F.avg_pool2d over (N, C, H, W) or (C, H, W), with torch's divisors:
    the window clipped to the padded input (count_include_pad=True) or to the
    input itself (False), or `divisor_override`.

    >>> nf.nn.avg_pool2d(x, 2, ceil_mode=True, count_include_pad=False).shape
    (2, 3, 4, 4)
    """
    op = "avg_pool2d"
    x = check_float(input, op, "input")
    if divisor_override is not None and (not isinstance(divisor_override, int)
                                         or isinstance(divisor_override, bool)
                                         or divisor_override == 0):
        raise NeoFlowError(f"{op}: divisor_override must be a non-zero int, got "
                           f"{divisor_override!r}")
    geo = _geometry(op, x, kernel_size, stride, padding, 1, ceil_mode)
    axes = [te.reduce_axis(k, name=f"r{n[0]}") for k, n in zip(geo.k, _NAMES)]

    def divisor(o):
        """(constant, expression or None) factors of the divisor at output o.
        Never 0: every window starts inside the input or its left padding."""
        const, expr = 1, None
        for d in range(2):
            counts, fn = geo.counts(d, include_pad=count_include_pad)
            if len(set(counts)) == 1:
                const *= counts[0]
            else:
                e = fn(o[d])
                expr = e if expr is None else expr * e
        return const, expr

    def body(*idx):
        pos, cond = geo.window(idx[-2:], axes)
        total = te.sum(x[idx[:-2] + pos], axis=axes, where=cond)
        if divisor_override is not None:
            return total * (1.0 / divisor_override)
        const, expr = divisor(idx[-2:])
        if expr is None:
            return total * (1.0 / const)
        return total / te.cast(expr * const if const != 1 else expr, x.dtype)

    return te.compute(x.shape[:-2] + geo.out, body, name=op)


class _Geometry:
    """Per-dimension kernel, stride, padding, dilation and output size of a pooling."""

    def __init__(self, k, s, p, d, sizes, out):
        self.k, self.s, self.p, self.d, self.sizes, self.out = k, s, p, d, sizes, out

    def window(self, o, axes):
        """Input positions of window element `axes` at output `o`, and the
        condition that they lie inside the input (None when they always do)."""
        pos, conds = [], []
        for d in range(2):
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


def _geometry(op, x, kernel_size, stride, padding, dilation, ceil_mode):
    if x.ndim not in (3, 4):
        raise ShapeError(f"{op}: input '{x.name}' must be 4-d (N, C, H, W) or 3-d (C, H, W), "
                         f"got shape {x.shape}")
    k = int_tuple(kernel_size, 2, op, "kernel_size", 1)
    s = k if stride is None or stride == () or stride == [] else \
        int_tuple(stride, 2, op, "stride", 1)
    p = int_tuple(padding, 2, op, "padding", 0)
    d = int_tuple(dilation, 2, op, "dilation", 1)
    if not isinstance(ceil_mode, bool):
        raise NeoFlowError(f"{op}: ceil_mode must be a bool, got {ceil_mode!r}")
    sizes = x.shape[-2:]
    out = []
    for i in range(2):
        if p[i] > k[i] // 2:
            raise NeoFlowError(f"{op}: padding {p[i]} in the {_NAMES[i]} is more than half "
                               f"the kernel size {k[i]}; expected at most {k[i] // 2}")
        num = sizes[i] + 2 * p[i] - d[i] * (k[i] - 1) - 1 + (s[i] - 1 if ceil_mode else 0)
        n = num // s[i] + 1
        if ceil_mode and (n - 1) * s[i] >= sizes[i] + p[i]:
            n -= 1   # the last window must start inside the input or its left padding
        if n < 1:
            raise ShapeError(
                f"{op}: input {_NAMES[i]} is {sizes[i]} (input.shape[{x.ndim - 2 + i}]), too "
                f"small for kernel {k[i]} with dilation {d[i]} and padding {p[i]}; expected at "
                f"least {d[i] * (k[i] - 1) + 1 - 2 * p[i]}")
        out.append(n)
    return _Geometry(k, s, p, d, sizes, tuple(out))
