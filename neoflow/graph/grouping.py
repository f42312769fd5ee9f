"""graph/grouping: materialised computes -> kernels (ordered groups of stages).

Over the run order, a kernel starts at the first compute not yet placed and
takes in, one at a time, a compute that
* reads one of its stages and is injective: an epilogue (a matmul's bias and
  gate nonlinearities, a reduction's normalisation, an optimizer update that
  reads the gradient elementwise);
* reads one of its stages and is a light reduction over the same outer
  iteration space (softmax's sum after its max, layer norm's variance
  after its mean);
* is a sibling: it reads no stage of the kernel but shares an input with
  one (the input projections of an RNN reading the same weights and
  sequence; the gradients of a weight and its bias reading the same
  upstream gradient). `_sibling` estimates the cost: merged, the shared
  input is read from memory once and from cache by the later stage,
  which holds while everything the kernel touches fits in
  SIBLING_CACHE_BYTES; each stage keeps its own loop nest and parallel
  loops, so no parallelism is lost. A requested output never joins as a
  sibling: its kernel stays the one the caller schedules and tunes.
A compute may join out of run order (within LOOKAHEAD computes) when
everything it must run after (`training.run_constraints`: what it reads,
and for an in-place update every other reader of the old value) has run
or is a stage of the kernel, so every such move is legal.

Before grouping, `sink_updates` moves a compute that only feeds parameter
updates (a weight gradient, the new optimizer state) down to just before
its first reader when that reader is injective (it will take it as an
epilogue) and nothing in between must run after it: the gradient kernel
then runs where the in-place update of the parameter is legal, and takes
the optimizer update as epilogue stages.

Every join, and every sibling the cost estimate refuses, is a Decision.

Hands on: Kernels in run order, and the grouping Decisions.
"""
from ..te.visit import tensor_inputs
from .decision import Decision
from .kernel import Kernel
from .memory import nbytes
from .ops_class import bytes_touched, op_class

SIBLING_MIN_SHARED_BYTES = 64     # a cache line: sharing a scalar (a learning rate) saves nothing
SIBLING_CACHE_BYTES = 256 * 1024  # a core's share of L2: a shared input read this recently is hot
LOOKAHEAD = 64                    # computes ahead in run order a kernel looks at for members


def group_kernels(order, needed, fusion=True, after=None, updates=(), decisions=None):
    """Kernels over the materialised computes `order` (a legal run order).

    `needed`: ids of the tensors the caller reads (step outputs); `after`:
    {id(compute): [computes it must run after]} (default: what it reads);
    `updates`: ids of the values that replace parameters or optimizer state
    (their producers may sink, see the module comment); `decisions`: a list
    that receives a Decision per join. With fusion=False every compute is a
    kernel of its own, in `order`.

    >>> x = nf.placeholder((8, 16), name="x")
    >>> s = nf.compute((8,), lambda i: nf.sum(x[i, k], axis=k), name="s")
    >>> t = nf.compute((8,), lambda i: s[i] * 2, name="t")
    >>> group_kernels([s, t], {id(t)})
    [<Kernel s, t>]
    """
    step = _Step(order, needed, after, updates)
    decisions = [] if decisions is None else decisions
    if fusion:
        order = sink_updates(order, step)
    groups, placed, pending = [], set(), list(order)
    while pending:
        stages = [pending.pop(0)]
        placed.add(id(stages[0]))
        refused = set()
        while fusion:
            pick = _member(step, stages, pending, placed, refused, decisions)
            if pick is None:
                break
            pending.remove(pick.consumer)
            decisions.append(pick)
            stages.append(pick.consumer)
            placed.add(id(pick.consumer))
        groups.append(stages)
    return _kernels(step, groups)


class _Step:
    """What grouping asks about the computes of `order`, each worked out once:
    `inputs(t)`, `kind(t)` (op class), `touched(t)` (bytes read and written
    alone); `readers` ({id(tensor): [computes reading it]}), `after`, `needed`,
    `updates` (ids of update values) and `feeds` (ids of the computes whose
    every reader, at least one, feeds an update; and of the updates)."""

    def __init__(self, order, needed, after, updates):
        self._inputs = {id(t): tensor_inputs(t) for t in order}
        self._kind, self._touched = {}, {}
        self.needed, self.updates = needed, set(updates)
        self.after = after if after is not None else {
            id(t): [p for p in self._inputs[id(t)] if p.is_compute] for t in order}
        self.readers = {}
        for t in order:
            for p in self._inputs[id(t)]:
                self.readers.setdefault(id(p), []).append(t)
        self.feeds = set()
        for t in reversed(order):
            rs = self.readers.get(id(t), [])
            if id(t) in self.updates or (rs and all(id(r) in self.feeds for r in rs)):
                self.feeds.add(id(t))

    def inputs(self, t):
        return self._inputs[id(t)]

    def kind(self, t):
        if id(t) not in self._kind:
            self._kind[id(t)] = op_class(t)
        return self._kind[id(t)]

    def touched(self, t):
        if id(t) not in self._touched:
            self._touched[id(t)] = bytes_touched(t)
        return self._touched[id(t)]

    def blocked(self, t, placed):
        """The first compute of `t`'s update chain that could not run right
        after it, or None (also when the chain reaches no update).

        The chain: `t`, the injective computes feeding updates that read a
        member (they would follow as epilogues), and the injective computes
        feeding updates that a member reads and that could run at once (all
        they wait for has run or is in the chain: Adam's first moment next
        to its second). A member is blocked when it waits for a compute
        outside the chain that has not run (not in `placed`): another reader
        of the value an update replaces."""
        after = self.after
        chain, grew = {id(t): t}, True
        while grew:
            grew = False
            for u in list(chain.values()):
                near = self.readers.get(id(u), []) + [
                    p for p in after[id(u)]
                    if id(p) not in placed and all(id(q) in placed or id(q) in chain
                                                   for q in after[id(p)])]
                for r in near:
                    if id(r) not in chain and id(r) in self.feeds \
                            and self.kind(r) == "injective":
                        chain[id(r)] = r
                        grew = True
        if not any(i in self.updates for i in chain):
            return None
        for u in chain.values():
            if any(id(p) not in chain and id(p) not in placed for p in after[id(u)]):
                return u
        return None


def _kernels(step, groups):
    """A Kernel per group; a stage is an output when needed or another group reads it."""
    readers = {}
    for g, stages in enumerate(groups):
        for t in stages:
            for p in step.inputs(t):
                readers.setdefault(id(p), set()).add(g)
    kernels = []
    for g, stages in enumerate(groups):
        outs = [t for t in stages
                if id(t) in step.needed or any(r != g for r in readers.get(id(t), ()))]
        kernels.append(Kernel(stages, outs or stages[-1:]))
    return kernels


def _member(step, stages, pending, placed, refused, decisions):
    """The next compute to join the kernel of `stages`, as a Decision, or None.

    Candidates are the computes among the next LOOKAHEAD of `pending` whose
    constraints are met; an epilogue or light reduction of a stage first (in
    run order), else a sibling that is not needed; either only when its
    update chain could follow it (`_unsplit`). Refusals are recorded once
    per compute and kernel."""
    ready = [t for t in pending[:LOOKAHEAD] if all(id(p) in placed for p in step.after[id(t)])]
    ids = {id(s) for s in stages}
    siblings = []
    for t in ready:
        verdict = _joins(step, t, stages, ids)
        if verdict is None:
            if id(t) not in step.needed and not any(id(p) in ids for p in step.inputs(t)):
                siblings.append(t)
            continue
        verdict = _unsplit(step, verdict, placed)
        if verdict.fused:
            return verdict
        _refuse(verdict, refused, decisions)
    footprint = sum(step.touched(s) for s in stages)
    for t in siblings:
        verdict = _sibling(step, t, stages, footprint)
        if verdict is None:
            continue
        if verdict.fused:
            verdict = _unsplit(step, verdict, placed)
            if verdict.fused:
                return verdict
        _refuse(verdict, refused, decisions)
    return None


def _refuse(verdict, refused, decisions):
    """Record the refused join `verdict` (a Decision) once per compute and kernel."""
    if id(verdict.consumer) not in refused:
        refused.add(id(verdict.consumer))
        decisions.append(verdict)


def _unsplit(step, verdict, placed):
    """`verdict`, or a refusal when its compute starts an update chain whose
    update could not follow it into this kernel (it waits for other readers
    of the value it replaces): the compute is left where the update may
    follow it."""
    t = verdict.consumer
    blocked = step.blocked(t, placed)
    if blocked is None:
        return verdict
    return Decision(verdict.producer, t, False, f"{blocked.name} must wait for other readers "
                    "of the value it replaces; joining here would split it from "
                    f"{t.name}", verdict.kind)


def _joins(step, t, stages, ids):
    """A Decision if compute `t` joins as an epilogue, update or light
    reduction of a stage it reads (in `stages`, ids `ids`), else None."""
    read = [p for p in step.inputs(t) if id(p) in ids]
    if not read:
        return None
    src = read[-1]
    kind = step.kind(t)
    if kind == "injective":
        if id(t) in step.updates:
            return Decision(src, t, True, f"update reads {src.name} elementwise: fused as an "
                            f"epilogue, {nbytes(src)} bytes of it stay in this kernel",
                            "update")
        return Decision(src, t, True, f"injective epilogue of {src.name}", "epilogue")
    if kind == "reduction-light" and t.shape != ():
        same = [p for p in stages if p.shape[:len(t.shape)] == t.shape]
        if same:
            return Decision(same[0], t, True, f"light reduction over the outer space "
                            f"{t.shape} of {same[0].name}", "reduction")
    return None


def _sibling(step, t, stages, footprint):
    """A Decision for the independent compute `t` sharing inputs with `stages`
    (which touch `footprint` bytes), or None when it shares too little."""
    mine = {id(p): s for s in stages for p in step.inputs(s)}
    shared = list({id(p): p for p in step.inputs(t) if id(p) in mine}.values())
    saved = sum(nbytes(p) for p in shared)
    if saved < SIBLING_MIN_SHARED_BYTES:
        return None
    stage = mine[id(shared[0])]
    names = ", ".join(p.name for p in shared)
    total = footprint + step.touched(t)
    if total > SIBLING_CACHE_BYTES:
        return Decision(stage, t, False, f"shares {names} ({saved} bytes), but the kernel "
                        f"would touch {total} bytes > {SIBLING_CACHE_BYTES}: the shared input "
                        "would come from memory again", "sibling")
    return Decision(stage, t, True, f"shares {names}: {saved} bytes read from cache instead "
                    f"of memory (kernel touches {total} <= {SIBLING_CACHE_BYTES} bytes); "
                    "each stage keeps its own parallel loops", "sibling")


def sink_updates(order, step):
    """`order` with each compute that only feeds updates (`step.feeds`)
    moved to just before its first reader, when that reader is injective
    and no compute in between must run after it.

    >>> [t.name for t in sink_updates([g, x, m], step)]   # doctest: +SKIP
    ['x', 'g', 'm']
    """
    order = list(order)
    for t in reversed(list(order)):
        rs = step.readers.get(id(t), [])
        if id(t) not in step.feeds or not rs:
            continue
        where = {id(u): n for n, u in enumerate(order)}
        pos, first = where[id(t)], min(where[id(r)] for r in rs)
        if first == pos + 1 or step.kind(order[first]) != "injective":
            continue
        if any(any(p is t for p in step.after[id(u)]) for u in order[pos + 1:first]):
            continue
        order.insert(first - 1, order.pop(pos))
    return order
