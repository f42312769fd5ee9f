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

The read side of the same flattening, `k[b * T + j, c]` with j in [0, T),
is affine already, but no index is a single axis, so the operand cannot be
packed into panels along j (attention's q . k^T, which no operand reads
contiguously along its output's last axis). With `reshape`, such a read is
made through an alias of the input reshaped to (B, T, C) -- same elements,
same addresses -- and indexed [b, j, c]; lowering reads the input's buffer
(`alias_source`).

Only exact splits are made (N divides the extent, N < extent), and only
where the split removes `//` or `%` nodes; schedule/stage.py decides when a
stage is scheduled through its view, and when with reshaped reads.

Hands on: `delinearized(tensor)`: a Tensor of the same name, dtype and
layout over the split axes, or None; `alias_source`.
"""
import weakref

from ..te import dtype as dt
from ..te.arith import Linear, form_interval, linear_form
from ..te.divmod import divmod_count, fold_divmod
from ..te.expr import Binary, Const, IterVar, Read, Reduce
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..te.visit import post_order, reads, transform

MAX_SPLITS = 8   # splits tried to a fixed point, at most


def delinearized(tensor, reshape=False):
    """`tensor` (a compute) seen over split axes, its `//` and `%` folded,
    and with `reshape` its inputs read as `x[b * T + j, c]` through reshaped
    aliases (`_reshape_inputs`); None when that changes nothing (see the
    module docstring).

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
    reshaped = False
    if reshape:
        body, reshaped = _reshape_inputs(body)
    if count >= before and not reshaped:
        return None
    return Tensor(tuple(a.extent for a in axes), tensor.dtype, tensor.name,
                  ComputeOp(axes, body))


def alias_source(t):
    """The tensor whose buffer `t` reads: `t` itself, or for an input seen
    reshaped by a view (`_reshape_inputs`), the input.

    >>> alias_source(x3) is x          # x3: x (512, 384) seen as (8, 64, 384)
    True
    """
    source = _sources.get(t)
    return t if source is None else source()


_sources = weakref.WeakKeyDictionary()     # reshaped input -> weakref to the input (a strong
                                           # one would keep it alive through its own view)


def _reshape_inputs(body):
    """`body` with each read that indexes some dimension of size S of its
    tensor as `N * a + g` (g within [0, N), N dividing S: a flattened batch,
    `qkv[b * T + j, c]`) made through a reshaped alias of the tensor of its
    own, whose dimension is split into (S / N, N) and indexed [a, g] -- the
    same elements at the same addresses, with an index that is exactly one
    axis where g is one (`qkv3[b, j, c]`: packable along j); (body, whether
    any read was changed)."""
    replace = {}
    for r in reads(body):
        forms = [linear_form(i) for i in r.indices]
        if any(f is None for f in forms):
            continue
        shape = list(r.tensor.shape)
        for d in range(len(forms) - 1, -1, -1):
            n = _flat_factor(shape[d], [forms[d]])
            if n is not None:
                shape[d:d + 1] = [shape[d] // n, n]
                forms[d:d + 1] = list(_split_form(forms[d], n))
        if len(shape) == r.tensor.ndim:
            continue
        alias = Tensor(tuple(shape), r.tensor.dtype, r.tensor.name, PlaceholderOp())
        _sources[alias] = weakref.ref(alias_source(r.tensor))
        replace[id(r)] = Read(alias, [f.to_expr() for f in forms])
    if not replace:
        return body, False
    return transform(body, lambda n: replace.get(id(n), n) if isinstance(n, Read) else n), True


def _flat_factor(size, forms):
    """N such that every form is N * a + g with g in [0, N) and a in
    [0, size / N), N dividing `size`; the largest such N that some form's
    variable carries as its coefficient, or None."""
    coefs = sorted({c for f in forms for c in f.terms.values() if 1 < c < size and size % c == 0},
                   reverse=True)
    for n in coefs:
        if all(_fits(f, n, size) for f in forms):
            return n
    return None


def _fits(form, n, size):
    high, low = _split_form(form, n)
    lo, hi = form_interval(low)
    h_lo, h_hi = form_interval(high)
    return bool(high.terms) and 0 <= lo and hi < n and 0 <= h_lo and h_hi < size // n


def _split_form(form, n):
    """(high, low) with form = n * high + low: the terms n divides, and the rest."""
    high = Linear({v: c // n for v, c in form.terms.items() if c % n == 0}, form.const // n)
    low = Linear({v: c for v, c in form.terms.items() if c % n}, form.const % n)
    return high, low


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
