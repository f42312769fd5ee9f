"""schedule/stage: what scheduling needs to know about one compute stage.

Axes are named by position, never by the user's names: spatial `s0..sn`
(the output dimensions) and reduce `r0..rm` (the axes of the stage's main
reduction). The main reduction is a reduction, not nested in another one,
whose value depends on every spatial axis (of extent above 1) -- the sum in
`relu(sum_k A[i, k] * B[k, j] + b[j])`: it gets tiled loops and an
accumulator. Every other reduction (the sum in softmax written as
`e[i, j] / sum_r e[i, r]`, reductions inside reductions) is computed into
a scalar where the loops it depends on are bound.

A stage whose main reduction reads through flattened indices (`n // T`,
`n % T`: attention's `qkv[b * T + i, h * hd + e]`, differentiated) is seen
through its delinearised view (schedule/delinearize.py): `Stage.tensor` is
then a tensor of the same name, dtype and memory layout over the split
axes, and `Stage.source` the kernel's own tensor, the one stored to. Its
body may read an input through a reshaped alias (`qkv[b * T + j, c]` as
qkv3[b, j, c], packable along j; `delinearize.alias_source` names the input).

Hands on: `Stage` records for configs, the default heuristic, the config
space and lowering.
"""
import math
import weakref

from ..te.arith import Linear, conjuncts, free_vars, interval, linear_form, negate
from ..te.divmod import divmod_count
from ..te.expr import Const, Read, Reduce, Select
from ..te.visit import children, reads
from .bounds import nonnegative_forms
from .delinearize import alias_source, delinearized

MIN_INNER_LAST = 8   # points the inner part of a split last axis needs (a vector of them)


class Stage:
    """One compute tensor seen by the scheduler.

    >>> st = Stage(C)            # C[i, j] = sum_k A[i, k] * B[k, j]
    >>> st.axis_names, st.extent("r0")
    (['s0', 's1', 'r0'], 64)

    `delinearize=False` sees `tensor` as it is, never through its view.
    """

    def __init__(self, tensor, delinearize=True):
        self.source = tensor
        self.tensor = tensor = scheduled_view(tensor) if delinearize else tensor
        self.spatial = tuple(tensor.op.axes)
        self.reduction, self.context = _main_reduction(tensor)
        self.reduce_axes = tuple(self.reduction.axes) if self.reduction is not None else ()
        self.axis_names = ([f"s{d}" for d in range(len(self.spatial))]
                           + [f"r{k}" for k in range(len(self.reduce_axes))])
        self._packable = self._paddable = None

    def axis(self, name):
        """The IterVar behind an axis name ("s0", "r1", ...)."""
        kind, pos = name[0], int(name[1:])
        return (self.spatial if kind == "s" else self.reduce_axes)[pos]

    def extent(self, name):
        return self.axis(name).extent

    @property
    def packable(self):
        """[(tensor, spatial axis name, dimension)]: inputs a schedule may
        pack -- of 2 or more dimensions, read only inside the main reduction
        with affine indices, one dimension always indexed by exactly one
        spatial axis that no other index uses (matmul's B[k, j]: j in
        dimension 1; dense's W[j, k]: j in dimension 0).

        >>> [(t.name, a, d) for t, a, d in Stage(C).packable]
        [('B', 's1', 1)]
        """
        if self._packable is None:
            padded = {id(t) for t, _, _, _ in self.paddable}
            self._packable = [p for p in _packable(self) if id(p[0]) not in padded]
        return self._packable

    @property
    def paddable(self):
        """[(tensor, pad before, pad after, selects)]: inputs a schedule may
        copy zero-padded -- read in the main reduction as `where(in bounds,
        t[index], 0)` (conv2d's padding), the condition exactly the bounds
        of some dimensions and every other dimension always in bounds; the
        copy is read without a test. Pads are per dimension; `selects` the
        where nodes it replaces.

        >>> [(t.name, lo, hi) for t, lo, hi, _ in Stage(conv).paddable]
        [('x', (0, 0, 1, 1), (0, 0, 1, 1))]
        """
        if self._paddable is None:
            self._paddable = _paddable(self)
        return self._paddable


_views = weakref.WeakKeyDictionary()   # compute -> the tensor its Stage schedules


def scheduled_view(tensor):
    """The tensor a Stage of `tensor` schedules: its delinearised view
    (schedule/delinearize.py) -- with reshaped reads when no operand
    streams along the last axis and that makes one packable along it
    (q . k^T) -- when that makes the main reduction read through fewer `//`
    and `%` or more operands packable, keeps every packable operand packable and
    leaves at least MIN_INNER_LAST points in the inner part of a split last
    axis; else `tensor` itself.

    >>> scheduled_view(dq).shape      # dq (512, 128) read as dq[n // 64, c // 32, ...]
    (8, 64, 4, 32)
    """
    if not tensor.is_compute:
        return tensor
    if tensor not in _views:     # None for no view: a value must not hold its key alive
        _views[tensor] = _choose_view(tensor)
    return _views[tensor] or tensor


def _choose_view(tensor):
    """The view `scheduled_view` takes, or None."""
    view = delinearized(tensor)
    seen = Stage(view or tensor, False)
    if seen.reduction is not None and not _streams_along_last(seen):
        reshaped = delinearized(tensor, reshape=True)   # q . k^T: k packable along its rows?
        last = f"s{len(seen.spatial) - 1}"
        if reshaped is not None and any(a == last for _, a, _ in Stage(reshaped, False).packable):
            view = reshaped
    if view is None:
        return None
    plain, split = Stage(tensor, False), Stage(view, False)
    if plain.reduction is None or split.reduction is None:
        return None
    packable = {id(t) for t, _, _ in plain.packable}
    now = {id(alias_source(t)) for t, _, _ in split.packable}
    if not packable <= now:
        return None
    if divmod_count(split.reduction.body) >= divmod_count(plain.reduction.body) and \
            packable == now:
        return None
    last = tensor.shape[-1] if tensor.shape else 1
    if view.shape[-1] != last and view.shape[-1] < MIN_INNER_LAST:
        return None
    return view


def _streams_along_last(st):
    """Whether a read in the main reduction of Stage `st` steps by 1 with its
    last spatial axis in its last index (a matmul's B[k, j] along j)."""
    if not st.spatial:
        return False
    for r in reads(st.reduction.body):
        form = linear_form(r.indices[-1]) if r.indices else None
        if form is not None and form.terms.get(st.spatial[-1]) == 1:
            return True
    return False


def _packable(st):
    if st.reduction is None:
        return []
    inside = {id(r) for r in reads(st.reduction.body)}
    by_tensor = {}
    for r in reads(st.tensor.op.body):
        by_tensor.setdefault(id(r.tensor), (r.tensor, []))[1].append(r)
    spatial = {id(v): f"s{d}" for d, v in enumerate(st.spatial)}
    out = []
    last = f"s{len(st.spatial) - 1}"
    # (where nothing streams along the last axis, packing along it is what
    # makes it a vector axis: a batched q . k^T's k[b, l, e] along l, not b)
    along_last = not _streams_along_last(st)
    for tensor, rs in by_tensor.values():
        prefer = last if along_last or tensor is not alias_source(tensor) else None
        places = {_pack_place(r, spatial, prefer) if id(r) in inside else None for r in rs}
        if tensor.ndim >= 2 and len(places) == 1 and None not in places:
            axis, dim = places.pop()
            out.append((tensor, axis, dim))
    return out


def _paddable(st):
    if st.reduction is None:
        return []
    found = {}   # id(tensor) -> [tensor, lo, hi, selects]
    for sel in _guarded_reads(st.reduction.body):
        read = sel.t
        pads = _pads(sel.cond, read)
        if pads is None:
            continue
        entry = found.setdefault(id(read.tensor), [read.tensor, [0] * read.tensor.ndim,
                                                   [0] * read.tensor.ndim, []])
        for d, (lo, hi) in enumerate(pads):
            entry[1][d], entry[2][d] = max(entry[1][d], lo), max(entry[2][d], hi)
        entry[3].append(sel)
    return [(t, tuple(lo), tuple(hi), tuple(sels)) for t, lo, hi, sels in found.values()]


def _guarded_reads(body):
    """Selects `where(cond, t[...], 0)` in `body`, outside inner reductions."""
    out, seen, stack = [], set(), [body]
    while stack:
        e = stack.pop()
        if id(e) in seen or isinstance(e, Reduce) and e is not body:
            continue
        seen.add(id(e))
        if (isinstance(e, Select) and isinstance(e.t, Read) and isinstance(e.f, Const)
                and e.f.value == 0):
            out.append(e)
        stack.extend(children(e))
    return out


def _pads(cond, read):
    """[(pad before, pad after)] per dimension if `cond` is exactly the
    bounds test of some of `read`'s indices and the others never leave their
    dimension; else None."""
    forms = [linear_form(i) for i in read.indices]
    if any(f is None for f in forms):
        return None
    tested = [[False, False] for _ in forms]
    for part in conjuncts(cond):
        nonneg = nonnegative_forms(part)
        if len(nonneg) != 1:
            return None
        g = nonneg[0]
        for d, f in enumerate(forms):
            if (g - f).is_const and (g - f).const == 0:
                tested[d][0] = True
                break
            upper = Linear(const=read.tensor.shape[d] - 1) - f
            if (g - upper).is_const and (g - upper).const == 0:
                tested[d][1] = True
                break
        else:
            return None
    pads = []
    for d, (f, (low_tested, high_tested)) in enumerate(zip(forms, tested)):
        lo, hi = interval(read.indices[d])
        before, after = max(0, -lo), max(0, hi - (read.tensor.shape[d] - 1))
        if before and not low_tested or after and not high_tested:
            return None
        pads.append((before, after))
    return pads if any(b or a for b, a in pads) else None


def _pack_place(read, spatial, prefer=None):
    """(axis name, dimension) of the first index of `read` that is exactly a
    spatial axis no other index uses (a capsule weight W[o, c, r, s, k, j]:
    o), all indices affine; else None."""
    forms = [linear_form(i) for i in read.indices]
    if any(f is None for f in forms):
        return None
    found = []
    for d, f in enumerate(forms):
        if f.const == 0 and len(f.terms) == 1:
            (var, coef), = f.terms.items()
            if coef == 1 and id(var) in spatial and not any(
                    var in g.terms for n, g in enumerate(forms) if n != d):
                found.append((spatial[id(var)], d))
    preferred = [f for f in found if f[0] == prefer]
    return (preferred or found or [None])[0]


def _main_reduction(tensor):
    """(the main reduction or None, the conditions of the selects around it).
    Axes of extent 1 (a 1x1 conv's weight gradient has two) need not appear in it."""
    axes = {id(a) for a in tensor.op.axes if a.extent > 1}
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
