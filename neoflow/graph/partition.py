"""graph/partition: cut a tensor DAG (or a training graph) into fused kernels.

Fusion here is inlining: an injective producer (graph/ops_class) is folded
into each compute that reads it -- its body substituted into every read, its
axes replaced by the read's indices -- so it is never written to memory.
A producer stays materialised when
* it is not injective (a reduction, a gather),
* its value is needed as such: a requested output, the loss, an updated
  parameter or optimizer state (anything in `keep`),
* recomputing it costs more than the memory traffic it saves: every read
  site evaluates it once per point of the consumer's loop nest around the
  read (reduce loops included), so inlining into several consumers, or into
  a reduction that reads each element many times (a matmul's inner loop),
  recomputes it; extra flops must not exceed RECOMPUTE_FLOPS_PER_BYTE times
  the bytes saved (its write and one read per consumer),
* its (already inlined) body is too large to copy (MAX_INLINE_NODES).
A sum that an inlined guard on its own axes alone leaves (`t >= 1`: a
scan's shifted states) is simplified, so the guard becomes the axis' range.
Every producer->consumer edge gets a `Decision` with the reason, for nf.explain.

Tensors that do not change keep their identity; rebuilt ones are new
Tensors with the same name, shape and dtype (`Partition.mapping`). The
training graph is rebuilt over the fused tensors and its run order and
in-place decisions recomputed (graph.training), since inlining moves reads
of parameters into other computes. graph/grouping then groups the
materialised computes into multi-stage kernels (`kernels_of`).

Hands on: `Partition` (rebuilt outputs, materialised computes, decisions,
kernels) and a fused `TrainingGraph`.
"""
import math

from ..te.arith import free_vars, interval, is_index_expr, linear_form
from ..te.expr import Read, Reduce, Select
from ..te.simplify import is_zero, masked_exp_rule, simplify
from ..te.tensor import ComputeOp, Tensor
from ..te.visit import children, post_order, substitute, topo_tensors, transform
from .decision import Decision
from .grouping import group_kernels
from .memory import nbytes
from .ops_class import op_class, per_element_flops
from .split import split_stages

RECOMPUTE_FLOPS_PER_BYTE = 1.0   # flops we accept to recompute per byte of traffic saved
MAX_INLINE_NODES = 64            # expression nodes of a producer body we copy into a read
MAX_INLINE_NODES_SHARED = 24     # ... when it has several read sites


class Partition:
    """The result of `fuse`: `outputs` (rebuilt, in the given order), `computes`
    (the materialised computes, producers first; one kernel each), `mapping`
    ({id(original): rebuilt}), `inlined` ({id(materialised compute, original or
    rebuilt): [original producers folded into it]}),
    `decisions` ([Decision] of inlining) and `unfused_kernels` (computes
    before fusion). `kernels_of` / `fuse_training_graph` add `kernels` and
    `grouping` (the Decisions of graph.grouping)."""

    def __init__(self, outputs, computes, mapping, inlined, decisions, unfused_kernels):
        self.outputs, self.computes, self.mapping = outputs, computes, mapping
        self.inlined, self.decisions = inlined, decisions
        self.unfused_kernels = unfused_kernels
        self.kernels, self.grouping = None, []

    def __repr__(self):
        return f"<Partition {self.unfused_kernels} -> {len(self.computes)} kernels>"


def _read_sites(consumer):
    """[(Read node, evaluations per step, padded)] of the compute `consumer`'s
    body; `padded`: the read sits in a reduction under a select on indices
    alone (a convolution's padding test, `where(h + rh - 1 >= 0, x[...], 0)`)."""
    out, base = [], math.prod(consumer.shape)
    stack = [(consumer.op.body, base, False, False)]
    while stack:
        e, evals, in_reduce, padded = stack.pop()
        if isinstance(e, Reduce):
            evals, in_reduce = evals * math.prod(a.extent for a in e.axes), True
        if isinstance(e, Read):
            out.append((e, evals, padded))
        if isinstance(e, Select) and in_reduce and is_index_expr(e.cond):
            stack += [(e.cond, evals, in_reduce, padded), (e.t, evals, in_reduce, True),
                      (e.f, evals, in_reduce, True)]
            continue
        stack.extend((c, evals, in_reduce, padded) for c in children(e))
    return out


def _size(e):
    return len(post_order(e))


def fuse(outputs, keep=(), fusion=True):
    """Inline injective producers behind `outputs` into their consumers.

    `keep`: tensors that must stay materialised besides `outputs`. With
    fusion=False nothing is inlined (one kernel per compute).

    >>> x = nf.placeholder((8,), name="x")
    >>> y = nf.compute((8,), lambda i: x[i] * 2, name="y")
    >>> z = nf.compute((), lambda: nf.sum(y[k], axis=k), name="z")
    >>> p = fuse([z]); [t.name for t in p.computes]
    ['z']
    """
    originals = list(outputs)
    outputs, split = split_stages(originals) if fusion else (originals, {})
    order = [t for t in topo_tensors(outputs) if t.is_compute]
    kept = {id(t) for t in outputs} | {id(split.get(id(t), t)) for t in keep}
    sites = {}                     # id(producer) -> [(consumer, evals, padded)]
    for c in order:
        for r, evals, padded in _read_sites(c):
            if r.tensor.is_compute:
                sites.setdefault(id(r.tensor), []).append((c, evals, padded))
    new, bodies, inlined, decisions, computes = {}, {}, {}, [], []

    def rebuild(n):
        if not isinstance(n, Read) or not n.tensor.is_compute:
            return n
        src = n.tensor
        if id(src) in bodies:
            axes = new[id(src)].op.axes
            return substitute(bodies[id(src)], dict(zip(axes, n.indices)))
        return Read(new[id(src)], n.indices)

    # (with inlining, a mask inlined into a softmax's exp moves out of it)
    step = (lambda n: masked_exp_rule(rebuild(n))) if fusion else rebuild
    for t in order:
        body = transform(t.op.body, step)
        if body is not t.op.body:
            body = transform(body, _tighten_guarded_sum)
        nt = t if body is t.op.body else Tensor(t.shape, t.dtype, t.name,
                                                ComputeOp(t.op.axes, body))
        new[id(t)] = nt
        folded = [p for p in _reads_of(t) if id(p) in bodies]
        inlined[id(t)] = _unique(folded + [q for p in folded for q in inlined.get(id(p), [])])
        consumers = sites.get(id(t), [])
        fused, reason = _decide(t, nt, consumers, id(t) in kept, fusion)
        for c in _unique([c for c, _, _ in consumers]):
            decisions.append(Decision(t, c, fused, reason))
        if fused:
            bodies[id(t)] = nt.op.body
        else:
            computes.append(nt)
            if inlined[id(t)]:
                inlined[id(nt)] = inlined[id(t)]
    for t in order:
        if id(t) in bodies:
            inlined.pop(id(t), None)
    inlined = {k: v for k, v in inlined.items() if v}
    for original, t in split.items():
        new.setdefault(original, new.get(id(t), t))
    part = Partition([new.get(id(t), t) for t in outputs], computes, new, inlined,
                     decisions, len(order))
    return part


def _tighten_guarded_sum(n):
    """A sum whose body inlining left guarded by a test on its own axes alone
    (`sum_t g[t] * where(t >= 1, h[t - 1], 0)`: a scan's shifted states),
    simplified: te.simplify turns the guard into the axes' bounds, so the
    reduction reads two plain affine operands. Guards that involve spatial
    axes (a convolution's padding) are left to the padding copies."""
    if not (isinstance(n, Reduce) and n.op == "sum"):
        return n
    own = {id(a) for a in n.axes}
    for x in post_order(n.body):
        if isinstance(x, Select) and is_zero(x.f) and is_index_expr(x.cond):
            tested = free_vars(x.cond)
            if tested and all(id(v) in own for v in tested):
                return simplify(n)
    return n


def _reshapes(t):
    """Whether compute `t` reads with an index that is not affine (flatten, view)."""
    return any(linear_form(i) is None for r in post_order(t.op.body) if isinstance(r, Read)
               for i in r.indices)


def _reads_of(t):
    return _unique([r.tensor for r in post_order(t.op.body) if isinstance(r, Read)])


def _unique(ts):
    seen, out = set(), []
    for t in ts:
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _decide(t, nt, consumers, kept, fusion):
    """(inline?, reason) for producer `t` (rebuilt as `nt`) read at `consumers`."""
    if not consumers:
        return False, "output"
    if not fusion:
        return False, "fusion is off"
    if kept:
        return False, "its value is kept (an output, the loss or an updated buffer)"
    kind = op_class(nt)
    if kind != "injective":
        return False, f"producer is a {kind}; only injective producers are inlined"
    nodes = _size(nt.op.body)
    limit = MAX_INLINE_NODES if len(consumers) == 1 else MAX_INLINE_NODES_SHARED
    if nodes > limit:
        return False, f"its body has {nodes} nodes (> {limit}) to copy into {len(consumers)} read(s)"
    pe = per_element_flops(nt)
    size = math.prod(t.shape)
    evals = sum(e for _, e, _ in consumers)
    if pe == 0:
        if _reshapes(nt) and any(e > math.prod(c.shape) for c, e, _ in consumers):
            return False, ("a reshape (// or % in its indices) read inside a reduction: "
                           "kept, so the reduction reads a contiguous copy")
        return True, "pure data movement (0 flops per element)"
    if any(padded for _, _, padded in consumers):
        return False, ("read under a padding test in a reduction: kept, so the window "
                       "reads a zero-padded copy instead of testing every point")
    extra = pe * max(0, evals - size)
    saved = nbytes(t) * (1 + len(consumers))
    if extra == 0:
        return True, f"injective, each element computed once ({pe:g} flops/element)"
    if extra <= RECOMPUTE_FLOPS_PER_BYTE * saved:
        return True, (f"injective; recomputes {extra:.3g} flops to save {saved:.3g} bytes "
                      f"({len(consumers)} read sites)")
    return False, (f"recompute cost: {evals / size:.3g} evaluations per element x "
                   f"{pe:g} flops = {extra:.3g} extra flops > {saved:.3g} bytes saved")


def kernels_of(partition, fusion=True):
    """The kernels of `partition` (from `fuse`), in run order (graph.grouping);
    also kept as `partition.kernels`, with the grouping decisions in
    `partition.grouping`.

    >>> [k.stages[0].name for k in kernels_of(fuse([z]))]
    ['z']
    """
    grouping = []
    kernels = group_kernels(partition.computes, {id(t) for t in partition.outputs}, fusion,
                            decisions=grouping)
    partition.kernels, partition.grouping = kernels, grouping
    _record_origins(kernels, partition.inlined)
    return kernels


def _record_origins(kernels, inlined):
    """Each kernel's `origins`: per stage, {(tensor name, dim): names of the
    computes inlined into the stage whose reads of that dimension are not
    proved in range} -- so a read found out of range at run time names the
    user's compute ('shift'), not the one it was fused into ('dense')."""
    for k in kernels:
        k.origins = {t.name: read_origins(inlined.get(id(t), ())) for t in k.stages
                     if inlined.get(id(t))}


def read_origins(computes):
    """{(tensor name, dim): [names of `computes` reading that dimension with an
    index not proved inside it]} (gathers, guarded shifts).

    >>> read_origins([nf.compute((4,), lambda i: nf.where(i > 0, x[i - 1], 0.0), name="s")])
    {('x', 0): ['s']}                                                  # doctest: +SKIP
    """
    out = {}
    for c in computes:
        for r in post_order(c.op.body):
            if isinstance(r, Read):
                for d, index in enumerate(r.indices):
                    span = interval(index)
                    if span is None or span[0] < 0 or span[1] >= r.tensor.shape[d]:
                        names = out.setdefault((r.tensor.name, d), [])
                        if c.name not in names:
                            names.append(c.name)
    return out


def fuse_training_graph(graph, fusion=True):
    """(fused TrainingGraph, Partition): `graph` with injective producers
    inlined; the loss and every alias value stay materialised; run order and
    in-place decisions are recomputed for the rebuilt tensors, then the
    computes are grouped into `part.kernels` (graph.grouping: epilogues,
    siblings, optimizer updates in the gradient's kernel) under the run
    order's constraints. The fused graph's `order` is the kernels' stages.

    >>> g2, part = fuse_training_graph(training_graph(loss, opt))   # doctest: +SKIP
    >>> len(part.kernels) <= len(g2.order) <= part.unfused_kernels  # doctest: +SKIP
    True
    """
    from .training import Alias, TrainingGraph, _execution_order, run_constraints
    part = fuse(graph.outputs, fusion=fusion)
    m = part.mapping
    remap = lambda t: m.get(id(t), t)  # noqa: E731
    pairs = [(a.target, remap(a.value)) for a in graph.aliases]
    everything = topo_tensors([remap(graph.loss)] + [v for _, v in pairs])
    order, inplace = _execution_order(everything, pairs)
    after, _ = run_constraints(order, pairs)
    aliases = [Alias(t, v, ok) for (t, v), ok in zip(pairs, inplace)]
    grads = {name: remap(g) for name, g in graph.grads.items()}
    needed = {id(remap(graph.loss))} | {id(v) for _, v in pairs}
    grouping = []
    kernels = group_kernels(order, needed, fusion, after=after,
                            updates={id(v) for _, v in pairs}, decisions=grouping)
    order = [t for k in kernels for t in k.stages]
    fused = TrainingGraph(remap(graph.loss), graph.optimizer, graph.inputs, graph.params,
                          graph.frozen, graph.state, graph.scalars, grads, aliases, order)
    part.kernels, part.grouping = kernels, grouping
    _record_origins(kernels, part.inlined)
    return fused, part
