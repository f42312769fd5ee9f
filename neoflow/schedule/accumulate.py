"""schedule/accumulate: blocked float sums (accuracy of long accumulations).

A float sum accumulated in one long sequence loses accuracy like the number
of terms (an MSE over 32k float32 elements was 1.8e-6 off the float64
value; PyTorch's cascade sum is 3.7e-8). This pass rewrites a stage's loop
IR so that no accumulator receives more than about `BLOCK` sequential adds:
a reduce loop for accumulator `b` -- a loop whose variable is not in the
index of `b[i] = b[i] + v`, the only way its body touches `b` -- whose
iterations add more than `BLOCK` terms per element is cut into chunks of
`BLOCK` terms; each chunk sums into a fresh partial buffer P (zeroed before
the chunk, added into `b` after it), and a loop over more than `BLOCK`
chunks is cut again, so the partials form a cascade of
ceil(log_BLOCK(n)) levels. A vectorized reduction loop (`omp simd
reduction`) already keeps one partial per SIMD lane, and counts n / lanes
(`lanes()`: float32's in the compiler's own vectors, toolchain/target.py).

Partials: for a stack accumulator (a register tile, a scalar) P has its
shape and is combined element by element; only boundaries outside every
spatial loop of the tile are cut there (inside one, zeroing the whole tile
per iteration would cost more than the sum). For an accumulator in memory
(an output accumulated in place), P is one scalar, cut only where the
index of `b` is fixed. The order in which terms are visited is unchanged;
only how the running sums are grouped. Integer sums are exact and left alone.
A register tile whose every term is a product of two loads (a GEMM's or a
convolution's) runs `CONTRACTION_TILE_BLOCK` adds between partials rather
than `TILE_BLOCK`: BLAS sums contractions in long runs too, so the error stays
within torch's while each partial's pass over the tile costs a quarter.

Hands on: `blocked_sums(stmt)`, the statement rewritten (lower.py calls it
on every stage).
"""
import sys

from ..te import dtype as dt
from ..te.arith import interval
from ..te.expr import Binary, Const, IterVar
from ..toolchain.target import target
from .loop_ir import (Allocate, Buffer, CDiv, CopyTransposed, For, IfThenElse, Let, Load, Seq,
                      Store, Var, _e,
                      map_body, nodes)

# (adds into a scalar partial, then partials per level above) and the same
# for a tile of accumulators, where each partial costs a pass over the tile;
# a tile of contractions (sums of products of two loads: GEMM, convolution)
# takes 128 adds, as BLAS accumulates them in long runs too (matmul 512 at one
# thread: 12-20% faster than with 32, its float32 error 3.0e-7 of the largest
# output against torch.mm's 5.1e-7); plain sums keep 32, as torch's are pairwise
BLOCK, FAN = 16, 2
TILE_BLOCK, TILE_FAN = 32, 4
CONTRACTION_TILE_BLOCK = 128
VECTOR_CHUNK = 256   # the shortest chunk of a vectorized reduction loop (its combine costs)
_MANY = 1 << 40  # past this, a bound is as good as none
PARTIAL = "partial"   # the hint of the partial buffers this pass makes
DEPTH = 20000    # Python frames the walks may take: a 3-D convolution's gradient stage nests
                 # over 300 statements deep (loop partitioning), three frames a level


def lanes():
    """Partials a vectorized reduction loop keeps: float32 lanes of the
    compiler's own vectoriser on the target (8 with AVX2 and with AVX-512,
    whose loops it keeps 256 bits wide; 4 with SSE or NEON).

    >>> lanes() in (4, 8)
    True
    """
    return target().auto_lanes("float32")


def blocked_sums(stmt):
    """`stmt` with every long float sum accumulated through a cascade of partials.

    >>> blocked_sums(For(k, 0, 10**6, "vectorized", Store(s, 0, s[0] + x[k]), reduction=("sum", s)))
    ... # doctest: +SKIP   (chunks of 512 into a partial, 1954 chunks in chunks of 64, ...)
    """
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEPTH))
    try:
        summary = _Summary()
        summary.walk(stmt)
        if not summary.spatial:
            return stmt              # nothing accumulated (most stages): one walk, no rewrite
        return _Rewrite(summary).stmt(stmt, frozenset())
    finally:
        sys.setrecursionlimit(limit)


def _int(v):
    return Const(int(v), dt.INDEX)


def _accumulates(n):
    """Whether Store `n` is `b[i] = b[i] + v` into a float buffer of this stage."""
    v = n.value
    return (n.buffer.hint != PARTIAL and dt.is_float(n.buffer.dtype) and isinstance(v, Binary)
            and v.op == "add" and isinstance(v.a, Load) and v.a.buffer is n.buffer
            and _same(v.a.index, n.index))


class _Summary:
    """Per statement (by id): (buffers accumulated under it, buffers touched
    there in any other way); per accumulated buffer, the variables of its
    store indices (its spatial loops). One walk over the stage, bottom-up."""

    def __init__(self):
        self.table, self.spatial, self.buffers = {}, {}, {}
        self.contraction = {}       # per accumulated buffer: every term a product of loads

    def of(self, s):
        if id(s) not in self.table:
            self.walk(s)            # a statement this pass made
        return self.table[id(s)]

    def walk(self, s):
        acc, other = set(), set()
        if isinstance(s, Store):
            own = None
            if _accumulates(s):
                acc.add(id(s.buffer))
                self.buffers[id(s.buffer)] = s.buffer
                self.spatial.setdefault(id(s.buffer), set()).update(
                    id(n) for n in nodes(s.index) if isinstance(n, IterVar))
                self.contraction[id(s.buffer)] = (self.contraction.get(id(s.buffer), True)
                                                  and _product_of_loads(s.value.b))
                own = s.value.a
            else:
                other.add(id(s.buffer))
            other.update(_loaded(s.value, own), _loaded(s.index))
        elif isinstance(s, CopyTransposed):
            other.update((id(s.dst), id(s.src)))
        else:
            parts = {For: lambda: [s.body], Seq: lambda: s.stmts, Let: lambda: [s.body],
                     Allocate: lambda: [s.body],
                     IfThenElse: lambda: [x for x in (s.then, s.else_) if x is not None]}
            for x in parts[type(s)]():
                a, o = self.walk(x)
                acc |= a
                other |= o
            for e in {For: lambda: [s.begin, s.end], Let: lambda: [s.value],
                      IfThenElse: lambda: [s.cond]}.get(type(s), lambda: [])():
                other.update(_loaded(e))
        self.table[id(s)] = out = (frozenset(acc), frozenset(other))
        return out

    def reduce_loop(self, loop, b):
        return id(loop.var) not in self.spatial.get(id(b), ())


def _product_of_loads(e):
    return (isinstance(e, Binary) and e.op == "mul"
            and all(any(isinstance(n, Load) for n in nodes(x)) for x in (e.a, e.b)))


def _loaded(e, skip=None):
    return {id(n.buffer) for n in nodes(e) if isinstance(n, Load) and n is not skip}


def _same(a, b):
    return a is b or _e(a) == _e(b)


def _trips(loop, known):
    """An upper bound of `loop`'s trip count, or None when the analysis has none.

    A clipped window loop, `for (v = max(0, f(o)); v < min(16, g(o)); ...)`,
    is bounded by its bounds' outer sides (16 - 0) even where f and g read
    values the analysis cannot size (a Let of a divided index)."""
    if id(loop.var) in known:
        return known[id(loop.var)]
    if isinstance(loop.begin, Const) and isinstance(loop.end, Const):
        return max(0, loop.end.value - loop.begin.value)
    span = interval(Binary("sub", loop.end, loop.begin, dt.INDEX))
    if span is None:
        hi, lo = _side(loop.end, 1), _side(loop.begin, 0)
        span = None if hi is None or lo is None else (None, hi - lo)
    return None if span is None or span[1] > _MANY else max(0, span[1])


def _side(e, upper):
    """The upper (`upper` = 1) or lower (0) bound of integer `e`, or None: one
    known operand bounds a min from above and a max from below."""
    if isinstance(e, Binary) and e.op in ("min", "max"):
        a, b = _side(e.a, upper), _side(e.b, upper)
        if (e.op == "min") == bool(upper):     # the side either operand bounds
            known = [v for v in (a, b) if v is not None]
            return (min if upper else max)(known) if known else None
        return None if a is None or b is None else (max if upper else min)(a, b)
    span = interval(e)
    return None if span is None else span[upper]


class _Rewrite:
    def __init__(self, summary):
        self.summary = summary

    def stmt(self, s, done):
        """Rewrites the outermost reduce loops under `s` (accumulators in `done`
        are already handled by an enclosing reduce loop)."""
        if isinstance(s, For):
            acc, other = self.summary.of(s.body)
            for key in sorted(acc - other - done):
                b = self.summary.buffers[key]
                if self.summary.reduce_loop(s, b):
                    s = _Cascade(b, self.summary).loop(s)
                    done = done | {key}
        return map_body(s, lambda x: self.stmt(x, done))


class _Cascade:
    """The cascade for one accumulator `b` under its outermost reduce loop."""

    def __init__(self, b, summary):
        self.b, self.summary = b, summary
        self.known = {}     # id(loop var) -> trip count bound, for the loops made here

    def _reduce(self, loop):
        return self.summary.reduce_loop(loop, self.b)

    def count(self, s):
        """Sequential adds into one element of `b` that `s` makes (an upper bound)."""
        if isinstance(s, For):
            inner = self.count(s.body)
            if not self._reduce(s):
                return inner
            n = _trips(s, self.known)
            if n is None:     # bounds the analysis cannot size (a conv window): never cut,
                n = 1         # and the loops around it sized as if it were short
            return max(1, -(-n // lanes())) * inner if s.reduction else n * inner
        if isinstance(s, Seq):
            return sum(self.count(x) for x in s.stmts)
        if isinstance(s, IfThenElse):
            return max(self.count(s.then), 0 if s.else_ is None else self.count(s.else_))
        if isinstance(s, (Let, Allocate)):
            return self.count(s.body)
        if isinstance(s, Store):
            return 1 if s.buffer is self.b else 0
        return 0

    def body(self, s, cut):
        """`s` with its reduce loops cascaded; `cut`: boundaries may be placed."""
        if isinstance(s, For):
            if self._reduce(s):
                return self.loop(s, cut)
            inner_cut = cut and self.b.scope != "stack"
            return map_body(s, lambda x: self.body(x, inner_cut))
        return map_body(s, lambda x: self.body(x, cut))

    def loop(self, s, cut=True):
        """Reduce loop `s` cascaded (its body first)."""
        return self._level(s, self.body(s.body, cut), cut)

    def _level(self, s, body, cut, upper=False):
        """Loop `s` around `body`, cut so that no partial takes more than the
        block's (or, `upper`: a level of partials, the fan's) adds."""
        tile = self.b.scope == "stack" and self.b.size > 1
        block = CONTRACTION_TILE_BLOCK if self.summary.contraction[id(self.b)] else TILE_BLOCK
        limit = (TILE_FAN if tile else FAN) if upper else (block if tile else BLOCK)
        c = self.count(body)
        n = _trips(s, self.known)
        if n is None:
            return self._remake(s, body)
        per = -(-n // lanes()) if s.reduction else n
        if per * c <= limit or not cut or not self._can_cut(body):
            return self._remake(s, body)
        if c > limit // 2:                  # a big body: its own partial
            body, c = self.partial(body), 1
            limit = TILE_FAN if tile else FAN
            if per <= limit:
                return self._remake(s, body)
        chunk = max(1, limit // c)
        chunk = max(chunk * lanes(), VECTOR_CHUNK) if s.reduction else chunk
        if chunk >= n:
            return self._remake(s, body)
        return self._chunked(s, body, chunk)

    def _can_cut(self, s):
        """A partial around `s`: any for a stack accumulator; for one in memory,
        only where every store into it under `s` has one index fixed outside `s`."""
        if self.b.scope == "stack":
            return True
        found = [n for n in nodes(s) if isinstance(n, Store) and n.buffer is self.b]
        bound = {id(n.var) for n in nodes(s) if isinstance(n, (For, Let))}
        self.index = found[0].index if found else None
        return bool(found) and all(_same(n.index, self.index) for n in found) and not any(
            id(v) in bound for n in found for v in nodes(n.index))

    def _remake(self, s, body):
        return For(s.var, s.begin, s.end, s.kind, body, s.unroll, s.reduction)

    def _chunked(self, s, body, chunk):
        """Loop `s` over chunks of `chunk` iterations, each summed into a partial;
        the loop over the chunks cascaded in turn."""
        span = Binary("max", _int(0), Binary("sub", s.end, s.begin, dt.INDEX), dt.INDEX)
        count = CDiv("div", Binary("add", span, _int(chunk - 1), dt.INDEX), _int(chunk))
        chunks = -(-_trips(s, self.known) // chunk)
        blk = Var("chunk", 0, chunks)
        start = Binary("mul", blk, _int(chunk), dt.INDEX)
        if not (isinstance(s.begin, Const) and s.begin.value == 0):
            start = Binary("add", s.begin, start, dt.INDEX)
        stop = Binary("add", start, _int(chunk), dt.INDEX)
        if isinstance(s.begin, Const) and isinstance(s.end, Const):
            count = _int(chunks)
        if not (isinstance(count, Const) and chunks * chunk == _trips(s, self.known)):
            stop = Binary("min", stop, s.end, dt.INDEX)     # a tail chunk
        inner = For(s.var, start, stop, s.kind, body, s.unroll, s.reduction)
        self.known[id(blk)] = chunks    # (the inner loop sums into a partial: never counted)
        outer = For(blk, _int(0), count, "serial", None)
        return self._level(outer, self.partial(inner), True, upper=True)

    def partial(self, s):
        """`s` summing into a fresh partial P, zeroed before and added into `b` after."""
        b = self.b
        p = Buffer(b.dtype, b.shape if b.scope == "stack" else (1,), "stack", PARTIAL)

        def swap(st):
            if isinstance(st, Store) and st.buffer is b:
                idx = st.index if b.scope == "stack" else _int(0)
                return Store(p, idx, Binary("add", Load(p, idx), st.value.b, b.dtype))
            if isinstance(st, For) and st.reduction is not None and st.reduction[1] is b:
                return For(st.var, st.begin, st.end, st.kind, swap(st.body), st.unroll,
                           (st.reduction[0], p))
            return map_body(st, swap)
        zero = Const(0, b.dtype)
        if b.scope == "stack" and b.size > 1:
            q, r = Var("q", 0, b.size), Var("q", 0, b.size)
            self.summary.spatial[id(b)].add(id(r))
            init = For(q, _int(0), _int(b.size), "vectorized", Store(p, q, zero))
            add = For(r, _int(0), _int(b.size), "vectorized",
                      Store(b, r, Binary("add", Load(b, r), Load(p, r), b.dtype)))
        else:
            at = _int(0) if b.scope == "stack" else self.index
            init = Store(p, _int(0), zero)
            add = Store(b, at, Binary("add", Load(b, at), Load(p, _int(0)), b.dtype))
        return Allocate(p, Seq([init, swap(s), add]))
