"""The selected element of a max/min reduction, for its gradient.

The gradient of `T[I] = max_R e(I, R)` goes to one element only: the first
R, in row-major order of the reduction's axes as listed in `axis=`, where e
attains T[I] (PyTorch's rule for max_pool2d and torch.max(dim)). `argext`
builds that index as an int64 tensor (one pass over the window:
a comparison per element), `selected` the conditions "R is that element".

Hands on: the index tensor and the per-axis equality conditions.
"""
import math

from ..te import dtype as dt
from ..te.expr import Const, IterVar, Reduce, Select
from ..te.simplify import conjunction, reduce_identity, where
from ..te.tensor import compute
from ..te.visit import substitute


def argext(T, top, prefix):
    """Arg[I]: the row-major position inside `top`'s axes of the first element
    attaining T[I] (`top` is T's max/min reduction, `prefix` the conditions
    under which T's body is that reduction). No such element: int64 max.

    >>> arg = argext(P, P.op.body, [])   # P = nf.max over (rh, rw) of a window
    """
    axes, none = T.op.axes, reduce_identity("min", dt.INDEX)

    def body(*idx):
        fresh = [IterVar(a.name, a.lo, a.hi, "reduce") for a in top.axes]
        mapping = dict(zip(axes, idx))
        mapping.update(zip(top.axes, fresh))
        e = substitute(top.body, mapping)
        pos = None
        for a, stride in zip(fresh, _strides(top.axes)):
            term = (a - a.lo) if a.lo else a
            term = term * stride if stride != 1 else term
            pos = term if pos is None else pos + term
        best = T[tuple(idx)]
        hit = e >= best if top.op == "max" else e <= best
        cond = None if top.cond is None else substitute(top.cond, mapping)
        found = Reduce("min", Select(hit, pos, none), fresh, cond)
        guard = conjunction([substitute(c, mapping) for c in prefix])
        return found if guard is None else where(guard, found, none)

    return compute(T.shape, body, name=f"arg{top.op}_{T.name}")


def selected(arg_read, axes):
    """Conditions under which the reduce `axes` point at the element `arg_read`
    selects (one equality per axis, so each pins one variable).

    >>> selected(arg[i], [k])   # [arg[i] == k]
    """
    out = []
    strides, n = _strides(axes), len(axes)
    for j, (a, stride) in enumerate(zip(axes, strides)):
        digit = arg_read // stride if stride != 1 else arg_read
        digit = digit % a.extent if j > 0 else digit
        out.append(digit == ((a - a.lo) if a.lo else a))
    return out if n else [Const(True, dt.BOOL)]


def _strides(axes):
    extents = [a.extent for a in axes]
    return [math.prod(extents[j + 1:]) for j in range(len(extents))]
