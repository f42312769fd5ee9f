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
(autodiff uses both).

Hands on: scan result Tensors, ordinary nodes of the DAG.
"""
import numbers

from ..errors import DTypeError, ExpressionError, ShapeError
from .expr import IterVar, Read
from .tensor import ComputeOp, Tensor
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
    """Result `index` of `group`: every state of that element, shaped (length, *S)."""

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
    try:
        out = step(group.t, group.prevs[0] if single else group.prevs)
    finally:
        group.open = False
    group.nexts = _check_nexts(group, out, single)
    body, _ = _split(group)
    inside = {id(x) for x in body}
    group.nexts = tuple(n if id(n) in inside else _copy(n, f"{group.name}_next{k}")
                        for k, n in enumerate(group.nexts))   # a state made without t or prev
    group.body, group.externals = _split(group, forced={id(n) for n in group.nexts})
    group.results = tuple(
        Tensor((group.length,) + s.shape, s.dtype,
               name if single else f"{name}_{k}", ScanOp(group, k))
        for k, s in enumerate(inits))
    return group.results[0] if single else group.results


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
    `batched`; without their first index when `batched` is "row"); IterVars in `variables` ({id(old): expr}) are replaced; every
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
            if how == "row":      # `new` is the row the first index picks
                return Read(new, tuple(n.indices[1:]))
            return Read(new, ((axes[0],) if how else ()) + tuple(n.indices))
        return n

    body = transform(x.op.body, fn)
    return Tensor(shape, x.dtype, f"{x.name}_b" if batch is not None else x.name,
                  ComputeOp(axes, body))
