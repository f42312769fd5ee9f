"""Running graphs that contain scans (nf.build, and nf.Trainer's scan
backend): each scan's step compiled once (its fused kernels under their
schedules, t an int64 0-d input read where the step used the index
variable; an input read only at row t + c passed as that row), the rest of the graph cut at the scan
results into native segments, and a driver that runs the segments in
order and each scan's step for t in range(length) over the state buffers.

The loop over t is C (`LOOP_SOURCE`, compiled once): per t it points the
step's prev arguments into the states buffer (row t-1; init at the start)
and its next-state outputs at row t -- the states are written in place, no
copy -- and calls the step's compiled entry. (A step that is not a plain
native function, e.g. under the reference backend, runs from a Python
loop.) The kernels and the code do not grow with length. A segment reads
what an earlier segment handed on (scan results, scan inputs) instead of
computing it again; other intermediates two segments share are computed
in each. A step also writes, at row t, the step tensors the gradient keeps
(te.scan.keep) that something reads.

Segment results, states and kept rows are buffers held across runs. The
Trainer's program (`ScanFunction.replay`) records the native calls of its
first run and replays them as one call of `nf_scan_program` afterwards.

Hands on: a `ScanFunction`, called like a BuiltFunction.
"""
import ctypes
import threading

import numpy as np

from ..errors import InputError
from ..te import dtype as dt
from ..te.feed import as_input_array
from ..te.random import fresh_seed, random_states, state_feed
from ..te.scan import clone, is_scan
from ..te.tensor import placeholder
from ..te.visit import topo_tensors
from .function import BuiltFunction, address

LOOP_SOURCE = r"""
#include <stdint.h>
typedef int64_t (*nf_entry_fn)(void* const*, int64_t*);
/* slots: for k < count, prev slot then next slot; for r < rows, row slot;
   base/bytes: states then rows; offset: per row, the constant added to t. */
int64_t nf_scan_loop(void* entry, void** args, int64_t length, int64_t reverse, int64_t* tix,
                     int64_t count, int64_t rows, const int64_t* slot, char* const* init,
                     char* const* base, const int64_t* bytes, const int64_t* offset,
                     int64_t* err) {
    nf_entry_fn f = (nf_entry_fn)entry;
    for (int64_t it = 0; it < length; ++it) {
        int64_t t = reverse ? length - 1 - it : it;
        *tix = t;
        for (int64_t k = 0; k < count; ++k) {
            args[slot[2 * k]] = it == 0 ? init[k]
                : base[k] + (reverse ? t + 1 : t - 1) * bytes[k];
            args[slot[2 * k + 1]] = base[k] + t * bytes[k];
        }
        for (int64_t r = 0; r < rows; ++r)
            args[slot[2 * count + r]] = base[count + r] + (t + offset[r]) * bytes[count + r];
        if (f(args, err)) return err[0];
    }
    return 0;
}
/* one native call for a whole run: op kind 0 calls a compiled entry on its
   arguments, kind 1 is a scan loop; the index of a failing op in *failed. */
typedef struct {
    int64_t kind; void* entry; void** args; int64_t length, reverse; int64_t* tix;
    int64_t count, rows; const int64_t* slot; char* const* init; char* const* base;
    const int64_t* bytes; const int64_t* offset;
} nf_scan_op;
int64_t nf_scan_program(const nf_scan_op* ops, int64_t n, int64_t* err, int64_t* failed) {
    for (int64_t i = 0; i < n; ++i) {
        const nf_scan_op* o = ops + i;
        int64_t code = o->kind == 0 ? ((nf_entry_fn)o->entry)(o->args, err)
            : nf_scan_loop(o->entry, o->args, o->length, o->reverse, o->tix, o->count, o->rows,
                           o->slot, o->init, o->base, o->bytes, o->offset, err);
        if (code) { *failed = i; return code; }
    }
    return 0;
}
"""
_loop = []


class _Op(ctypes.Structure):
    """One native call of a run (`nf_scan_op`): kind 0 an entry, 1 a scan loop."""
    _fields_ = [("kind", ctypes.c_int64), ("entry", ctypes.c_void_p), ("args", ctypes.c_void_p),
                ("length", ctypes.c_int64), ("reverse", ctypes.c_int64),
                ("tix", ctypes.c_void_p), ("count", ctypes.c_int64), ("rows", ctypes.c_int64)] + \
        [(f, ctypes.c_void_p) for f in ("slot", "init", "base", "bytes", "offset")]


def _program():
    """nf_scan_program (compiled on first use, then from the build cache)."""
    if not _loop:
        from ..toolchain import compile_c
        lib = compile_c(LOOP_SOURCE)
        _loop.append((lib, lib.get("nf_scan_program", [ctypes.c_void_p, ctypes.c_int64] +
                                   [ctypes.c_void_p] * 2, ctypes.c_int64)))
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
        self._needed = {id(t) for t in order}
        groups = []
        for t in order:
            if is_scan(t) and all(t.op.group is not g for g in groups):
                groups.append(t.op.group)
        self._stand = {}   # id(scan result or segment output) -> placeholder standing for it
        self._buffers, self._lock = {}, threading.Lock()
        self._err, self._failed = (ctypes.c_int64 * 2)(), ctypes.c_int64()
        self._recording = self._recorded = None   # the native calls of a run, for replay
        # random state leaves: plain int64 inputs of the segments, drawn here per call
        # (a runtime that holds them, e.g. the Trainer, passes them as inputs)
        given = {id(t) for t in self.inputs}
        self._randoms = [t for t in random_states(order) if id(t) not in given]
        self._seed, self._calls = fresh_seed(), 0
        for t in random_states(order):
            self._stand[id(t)] = (placeholder(t.shape, t.dtype, name=t.name), False)
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
        for t in wanted:          # later segments read these instead of recomputing them
            if t.is_compute and id(t) not in self._stand:
                self._stand[id(t)] = (placeholder(t.shape, t.dtype, name=t.name), False)
        return fn, leaves, list(zip(wanted, cut))

    def _step(self, g, build):
        """The step compiled alone: its leaves are t (int64, 0-d), the prevs,
        then the externals -- an external read only at row t + c (c constant,
        always in range) as that row, every other one whole."""
        tix = placeholder((), dt.INDEX, name=f"{g.name}_t")
        stand, rows = {}, {}
        for e in g.externals:
            c = _row_offset(g, e)
            if c is None:
                stand[id(e)] = (placeholder(e.shape, e.dtype, name=e.name), False)
            else:
                rows[id(e)] = c
                stand[id(e)] = (placeholder(e.shape[1:], e.dtype, name=f"{e.name}_row"), "row")
        prevs = [placeholder(p.shape, p.dtype, name=p.name) for p in g.prevs]
        stand_all = dict(stand)
        stand_all.update({id(p): (q, False) for p, q in zip(g.prevs, prevs)})
        K = len(g.prevs)
        kept = [(x, r) for x, r in zip(g.saved, g.results[K:]) if id(r) in self._needed]
        outs = clone(list(g.nexts) + [x for x, _ in kept], stand_all, {id(g.t): tix[()]})
        leaves = [tix] + prevs + [s for s, _ in stand.values()]
        fn = build(list(outs), leaves)
        return fn, leaves, rows, [r for _, r in kept]

    def __call__(self, *args, seed=None):
        values = self._run(args, seed)
        outs = [np.array(values[id(t)], copy=True) for t in self.outputs]
        return outs[0] if self._single else tuple(outs)

    def _run(self, args, seed=None):
        """{id(tensor): array} after one run: the outputs' arrays may be buffers
        the next run writes again (copy them out before)."""
        with self._lock:
            return self._run_locked(args, seed)

    def replay(self, args):
        """`_run(args)` as ONE native call: the first run records its native
        calls (every address is the same run to run: held buffers and, as the
        Trainer passes, the same input arrays); later runs with the same
        arrays replay them. Anything else (fresh input arrays, random states
        drawn here, a Python step loop, an input converted) runs `_run`."""
        with self._lock:
            rec = self._recorded
            if rec is not None and all(a is b for a, b in zip(args, rec[0])):
                ops, calls, values = rec[1:]
                if _program()(ops, len(calls), self._err, ctypes.byref(self._failed)):
                    fn, _, arrays, _ = calls[self._failed.value]
                    fn._raise(self._err[0], self._err[1], arrays)
                return values
            self._recording = [] if not self._randoms else None
            try:
                values = self._run_locked(args, None)
            finally:
                calls, self._recording = self._recording, None
            if calls is not None:
                self._recorded = (list(args), (_Op * max(1, len(calls)))(*[c[1] for c in calls]),
                                  calls, values)
            return values

    def _array(self, t, a):
        """as_input_array; a run that converts (copies) an array is not replayed."""
        out = as_input_array(t, a)
        if out is not a and self._recording is not None:
            self._recording = None
        return out

    def _native(self, fn, op, keep, arrays):
        """Run native call `op` (an _Op; `keep` holds what it points into) of
        compiled `fn` now; recorded while recording."""
        if _program()(ctypes.byref(op), 1, self._err, ctypes.byref(self._failed)):
            fn._raise(self._err[0], self._err[1], arrays)
        if self._recording is not None:
            self._recording.append((fn, op, arrays, keep))

    def _run_locked(self, args, seed):
        if len(args) != len(self.inputs):
            names = ", ".join(f"'{t.name}'" for t in self.inputs)
            raise InputError(f"expected {len(self.inputs)} input(s) ({names}), got {len(args)}")
        values = {id(t): self._array(t, a) for t, a in zip(self.inputs, args)}
        if self._randoms:          # as BuiltFunction: afresh per call, or from `seed=`
            self._calls += seed is None
            values.update(state_feed(self._randoms, self._seed if seed is None else seed,
                                     self._calls if seed is None else 0))
        for t in random_states(self._randoms + [t for t in self.inputs]):
            values[id(self._stand[id(t)][0])] = values[id(t)]
        for kind, g, segment, step in self._plan:
            self._run_segment(segment, values)
            self._run_scan(g, step, values)
        self._run_segment(self._final, values)
        return values

    def _held(self, key, shape, dtype):
        """The buffer `key` names, made on first use and written again by every
        run (no fresh pages per run)."""
        buf = self._buffers.get(key)
        if buf is None:
            buf = self._buffers[key] = np.empty(shape, dtype)
        return buf

    def _run_segment(self, segment, values):
        fn, leaves, pairs = segment
        computed = [c for _, c in pairs if c.is_compute]
        if fn is None:
            got = {}
        elif isinstance(fn, BuiltFunction) and fn._plain and not fn._randoms:
            arrays = [self._array(t, values[id(t)]) for t in leaves]
            res = [self._held((id(fn), n), shape, dtype)
                   for n, (shape, dtype) in enumerate(fn._results)]
            pointers = fn._pointer_array(*map(address, arrays), *map(address, res))
            op = _Op(kind=0, entry=ctypes.cast(fn._entry, ctypes.c_void_p).value,
                     args=ctypes.addressof(pointers))
            self._native(fn, op, pointers, {t.name: a for t, a in zip(leaves, arrays)})
            got = {id(c): r for c, r in zip(computed, res)}
        else:
            self._recording = None
            res = fn(*[values[id(t)] for t in leaves])
            got = {id(c): r for c, r in zip(computed, res)}
        for orig, c in pairs:
            values[id(orig)] = got[id(c)] if id(c) in got else values[id(c)]
            if id(orig) in self._stand:
                self._stand_value(orig, values[id(orig)], values)

    def _run_scan(self, g, step, values):
        fn, leaves, rows, kept = step
        count = len(g.prevs)
        states = [self._held(id(r), r.shape, dt.to_numpy(r.dtype))
                  for r in g.results[:count] + tuple(kept)]
        inits = [self._array(p, values[id(s)]) for p, s in zip(g.prevs, g.inits)]
        ext = [self._array(e, values[id(e)]) for e in g.externals]
        if isinstance(fn, BuiltFunction) and fn._plain:
            self._native_loop(g, fn, leaves, rows, inits, ext, states)
        else:
            self._recording = None
            self._python_loop(g, fn, rows, inits, ext, states)
        for r, buf in zip(g.results[:count] + tuple(kept), states):
            values[id(r)] = buf
            self._stand_value(r, buf, values)

    def _native_loop(self, g, fn, leaves, rows, inits, ext, states):
        """`states`: the states, then the kept step tensors (written at row t
        like the states, never read back)."""
        count = len(g.prevs)
        tix = np.zeros((), np.int64)
        first = 1 + count                      # slot of the first external
        whole = [(n, a) for n, (e, a) in enumerate(zip(g.externals, ext)) if id(e) not in rows]
        row = [(first + n, a, rows[id(e)]) for n, (e, a) in enumerate(zip(g.externals, ext))
               if id(e) in rows]
        row += [(len(leaves) + count + n, b, 0) for n, b in enumerate(states[count:])]
        args = (ctypes.c_void_p * (len(leaves) + len(states)))()
        args[0] = address(tix)
        for n, a in whole:
            args[first + n] = address(a)
        slots = [s for k in range(count) for s in (1 + k, len(leaves) + k)] + \
            [slot for slot, _, _ in row]
        base = [address(b) for b in states[:count]] + [address(a) for _, a, _ in row]
        nbytes = [b.itemsize * b[0].size for b in states[:count]] + \
            [a.itemsize * a[0].size for _, a, _ in row]
        words = lambda xs: (ctypes.c_int64 * max(1, len(xs)))(*xs)  # noqa: E731
        keep = [args, tix, words(slots), words([address(a) for a in inits]), words(base),
                words(nbytes), words([c for _, _, c in row])]
        op = _Op(1, ctypes.cast(fn._entry, ctypes.c_void_p).value, ctypes.addressof(args),
                 g.length, int(g.reverse), address(tix), count, len(row),
                 *[ctypes.addressof(w) for w in keep[2:]])
        self._native(fn, op, keep, None)

    def _python_loop(self, g, fn, rows, inits, ext, states):
        state = inits
        steps = range(g.length - 1, -1, -1) if g.reverse else range(g.length)
        tix = np.zeros((), np.int64)
        for t in steps:
            tix[()] = t
            fed = [a[t + rows[id(e)]] if id(e) in rows else a for e, a in zip(g.externals, ext)]
            out = list(fn(tix, *state, *fed))
            state = out[:len(g.prevs)]
            for buf, v in zip(states, out):
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

    def program(self, kernels, views, apart=()):
        """A callable running the training step over `views` (`kernels` and
        `apart` unused: the scans' steps and the segments around them are
        compiled instead)."""
        outs = self.graph.outputs
        leaves = [t for t in topo_tensors(outs) if not t.is_compute and not is_scan(t)]
        fn = self.scan_function = self.function(outs, leaves)   # (bench/scan.py --profile)
        sources = [views[id(t)] for t in leaves]
        targets = [(views[id(t)], id(t)) for t in outs]
        run_all = fn.replay if isinstance(fn, ScanFunction) else None

        def run():
            if run_all is None:
                for (target, _), value in zip(targets, fn(*sources)):
                    np.copyto(target, value)
                return
            values = run_all(sources)
            for target, key in targets:
                np.copyto(target, values[key])
        return run

    def function(self, outputs, inputs):
        """A callable(*arrays) -> tuple of arrays computing `outputs` (scans or not)."""
        outputs = list(outputs)
        if any(is_scan(t) for t in topo_tensors(outputs)):
            return ScanFunction(outputs, False, list(inputs), self.inner.function)
        return self.inner.function(outputs, list(inputs))


def _row_offset(g, e):
    """c when every read of `e` in the step body has first index t + c (c a
    constant with rows t + c in range for every t), else None."""
    from ..te.expr import Binary, Const
    from ..te.visit import reads
    if e.ndim == 0:
        return None
    found = set()
    for x in g.body:
        for r in reads(x.op.body):
            if r.tensor is not e:
                continue
            i = r.indices[0]
            if i is g.t:
                found.add(0)
            elif isinstance(i, Binary) and i.a is g.t and isinstance(i.b, Const) and \
                    i.op in ("add", "sub"):
                found.add(i.b.value if i.op == "add" else -i.b.value)
            else:
                return None
    if len(found) != 1:
        return None
    (c,) = found
    return c if 0 <= c and g.length - 1 + c < e.shape[0] else None
