"""Counting the floating-point work of the loop nests that compute tensors.

The rule (docs/autodiff.md has the long form):

* Every arithmetic operation, comparison and intrinsic on float values counts
  1 (`exp`, `erf`, `max` ... alike); a float reduction counts 1 per iteration
  that takes part (its `+`, `max` or `min`). Reads, casts, selects and all
  integer arithmetic (addresses, loop bounds, index conditions, gather
  comparisons) count 0. A sub-expression shared inside one body counts once.
* Iteration ranges are exact: a reduction's index-only `where=` conditions
  and the index conditions of enclosing `where`s remove iterations, counted
  by evaluating the conditions over the index grid with NumPy (independent
  groups of variables separately); a group too large for that is bounded by
  the box its conditions narrow it to.
* Conditions that read data cannot be counted ahead of time. Equalities
  `f(X[g]) == e`, X an integer tensor, g and e affine index expressions,
  select one point per element X[g] when v -> (g(v), e(v)) is injective (a
  one-hot selection: gather, argmax): the points that pass are counted as
  the distinct elements X[g] met (with the other variables). Any other data
  condition is assumed to hold (a data-dependent `where` costs its costlier
  branch).

Hands on: an int.
"""
import math

import numpy as np

from . import dtype as dt
from .arith import conjuncts, free_vars, is_index_expr, linear_form, narrow, negate
from .evaluate import evaluate as nf_evaluate
from .expr import Binary, Cast, Const, IterVar, Read, Select, Unary
from .simplify import Structure, conjunction, is_zero
from .tensor import Tensor, compute
from .random import Random
from .visit import post_order, substitute, tensor_inputs

GRID_LIMIT = 1 << 22  # points of one condition grid evaluated with NumPy


def flops(tensors, given=()):
    """Floating-point operations to compute `tensors` and every computed tensor
    they depend on; placeholders, parameters and the `given` tensors (values
    already at hand, e.g. a forward pass's outputs) are free.

    >>> C = nf.compute((M, N), lambda i, j: nf.sum(A[i, k] * B[k, j], axis=k))
    >>> nf.flops(C) == 2 * M * N * K
    True
    """
    outs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    free = {id(t) for t in given}
    seen, stack, total = set(), list(outs), 0
    counter = _Counter()
    while stack:
        t = stack.pop()
        if id(t) in seen or id(t) in free or not t.is_compute:
            continue
        seen.add(id(t))
        total += counter.walk(t.op.body, tuple(t.op.axes), (), ())
        stack.extend(tensor_inputs(t))
    return total


def condition_share(cond, vars_):
    """The share of the grid of the index variables `vars_` where the index
    condition `cond` holds (exact up to GRID_LIMIT points, beyond that the
    share of the box the condition narrows the grid to, an upper bound).

    >>> i, j = nf.reduce_axis(4, name="i"), nf.reduce_axis(4, name="j")
    >>> condition_share(i + j < 4, [i, j])
    0.625
    """
    vars_ = list(vars_)
    return _grid_count(vars_, list(conjuncts(cond)), ()) / math.prod(v.extent for v in vars_)


def _float_op(e):
    if isinstance(e, Unary):
        return dt.is_float(e.a.dtype)
    if isinstance(e, Binary):
        return dt.is_float(e.a.dtype)
    return False


class _Counter:
    def __init__(self):
        self.structure = Structure()
        self.points_memo = {}

    def walk(self, e, scope, conds, picks):
        return self._walk(e, scope, conds, picks, set())

    def _walk(self, e, scope, conds, picks, done):
        """Cost of `e` at every point of `scope` where `conds` hold and the one-hot
        `picks` select; `done` holds the nodes counted in this context already."""
        if id(e) in done or isinstance(e, (Const, IterVar)):
            return 0
        done.add(id(e))
        rec = lambda x: self._walk(x, scope, conds, picks, done)  # noqa: E731
        if isinstance(e, Read):
            return sum(rec(i) for i in e.indices)
        if isinstance(e, Cast):
            return rec(e.a)
        if isinstance(e, (Unary, Binary)):
            own = self.points(scope, conds, picks) if _float_op(e) else 0
            return own + sum(rec(c) for c in ((e.a,) if isinstance(e, Unary) else (e.a, e.b)))
        if isinstance(e, Select):
            return rec(e.cond) + self._select(e, scope, conds, picks)
        if isinstance(e, Random):   # one draw: counted as one operation, like an intrinsic
            return self.points(scope, conds, picks) + sum(rec(c) for c in e.args)
        return self._reduce(e, scope, conds, picks)

    def _select(self, e, scope, conds, picks):
        if is_index_expr(e.cond):
            return (self.walk(e.t, scope, conds + (e.cond,), picks)
                    + self.walk(e.f, scope, conds + (negate(e.cond),), picks))
        new = _picks(conjuncts(e.cond), scope)
        if new:
            return (self.walk(e.t, scope, conds, picks + new)
                    + self.walk(e.f, scope, conds, picks))
        return max(self.walk(e.t, scope, conds, picks), self.walk(e.f, scope, conds, picks))

    def _reduce(self, e, scope, conds, picks):
        scope = scope + tuple(e.axes)
        parts = conjuncts(e.cond)
        index = tuple(c for c in parts if is_index_expr(c))
        data = [c for c in parts if not is_index_expr(c)]
        conds = conds + index
        body = e.body
        if e.op == "sum":   # sum of where(c, x, 0): x is added only where c holds
            while isinstance(body, Select) and is_zero(body.f):
                if is_index_expr(body.cond):
                    conds = conds + (body.cond,)
                else:
                    data.extend(conjuncts(body.cond))
                body = body.t
        cost = sum(self.walk(c, scope, conds, picks) for c in data)
        picks = picks + _picks(data, scope)
        cost += self.walk(body, scope, conds, picks)
        if dt.is_float(e.dtype):
            cost += self.points(scope, conds, picks)
        return cost

    # -- counting points --------------------------------------------------------
    def points(self, scope, conds, picks):
        """Points of the grid of `scope` where `conds` hold and `picks` select."""
        key = (tuple(id(v) for v in scope), tuple(self.structure.key(c) for c in conds),
               tuple(p.key(self.structure) for p in picks))
        hit = self.points_memo.get(key)
        if hit is None:
            hit = self.points_memo[key] = self._points(scope, conds, picks)
        return hit

    def _points(self, scope, conds, picks):
        if any(isinstance(c, Const) and not c.value for c in conds):
            return 0
        total = 1
        for vars_, cs, ps in _components(scope, conds, picks):
            if not cs and not ps:
                total *= math.prod(v.extent for v in vars_)
            else:
                total *= _grid_count(vars_, cs, ps)
            if total == 0:
                return 0
        return total


class _Pick:
    """A one-hot selection: the conditions `f_n(X[g]) == e_n` (X an integer
    tensor) hold, for each element X[g], at one point at most when the map
    v -> (g(v), e(v)) is injective; the points that pass are then at most the
    distinct values of g (with the variables neither uses)."""

    def __init__(self, read, targets):
        self.read, self.targets = read, targets

    def forms(self):
        return list(self.read.indices) + list(self.targets)

    def key(self, structure):
        return tuple(structure.key(f) for f in self.forms())


def _components(scope, conds, picks):
    """Independent groups of variables: (vars, the conditions and picks over them)."""
    parent = {id(v): id(v) for v in scope}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    items = list(conds) + list(picks)
    used = []
    for item in items:
        exprs = item.forms() if isinstance(item, _Pick) else [item]
        vs = [id(v) for x in exprs for v in free_vars(x) if id(v) in parent]
        used.append(vs)
        for v in vs[1:]:
            parent[find(v)] = find(vs[0])
    groups = {}
    for v in scope:
        groups.setdefault(find(id(v)), ([], [], []))[0].append(v)
    for item, vs in zip(items, used):
        if vs:
            groups[find(vs[0])][2 if isinstance(item, _Pick) else 1].append(item)
    return list(groups.values())


def _grid_count(vars_, conds, picks):
    """Points of the grid of `vars_` where `conds` hold; with `picks`, the distinct
    (picked element, variables no pick uses) among them."""
    cond = conjunction(conds) if conds else Const(True, dt.BOOL)
    size = math.prod(v.extent for v in vars_)
    if size > GRID_LIMIT:
        return _bound_count(vars_, conds, picks, cond)
    shape = tuple(v.extent for v in vars_)
    keys = [f for p in picks for f in p.read.indices]
    used = {id(v) for p in picks for f in p.forms() for v in free_vars(f)}
    keys += [v for v in vars_ if id(v) not in used]

    def on_grid(e):
        return compute(shape, lambda *ax: substitute(e, {v: (a + v.lo if v.lo else a)
                                                         for v, a in zip(vars_, ax)}))
    grids = nf_evaluate([on_grid(cond)] + ([on_grid(k) for k in keys] if picks else []), {})
    mask = np.broadcast_to(grids[0], shape)
    if not picks:
        return int(np.count_nonzero(mask))
    coords = np.stack([np.broadcast_to(g, shape)[mask] for g in grids[1:]], axis=1)
    return int(len(np.unique(coords, axis=0))) if len(coords) else 0


def _bound_count(vars_, conds, picks, cond):
    """An upper bound of `_grid_count` for grids too big for NumPy: the points
    of the conditions alone (counted per independent group), and with picks at
    most the box of the picked elements' variables times the free ones."""
    if picks:
        exact = 1
        for sub, cs, _ in _components(vars_, conds, ()):
            exact *= _grid_count(sub, cs, ()) if cs else math.prod(v.extent for v in sub)
    else:
        box = narrow(cond, {v: (v.lo, v.hi - 1) for v in vars_}, atoms=True)
        return 0 if box is None else math.prod(box[v][1] - box[v][0] + 1 for v in vars_)
    box = narrow(cond, {v: (v.lo, v.hi - 1) for v in vars_}, atoms=True)
    if box is None:
        return 0
    targets = {id(v) for p in picks for t in p.targets for v in free_vars(t)}
    keys = {id(v) for p in picks for i in p.read.indices for v in free_vars(i)}
    picked = math.prod(box[v][1] - box[v][0] + 1 for v in vars_
                       if id(v) in keys or id(v) not in targets)
    return min(exact, picked)


def _picks(conds, scope):
    """One-hot selections among data conditions `conds` (see _Pick), grouped by
    the integer element they compare; kept only where the selection is injective."""
    structure, groups = Structure(), {}
    in_scope = {id(v) for v in scope}
    for c in conds:
        if not (isinstance(c, Binary) and c.op == "eq" and dt.is_int(c.a.dtype)):
            continue
        for data, index in ((c.a, c.b), (c.b, c.a)):
            reads = [n for n in post_order(data) if isinstance(n, Read)]
            if is_index_expr(index) and len(reads) == 1 and \
                    all(is_index_expr(i) for i in reads[0].indices):
                k = structure.key(reads[0])
                groups.setdefault(k, (reads[0], []))[1].append(index)
                break
    out = []
    for read, targets in groups.values():
        forms = [linear_form(f) for f in list(read.indices) + targets]
        if any(f is None for f in forms):
            continue
        vars_ = [v for v in {id(v): v for f in forms for v in f.terms}.values()
                 if id(v) in in_scope]
        matrix = np.array([[f.terms.get(v, 0) for v in vars_] for f in forms], dtype=float)
        if vars_ and np.linalg.matrix_rank(matrix) == len(vars_):
            out.append(_Pick(read, tuple(targets)))
    return tuple(out)
