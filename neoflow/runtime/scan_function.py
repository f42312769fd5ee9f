"""Running graphs that contain scans (nf.build, and nf.Trainer's scan backend): each scan's step compiled once
(its fused kernels under their schedules, t an int64 0-d input read where
the step used the index variable), the rest of the graph cut at the scan
results into native segments, and a driver that runs the segments in
order and each scan's step for t in range(length) over the state buffers.

The loop over t is C (`LOOP_SOURCE`, compiled once): per t it points the
step's prev arguments into the states buffer (row t-1; init at the start)
and its next-state outputs at row t -- the states are written in place, no
copy -- and calls the step's compiled entry. (A step that is not a plain
native function, e.g. under the reference backend, runs from a Python
loop.) The kernels and the code do not grow with length. Intermediates
that two segments share are computed in each.

Hands on: a `ScanFunction`, called like a BuiltFunction.
"""
import ctypes

import numpy as np

from ..errors import InputError
from ..te import dtype as dt
from ..te.feed import as_input_array
from ..te.scan import clone, is_scan
from ..te.tensor import placeholder
from ..te.visit import topo_tensors
from .function import BuiltFunction, address

LOOP_SOURCE = r"""
#include <stdint.h>
typedef int64_t (*nf_entry_fn)(void* const*, int64_t*);
int64_t nf_scan_loop(void* entry, void** args, int64_t length, int64_t reverse, int64_t* tix,
                     int64_t count, const int64_t* prev_slot, const int64_t* next_slot,
                     char* const* init, char* const* states, const int64_t* bytes,
                     int64_t* err) {
    nf_entry_fn f = (nf_entry_fn)entry;
    for (int64_t it = 0; it < length; ++it) {
        int64_t t = reverse ? length - 1 - it : it;
        *tix = t;
        for (int64_t k = 0; k < count; ++k) {
            args[prev_slot[k]] = it == 0 ? init[k]
                : states[k] + (reverse ? t + 1 : t - 1) * bytes[k];
            args[next_slot[k]] = states[k] + t * bytes[k];
        }
        if (f(args, err)) return err[0];
    }
    return 0;
}
"""
_loop = []


def _scan_loop():
    """The C loop over t (compiled on first use, then from the build cache)."""
    if not _loop:
        from ..toolchain import compile_c
        lib = compile_c(LOOP_SOURCE)
        fn = lib.get("nf_scan_loop", [ctypes.c_void_p] * 2 + [ctypes.c_int64] * 2 +
                     [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 6, ctypes.c_int64)
        _loop.append((lib, fn))
    return _loop[0][1]


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
        inits = [values[id(s)] for s in g.inits]
        if isinstance(fn, BuiltFunction) and fn._plain:
            self._native_loop(g, fn, leaves, feed, inits, states)
        else:
            self._python_loop(g, fn, leaves, prev_ids, feed, inits, states)
        for r, buf in zip(g.results, states):
            values[id(r)] = buf
            self._stand_value(r, buf, values)

    def _native_loop(self, g, fn, leaves, feed, inits, states):
        count = len(g.prevs)
        tix = np.zeros((), np.int64)
        keep = [as_input_array(x, feed[id(x)]) for x in leaves[1 + count:]]
        inits = [as_input_array(p, v) for p, v in zip(g.prevs, inits)]
        args = (ctypes.c_void_p * (len(leaves) + count))(
            address(tix), *([0] * count), *map(address, keep))
        words = lambda xs: (ctypes.c_int64 * count)(*xs)  # noqa: E731
        err = (ctypes.c_int64 * 2)()
        entry = ctypes.cast(fn._entry, ctypes.c_void_p).value
        code = _scan_loop()(
            entry, args, g.length, int(g.reverse), address(tix), count,
            words(range(1, 1 + count)), words(range(len(leaves), len(leaves) + count)),
            words(map(address, inits)), words(map(address, states)),
            words(b.itemsize * b[0].size for b in states), err)
        if code:
            fn._raise(err[0], err[1])

    def _python_loop(self, g, fn, leaves, prev_ids, feed, inits, states):
        state = inits
        steps = range(g.length - 1, -1, -1) if g.reverse else range(g.length)
        tix = np.zeros((), np.int64)
        for t in steps:
            tix[()] = t
            feed.update(zip(prev_ids, state))
            state = list(fn(tix, *[feed[id(x)] for x in leaves[1:]]))
            for buf, v in zip(states, state):
                buf[t] = v

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
