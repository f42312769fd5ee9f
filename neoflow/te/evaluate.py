"""The reference interpreter: evaluates a tensor DAG with NumPy, vectorised
over index grids. It is the oracle every later stage is tested against.

Each compute is evaluated over the grid of its output indices; a reduction
appends its axes to the grid and reduces them away. Reads clip their indices
and remember where they were out of range: a `where` may discard such a
value (padding), but an out-of-range value that reaches an output raises
OutOfBoundsError. Large grids are evaluated in slices of the first axis.

Hands on: NumPy arrays.
"""
import math

import numpy as np

from ..errors import ExpressionError, OutOfBoundsError
from . import dtype as dt
from .expr import Binary, Cast, Const, IterVar, Read, Reduce, Select, Unary
from .feed import resolve_feed
from .random import Random, fresh_seed, is_random_state, random_states, state_feed, uniform
from .scan import ScanStateOp, is_scan
from .tensor import Tensor
from .visit import post_order, topo_tensors

GRID_LIMIT = 1 << 23  # elements of one evaluation grid before slicing


def evaluate(outputs, feed, seed=None):
    """Evaluate `outputs` exactly with NumPy; returns arrays shaped as `nf.build`'s.

    Random tensors (nf.random_uniform) draw from `seed` (counter 0) -- the
    same numbers as a built function called with `seed=` -- or, without
    one, afresh.

    >>> A = nf.placeholder((2, 3), name="A")
    >>> B = nf.compute((3, 2), lambda i, j: A[j, i] * 2)
    >>> nf.evaluate(B, {A: np.ones((2, 3), np.float32)}).shape
    (3, 2)
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    for t in outs:
        if not isinstance(t, Tensor):
            raise ExpressionError(f"nf.evaluate: outputs must be Tensors, got {t!r}")
    order = topo_tensors(outs)
    for t in order:
        if isinstance(t.op, ScanStateOp):
            raise ExpressionError(f"nf.evaluate: '{t.name}' is the previous state of scan "
                                  f"'{t.op.group.name}', read outside its step")
    states = random_states(order)
    given = {id(k) for k in (feed or {}) if isinstance(k, Tensor)}   # a runtime's own state
    values = resolve_feed(feed, [t for t in order if not t.is_compute
                                 and not is_scan(t)
                                 and (not is_random_state(t) or id(t) in given)])
    drawn = state_feed(states, fresh_seed() if seed is None else seed, 0)
    values.update({k: v for k, v in drawn.items() if k not in values})
    with np.errstate(all="ignore"):
        for t in order:
            if t.is_compute:
                values[id(t)] = _Compute(t, values).run()
            elif is_scan(t) and id(t) not in values:
                _scan(t.op.group, values)
    results = tuple(np.array(values[id(t)], copy=True) for t in outs)
    return results[0] if single else results


def _volume(e):
    """Largest product of nested reduce extents in `e` (work per output element)."""
    best = 1
    for node in post_order(e):
        if isinstance(node, Reduce):
            inner = math.prod(a.extent for a in node.axes) * _volume(node.body)
            best = max(best, inner)
    return best


def _or(a, b):
    if a is None:
        return b
    return a if b is None else (a | b)


def _scan(group, values):
    """Run a scan's step for t in order, each state read from the one before."""
    outs = [np.empty(r.shape, dt.to_numpy(r.dtype)) for r in group.results]
    state = [values[id(s)] for s in group.inits]
    steps = range(group.length - 1, -1, -1) if group.reverse else range(group.length)
    for t in steps:
        local = dict(values)
        local.update({id(p): v for p, v in zip(group.prevs, state)})
        bound = {id(group.t): np.asarray(t, np.int64)}
        for x in group.body:
            local[id(x)] = _Compute(x, local, bound).run()
        state = [local[id(n)] for n in group.nexts]
        for o, v in zip(outs, state + [local[id(x)] for x in group.saved]):
            o[t] = v
    for r, o in zip(group.results, outs):
        values[id(r)] = o


class _Compute:
    def __init__(self, tensor, values, bound=None):
        self.t, self.values = tensor, values
        self.bound = bound or {}
        self.faults = []

    def run(self):
        t = self.t
        out = np.empty(t.shape, dt.to_numpy(t.dtype))
        axes = t.op.axes
        env = {id(a): np.arange(a.extent).reshape((1,) * d + (a.extent,))
               for d, a in enumerate(axes)}
        env.update(self.bound)
        if not axes:
            out[...] = self._finish(self.ev(t.op.body, _Frame(env, 0)), ())
            return out
        per_row = math.prod(t.shape[1:]) * _volume(t.op.body)
        rows = max(1, GRID_LIMIT // max(per_row, 1))
        for start in range(0, t.shape[0], rows):
            stop = min(start + rows, t.shape[0])
            env[id(axes[0])] = np.arange(start, stop)
            frame = _Frame(env, len(axes))
            out[start:stop] = self._finish(self.ev(t.op.body, frame), (stop - start,) + t.shape[1:])
        return out

    def _finish(self, result, shape):
        value, bad = result
        if bad is not None and np.any(bad):
            raise OutOfBoundsError(self.faults[0] if self.faults else
                                   f"compute '{self.t.name}' reads out of range")
        return np.broadcast_to(value, shape)

    # -- expressions ------------------------------------------------------
    def ev(self, e, f):
        hit = f.memo.get(id(e))
        if hit is None:
            hit = f.memo[id(e)] = self._ev(e, f)
        return hit

    def _ev(self, e, f):
        if isinstance(e, Const):
            return np.asarray(e.value, dt.to_numpy(e.dtype)), None
        if isinstance(e, IterVar):
            a = f.env[id(e)]
            return a.reshape(a.shape + (1,) * (f.depth - a.ndim)), None
        if isinstance(e, Read):
            return self._read(e, f)
        if isinstance(e, Binary):
            (a, ba), (b, bb) = self.ev(e.a, f), self.ev(e.b, f)
            return _binary(e.op, a, b, e.dtype), _or(ba, bb)
        if isinstance(e, Unary):
            a, ba = self.ev(e.a, f)
            return _unary(e.op, a), ba
        if isinstance(e, Cast):
            a, ba = self.ev(e.a, f)
            return a.astype(dt.to_numpy(e.dtype)), ba
        if isinstance(e, Select):
            (c, bc), (a, ba), (b, bb) = self.ev(e.cond, f), self.ev(e.t, f), self.ev(e.f, f)
            bad = _or(bc, None if ba is None and bb is None else
                      np.where(c, ba if ba is not None else False, bb if bb is not None else False))
            return np.where(c, a, b).astype(dt.to_numpy(e.dtype)), bad
        if isinstance(e, Reduce):
            return self._reduce(e, f)
        if isinstance(e, Random):
            args = [self.ev(c, f) for c in e.args]
            bad = None
            for _, b in args:
                bad = _or(bad, b)
            return uniform(e.dtype, *(a for a, _ in args)), bad
        raise TypeError(f"cannot evaluate {type(e).__name__}")

    def _read(self, e, f):
        idx, bad = [], None
        for d, ie in enumerate(e.indices):
            v, b = self.ev(ie, f)
            bad = _or(bad, b)
            v = v.astype(np.int64)
            n = e.tensor.shape[d]
            oob = (v < 0) | (v >= n)
            if np.any(oob):
                sample = int(v[oob].flat[0]) if v.ndim else int(v)
                self.faults.append(
                    f"compute '{self.t.name}' reads tensor '{e.tensor.name}' at index {sample} "
                    f"in dimension {d}, outside its size {n}")
                bad = _or(bad, oob)
                v = np.clip(v, 0, n - 1)
            idx.append(v)
        arr = self.values[id(e.tensor)]
        return np.asarray(arr[tuple(idx)]), bad

    def _reduce(self, e, f):
        depth = f.depth + len(e.axes)
        env = dict(f.env)
        for j, a in enumerate(e.axes):
            env[id(a)] = np.arange(a.lo, a.hi).reshape((1,) * (f.depth + j) + (a.extent,))
        inner = _Frame(env, depth)
        value, bad = self.ev(e.body, inner)
        grid = (1,) * f.depth + tuple(a.extent for a in e.axes)
        shape = np.broadcast_shapes(value.shape if value.ndim else (1,) * depth, grid)
        value = np.broadcast_to(value, shape)
        identity = _identity(e.op, value.dtype)
        if e.cond is not None:
            cond, bad_cond = self.ev(e.cond, inner)
            value = np.where(cond, value, identity)
            shape = value.shape  # the condition may span grid axes the body does not
            bad = _or(bad_cond, None if bad is None else (bad & cond))
        red_axes = tuple(range(f.depth, depth))
        fn = {"sum": np.sum, "max": np.max, "min": np.min}[e.op]
        kw = {"dtype": value.dtype} if e.op == "sum" else {"initial": identity}
        out = fn(value, axis=red_axes, **kw)
        if bad is not None:
            bad = np.any(np.broadcast_to(bad, shape), axis=red_axes)
        return np.asarray(out), bad


class _Frame:
    """Index arrays of the bound variables at one grid depth, plus a memo."""

    def __init__(self, env, depth):
        self.env, self.depth, self.memo = env, depth, {}


def _identity(op, dtype):
    if op == "sum":
        return dtype.type(0)
    if np.issubdtype(dtype, np.floating):
        return dtype.type(-np.inf if op == "max" else np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min if op == "max" else info.max)


_erf = np.frompyfunc(math.erf, 1, 1)


def _unary(op, a):
    if op == "neg":
        return np.negative(a)
    if op == "not":
        return np.logical_not(a)
    if op == "abs":
        return np.abs(a)
    one = a.dtype.type(1)
    if op == "sigmoid":
        return one / (one + np.exp(-a))
    if op == "rsqrt":
        return one / np.sqrt(a)
    if op == "erf":
        return np.asarray(_erf(a), dtype=a.dtype)
    if op == "sign":   # torch: sign(NaN) = 0, sign(-0.0) = 0
        return (a > 0).astype(a.dtype) - (a < 0).astype(a.dtype)
    return _NUMPY_UNARY[op](a)


_NUMPY_UNARY = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt,
                "floor": np.floor, "ceil": np.ceil, "round": np.rint,   # rint: half to even
                "log1p": np.log1p, "expm1": np.expm1, "sin": np.sin, "cos": np.cos}


def _binary(op, a, b, out_dtype):
    if op == "add":
        r = a + b
    elif op == "sub":
        r = a - b
    elif op == "mul":
        r = a * b
    elif op == "div":
        r = a / b
    elif op == "floordiv":
        r = np.floor_divide(a, b) if np.issubdtype(a.dtype, np.integer) else np.floor(a / b)
    elif op == "mod":
        r = np.mod(a, b) if np.issubdtype(a.dtype, np.integer) else a - np.floor(a / b) * b
    elif op == "pow":
        r = np.power(a, b)
    elif op == "max":
        r = np.maximum(a, b)
    elif op == "min":
        r = np.minimum(a, b)
    else:
        r = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
             "eq": np.equal, "ne": np.not_equal, "and": np.logical_and,
             "or": np.logical_or}[op](a, b)
    return np.asarray(r).astype(dt.to_numpy(out_dtype), copy=False)
