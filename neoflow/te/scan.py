"""Recurrences: `nf.scan(init, step, length)`.

A scan is a computed tensor whose producer is a sub-graph: the step. The
step is called once, with an index variable `t` (kind "scan", over
range(length)) and one `ScanStateOp` tensor per state (`prev`, the state
of the step before); what it returns is the next state. The results are
tensors with a `ScanOp` (one per state, sharing one `ScanGroup`) holding
every state: `states[t] = step(t, states[t-1])`, `states[-1] = init`.

The step sub-graph (`ScanGroup.body`: the tensors that depend on `t` or
on a `prev`) stays inside the group; `ScanGroup.inputs` (the inits and
the tensors the body reads from outside) are what the DAG sees
(`visit.tensor_inputs`). `clone` rebuilds a step sub-graph over other
tensors and index variables, or batched over the whole range of `t`
(autodiff uses both). At construction the reductions that do not depend on
the state leave the step (`hoist`: one tensor over t, before the loop) and a
random tensor the step makes is drawn per t; `keep` adds a result holding
a step tensor's value at every step (autodiff keeps what the reverse step
reads).

Hands on: scan result Tensors, ordinary nodes of the DAG.
"""
import numbers

from ..errors import DTypeError, ExpressionError, ShapeError
from .expr import Expr, IterVar, Read, Reduce, Select
from .tensor import ComputeOp, Tensor, _ids
from .visit import post_order, tensor_inputs, topo_tensors, transform


class ScanStateOp:
    """`prev`: the state of the step before, inside a step (open while `nf.scan`
    runs the step; reading it afterwards is refused)."""

    def __init__(self, group):
        self.group = group


class ScanGroup:
    """One scan: `inits`, `prevs` (ScanStateOp tensors), `nexts` (what the step
    returned), `t` and `length`; `reverse` runs t from length-1 down (states[t] =
    step(t, states[t+1]), states[length] = init; autodiff's adjoint scans)."""

    def __init__(self, inits, length, name, reverse):
        self.inits, self.length, self.name, self.reverse = inits, length, name, reverse
        self.t = IterVar("t", 0, length, "scan")
        self.open = True
        self.prevs = tuple(Tensor(s.shape, s.dtype, f"{name}_prev{k}" if len(inits) > 1
                                  else f"{name}_prev", ScanStateOp(self))
                           for k, s in enumerate(inits))
        self.nexts, self.body, self.externals, self.results = (), [], [], ()
        self.saved = []     # step tensors kept at every step: results[len(inits) + n]

    @property
    def inputs(self):
        """The tensors outside the step the scan reads: inits, then externals."""
        out, seen = [], set()
        for x in list(self.inits) + list(self.externals):
            if id(x) not in seen:
                seen.add(id(x))
                out.append(x)
        return out


class ScanOp:
    """Result `index` of `group`: every state of that element, shaped (length, *S);
    an index past the states holds every step's value of `group.saved[index - K]`."""

    def __init__(self, group, index):
        self.group, self.index = group, index

    @property
    def inputs(self):
        return self.group.inputs


def is_scan(t):
    """True if `t` is a result of `nf.scan`."""
    return isinstance(t.op, ScanOp)


def scan(init, step, length, name=None, *, reverse=False):
    """Every state of a recurrence: `states[t] = step(t, states[t-1])`, `states[-1] = init`.

    `init` is a Tensor (or a tuple of Tensors) of state shape S; `step(t, prev)`
    is called once and returns the next state (same shapes and dtypes) built
    with `nf.compute` from `prev` and reads of other tensors at `t`; the result
    is shaped (length, *S) (a tuple for a tuple state).

    >>> x = nf.placeholder((T, N), name="x"); h0 = nf.placeholder((N,), name="h0")
    >>> hs = nf.scan(h0, lambda t, h: nf.compute((N,), lambda i: h[i] + x[t, i]), T)
    """
    name = name or "scan"
    single = isinstance(init, Tensor)
    inits = (init,) if single else tuple(init) if isinstance(init, (tuple, list)) else None
    if not inits or not all(isinstance(s, Tensor) for s in inits):
        raise ExpressionError(f"nf.scan '{name}': init must be a Tensor or a non-empty tuple "
                              f"of Tensors, got {init!r}")
    if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length <= 0:
        raise ShapeError(f"nf.scan '{name}': length must be a positive int, got {length!r}")
    group = ScanGroup(inits, int(length), name, reverse)
    mark = next(_ids)           # tensors numbered above it are made by the step
    try:
        out = step(group.t, group.prevs[0] if single else group.prevs)
    finally:
        group.open = False
    group.nexts = _fresh_draws(group, _check_nexts(group, out, single), mark)
    body, _ = _split(group)
    inside = {id(x) for x in body}
    group.nexts = tuple(n if id(n) in inside else _copy(n, f"{group.name}_next{k}")
                        for k, n in enumerate(group.nexts))   # a state made without t or prev
    group.body, _ = _split(group, forced={id(n) for n in group.nexts})
    group.nexts = hoist(group)
    group.body, group.externals = _split(group, forced={id(n) for n in group.nexts})
    group.results = tuple(
        Tensor((group.length,) + s.shape, s.dtype,
               name if single else f"{name}_{k}", ScanOp(group, k))
        for k, s in enumerate(inits))
    return group.results[0] if single else group.results


def keep(group, x):
    """The result holding step tensor `x`'s value at every step, shaped
    (length, *x.shape): the states for a next state, else a result added to
    the scan (once; `group.saved`). nf.grad keeps what the reverse step
    reads instead of computing it again; a run computes a kept result only
    where something reads it.

    >>> gates_at = keep(hs.op.group, gates)      # doctest: +SKIP
    """
    for k, n in enumerate(group.nexts):
        if n is x:
            return group.results[k]
    for n, s in enumerate(group.saved):
        if s is x:
            return group.results[len(group.inits) + n]
    if all(b is not x for b in group.body):
        raise ExpressionError(f"nf.scan '{group.name}': '{x.name}' is not a tensor of its step")
    group.saved.append(x)
    r = Tensor((group.length,) + x.shape, x.dtype, f"{group.name}_{x.name}",
               ScanOp(group, len(group.results)))
    group.results = group.results + (r,)
    return r


def _check_nexts(group, out, single):
    name, inits = group.name, group.inits
    outs = (out,) if single and isinstance(out, Tensor) else out
    if not isinstance(outs, (tuple, list)) or not all(isinstance(o, Tensor) for o in outs):
        want = "a Tensor" if single else f"a tuple of {len(inits)} Tensors"
        raise ExpressionError(f"nf.scan '{name}': step must return {want} (the next state), "
                              f"got {out!r}")
    if len(outs) != len(inits):
        raise ShapeError(f"nf.scan '{name}': step returned {len(outs)} state tensor(s); the "
                         f"state (init) has {len(inits)}")
    nexts = []
    for k, (o, s) in enumerate(zip(outs, inits)):
        if o.shape != s.shape:
            raise ShapeError(f"nf.scan '{name}': step's state {k} '{o.name}' has shape "
                             f"{o.shape}; expected {s.shape}, the shape of init '{s.name}'")
        if o.dtype != s.dtype:
            raise DTypeError(f"nf.scan '{name}': step's state {k} '{o.name}' is {o.dtype}; "
                             f"expected {s.dtype}, the dtype of init '{s.name}'")
        if o is group.prevs[k] or not o.is_compute:  # a state passed on unchanged: copy it
            nexts.append(_copy(o, f"{name}_next{k}"))
        else:
            nexts.append(o)
    return tuple(nexts)


def _fresh_draws(group, nexts, mark):
    """The next states with every random tensor the step made (nf.random_uniform,
    a dropout mask; made after tensor number `mark`) drawn afresh at each step:
    one draw shaped (length, *shape) before the loop, row t read inside."""
    from .random import Random, random_uniform
    drawn = {}
    for x in topo_tensors(list(nexts)):
        if x.is_compute and x.id > mark and isinstance(x.op.body, Random):
            u = random_uniform((group.length,) + x.shape, x.dtype, name=x.name)
            drawn[id(x)] = (u, group.t)
    return tuple(clone(list(nexts), drawn, {})) if drawn else nexts


def hoist(group):
    """The next states rebuilt with the reductions that do not depend on the
    state taken out of the loop over t (loop-invariant code motion): a
    reduction inside a step tensor that reads only tensors from outside the
    step (e.g. an input projection `sum_i x[t, b, i] * w[j, i]` beside
    `sum_k h[b, k] * u[j, k]`) becomes one tensor over t and the indices it
    uses -- one big contraction before the loop; the step reads it at t.
    Not hoisted: a reduction in a branch of a `where` (only the chosen branch
    may be read: hoisting could read out of range) or one that uses an index
    of an enclosing reduction. Element-wise work stays in the step (it fuses
    there, and batching it would store (length, *shape) for nothing).

    Values are unchanged: the same expressions, evaluated for every t at once.

    >>> group.nexts = hoist(group)      # doctest: +SKIP
    """
    inside = {id(p) for p in group.prevs} | {id(x) for x in group.body}
    step = {}       # id(old step tensor) -> its rebuilt version

    def read(n):
        if isinstance(n, Read) and step.get(id(n.tensor), n.tensor) is not n.tensor:
            return Read(step[id(n.tensor)], n.indices)
        return n
    for x in group.body:
        body = _hoist_reductions(transform(x.op.body, read), x, group.t, group.length, inside)
        step[id(x)] = x if body is x.op.body else \
            Tensor(x.shape, x.dtype, x.name, ComputeOp(x.op.axes, body))
        inside.add(id(step[id(x)]))
    return tuple(step[id(n)] for n in group.nexts)


def _hoist_reductions(e, x, t, length, inside):
    """`e` (the body of step tensor `x`) with each outermost reduction that reads
    no tensor in `inside` (the prevs and the step's tensors) replaced by a read
    of a tensor computing it for every t (see `hoist`)."""
    from .visit import children, with_children
    axes = {id(a): a for a in x.op.axes}

    def hoistable(r):
        if any(id(n.tensor) in inside for n in post_order(r) if isinstance(n, Read)):
            return None
        bound = {id(a) for n in post_order(r) if isinstance(n, Reduce) for a in n.axes}
        free = {id(n): n for n in post_order(r) if isinstance(n, IterVar) and id(n) not in bound}
        if any(k not in axes and k != id(t) for k in free):
            return None
        return [a for a in x.op.axes if id(a) in free], id(t) in free

    def walk(n):
        if isinstance(n, Reduce):
            found = hoistable(n)
            if found is not None:
                return _hoisted(n, found, x, t, length)
        if isinstance(n, Select):       # only the condition is always evaluated
            return with_children(n, [walk(n.cond), n.t, n.f])
        return with_children(n, [walk(c) for c in children(n)])
    return walk(e)


def _hoisted(r, found, x, t, length):
    """A read (at t and the indices it uses) of a tensor holding reduction `r`
    for every t: the tensor computed once, before the loop."""
    used, uses_t = found
    lead = [IterVar("t", 0, length, "spatial")] if uses_t else []
    own = [IterVar(a.name, 0, a.extent, "spatial") for a in used]
    mapping = {id(a): b for a, b in zip(used, own)}
    if uses_t:
        mapping[id(t)] = lead[0]
    body = transform(r, lambda n: mapping.get(id(n), n) if isinstance(n, IterVar) else n)
    shape = tuple(a.extent for a in lead + own)
    h = Tensor(shape, r.dtype, f"{x.name}_in", ComputeOp(lead + own, body))
    return Read(h, ((t,) if uses_t else ()) + tuple(used))


def _copy(src, name):
    from .tensor import compute
    return compute(src.shape, lambda *i: src[i], name=name)


def _split(group, forced=frozenset()):
    """(body, externals): the step's tensors that depend on t or a prev, and those
    in `forced` (producers first), and the tensors outside the step the body reads."""
    own = {id(p) for p in group.prevs}
    order = topo_tensors(list(group.nexts))
    body, inside = [], set(own)
    for x in order:
        if isinstance(x.op, ScanStateOp):
            if x.op.group is not group:
                raise ExpressionError(
                    f"nf.scan '{group.name}': the step reads '{x.name}', the previous state "
                    f"of scan '{x.op.group.name}'; a scan's prev is read only inside its own "
                    "step, at the current step (use that scan's result at t instead)")
            continue
        if is_scan(x) and x.op.group is group:
            raise ExpressionError(f"nf.scan '{group.name}': the step reads the scan's own "
                                  f"result '{x.name}'; read prev (the state before) instead")
        if not x.is_compute and not is_scan(x):
            continue
        if is_scan(x) and any(id(p) in inside for p in tensor_inputs(x)):
            raise ExpressionError(f"nf.scan '{group.name}': a scan nested in the step that "
                                  f"depends on the step's state ('{x.name}') is not supported")
        if x.is_compute and (id(x) in forced or any(id(p) in inside for p in tensor_inputs(x))
                             or _uses(x.op.body, group.t)):
            inside.add(id(x))
            body.append(x)
    externals, seen = [], set()
    for x in body:
        for p in tensor_inputs(x):
            if id(p) not in inside and id(p) not in seen:
                seen.add(id(p))
                externals.append(p)
    return body, externals


def _uses(e, var):
    return any(n is var for n in post_order(e))


def clone(roots, tensors, variables, batch=None):
    """The sub-graph behind `roots` rebuilt: reads of a tensor in `tensors`
    ({id(old): (new, batched)}) read `new` (with the batch index in front when
    `batched`; without their first index when `batched` is "row"; with an index
    expression in front when `batched` is one, e.g. t: row t of a kept result);
    IterVars in `variables` ({id(old): expr}) are replaced; every
    compute that depends on either is rebuilt (shaped (batch.extent, *shape)
    with its first axis standing for `batch` when `batch`, an IterVar, is
    given). Returns the rebuilt roots, in order.

    >>> (n2,) = clone([nxt], {id(prev): (p2, False)}, {id(t): t2})   # doctest: +SKIP
    """
    memo = dict(tensors)
    for x in topo_tensors(list(roots)):
        if id(x) in memo or not x.is_compute:
            continue
        reads = tensor_inputs(x)
        if not (any(id(p) in memo for p in reads) or
                any(id(n) in variables or n is batch for n in post_order(x.op.body))):
            continue
        memo[id(x)] = (_rebuild(x, memo, variables, batch), batch is not None)
    return [memo[id(r)][0] if id(r) in memo else r for r in roots]


def _rebuild(x, memo, variables, batch):
    shape = ((batch.extent,) if batch is not None else ()) + x.shape
    letters = "ijlmnopqsuvw"
    axes = [IterVar(letters[d] if d < len(letters) else f"i{d}", 0, s, "spatial")
            for d, s in enumerate(shape)]
    own = axes[1:] if batch is not None else axes
    mapping = dict(variables)
    mapping.update({id(a): b for a, b in zip(x.op.axes, own)})
    if batch is not None:
        mapping[id(batch)] = axes[0]

    def fn(n):
        if isinstance(n, IterVar):
            return mapping.get(id(n), n)
        if isinstance(n, Read) and id(n.tensor) in memo:
            new, how = memo[id(n.tensor)]
            if isinstance(how, Expr):     # `new` holds one row per value of `how`
                return Read(new, (how,) + tuple(n.indices))
            if how == "row":      # `new` is the row the first index picks
                return Read(new, tuple(n.indices[1:]))
            return Read(new, ((axes[0],) if how else ()) + tuple(n.indices))
        return n

    body = transform(x.op.body, fn)
    return Tensor(shape, x.dtype, f"{x.name}_b" if batch is not None else x.name,
                  ComputeOp(axes, body))
