"""schedule/delinearize: split an axis that the body only uses as `a // N`
and `a % N` into its two parts, so the loop nest iterates both and the
reads become affine again.

A gradient of a flattened read -- `qkv[b * T + i, h * hd + e]` in
attention, a reshape to heads -- indexes its output point (n, c) as
`n // T`, `n % T`, `c // hd`, `c % hd`. Splitting n into (n_o, n_i) with
n = n_o * T + n_i (and c likewise) turns those into `n_o`, `n_i`, ...: the
stage is a dense batched contraction over (n_o, c_o) again, with a
contiguous axis (c_i) to vectorise and register-block. A reduce axis read
the same way splits the same way (the sum runs over both parts).

The view keeps the tensor's memory layout: each split axis is replaced in
place by (outer, inner) of extents (extent / N, N), so the row-major order
of the view's points is the tensor's own. Lowering stores the view's point
at the same address, and readers of the tensor are unchanged.

Only exact splits are made (N divides the extent, N < extent), and only
where the split removes `//` or `%` nodes; schedule/stage.py decides when a
stage is scheduled through its view.

Hands on: `delinearized(tensor)`: a Tensor of the same name, dtype and
layout over the split axes, or None.
"""
from ..te import dtype as dt
from ..te.arith import linear_form
from ..te.divmod import divmod_count, fold_divmod
from ..te.expr import Binary, Const, IterVar, Reduce
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import post_order, transform

MAX_SPLITS = 8   # splits tried to a fixed point, at most


def delinearized(tensor):
    """`tensor` (a compute) seen over split axes, its `//` and `%` folded,
    or None when that leaves as many of them (see the module docstring).

    >>> y = nf.compute((512, 128), lambda n, c: nf.sum(
    ...     p[n // 64, c // 32, n % 64, j] * v[(n // 64) * 64 + j, c], axis=j))
    >>> delinearized(y).shape           # p[n_o, c_o, n_i, j] * v[n_o * 64 + j, c_o * 32 + c_i]
    (8, 64, 4, 32)
    """
    if not tensor.is_compute:
        return None
    axes, body = list(tensor.op.axes), fold_divmod(tensor.op.body)
    before = divmod_count(tensor.op.body)
    count = divmod_count(body)
    for _ in range(MAX_SPLITS):
        if not count:
            break
        for var, factor in _candidates(body):
            new_axes, new_body = _split(axes, body, var, factor)
            new_count = divmod_count(new_body)
            if new_count < count:
                axes, body, count = new_axes, new_body, new_count
                break
        else:
            break
    if count >= before:
        return None
    return Tensor(tuple(a.extent for a in axes), tensor.dtype, tensor.name,
                  ComputeOp(axes, body))


def _candidates(body):
    """(axis, factor) pairs to try, in order of first use: for each `x // c`
    or `x % c`, every variable of x with a coefficient k > 0 dividing c
    (factor c / k), when the factor splits its range exactly."""
    out, seen = [], set()
    for n in post_order(body):
        if not (isinstance(n, Binary) and n.op in ("floordiv", "mod") and n.dtype == dt.INDEX
                and isinstance(n.b, Const) and n.b.value > 0):
            continue
        c = n.b.value
        form = linear_form(n.a, atoms=True)
        for v, k in form.terms.items():
            if not isinstance(v, IterVar) or k <= 0 or c % k:
                continue
            f = c // k
            if v.lo == 0 and 1 < f < v.extent and v.extent % f == 0 and (id(v), f) not in seen:
                seen.add((id(v), f))
                out.append((v, f))
    return out


def _split(axes, body, var, factor):
    """(axes, body) with `var` = outer * factor + inner: the spatial axis
    replaced in place, or, for a reduce axis, the reductions over it running
    over both parts; `//` and `%` folded."""
    outer = IterVar(f"{var.name}_o", 0, var.extent // factor, var.kind)
    inner = IterVar(f"{var.name}_i", 0, factor, var.kind)
    value = outer * factor + inner

    def fn(n):
        if n is var:
            return value
        if isinstance(n, Reduce) and any(a is var for a in n.axes):
            parts = [p for a in n.axes for p in ((outer, inner) if a is var else (a,))]
            return Reduce(n.op, n.body, parts, n.cond)
        return n
    new_axes = [p for a in axes for p in ((outer, inner) if a is var else (a,))]
    return new_axes, fold_divmod(transform(body, fn))
