"""Running graphs that contain scans (nf.build, and nf.Trainer's scan backend): each scan's step compiled once
(its fused kernels under their schedules, t an int64 0-d input read where
the step used the index variable), the rest of the graph cut at the scan
results into native segments, and a driver that runs the segments in
order and each scan's step for t in range(length) over the state buffers.

The loop over t runs in Python around one native call of the step per t
(not yet a C loop in the generated entry); the kernels and the code do not
grow with length. Intermediates that two segments share are computed in
each.

Hands on: a `ScanFunction`, called like a BuiltFunction.
"""
import numpy as np

from ..errors import InputError
from ..te import dtype as dt
from ..te.feed import as_input_array
from ..te.scan import clone, is_scan
from ..te.tensor import placeholder
from ..te.visit import topo_tensors


def build_with_scans(outs, single, inputs, build):
    """A ScanFunction for `outs` (some read a scan) of `inputs`; `build(outs,
    inputs)` compiles a graph without scans (nf.build, or an execution
    backend's `function`), called for every segment and step.

    >>> f = nf.build(hs, [x, h0]); f(xv, h0v).shape        # doctest: +SKIP
    """
    return ScanFunction(outs, single, inputs, build)


class ScanFunction:
    """The driver of segments and scan steps (see the module comment).

    `kernel_count` and `source_size` sum over every native segment and step.
    """

    def __init__(self, outs, single, inputs, build):
        self.outputs, self._single, self.inputs = list(outs), single, list(inputs)
        order = topo_tensors(self.outputs)
        groups = []
        for t in order:
            if is_scan(t) and all(t.op.group is not g for g in groups):
                groups.append(t.op.group)
        self._stand = {}          # id(scan result) -> placeholder standing for it
        self._plan = []
        for g in groups:
            needed = self._segment([x for x in g.inputs], build)
            self._plan.append(("scan", g, needed, self._step(g, build)))
            for r in g.results:
                self._stand[id(r)] = (placeholder(r.shape, r.dtype, name=r.name), False)
        self._final = self._segment(self.outputs, build)
        self.functions = [p[2][0] for p in self._plan if p[2][0] is not None] + \
            [p[3][0] for p in self._plan] + ([self._final[0]] if self._final[0] else [])

    @property
    def kernel_count(self):
        return sum(len(f.kernels) for f in self.functions)

    @property
    def source_size(self):
        return sum(len(f.source) for f in self.functions)

    def _segment(self, wanted, build):
        """(function or None, its leaves, wanted) computing `wanted` from leaves
        and the results of the scans run before."""
        cut = clone(wanted, self._stand, {})
        computed = [c for c in cut if c.is_compute]
        leaves = [t for t in topo_tensors(computed) if not t.is_compute]
        fn = build(computed, leaves) if computed else None
        return fn, leaves, list(zip(wanted, cut))

    def _step(self, g, build):
        tix = placeholder((), dt.INDEX, name=f"{g.name}_t")
        stand = {id(e): (placeholder(e.shape, e.dtype, name=e.name), False)
                 for e in g.externals}
        nexts = clone(g.nexts, stand, {id(g.t): tix[()]})
        leaves = [tix] + list(g.prevs) + [s for s, _ in stand.values()]
        fn = build(list(nexts), leaves)
        return fn, leaves, [id(p) for p in g.prevs], list(zip(g.externals, stand.values()))

    def __call__(self, *args):
        if len(args) != len(self.inputs):
            names = ", ".join(f"'{t.name}'" for t in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({names}), got {len(args)}")
        values = {id(t): as_input_array(t, a) for t, a in zip(self.inputs, args)}
        for kind, g, segment, step in self._plan:
            self._run_segment(segment, values)
            self._run_scan(g, step, values)
        self._run_segment(self._final, values)
        outs = [np.array(values[id(t)], copy=True) for t in self.outputs]
        return outs[0] if self._single else tuple(outs)

    def _run_segment(self, segment, values):
        fn, leaves, pairs = segment
        computed = [c for _, c in pairs if c.is_compute]
        if fn is not None:
            res = fn(*[values[id(t)] for t in leaves])
            got = {id(c): r for c, r in zip(computed, res)}
        else:
            got = {}
        for orig, c in pairs:
            values[id(orig)] = got[id(c)] if id(c) in got else values[id(c)]

    def _run_scan(self, g, step, values):
        fn, leaves, prev_ids, externals = step
        states = [np.empty(r.shape, dt.to_numpy(r.dtype)) for r in g.results]
        feed = {id(s): values[id(e)] for e, (s, _) in externals}
        state = [values[id(s)] for s in g.inits]
        steps = range(g.length - 1, -1, -1) if g.reverse else range(g.length)
        tix = np.zeros((), np.int64)
        for t in steps:
            tix[()] = t
            feed.update(zip(prev_ids, state))
            out = fn(tix, *[feed[id(x)] for x in leaves[1:]])
            state = list(out)
            for buf, v in zip(states, state):
                buf[t] = v
        for r, buf in zip(g.results, states):
            values[id(r)] = buf
            self._stand_value(r, buf, values)

    def _stand_value(self, r, buf, values):
        values[id(self._stand[id(r)][0])] = buf


class ScanBackend:
    """The Trainer's execution backend for a training graph with scans: the
    whole step (loss and every updated value) as one ScanFunction over the
    leaves' buffers, its segments and steps compiled by `inner` (the native
    or the reference backend); the results are copied into their buffers.

    >>> backend = ScanBackend(graph, NativeBackend())      # doctest: +SKIP
    """

    def __init__(self, graph, inner):
        self.graph, self.inner = graph, inner
        self.name = f"scan+{inner.name}"

    def program(self, kernels, views):
        """A callable running the training step over `views` (`kernels` unused:
        the scans' steps and the segments around them are compiled instead)."""
        outs = self.graph.outputs
        leaves = [t for t in topo_tensors(outs) if not t.is_compute and not is_scan(t)]
        fn = self.function(outs, leaves)
        sources = [views[id(t)] for t in leaves]
        targets = [views[id(t)] for t in outs]

        def run():
            for target, value in zip(targets, fn(*sources)):
                np.copyto(target, value)
        return run

    def function(self, outputs, inputs):
        """A callable(*arrays) -> tuple of arrays computing `outputs` (scans or not)."""
        outputs = list(outputs)
        if any(is_scan(t) for t in topo_tensors(outputs)):
            return ScanFunction(outputs, False, list(inputs), self.inner.function)
        return self.inner.function(outputs, list(inputs))
