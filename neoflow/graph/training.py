"""The training graph: forward, every parameter gradient and the optimizer
updates as one set of te tensors, plus which output overwrites which buffer.

    loss --nf.grad--> grads --optimizer--> new parameters, new optimizer state
    batch_norm ---------------------------> new running statistics

Leaves of the graph, each a buffer the runtime keeps: data `inputs`
(placeholders fed each step), trainable `params`, `frozen` parameters
(requires_grad=False; running statistics), optimizer `state` (zero-initialised
parameters named "<param>.<slot>") and `scalars` (0-d placeholders fed each
step, e.g. the learning rate). Outputs: the loss and one `Alias` per updated
leaf. An alias is done in place when that is safe (the update reads the old
value only at the element it writes, and every other reader of the old value
runs first — `order` guarantees it); otherwise the runtime copies the new
value over the leaf after the step.

Hands on: a `TrainingGraph` (tensors, aliases and an execution order of its
computes) for buffer planning and the runtime.
"""
import functools
import heapq
import warnings

from ..autodiff import grad
from ..errors import NeoFlowError
from ..nn import state_updates
from ..optim import Optimizer
from ..te import (Tensor, cast, compute, const, minimum, parameter, placeholder, reduce_axis,
                  sqrt)
from ..te import sum as te_sum
from ..te import dtype as dt
from ..te.random import random_states
from ..te.scan import is_scan
from ..te.tensor import ParameterOp, PlaceholderOp, live_computes
from ..te.visit import reads, tensor_inputs, topo_tensors
from .kernel import Kernel


class Alias:
    """`value` (an output of the step) replaces the leaf `target`; `inplace`
    says whether `value` is computed straight into `target`'s buffer."""

    def __init__(self, target, value, inplace):
        self.target, self.value, self.inplace = target, value, inplace

    def __repr__(self):
        how = "in place" if self.inplace else "by copy"
        return f"<alias {self.value.name} -> {self.target.name} ({how})>"


class TrainingGraph:
    """The whole training step as te tensors (see the module comment).

    >>> g = training_graph(loss, nf.optim.SGD(lr=0.1))          # doctest: +SKIP
    >>> [p.name for p in g.params], len(g.order)                # doctest: +SKIP
    """

    def __init__(self, loss, optimizer, inputs, params, frozen, state, scalars, grads,
                 aliases, order):
        self.loss, self.optimizer = loss, optimizer
        self.inputs = inputs      # [Tensor] data placeholders, in DAG order
        self.params = params      # [Tensor] trainable parameters, in DAG order
        self.frozen = frozen      # [Tensor] requires_grad=False parameters
        self.state = state        # {param name: {slot: Tensor}} optimizer state
        self.scalars = scalars    # {(scalar name, dtype): 0-d placeholder}
        self.grads = grads        # {param name: gradient Tensor}
        self.aliases = aliases    # [Alias], one per updated leaf
        self.order = order        # [Tensor] every compute of the step, in run order

    @property
    def outputs(self):
        """The loss, then every alias value."""
        return [self.loss] + [a.value for a in self.aliases]

    def kernels(self):
        """The step as kernels in run order: for now one per compute (the
        partitioner will fuse; it must keep `order`'s alias constraints).

        >>> [k.stages[0].name for k in g.kernels()][:2]          # doctest: +SKIP
        ['out', 'diff']
        """
        return [Kernel([t]) for t in self.order]

    @functools.cached_property
    def randoms(self):
        """[Tensor] the state leaves of the step's random tensors (te/random.py),
        stream n the n-th; the runtime writes them before each step."""
        return random_states(topo_tensors(self.outputs))

    @property
    def leaves(self):
        """Every buffer the step reads that no kernel writes (inputs first)."""
        state = [t for slots in self.state.values() for t in slots.values()]
        return (self.inputs + list(self.scalars.values()) + self.params + self.frozen + state
                + self.randoms)


def training_graph(loss, optimizer):
    """Build the training step of `loss` (0-d) under `optimizer`.

    >>> x = nf.placeholder((4, 3), name="x")
    >>> w = nf.parameter((2, 3), name="w")
    >>> loss = nf.nn.mean(nf.nn.dense(x, w))
    >>> g = training_graph(loss, nf.optim.SGD(lr=0.1))         # doctest: +SKIP
    >>> [a.target.name for a in g.aliases]                      # doctest: +SKIP
    ['w']
    """
    if not isinstance(loss, Tensor):
        raise NeoFlowError(f"training: the loss must be a neoflow Tensor, got {loss!r}")
    if loss.shape != () or not dt.is_float(loss.dtype):
        raise NeoFlowError(f"training: the loss '{loss.name}' must be a 0-d float tensor; got "
                           f"shape {loss.shape}, dtype {loss.dtype} (reduce it, e.g. nf.nn.mean)")
    if not isinstance(optimizer, Optimizer):
        raise NeoFlowError(f"training: optimizer must be an nf.optim optimizer (SGD, Adam), "
                           f"got {optimizer!r}")
    graph = topo_tensors([loss])
    leaves = [t for t in graph if not t.is_compute and not is_scan(t)]
    name_parameters(leaves)
    _warn_unreached(loss, graph)
    params = [t for t in leaves if isinstance(t.op, ParameterOp) and t.op.requires_grad]
    if not params:
        raise NeoFlowError(f"training: the loss '{loss.name}' depends on no trainable "
                           "nf.parameter (requires_grad=True); there is nothing to train")
    for p in params:
        if not dt.is_float(p.dtype):
            raise NeoFlowError(f"training: parameter '{p.name}' is {p.dtype}; trainable "
                               "parameters must be float32 or float64 "
                               "(use requires_grad=False for integer state)")

    grads = dict(zip((p.name for p in params), grad(loss, params)))
    applied = grads if optimizer.clip_grad_norm is None else \
        clip_by_global_norm(params, grads, optimizer.clip_grad_norm)
    scalars = {}

    def scalar(name, dtype):
        key = (name, dtype)
        if key not in scalars:
            suffix = "" if dtype == "float32" else f".{dtype}"
            scalars[key] = placeholder((), dtype, name=f"optim.{name}{suffix}")
        return scalars[key]

    state, aliases = {}, []
    for p in params:
        slots = {s: parameter(p.shape, init="zeros", dtype=p.dtype, name=f"{p.name}.{s}",
                              requires_grad=False) for s in optimizer.slots}
        upd = optimizer.update(p, applied[p.name], slots,
                               {s: scalar(s, p.dtype) for s in optimizer.scalar_names})
        state[p.name] = slots
        aliases.append((p, upd.param))
        aliases.extend((slots[s], upd.state[s]) for s in optimizer.slots)
    trainable = {id(p) for p in params}
    seen = {id(target) for target, _ in aliases}
    for target, value in state_updates([loss]):
        if id(target) in trainable:
            raise NeoFlowError(f"training: parameter '{target.name}' is trainable but also "
                               "updated as state (e.g. batch-norm running statistics); make "
                               "it with requires_grad=False")
        if id(target) in seen:
            raise NeoFlowError(f"training: state '{target.name}' is updated twice in one step "
                               "(is one running statistic shared by two batch_norm calls?)")
        seen.add(id(target))
        aliases.append((target, value))

    outputs = [loss] + [value for _, value in aliases]
    everything = topo_tensors(outputs)
    inputs = [t for t in everything if isinstance(t.op, PlaceholderOp)
              and all(t is not s for s in scalars.values())]
    frozen = [t for t in everything if isinstance(t.op, ParameterOp) and not t.op.requires_grad
              and not any(t is s for slots in state.values() for s in slots.values())]
    _check_unique_names([t for t in everything if not t.is_compute])
    order, inplace = _execution_order(everything, aliases)
    aliases = [Alias(target, value, ok) for (target, value), ok in zip(aliases, inplace)]
    return TrainingGraph(loss, optimizer, inputs, params, frozen, state, scalars, grads,
                         aliases, order)


def clip_by_global_norm(params, grads, max_norm):
    """{param name: gradient scaled as torch.nn.utils.clip_grad_norm_ scales it}:
    every gradient times min(1, max_norm / (norm + 1e-6)), `norm` the 2-norm
    of all gradients together -- one 0-d compute of squared sums (in float64
    if any parameter is) and one 0-d scale that each update reads, so the
    scaling fuses into the updates.

    >>> clipped = clip_by_global_norm(params, grads, 1.0)       # doctest: +SKIP
    """
    dtype = "float64" if any(p.dtype == "float64" for p in params) else "float32"

    def squares(g):
        axes = [reduce_axis(n, name=f"c{d}") for d, n in enumerate(g.shape)]
        v = g[tuple(axes)]
        v = v if g.dtype == dtype else cast(v, dtype)
        return v * v if not axes else te_sum(v * v, axis=axes)

    total = compute((), lambda: functools.reduce(
        lambda a, b: a + b, [squares(grads[p.name]) for p in params]), name="clip.sumsq")
    coef = compute((), lambda: minimum(const(max_norm, dtype) / (sqrt(total[()]) + 1e-6),
                                       const(1.0, dtype)), name="clip.coef")

    def scaled(p):
        g = grads[p.name]
        c = coef[()] if g.dtype == dtype else cast(coef[()], g.dtype)
        return compute(g.shape, lambda *i: g[i] * c, name=f"{p.name}.grad.clipped")
    return {p.name: scaled(p) for p in params}


class UnreachedParameterWarning(UserWarning):
    """A parameter read by computes that do not reach the loss: it is not trained."""


def name_parameters(leaves):
    """Give the unnamed parameters among `leaves` (the loss graph's, in its
    topological order) the names param0, param1, ... in that order -- a
    network built again the same way gets the same names, so its
    `trainer.parameters()` load into the new one. A parameter keeps the
    first name it is given.

    >>> w = nf.parameter((3, 2)); name_parameters([x, w]); w.name    # doctest: +SKIP
    'param0'
    """
    taken = {t.name for t in leaves}
    n = 0
    for t in leaves:
        if isinstance(t.op, ParameterOp) and t.auto_named:
            while f"param{n}" in taken:
                n += 1
            t.name, t.auto_named = f"param{n}", False
            taken.add(t.name)
            n += 1


def unreached_parameters(loss, graph=None):
    """[(parameter, [branch computes])]: trainable parameters outside the loss's
    graph read by a forgotten branch -- live computes that read a tensor of
    the loss's graph but do not reach the loss -- (or by what such a branch
    reads), in creation order.

    >>> h = nf.nn.dense(x, w1); out = nf.nn.dense(h, w2); aux = nf.nn.dense(h, w3)
    >>> [p.name for p, _ in unreached_parameters(nf.nn.mean(out))]   # doctest: +SKIP
    ['w3']
    """
    ids = {id(t) for t in (graph if graph is not None else topo_tensors([loss]))}
    branches = sorted((c for c in live_computes() if id(c) not in ids
                       and any(id(p) in ids for p in tensor_inputs(c))), key=lambda t: t.id)
    found, seen = {}, set()
    for c in branches:                  # one walk up from every branch, stopping at the graph
        stack = [c]
        while stack:
            t = stack.pop()
            if id(t) in ids or id(t) in seen:
                continue
            seen.add(id(t))
            if isinstance(t.op, ParameterOp) and t.op.requires_grad:
                found[id(t)] = (t, [c.name])
            elif t.is_compute:
                stack.extend(tensor_inputs(t))
    return sorted(found.values(), key=lambda pb: pb[0].id)


def _warn_unreached(loss, graph):
    missed = unreached_parameters(loss, graph)
    if missed:
        listed = "; ".join(f"'{p.name}' {p.shape} (read by {', '.join(map(repr, b[:3]))})"
                           for p, b in missed)
        warnings.warn(f"training: {len(missed)} parameter(s) do not reach the loss "
                      f"'{loss.name}' and are not trained: {listed} -- computes that read "
                      "the loss's tensors but feed nothing into it (a forgotten branch?)",
                      UnreachedParameterWarning, stacklevel=4)


def _check_unique_names(leaves):
    names = {}
    for t in leaves:
        other = names.setdefault(t.name, t)
        if other is not t:
            raise NeoFlowError(f"training: two inputs/parameters are named '{t.name}' "
                               f"({other!r} and {t!r}); give each a unique name, the trainer "
                               "feeds and saves them by name")


def _reads_only_in_place(value, target):
    """True when every read of `target` in `value`'s body is at `value`'s own index."""
    axes = value.op.axes
    return all(len(r.indices) == len(axes) and all(a is b for a, b in zip(r.indices, axes))
               for r in reads(value.op.body) if r.tensor is target)


def _execution_order(tensors, aliases):
    """The computes of `tensors` in a run order, and per alias whether it is in place.

    A topological order of `run_constraints` (ties broken by DAG order, which
    keeps producers close to consumers).
    """
    computes = [t for t in tensors if t.is_compute]
    after, inplace = run_constraints(computes, aliases)
    rank = {id(t): n for n, t in enumerate(computes)}
    waiting = {id(t): len({id(p) for p in after[id(t)]}) for t in computes}
    users = {}
    for t in computes:
        for p in {id(p): p for p in after[id(t)]}.values():
            users.setdefault(id(p), []).append(t)
    ready = [(rank[id(t)], id(t), t) for t in computes if waiting[id(t)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, _, t = heapq.heappop(ready)
        order.append(t)
        for u in users.get(id(t), []):
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(ready, (rank[id(u)], id(u), u))
    assert len(order) == len(computes), "cycle in the training graph"
    return order, inplace


def run_constraints(computes, aliases):
    """({id(compute): [computes it must run after]}, [in place? per alias]).

    A compute runs after the computes it reads; the writer of an in-place
    alias also runs after every other reader of its target. An alias whose
    writer reads the target at another element, or that some reader of the
    target depends on, is done by copy instead (no extra constraint). Any
    order (or grouping into kernels) that keeps these is legal.

    >>> after, inplace = run_constraints(g.order, [(a.target, a.value) for a in g.aliases])
    ...                                                         # doctest: +SKIP
    """
    readers = {}
    for t in computes:
        for src in tensor_inputs(t):
            readers.setdefault(id(src), []).append(t)
    after = {id(t): [p for p in tensor_inputs(t) if p.is_compute] for t in computes}
    inplace = []
    for target, value in aliases:
        others = [r for r in readers.get(id(target), []) if r is not value]
        later = _downstream(value, readers)
        ok = value.is_compute and _reads_only_in_place(value, target) \
            and not any(id(r) in later for r in others)
        if ok:
            after[id(value)] = after[id(value)] + others
        inplace.append(ok)
    return after, inplace


def _downstream(src, readers):
    """ids of every compute that needs `src` (through `readers`, id -> readers)."""
    seen, stack = set(), [src]
    while stack:
        for r in readers.get(id(stack.pop()), []):
            if id(r) not in seen:
                seen.add(id(r))
                stack.append(r)
    return seen
