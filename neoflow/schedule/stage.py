"""schedule/stage: what scheduling needs to know about one compute stage.

Axes are named by position, never by the user's names: spatial `s0..sn`
(the output dimensions) and reduce `r0..rm` (the axes of the stage's main
reduction). The main reduction is a reduction, not nested in another one,
whose value depends on every spatial axis -- the sum in
`relu(sum_k A[i, k] * B[k, j] + b[j])`: it gets tiled loops and an
accumulator. Every other reduction (the sum in softmax written as
`e[i, j] / sum_r e[i, r]`, reductions inside reductions) is computed into
a scalar where the loops it depends on are bound.

Hands on: `Stage` records for configs, the default heuristic, the config
space and lowering.
"""
import math

from ..te.expr import Reduce, Select
from ..te.visit import children
from .bounds import free_vars, negate


class Stage:
    """One compute tensor seen by the scheduler.

    >>> st = Stage(C)            # C[i, j] = sum_k A[i, k] * B[k, j]
    >>> st.axis_names, st.extent("r0")
    (['s0', 's1', 'r0'], 64)
    """

    def __init__(self, tensor):
        self.tensor = tensor
        self.spatial = tuple(tensor.op.axes)
        self.reduction, self.context = _main_reduction(tensor)
        self.reduce_axes = tuple(self.reduction.axes) if self.reduction is not None else ()
        self.axis_names = ([f"s{d}" for d in range(len(self.spatial))]
                           + [f"r{k}" for k in range(len(self.reduce_axes))])

    def axis(self, name):
        """The IterVar behind an axis name ("s0", "r1", ...)."""
        kind, pos = name[0], int(name[1:])
        return (self.spatial if kind == "s" else self.reduce_axes)[pos]

    def extent(self, name):
        return self.axis(name).extent


def _main_reduction(tensor):
    """(the main reduction or None, the conditions of the selects around it)."""
    axes = {id(a) for a in tensor.op.axes}
    found = {}  # id -> [reduce, set of context tuples]
    seen = set()

    def walk(e, conds):
        key = (id(e), tuple(id(c) for c in conds))
        if key in seen:
            return
        seen.add(key)
        if isinstance(e, Reduce):
            entry = found.setdefault(id(e), [e, {}])
            entry[1][key[1]] = conds
            return
        if isinstance(e, Select):
            walk(e.cond, conds)
            walk(e.t, conds + (e.cond,))
            walk(e.f, conds + (negate(e.cond),))
            return
        for c in children(e):
            walk(c, conds)

    walk(tensor.op.body, ())
    best = None
    for red, contexts in found.values():
        if len(contexts) != 1:
            continue  # reached under different conditions: no single guard fits
        if not axes <= {id(v) for v in free_vars(red)}:
            continue
        volume = math.prod(a.extent for a in red.axes)
        if best is None or volume > best[0]:
            best = (volume, red, next(iter(contexts.values())))
    return (None, ()) if best is None else (best[1], best[2])
