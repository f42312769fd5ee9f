"""Bring a compute body into the form reverse mode works on: a chain of
guards `where(c, X, 0)` around either one reduction whose body holds no
reduction, or a reduction-free expression.

Every other reduction (`nf.sum(x[i, k], axis=k) / K`, a reduction inside
another's body) is lifted into a compute of its own over the variables it
uses, guarded by the `where` conditions on its path so that it reads only
where the original did. Gradients then read its value instead of
recomputing it, and its own gradient flows through the new tensor.

Hands on: (guard conditions, top expression, lifted tensors).
"""
from ..te.arith import conjuncts, free_vars, negate
from ..te.expr import IterVar, Read, Reduce, Select
from ..te.simplify import conjunction, is_zero, where, zero
from ..te.tensor import compute
from ..te.visit import children, post_order, substitute, transform


def peel(e):
    """Split `where(c1, where(c2, X, 0), 0)` into ([c1, c2], X).

    >>> peel(nf.where(i > 0, A[i - 1], 0.0))   # ([i > 0], A[i - 1])
    """
    conds = []
    while isinstance(e, Select):
        if is_zero(e.f):
            conds.append(e.cond)
            e = e.t
        elif is_zero(e.t):
            conds.append(negate(e.cond))
            e = e.f
        else:
            break
    return conds, e


def normalize(T):
    """(guards, top, lifted) for compute T: T's body equals
    `where(guards, top, 0)`; `top` is a reduction over a reduction-free body,
    or reduction-free; `lifted` are the new computes `top` reads.

    >>> guards, top, lifted = normalize(nf.compute((4,), lambda i: nf.sum(A[i, k], axis=k) / 4))
    >>> top, lifted                                     # (T_r0[i] / 4.0, [T_r0])
    """
    guards, top = peel(T.op.body)
    lifted = []
    guards = [_lift(c, T.op.axes, [], T.name, lifted) for c in guards]
    if isinstance(top, Reduce):
        scope = list(T.op.axes) + list(top.axes)
        inner = conjuncts(top.cond)
        body = _lift(top.body, scope, guards + inner, T.name, lifted)
        cond = None if top.cond is None else _lift(top.cond, scope, guards, T.name, lifted)
        if body is not top.body or cond is not top.cond:
            top = Reduce(top.op, body, top.axes, cond)
    else:
        top = _lift(top, T.op.axes, guards, T.name, lifted)
    return guards, top, lifted


def _lift(e, scope, guards, name, lifted):
    """`e` with each outermost reduction replaced by a read of a new compute."""
    paths = {}
    _paths(e, list(guards), paths)
    if not paths:
        return e
    reads = {}
    for rid, (node, conds) in paths.items():
        reads[rid] = _materialise(node, conds, scope, f"{name}_r{len(lifted)}", lifted)
    return transform(e, lambda n: reads.get(id(n), n))


def _paths(e, conds, out):
    """Record every outermost Reduce under `e` with the where-conditions on its
    path (for a Reduce met on several paths: the conditions common to all)."""
    if isinstance(e, Reduce):
        if id(e) in out:
            node, old = out[id(e)]
            out[id(e)] = (node, [c for c in old if any(c is d for d in conds)])
        else:
            out[id(e)] = (e, list(conds))
        return
    if isinstance(e, Read):
        return
    if isinstance(e, Select):
        _paths(e.cond, conds, out)
        _paths(e.t, conds + [e.cond], out)
        _paths(e.f, conds + [negate(e.cond)], out)
        return
    for c in children(e):
        _paths(c, conds, out)


def _materialise(R, conds, scope, name, lifted):
    """A compute over the variables R uses, holding R where `conds` hold."""
    used = {id(v) for v in free_vars(R)}
    own = [v for v in scope if id(v) in used]
    guard = [c for c in conds if all(id(v) in used for v in free_vars(c))]
    fresh = {a: IterVar(a.name, a.lo, a.hi, "reduce") for a in _reduce_axes(R)}

    def body(*idx):
        mapping = {v: (i + v.lo if v.lo else i) for v, i in zip(own, idx)}
        mapping.update(fresh)
        value = _rebind(R, mapping)
        g = conjunction([substitute(c, mapping) for c in guard])
        return value if g is None else where(g, value, zero(R.dtype))

    L = compute(tuple(v.extent for v in own), body, name=name)
    L.op.lifted_from = R     # an operator's adjoint rule for R follows it (reverse._rules)
    lifted.append(L)
    return L[tuple((v - v.lo) if v.lo else v for v in own)]


def _reduce_axes(e):
    """Every reduce axis bound inside `e` (its own reduction's included)."""
    return [a for n in post_order(e) if isinstance(n, Reduce) for a in n.axes]


def _rebind(e, mapping):
    """`e` with IterVars replaced per `mapping`, reduce axes of its reductions included."""
    def fn(n):
        if isinstance(n, IterVar):
            return mapping.get(n, n)
        if isinstance(n, Reduce) and any(a in mapping for a in n.axes):
            return Reduce(n.op, n.body, [mapping.get(a, a) for a in n.axes], n.cond)
        return n
    return transform(e, fn)
