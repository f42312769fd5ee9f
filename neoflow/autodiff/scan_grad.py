"""The gradient of a scan: a reverse scan over the stored states.

For `S[t] = f(t, S[t-1])` with the total adjoint `G[t]` of `S[t]`,
`G[t] = dS[t] + J_{t+1}^T G[t+1]`. The adjoint scan runs t backwards with
carry `q_t` (what flows into S[t] from step t+1; q_{L-1} = 0) and one step
`q_{t-1} = vjp_prev(t, S[t-1], dS[t] + q_t)` -- the step's own gradient with
respect to prev (`nf.grad` of the step sub-graph, cloned at the adjoint's t).
Its results R[t] = q_{t-1} give `d init = R[0]` and `G[t] = dS[t] + R[t+1]`.

The adjoint step also hands on, as extra states (one row per t), the
adjoint of every step tensor X that reads an input needing a gradient.
The gradients of those inputs (parameters used at every step, per-step
inputs x[t]) come from each X batched over t (te.scan.clone: shape
(length, *shape), prev read from the shifted states) differentiated as an
ordinary DAG with the stored rows as head: a parameter's accumulation over
t is one reduction, a per-step input's gradient is solved exactly. The
step's forward is not run again: the reverse step reads, at row t, the
next states and the step tensors with a reduction the forward scan keeps
(`_kept`, te.scan.keep), and the state before as a row of the shifted
states. Memory is linear in length (the states, the kept rows and the
adjoint scan's rows).

Hands on: contributions to the adjoints of a scan's inits and inputs, added
to the reverse pass (reverse.py) that reached the scan.
"""
from ..te.expr import Const, IterVar, Read, Reduce
from ..te.ops import where
from ..te.scan import clone, keep, scan
from ..te.tensor import compute, placeholder
from ..te.visit import children, post_order, tensor_inputs


def multi_grad(outputs, heads, wrts):
    """Gradients of `outputs` (each with adjoint `heads[k]`, a Tensor shaped
    like it) with respect to each of `wrts`.

    >>> (dx,) = multi_grad([y1, y2], [g1, g2], [x])   # doctest: +SKIP
    """
    from .reverse import _Reverse
    rev = _Reverse(None, list(wrts), None, roots=list(outputs))
    for o, h in zip(outputs, heads):
        _add(rev, o, h)
    return rev.run()


def _add(rev, target, value):
    """Add `value` (a tensor shaped like `target`) to target's adjoint in `rev`."""
    from .reverse import _Contribution
    if id(target) not in rev.dep:
        return
    if value.is_compute and isinstance(value.op.body, Const) and value.op.body.value == 0:
        return
    axes = [IterVar(f"g{d}", 0, s, "spatial") for d, s in enumerate(target.shape)]
    rev.contribs.setdefault(id(target), []).append(
        _Contribution(axes, axes, [], value[tuple(axes)] if axes else value[()]))


def visit_scan(rev, t, adj):
    """Reverse pass `rev` reaches scan result `t` with adjoint `adj` (or None);
    once every result of its scan the pass depends on is reached, the scan's
    gradient contributions are added."""
    group = t.op.group
    if adj is not None:
        rev.adjoints[id(t)] = adj
    seen = rev.__dict__.setdefault("_scan_adjoints", {}).setdefault(id(group), {})
    seen[t.op.index] = adj.tensor if adj is not None else None
    members = [r for r in group.results if id(r) in rev.dep]
    if len(seen) < len(members) or all(v is None for v in seen.values()):
        return
    _backprop(rev, group, [seen.get(k) for k in range(len(group.results))])


def _backprop(rev, group, dS):
    L, inits, K = group.length, group.inits, len(group.inits)
    fwd = not group.reverse
    stand = {id(e): (placeholder(e.shape, e.dtype, name=e.name), False)
             for e in group.externals}
    back = {id(s): (e, False) for e, (s, _) in zip(group.externals, stand.values())}
    needed = [e for e in group.externals if id(e) in rev.dep]
    wanted = {id(e) for e in needed}
    readers = [x for x in group.body if any(id(p) in wanted for p in tensor_inputs(x))]
    local = dict(zip(map(id, group.body), clone(group.body, stand, {})))
    # a kept step tensor with an adjoint of its own (a gradient of a gradient)
    heads_of = [(x, d) for x, d in zip(group.saved, dS[K:]) if d is not None]
    heads = [placeholder(s.shape, s.dtype, name=f"d{s.name}") for s in inits] + \
        [placeholder(x.shape, x.dtype, name=f"d{x.name}") for x, _ in heads_of]
    # per step: the adjoint of each prev, and of each step tensor that reads a
    # needed input (kept as extra states of the adjoint scan: one row per t)
    per_step = multi_grad([local[id(n)] for n in group.nexts] + [local[id(x)] for x, _ in heads_of],
                          heads, list(group.prevs) + [local[id(x)] for x in readers])
    kept = _kept(group, local, per_step)
    P = [_shifted(group, k) for k in range(K)]

    def adjoint_step(tr, q):
        g = [q[k] if dS[k] is None else
             compute(s.shape, lambda *i, k=k: dS[k][(tr,) + i] + q[k][i], name=f"g{k}")
             for k, s in enumerate(inits)]
        g += [compute(x.shape, lambda *i, d=d: d[(tr,) + i], name=f"g_{x.name}")
              for x, d in heads_of]
        tensors = dict(back)
        tensors.update({id(p): (b, tr) for p, b in zip(group.prevs, P)})   # the state before
        tensors.update({id(h): (x, False) for h, x in zip(heads, g)})
        tensors.update({id(local[id(x)]): (r, tr) for x, r in kept})      # row tr: no recompute
        return tuple(clone(per_step, tensors, {id(group.t): tr}))

    zeros = tuple(compute(s.shape, lambda *i, s=s: Const(0, s.dtype), name=f"q0_{s.name}")
                  for s in inits + tuple(readers))
    R = scan(zeros, adjoint_step, L, name=f"d{group.name}", reverse=fwd)
    first = 0 if fwd else L - 1
    for k, s in enumerate(inits):
        _add(rev, s, compute(s.shape, lambda *i, k=k: R[k][(first,) + i], name=f"d{s.name}"))
    if not needed:
        return
    # the inputs' gradients: each reader batched over t, its adjoint the stored rows
    stand_p = [placeholder(p.shape, p.dtype, name=p.name) for p in P]
    tensors = dict(stand)
    tensors.update({id(p): (sp, True) for p, sp in zip(group.prevs, stand_p)})
    # each reader alone, the others (and every kept step tensor) read as
    # stand-ins: its stored adjoint already holds what flows into it through them
    values = [placeholder((L,) + x.shape, x.dtype, name=f"{x.name}_b") for x in readers]
    kept_at = {id(x): r for x, r in kept}
    batched = []
    for j, x in enumerate(readers):
        cut = dict(tensors)
        cut.update({id(y): (v, True) for i, (y, v) in enumerate(zip(readers, values)) if i != j})
        cut.update({id(y): (r, True) for y, r in kept if y is not x and id(y) not in cut})
        cut.pop(id(x), None)
        batched += clone([x], cut, {}, batch=group.t)
    stand_h = [placeholder(r.shape, r.dtype, name=r.name) for r in R[K:K + len(readers)]]
    grads = multi_grad(batched, stand_h, [stand[id(e)][0] for e in needed])
    mapping = dict(back)
    mapping.update({id(sp): (p, False) for sp, p in zip(stand_p, P)})
    mapping.update({id(sh): (r, False) for sh, r in zip(stand_h, R[K:])})
    for x, v, b in zip(readers, values, batched):   # producers first: resolve in order
        value = kept_at.get(id(x))
        if value is None:
            value = clone([b], mapping, {})[0]
        mapping[id(v)] = mapping[id(b)] = (value, False)
    same = {}       # inputs read alike (an LSTM's two biases) share one gradient tensor
    for e, d in zip(needed, clone(grads, mapping, {})):
        _add(rev, e, same.setdefault(_structure(d), d))


def _structure(t):
    """A key equal for two tensors that compute the same thing: shape, dtype and
    body with index variables numbered by first appearance, tensors by identity."""
    if not t.is_compute:
        return ("leaf", id(t))
    number = {}

    def key(e):
        if isinstance(e, IterVar):
            return ("var", number.setdefault(id(e), len(number)), e.extent)
        if isinstance(e, Const):
            return ("const", e.value, e.dtype)
        if isinstance(e, Read):
            return ("read", id(e.tensor)) + tuple(key(i) for i in e.indices)
        if isinstance(e, Reduce):
            return ("reduce", e.op) + tuple(key(a) for a in e.axes) + \
                tuple(key(c) for c in children(e))
        fields = tuple(getattr(e, f) for f in ("op",) if hasattr(e, f))
        return (type(e).__name__, e.dtype) + fields + tuple(key(c) for c in children(e))
    return (t.shape, t.dtype) + tuple(key(a) for a in t.op.axes) + (key(t.op.body),)


def _kept(group, local, per_step):
    """[(step tensor, the result holding it at every step)]: the step tensors
    the reverse step reads that are kept instead of computed again -- the next
    states (stored anyway) and any with a reduction (SAVE_IF) -- found from the
    reverse step's reads down, not below a kept one."""
    at = {id(l): x for x, l in ((x, local[id(x)]) for x in group.body)}
    kept, seen, stack = [], set(), list(per_step)
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        x = at.get(id(t))
        if x is not None and (any(x is n for n in group.nexts) or SAVE_IF(x)):
            kept.append((x, keep(group, x)))
            continue
        stack.extend(tensor_inputs(t))
    return kept


def _has_reduction(x):
    return any(isinstance(n, Reduce) for n in post_order(x.op.body))


SAVE_IF = _has_reduction    # what the reverse step keeps rather than recomputes


def _shifted(group, k):
    """Every state step t reads, shaped (length, *S)."""
    S, init, L = group.results[k], group.inits[k], group.length
    if group.reverse:
        return compute(S.shape, lambda t, *i: where(t < L - 1, S[(t + 1,) + i], init[i]),
                       name=f"{S.name}_before")
    return compute(S.shape, lambda t, *i: where(t >= 1, S[(t - 1,) + i], init[i]),
                   name=f"{S.name}_before")
