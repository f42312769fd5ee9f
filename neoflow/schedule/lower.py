"""schedule/lower: a kernel and its Config -> loop IR; kernels -> a Program.

Each stage gets its own loop nest (kernel-local intermediates live in heap
buffers), except that a stage computed at the one before it (`compute_at`)
runs inside that stage's parallel row loop, after it. The loops of a stage
are its axes split by `tile`, in `order`; the first `parallel` loops fuse
into one parallel loop. Loop bounds are
exact -- a tile's tail loop runs only to the extent (min with an expression
of the outer loop variables) -- or an edge tile runs whole inside its axis
or its panel's padding (below), so no index ever leaves its tensor.

A stage with a main reduction (schedule/stage.py) lowers in three phases
inside the loops before the first reduce loop: initialise the accumulator
tile (the spatial loops after the first reduce loop), accumulate, then
apply the epilogue and store each output once. Conjuncts of the reduction's
`where` that bound one reduce axis affinely become that loop's bounds (as
soon as the variables they use are bound); the rest guard the update.

The phases are made in up to two versions, chosen per tile: whole and
interior (constant loop bounds keep the accumulator in registers; the
affine `where`s of the body -- padding -- hold for every point of the tile,
so their true branch is taken without a test), and the rest. Where the
accumulator is the tile's own (`cache_write`), the rest runs whole tiles
too: an edge tile is moved back to end at the axis' end (its overlap with
the tile before is computed twice and stored once), or, where every read
along the axis is from a packed panel, runs on into the panel's zero
padding and stores only its own points. Elsewhere the rest is made whole
(constant bounds) and exact (tails). Outside the interior, the spatial
loops inside the innermost reduce loop are made twice again, so that an
edge tile runs the reduce steps where its `where`s hold for the whole tile
(most kernel taps) without tests either.

Every other reduction is computed into a scalar at the outermost loop depth
where everything it depends on (its free variables and the conditions under
which it is evaluated) is bound -- softmax's row sum runs once per row.

Packed inputs (`pack`) are copied into their panels before the stage's
loops -- or, when the loop over the panels is the outermost and runs alone,
one panel at the top of each of its iterations; a packing that transposes
(a dense layer's W[j, k]) copies 8x8 blocks when the sizes allow.

Every read is proved in bounds (te.arith over the axis ranges narrowed by
the enclosing `where` conditions); a read that cannot be proved (gathers)
gets a run-time check: on failure it reads nothing and reports its `Site`.

Hands on: `KernelFunc`s and a `Program` for codegen.
"""
import itertools
import math

import numpy as np

from ..te import dtype as dt
from ..te.arith import conjuncts, free_vars, interval, negate
from ..te.expr import Binary, Cast, Const, IterVar, Read, Reduce, Select
from ..te.simplify import addends
from ..te.visit import children, reads, with_children
from .accumulate import blocked_sums
from .bounds import Facts, axis_bounds, nonnegative_forms, redundant
from .config import ConfigError, accumulator_levels, level_extents, level_names, validate
from .delinearize import alias_source
from .loop_ir import (Allocate, Buffer, Check, CDiv, CopyTransposed, For, IfThenElse,
                      KernelFunc, Let, Load, Program, Seq, Site, Store, Var, map_stmt, nodes)
from .loop_fusion import fuse_loops
from .loop_partition import partition_loops
from .speculate import speculate
from .split_reduce import split_stages
from .stage import Stage

PACK_PARALLEL_MIN = 1 << 15   # elements of a panel buffer worth copying on all cores
DISTRIBUTE_MIN_OPERANDS = 4   # tensors a tile's reduction body may stream at once
PACK_ROW_BLOCK = 8            # rows of a packing copy's source kept in cache per pass
TRANSPOSE_BLOCK = 8           # the block of codegen's transposing copy (nf_transpose8_f32)
TAIL_SLOWDOWN = 3             # an exact tail (accumulator in memory) runs about 3x slower per
                              # point than a whole tile: an edge tile runs whole only when its
                              # own points would take as long as a tile exactly (LeNet's 6
                              # channels in tiles of 5, the last one whole: 0.43 -> 0.51 ms)


def lower_program(kernels, configs, inputs, outputs):
    """Lower `kernels` (in order) with `configs` into one Program.

    `inputs` are the leaf tensors passed in, `outputs` the computed tensors
    handed back (distinct); every other kernel output becomes a temporary.

    >>> prog = lower_program(kernels_for([C]), [default_config(k) for k in ks], [A, B], [C])
    """
    buffers = {}
    for t in inputs:
        buffers[id(t)] = Buffer(t.dtype, t.shape, "arg", "in")
    for t in outputs:
        buffers[id(t)] = Buffer(t.dtype, t.shape, "arg", "out")
    temps, funcs, calls, sites = [], [], [], []
    for kernel, config in zip(kernels, configs):
        for t in kernel.outputs:
            if id(t) not in buffers:
                buffers[id(t)] = Buffer(t.dtype, t.shape, "heap", "tmp")
                temps.append(buffers[id(t)])
        funcs.append(lower_kernel(kernel, config, sites))
        calls.append([buffers[id(t)] for t in kernel.inputs + kernel.outputs])
    return Program(funcs, calls, [buffers[id(t)] for t in inputs],
                   [buffers[id(t)] for t in outputs], temps, sites)


def lower_kernel(kernel, config, sites):
    """Lower one kernel under `config` to a KernelFunc; checked reads append
    their `Site` to `sites` (numbered by position there).

    >>> func = lower_kernel(k, default_config(k), sites=[])
    """
    validate(config, kernel)
    buffers = {id(t): Buffer(t.dtype, t.shape, "arg", "in") for t in kernel.inputs}
    for t in kernel.outputs:
        buffers[id(t)] = Buffer(t.dtype, t.shape, "arg", "out")
    for t in kernel.locals:
        buffers[id(t)] = Buffer(t.dtype, t.shape, "heap", "local")
    stmts, partials = [], []
    for t, sc in zip(kernel.stages, config.stages):
        pieces, local = split_stages(t, sc, buffers)   # a split sum: its partials, their sum
        partials += local
        for piece, psc in pieces:
            stmt = _StageLowering(piece, psc, buffers, sites, kernel.origins.get(t.name))
            stmt = stmt.lower()
            if config.gpu is None:      # a GPU reduction is a block (tree) reduction already
                stmt = blocked_sums(stmt)
            if psc.compute_at:
                stmts[-1] = _computed_at(stmts[-1], stmt, t.name)
            else:
                stmts.append(stmt)
    body = fuse_loops(speculate(partition_loops(Seq(stmts))))
    for buf in [buffers[id(t)] for t in reversed(kernel.locals)] + partials:
        body = Allocate(buf, body)
    return KernelFunc([buffers[id(t)] for t in kernel.inputs],
                      [buffers[id(t)] for t in kernel.outputs], body,
                      hint=" ".join(t.name for t in kernel.stages))


def _computed_at(previous, stmt, name):
    """Stage `name`'s loop `stmt` run inside `previous` (the loop of the stage
    before it, or of a chain of such): one parallel loop over the rows whose
    body computes row i of each stage in turn."""
    loops = (previous, stmt)
    if not all(isinstance(x, For) and x.kind == "parallel" and isinstance(x.begin, Const)
               and isinstance(x.end, Const) for x in loops) or \
            (previous.begin.value, previous.end.value) != (stmt.begin.value, stmt.end.value):
        raise ConfigError(f"stage '{name}': compute_at needs it and the stage before to run "
                          "as one parallel loop over the same rows")
    row = previous.var
    body = map_stmt(stmt.body, lambda n: row if n is stmt.var else n)
    return For(row, previous.begin, previous.end, "parallel", Seq([previous.body, body]))


# -- loop nests ------------------------------------------------------------------

class _Loop:
    __slots__ = ("var", "begin", "end", "kind", "unroll", "reduction", "extent", "level")

    def __init__(self, var, begin, end, extent=None, level=None):
        self.var, self.begin, self.end = var, begin, end
        self.kind, self.unroll, self.reduction = "serial", None, None
        self.extent, self.level = extent, level   # largest trip count; config loop name


class _Frame:
    """What runs at the top of one loop body: lets, then scalars computed there."""

    def __init__(self):
        self.lets, self.requests, self.memo = [], [], {}


class _Nest:
    """Loops outer to inner; frames[d] is the body of loops[d - 1] (frames[0]:
    outside them all). `avail` maps a variable to the depth where it is bound."""
    _uids = itertools.count()

    def __init__(self, loops=(), frames=None, avail=None, assume=frozenset()):
        self.uid = next(self._uids)
        self.loops = list(loops)
        self.frames = list(frames) if frames is not None else [_Frame()]
        self.avail = dict(avail or {})
        self.assume = assume   # ids of select conditions known to hold in this nest

    def copy(self, assume=None):
        return _Nest(self.loops, self.frames, self.avail,
                     self.assume if assume is None else assume)

    def upto(self, depth):
        return _Nest(self.loops[:depth], self.frames[:depth + 1],
                     {v: d for v, d in self.avail.items() if d <= depth})

    @property
    def depth(self):
        return len(self.loops)

    def let(self, var, value):
        self.frames[-1].lets.append((var, value))
        self.avail[id(var)] = self.depth

    def push(self, loop):
        self.loops.append(loop)
        self.frames.append(_Frame())
        self.avail[id(loop.var)] = self.depth

    def depth_of(self, variables):
        return max((self.avail[id(v)] for v in variables), default=0)


def _frame_block(frame, stmt):
    for buf, compute in reversed(frame.requests):
        stmt = Allocate(buf, Seq([compute, stmt]))
    for var, value in reversed(frame.lets):
        stmt = Let(var, value, stmt)
    return stmt


def _loop_stmt(loop, body):
    return For(loop.var, loop.begin, loop.end, loop.kind, body, loop.unroll, loop.reduction)


def _wrap(nest, stop, stmt, fuse=0):
    """`stmt` (the innermost frame's body) inside the frames and loops of
    `nest` deeper than `stop`; the first `fuse` loops become one parallel loop."""
    d = nest.depth
    while d > stop:
        stmt = _frame_block(nest.frames[d], stmt)
        if fuse and d == fuse:
            for k in range(fuse - 1, 0, -1):
                stmt = _frame_block(nest.frames[k], stmt)
            return _fused(nest.loops[:fuse], stmt)
        stmt = _loop_stmt(nest.loops[d - 1], stmt)
        d -= 1
    return stmt


def _fused(loops, body):
    """One parallel loop over the product of `loops` (each from 0, with a
    constant largest trip count); tails skip by a guard."""
    if len(loops) == 1 and isinstance(loops[0].end, Const):
        return For(loops[0].var, loops[0].begin, loops[0].end, "parallel", body)
    guards = [Binary("lt", lp.var, lp.end, dt.BOOL) for lp in loops
              if not isinstance(lp.end, Const)]
    if guards:
        body = IfThenElse(_all(guards), body)
    fused = Var("fused", 0, math.prod(lp.extent for lp in loops))
    stride = 1
    for n in range(len(loops) - 1, -1, -1):
        value = fused if stride == 1 else CDiv("div", fused, _int(stride))
        if n > 0:
            value = CDiv("mod", value, _int(loops[n].extent))
        body = Let(loops[n].var, value, body)
        stride *= loops[n].extent
    return For(fused, _int(0), _int(stride), "parallel", body)


# -- small expression helpers ------------------------------------------------------------

def _int(v):
    return Const(int(v), dt.INDEX)


def _add(a, b):
    if isinstance(a, Const) and a.value == 0:
        return b
    if isinstance(b, Const) and b.value == 0:
        return a
    if isinstance(a, Const) and isinstance(b, Const):
        return _int(a.value + b.value)
    return Binary("add", a, b, dt.INDEX)


def _mul(a, k):
    if k == 1:
        return a
    if isinstance(a, Const):
        return _int(a.value * k)
    return Binary("mul", a, _int(k), dt.INDEX)


def _linear(terms):
    """sum(var * stride) over (var, stride) pairs."""
    out = _int(0)
    for var, stride in terms:
        out = _add(out, _mul(var, stride))
    return out


def _all(conds):
    out = conds[0]
    for c in conds[1:]:
        out = Binary("and", out, c, dt.BOOL)
    return out


def _fold(op, limit, bounds):
    """max (or min) of the constant `limit` and `bounds`, leaving out what cannot matter."""
    lower = op == "max"
    out = None
    for b in bounds:
        if not redundant(b, limit, lower, {}):
            out = b if out is None else Binary(op, out, b, dt.INDEX)
    if out is None:
        return _int(limit)
    edges = interval(out, {})
    if edges is not None and (edges[0] >= limit if lower else edges[1] <= limit):
        return out
    return Binary(op, _int(limit), out, dt.INDEX)


def _strides(shape):
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _identity(op, dtype):
    """The value a reduction starts from (as nf.evaluate's)."""
    if op == "sum":
        return Const(0, dtype)
    if dt.is_float(dtype):
        return Const(-math.inf if op == "max" else math.inf, dtype)
    info = np.iinfo(dtype)
    return Const(info.min if op == "max" else info.max, dtype)


def _combine(op, acc, value):
    return Binary({"sum": "add", "max": "max", "min": "min"}[op], acc, value, acc.dtype)


def _selects(e):
    """The Select nodes under `e` that are not inside a reduction."""
    out, seen, stack = [], set(), [e]
    while stack:
        n = stack.pop()
        if id(n) in seen or isinstance(n, Reduce):
            continue
        seen.add(id(n))
        if isinstance(n, Select):
            out.append(n)
        stack.extend(children(n))
    return out


def _panel_by_panel(sc, axis):
    """Whether an input packed along `axis` is packed one panel at a time, at
    the top of the loop over its panels: when that loop is the stage's
    outermost and runs on its own (at most one parallel loop), each thread
    then copies just the panels it uses, right before the register tiles
    read them from its L1 cache, instead of all of them first."""
    return len(sc.tile[axis]) == 1 and sc.order[0] == f"{axis}.0" and sc.parallel <= 1


def _transposes(t, dim, f):
    """Whether packing `t` along `dim` into panels `f` wide is a transposition
    the 8x8 block copy does exactly: float32, `dim` not the contiguous last
    dimension, and every extent involved a multiple of the block (no panel
    padded with zeros)."""
    b = TRANSPOSE_BLOCK
    return (t.dtype == "float32" and dim < len(t.shape) - 1 and f % b == 0
            and t.shape[-1] % b == 0 and t.shape[dim] % f == 0)


def _distributed_terms(red, sc, extents):
    """The bodies the reduction `red` accumulates one after the other into its
    register tile (`extents`: its loops'): its terms when the tile is blocked
    over two axes and the body adds up products over more than
    DISTRIBUTE_MIN_OPERANDS tensors (an unrolled RNN's recurrent weight
    gradient after merge_sums: sum_b of dy_t[b, i] h_{t-1}[b, j] for seven t
    in one body, fourteen streams through one loop), else the body whole.
    Each term then runs its own reduce loops over two streams; only the
    order of additions changes."""
    terms = addends(red.body)
    operands = {id(r.tensor) for r in reads(red.body)}
    products = all(isinstance(t, Binary) and t.op == "mul" for t in terms)
    blocked = sum(e > 1 for e in extents) >= 2      # rows by vectors: operands reused
    if red.op != "sum" or not blocked or len(terms) < 2 or not products or \
            len(operands) <= DISTRIBUTE_MIN_OPERANDS:
        return [red.body]
    return terms


def _row_blocked_pack(others, outer, buf, copy):
    """The loops of `_StageLowering._pack_nest` around `copy` (one row of every
    panel's elements) when the operand's rows hold every panel's elements
    side by side (the packed dimension is its last: a weight gradient's
    dy[t, b, j] into P[j // f, t, b, j % f]): blocks of PACK_ROW_BLOCK rows,
    each copied panel by panel, so a block's rows stay in cache while every
    panel takes its piece of them, and each panel is written a block of
    rows at a time. Panel by panel over all rows, a weight gradient read f
    elements of every 2 KB row, the rows in the same few cache sets; row by
    row over all panels, it wrote f elements into every panel, the panels a
    multiple of 4 KB apart."""
    last = others[-1]
    block = min(PACK_ROW_BLOCK, last.hi)
    rows_out, row = Var("pack_rb", 0, -(-last.hi // block)), Var("pack_r", 0, block)
    end = _int(block) if last.hi % block == 0 else Binary(
        "min", _int(block), Binary("sub", _int(last.hi), _mul(rows_out, block), dt.INDEX),
        dt.INDEX)
    stmt = For(row, _int(0), end, "serial",
               Let(last, _add(_mul(rows_out, block), row), copy))
    stmt = For(outer, _int(0), _int(buf.shape[0]), "serial", stmt)
    loops = others[:-1] + [rows_out]
    for n, v in reversed(list(enumerate(loops))):
        wide = n == 0 and v.hi > 1 and buf.size >= PACK_PARALLEL_MIN
        stmt = For(v, _int(0), _int(v.hi), "parallel" if wide else "serial", stmt)
    return stmt


def _panel_loop(outer, buf, body):
    """The loop over the panels of a packing copy into `buf`: on every core
    when the buffer is large enough to pay for it."""
    kind = "parallel" if buf.size >= PACK_PARALLEL_MIN and buf.shape[0] > 1 else "serial"
    return For(outer, _int(0), _int(buf.shape[0]), kind, body)


def _has_checks(stmt):
    """True if any Load under `stmt` checks its index at run time."""
    return any(isinstance(n, Load) and n.checks for n in nodes(stmt))


# -- one stage --------------------------------------------------------------------------

class _Axis:
    """An axis split into loops: a = start + sum(level_var * stride)."""

    def __init__(self, name, var, factors):
        self.name, self.var, self.factors = name, var, list(factors)
        self.strides = [math.prod(self.factors[j:]) for j in range(len(self.factors) + 1)]
        self.levels = level_names(name, self.factors)
        if self.factors:
            self.vars = [Var(lv, 0, e) for lv, e in
                         zip(self.levels, level_extents(var.extent, self.factors))]
        else:
            self.vars = [var]
        self.start = self.length = None   # set when the outermost loop is placed


class _StageLowering:
    def __init__(self, tensor, sc, buffers, sites, origins=None):
        self.st, self.sc = Stage(tensor), sc
        self.origins = origins or {}   # (tensor, dim) -> computes inlined here that read it
        self.buffers, self.sites = buffers, sites
        self.out = buffers[id(tensor)]
        for r in reads(self.st.tensor.op.body):   # inputs read through a reshaped alias
            if id(r.tensor) not in buffers:
                buffers[id(r.tensor)] = buffers[id(alias_source(r.tensor))]
        self.axes = {a: _Axis(a, self.st.axis(a), sc.tile[a]) for a in self.st.axis_names}
        self.memo, self.negations, self.known = {}, {}, {}
        self.packs = {}   # id(tensor) -> (axis, dimension, panel width, panel buffer)
        self.inside = set()   # ids of the packs made one panel at a time (_panel_by_panel)
        for n in sc.pack:
            t, axis, dim = self.st.packable[n]
            f = sc.tile[axis][-1]
            panels = -(-t.shape[dim] // f)
            if _panel_by_panel(sc, axis):
                self.inside.add(id(t))
                panels = 1
            shape = (panels,) + t.shape[:dim] + t.shape[dim + 1:] + (f,)
            self.packs[id(t)] = (axis, dim, f, Buffer(t.dtype, shape, "heap", "pack"))
        self.pads = {}    # id(tensor) and id(replaced select) -> (tensor, pads before, buffer)
        for n in sc.pad:
            t, lo, hi, selects = self.st.paddable[n]
            shape = tuple(size + a + b for size, a, b in zip(t.shape, lo, hi))
            entry = (t, lo, Buffer(t.dtype, shape, "heap", "pad"))
            self.pads.update({id(x): entry for x in (t,) + selects})

    # loops ------------------------------------------------------------------
    def _push_level(self, nest, level, tightener=None, full=(), shifted=(), store=False):
        """Push the loop `level` ("s0.1") onto `nest` with exact bounds (constant
        for the axes in `full`, whose tile is known to be whole). For the axes
        in `shifted` (see `_edge_tiles`) the tile's innermost loop runs whole,
        the tile moved back by its overhang past the axis' end; with `store`,
        it starts past the overhang (the points the tile before it has)."""
        ax = self.axes[level.split(".")[0]]
        j = int(level.split(".")[1])
        if ax.name in shifted and j == len(ax.factors):
            base = _linear(zip(ax.vars[:j], ax.strides[:j]))
            overhang = Binary("max", _int(0), _add(base, _int(ax.factors[-1] - ax.length.value)),
                              dt.INDEX)
            nest.push(_Loop(ax.vars[j], overhang if store else _int(0), _int(ax.factors[-1]),
                            ax.vars[j].extent, level))
            nest.let(ax.var, Binary("sub", _add(ax.start, _linear(zip(ax.vars, ax.strides))),
                                    overhang, dt.INDEX))
            return
        if j == 0:
            start, end = _int(ax.var.lo), _int(ax.var.hi)
            if tightener is not None:
                start, end = tightener.bounds(ax.var, nest.avail)
            start, end = self.expr(start, nest), self.expr(end, nest)
            if not ax.factors:
                nest.push(_Loop(ax.var, start, end, ax.var.extent, level))
                return
            if isinstance(start, Const) and isinstance(end, Const):
                ax.start, ax.length = start, _int(end.value - start.value)
            else:
                ax.start, ax.length = Var("start"), Var("length")
                nest.let(ax.start, start)
                nest.let(ax.length, Binary("max", Binary("sub", end, ax.start, dt.INDEX),
                                           _int(0), dt.INDEX))
        stride = ax.strides[j]
        base = _linear(zip(ax.vars[:j], ax.strides[:j]))
        if j == 0:
            end = (_int(-(-ax.length.value // stride)) if isinstance(ax.length, Const)
                   else CDiv("div", _add(ax.length, _int(stride - 1)), _int(stride)))
        elif ax.name in full or (isinstance(ax.length, Const)
                                 and ax.length.value % ax.strides[0] == 0):
            end = _int(ax.factors[j - 1])
        else:
            remaining = Binary("sub", ax.length, base, dt.INDEX)
            if stride > 1:
                remaining = CDiv("div", _add(remaining, _int(stride - 1)), _int(stride))
            end = Binary("min", _int(ax.factors[j - 1]), remaining, dt.INDEX)
        extent = ax.vars[j].extent
        nest.push(_Loop(ax.vars[j], _int(0), end, extent, level))
        if j == len(ax.factors):
            nest.let(ax.var, _add(ax.start, _linear(zip(ax.vars, ax.strides))))

    def _set_kinds(self, nest, leaf, first):
        """Loop kinds of the loops from depth `first` on; the innermost may be vectorised."""
        for loop in nest.loops[first:]:
            if loop.level in self.sc.unroll:
                loop.kind, loop.unroll = "unrolled", self.sc.unroll[loop.level]
        v = self.sc.vectorize
        inner = nest.loops[-1] if nest.depth > first else None
        if (v is not None and inner is not None and inner.level == self.axes[v].levels[-1]
                and not _has_checks(leaf)):
            inner.kind, inner.unroll = "vectorized", None

    # the stage ----------------------------------------------------------------
    def lower(self):
        st, sc = self.st, self.sc
        order = list(sc.order)
        first_reduce = next((n for n, lv in enumerate(order) if lv.startswith("r")), len(order))
        outer = _Nest()
        for lv in order[:first_reduce]:
            self._push_level(outer, lv)
        for t, axis, _ in self.st.packable:   # a panel packed at the top of its loop
            if id(t) in self.inside:
                buf = self.packs[id(t)][3]
                outer.frames[1].requests.append((buf, self._pack_nest(t, self.axes[axis].vars[0])))
        out_index = _linear(zip(st.spatial, _strides(st.tensor.shape)))
        red = st.reduction
        if red is None:
            leaf = Store(self.out, out_index, self.expr(st.tensor.op.body, outer))
            self._set_kinds(outer, leaf, sc.parallel)
            body = leaf
        else:
            body = self._reduction_phases(outer, order[first_reduce:], out_index)
            self._set_kinds(outer, body, sc.parallel)
        stmt = _frame_block(outer.frames[0], _wrap(outer, 0, body, fuse=sc.parallel))
        for t in reversed(self.st.packable):
            if id(t[0]) in self.packs and id(t[0]) not in self.inside:
                buf = self.packs[id(t[0])][3]
                stmt = Allocate(buf, Seq([self._pack_nest(t[0]), stmt]))
        for t in reversed(self.st.paddable):
            if id(t[0]) in self.pads:
                stmt = Allocate(self.pads[id(t[0])][2], Seq([self._pad_nest(t[0]), stmt]))
        return stmt

    def _pad_nest(self, t):
        """Loops copying input `t` zero-padded into its buffer P:
        P[i + lo] = t[i] inside, 0 around."""
        _, lo, buf = self.pads[id(t)]
        idx = [Var("pad", 0, n) for n in buf.shape]
        src = [_add(v, _int(-a)) for v, a in zip(idx, lo)]
        inside = [Binary("ge", x, _int(0), dt.BOOL) for x, a in zip(src, lo) if a] + [
            Binary("lt", x, _int(n), dt.BOOL) for x, n, a, m in
            zip(src, t.shape, lo, buf.shape) if m - a > n]
        value = Load(self.buffers[id(t)], _linear(zip(src, _strides(t.shape))))
        if inside:
            value = Select(_all(inside), value, Const(0, t.dtype))
        stmt = Store(buf, _linear(zip(idx, _strides(buf.shape))), value)
        kinds = ["parallel" if buf.size >= PACK_PARALLEL_MIN else "serial"] + [
            "serial"] * (len(idx) - 2) + ["vectorized"]
        for v, kind in reversed(list(zip(idx, kinds[-len(idx):]))):
            stmt = For(v, _int(0), _int(v.hi), kind, stmt)
        return stmt

    def _pack_nest(self, t, panel=None):
        """Loops copying input `t` into its panel buffer P (zeros past the end):
        P[o, ..., i] = t[..., o * f + i, ...] with the packed dimension moved out;
        with `panel` (an expression), only panel o = `panel`, into P[0]."""
        _, dim, f, buf = self.packs[id(t)]
        if _transposes(t, dim, f):
            return self._transposed_pack_nest(t, dim, f, buf, panel)
        outer = Var("pack_o", 0, buf.shape[0]) if panel is None else panel
        others = [Var("pack", 0, n) for n in buf.shape[1:-1]]
        inner = Var("pack_i", 0, f)
        src = _add(_mul(outer, f), inner)
        value = Load(self.buffers[id(t)], _linear(zip(others[:dim] + [src] + others[dim:],
                                                      _strides(t.shape))))
        if t.shape[dim] % f:
            value = Select(Binary("lt", src, _int(t.shape[dim]), dt.BOOL), value,
                           Const(0, t.dtype))
        stmt = Store(buf, _linear(zip([outer if panel is None else _int(0)] + others + [inner],
                                      _strides(buf.shape))), value)
        stmt = For(inner, _int(0), _int(f), "vectorized", stmt)
        if panel is None and dim == t.ndim - 1 and others:
            return _row_blocked_pack(others, outer, buf, stmt)
        for v in reversed(others):
            stmt = For(v, _int(0), _int(v.hi), "serial", stmt)
        return stmt if panel is not None else _panel_loop(outer, buf, stmt)

    def _transposed_pack_nest(self, t, dim, f, buf, panel):
        """`_pack_nest` for a packed dimension that is not t's last (a dense
        layer's W[j, k] into P[j // f, k, j % f]): 8x8 blocks copied
        transposed, 8 of t's contiguous last dimension at a time."""
        outer = Var("pack_o", 0, buf.shape[0]) if panel is None else panel
        others = [Var("pack", 0, n) for n in buf.shape[1:-2]]
        last = Var("pack_k", 0, buf.shape[-2] // TRANSPOSE_BLOCK)
        inner = Var("pack_i", 0, f // TRANSPOSE_BLOCK)
        rows = _add(_mul(outer, f), _mul(inner, TRANSPOSE_BLOCK))
        src = others[:dim] + [rows] + others[dim:] + [_mul(last, TRANSPOSE_BLOCK)]
        dst = [outer if panel is None else _int(0)] + others + [
            _mul(last, TRANSPOSE_BLOCK), _mul(inner, TRANSPOSE_BLOCK)]
        stmt = CopyTransposed(TRANSPOSE_BLOCK, buf, _linear(zip(dst, _strides(buf.shape))), f,
                              self.buffers[id(t)], _linear(zip(src, _strides(t.shape))),
                              _strides(t.shape)[dim])
        for v in [inner, last] + others[::-1]:
            stmt = For(v, _int(0), _int(v.hi), "serial", stmt)
        return stmt if panel is not None else _panel_loop(outer, buf, stmt)

    def _reduction_phases(self, outer, inner_order, out_index):
        st, sc, red = self.st, self.sc, self.st.reduction
        tile = accumulator_levels(sc)
        if sc.cache_write:
            extents = [self.axes[lv.split(".")[0]].vars[int(lv.split(".")[1])].extent
                       for lv in tile]
            acc = Buffer(red.dtype, (math.prod(extents),), "stack", "acc")
            acc_vars = [self.axes[lv.split(".")[0]].vars[int(lv.split(".")[1])] for lv in tile]
            acc_index = _linear(zip(acc_vars, _strides(extents)))
        else:
            acc, acc_index, extents = self.out, out_index, ()
        terms = _distributed_terms(red, sc, extents)
        p = outer.depth

        def phase(levels, make_leaf, full, assume, shifted=(), store=False):
            nest = outer.copy(assume)     # init or epilogue: tile loops only
            for lv in levels:
                self._push_level(nest, lv, None, full, shifted, store)
            leaf = make_leaf(nest)
            self._set_kinds(nest, leaf, p)
            return _wrap(nest, p, leaf)

        def update_phase(full, assume, tightener, shifted, body=red.body, into=acc):
            """The accumulation of `body` (the reduction's, or one of its terms)
            into buffer `into`; inside the innermost reduce loop, the spatial
            loops after it are made twice when the `where`s of the body can
            hold for all of them (an edge tile then runs most reduce steps,
            e.g. the kernel taps inside the image, without tests)."""
            def update(nest):
                value = self.expr(body, nest, st.context + tightener.conds())
                stmt = Store(into, acc_index, _combine(red.op, Load(into, acc_index), value))
                if sc.vectorize is not None and sc.vectorize.startswith("r"):
                    nest.loops[-1].reduction = (red.op, into)
                return self._guarded(stmt, nest, st.context, tightener)

            split = max(n for n, lv in enumerate(inner_order) if lv.startswith("r")) + 1
            nest = outer.copy(assume)
            for lv in inner_order[:split]:
                self._push_level(nest, lv, tightener if lv.startswith("r") else None, full,
                                 shifted)

            def rest(known):
                inner = nest.copy(known)
                for lv in inner_order[split:]:
                    self._push_level(inner, lv, None, full, shifted)
                leaf = update(inner)
                self._set_kinds(inner, leaf, nest.depth)
                return _wrap(inner, nest.depth, leaf)

            conds, known = self._interior_conds(sc.order[:p] + inner_order[:split])
            if split < len(inner_order) and not known <= assume:
                leaf = rest(assume | known)
                if conds:
                    leaf = IfThenElse(_all(conds), leaf, rest(assume))
            else:
                leaf = rest(assume)
            self._set_kinds(nest, leaf, p)
            return _wrap(nest, p, leaf)

        def updates(full, assume, tightener, shifted):
            """The update phases: the body's, or one per term (`_distributed_terms`),
            each summed into a tile of its own and then added into the
            accumulator, so every sum stays as long as the body's was (and
            schedule/accumulate.py still cuts a long one into partials)."""
            if len(terms) == 1:
                return [update_phase(full, assume, tightener, shifted)]
            out = []
            for term in terms:
                part = Buffer(red.dtype, acc.shape, "stack", "term")
                out.append(Allocate(part, Seq([
                    phase(tile, lambda nest: Store(part, acc_index, _identity(red.op, red.dtype)),
                          full, assume, shifted),
                    update_phase(full, assume, tightener, shifted, term, part),
                    phase(tile, lambda nest: Store(acc, acc_index, _combine(
                        red.op, Load(acc, acc_index), Load(part, acc_index))),
                          full, assume, shifted)])))
            return out

        def phases(full, assume, shifted=(), padded=()):
            tightener = _Tightener(red.cond)
            out = [phase(tile, lambda nest: Store(acc, acc_index, _identity(red.op, red.dtype)),
                         full, assume, shifted),
                   *updates(full, assume, tightener, shifted)]
            if sc.cache_write or st.tensor.op.body is not red:
                replace = {id(red): Load(acc, acc_index)}
                out.append(phase(tile, lambda nest: Store(
                    self.out, out_index, self.expr(st.tensor.op.body, nest, (), replace)),
                    set(full) - set(padded), assume, shifted, store=True))
            return Seq(out)

        whole = self._whole_tile_conds(tile)
        interior, assume = self._interior_conds(sc.order[:p])
        edges = self._edge_tiles(whole, tile)
        if edges:
            body = phases(set(whole), frozenset(),
                          {name for name, mode in edges.items() if mode == "shift"},
                          {name for name, mode in edges.items() if mode == "pad"})
        else:
            body = phases((), frozenset())
            if whole:
                body = IfThenElse(_all(list(whole.values())), phases(set(whole), frozenset()),
                                  body)
        if assume:
            fast = list(whole.values()) + interior
            body = phases(set(whole), assume) if not fast else IfThenElse(
                _all(fast), phases(set(whole), assume), body)
        return Allocate(acc, body) if sc.cache_write else body

    def _interior_conds(self, bound_levels):
        """Conditions on the variables of `bound_levels` (the loops around a
        tile) under which the `where`s in the main reduction's body (affine
        conjuncts only, as padding is written) hold for every point of the
        tile, and the ids of those where-conditions: under them a fast path
        takes each such where's true branch directly."""
        conds, assume = [], set()
        for sel in _selects(self.st.reduction.body):
            if id(sel) in self.pads:
                continue        # read from the padded copy: no test to lift
            needed = []
            for part in conjuncts(sel.cond):
                forms = nonnegative_forms(part)
                lows = [self._tile_minimum(f, bound_levels) for f in forms]
                if not forms or any(g is None for g in lows):
                    break
                needed.extend(lows)
            else:
                if all(not isinstance(g, Const) or g.value >= 0 for g in needed):
                    assume.add(id(sel.cond))
                    conds.extend(Binary("ge", g, _int(0), dt.BOOL) for g in needed
                                 if not isinstance(g, Const))
        return conds, frozenset(assume)

    def _tile_minimum(self, form, bound_levels):
        """The least value of the affine `form` over the tile (every loop not in
        `bound_levels`), as an expression of the bound loops' variables; None
        if `form` uses other variables or a reduce axis only partly bound."""
        st = self.st
        terms, low = [], form.const
        for v, a in form.terms.items():
            k = next((k for k, r in enumerate(st.reduce_axes) if r is v), None)
            d = next((d for d, s in enumerate(st.spatial) if s is v), None)
            if k is not None:
                bound = [lv in bound_levels for lv in self.axes[f"r{k}"].levels]
                if all(bound):
                    terms.append((v, a))
                elif any(bound):
                    return None
                else:
                    low += min(a * v.lo, a * (v.hi - 1))
            elif d is not None:
                ax = self.axes[f"s{d}"]
                for lv, var, stride in zip(ax.levels, ax.vars, ax.strides):
                    if lv in bound_levels:
                        terms.append((var, a * stride))
                    else:
                        low += min(0, a * stride * (var.extent - 1))
            else:
                return None
        return _add(_linear(terms), _int(low))

    def _whole_tile_conds(self, tile):
        """{spatial axis: condition that its part of the accumulator tile is whole}
        for the axes whose tile loops have tails: the phases are made twice, with
        constant tile bounds under these conditions (so the tile stays in
        registers) and exactly otherwise."""
        out = {}
        for name, ax in self.axes.items():
            if not name.startswith("s") or ax.var.extent % ax.strides[0] == 0:
                continue
            inner = [int(lv.split(".")[1]) for lv in tile if lv.split(".")[0] == name]
            if inner and min(inner) >= 1:
                j = min(inner)
                base = _linear(zip(ax.vars[:j], ax.strides[:j]))
                out[name] = Binary("le", _add(base, _int(ax.strides[j - 1])),
                                   _int(ax.var.extent), dt.BOOL)
        return out

    def _edge_tiles(self, whole, tile):
        """How the edge tiles of the axes in `whole` run as whole tiles, or
        None where one cannot or should not: {axis: "shift" or "pad"}.
        Either way the accumulator is the tile's own (cache_write), the axis
        has one loop in the tile, its innermost, and constant bounds, the
        edge tile's own points would take a whole tile's time as an exact
        tail (TAIL_SLOWDOWN), and the epilogue stores only those points.
        * "shift": the tile is moved back to end at the axis' end (no
          longer than the axis, no panel along it); the points it shares
          with the tile before are computed again, the same way.
        * "pad": every read in the sum that moves along the axis is from
          its packed panels, which hold zeros past the axis' end."""
        if not self.sc.cache_write:
            return None
        modes = {}
        for name in whole:
            ax = self.axes[name]
            levels = [lv for lv in tile if lv.split(".")[0] == name]
            if levels != [ax.levels[-1]] or not isinstance(ax.length, Const):
                return None
            own = ax.length.value % ax.factors[-1]
            if own * TAIL_SLOWDOWN < ax.factors[-1]:
                return None
            packed = any(axis == name for axis, _, _, _ in self.packs.values())
            if not packed and ax.factors[-1] <= ax.length.value:
                modes[name] = "shift"
            elif packed and self._read_through_panels(name):
                modes[name] = "pad"
            else:
                return None
        return modes

    def _read_through_panels(self, name):
        """Whether every read in the main reduction's body that uses spatial
        axis `name` is from a panel packed along it."""
        var = self.st.axis(name)
        for r in reads(self.st.reduction.body):
            pack = self.packs.get(id(r.tensor))
            if (pack is None or pack[0] != name) and any(
                    any(v is var for v in free_vars(index)) for index in r.indices):
                return False
        return True

    def _guarded(self, stmt, nest, context, tightener):
        """`stmt` under nested ifs: the context conditions, then the conjuncts
        of the reduction condition that did not become loop bounds."""
        conds = list(context) + tightener.pending
        for n in range(len(conds) - 1, -1, -1):
            if not self.facts(tuple(conds[:n])).always(conds[n]):
                stmt = IfThenElse(self.expr(conds[n], nest, tuple(conds[:n])), stmt)
        return stmt

    # expressions ------------------------------------------------------------------
    def expr(self, e, nest, conds=(), replace=None):
        """The IR of te expression `e` evaluated in `nest` where `conds` hold."""
        key = (id(e), nest.uid, tuple(id(c) for c in conds))
        hit = self.memo.get(key)
        if hit is None:  # the entry keeps `e` and `conds` alive, so their ids stay theirs
            hit = self.memo[key] = (e, conds, self._expr(e, nest, tuple(conds), replace or {}))
        return hit[2]

    def facts(self, conds):
        """Facts(conds), made once per tuple of conditions."""
        key = tuple(id(c) for c in conds)
        hit = self.known.get(key)
        if hit is None:
            hit = self.known[key] = (conds, Facts(conds))
        return hit[1]

    def _negation(self, cond):
        """negate(cond), made once per condition (memo keys use its id)."""
        hit = self.negations.get(id(cond))
        if hit is None:
            hit = self.negations[id(cond)] = (cond, negate(cond))
        return hit[1]

    def _expr(self, e, nest, conds, replace):
        if id(e) in replace:
            return replace[id(e)]
        if isinstance(e, (Const, IterVar)):
            return e
        if isinstance(e, Read):
            return self._read(e, nest, conds, replace)
        if isinstance(e, Reduce):
            return self._scalar_reduce(e, nest, conds)
        if isinstance(e, Select) and id(e) in self.pads:   # a read of the padded copy
            t, lo, buf = self.pads[id(e)]
            parts = []
            for index, a in zip(e.t.indices, lo):
                value = self.expr(index, nest, conds, replace)
                value = value if value.dtype == dt.INDEX else Cast(dt.INDEX, value)
                parts.append(_add(value, _int(a)))
            return Load(buf, _linear(zip(parts, _strides(buf.shape))))
        if isinstance(e, Select) and id(e.cond) in nest.assume:
            return self.expr(e.t, nest, conds + (e.cond,), replace)
        if isinstance(e, Select):
            return Select(self.expr(e.cond, nest, conds, replace),
                          self.expr(e.t, nest, conds + (e.cond,), replace),
                          self.expr(e.f, nest, conds + (self._negation(e.cond),), replace))
        if (isinstance(e, Binary) and e.op in ("floordiv", "mod") and dt.is_int(e.dtype)
                and e.b.value > 0 and self.facts(conds).nonnegative(e.a)):
            return CDiv("div" if e.op == "floordiv" else "mod",
                        self.expr(e.a, nest, conds, replace), e.b)
        return with_children(e, [self.expr(c, nest, conds, replace) for c in children(e)])

    def _read(self, e, nest, conds, replace):
        t = e.tensor
        facts = self.facts(conds)
        if id(t) in self.packs and all(facts.within(i, n) for i, n in zip(e.indices, t.shape)):
            return self._packed_read(e, nest, conds, replace)
        checks, parts = [], []
        for d, index in enumerate(e.indices):
            value = self.expr(index, nest, conds, replace)
            if value.dtype != dt.INDEX:
                value = Cast(dt.INDEX, value)
            if not facts.within(index, t.shape[d]):
                var = Var("checked")
                source = index.a if isinstance(index, Cast) else index
                gathered = source.tensor.name if isinstance(source, Read) and \
                    not source.tensor.is_compute else None
                self.sites.append(Site(self.st.tensor.name, t.name, d, t.shape[d],
                                       self.origins.get((t.name, d), ()), gathered))
                checks.append(Check(var, value, t.shape[d], len(self.sites) - 1))
                value = var
            parts.append(value)
        return Load(self.buffers[id(t)], _linear(zip(parts, _strides(t.shape))), checks)

    def _packed_read(self, e, nest, conds, replace):
        """A read of a packed input from its panel: the packed axis' outer
        loops pick the panel, its innermost loop the element in it."""
        axis, dim, f, buf = self.packs[id(e.tensor)]
        ax = self.axes[axis]
        parts = [_int(0) if id(e.tensor) in self.inside else
                 _linear((v, s // f) for v, s in zip(ax.vars[:-1], ax.strides[:-1]))]
        for d, index in enumerate(e.indices):
            if d != dim:
                value = self.expr(index, nest, conds, replace)
                parts.append(value if value.dtype == dt.INDEX else Cast(dt.INDEX, value))
        parts.append(ax.vars[-1])
        return Load(buf, _linear(zip(parts, _strides(buf.shape))))

    def _scalar_reduce(self, red, nest, conds):
        """A Load of `red` computed into a scalar at the outermost depth where
        its free variables and the conditions it is evaluated under are bound."""
        deps = free_vars(red) + [v for c in conds for v in free_vars(c)]
        depth = nest.depth_of(deps)
        frame = nest.frames[depth]
        key = (id(red), tuple(id(c) for c in conds))
        if key in frame.memo:
            return Load(frame.memo[key][1], _int(0))
        buf = Buffer(red.dtype, (1,), "stack", "red")
        inner = nest.upto(depth)
        tightener = _Tightener(red.cond)
        for axis in red.axes:
            start, end = tightener.bounds(axis, inner.avail)
            inner.push(_Loop(axis, self.expr(start, inner, conds),
                             self.expr(end, inner, conds), axis.extent))
        value = self.expr(red.body, inner, conds + tightener.conds())
        update = Store(buf, _int(0), _combine(red.op, Load(buf, _int(0)), value))
        leaf = self._guarded(update, inner, conds, tightener)
        loop = inner.loops[-1]
        if not inner.frames[-1].requests and not _has_checks(leaf):
            loop.kind, loop.reduction = "vectorized", (red.op, buf)
        compute = Seq([Store(buf, _int(0), _identity(red.op, red.dtype)),
                       _wrap(inner, depth, leaf)])
        frame.requests.append((buf, compute))
        frame.memo[key] = (conds, buf)
        return Load(buf, _int(0))


class _Tightener:
    """Turns conjuncts of a reduction's condition into loop bounds, axis by
    axis, as soon as the variables they use are bound; `pending` keeps the rest."""

    def __init__(self, cond):
        self.pending = [] if cond is None else [c for c in conjuncts(cond)
                                                if not Facts(()).always(c)]
        self.used = []

    def bounds(self, axis, available):
        """(start, end) te expressions of reduce `axis` given the bound variables."""
        lowers, uppers = [], []
        for c in list(self.pending):
            found = axis_bounds(c, axis, available)
            if found is not None:
                self.pending = [p for p in self.pending if p is not c]  # (== builds an Expr)
                self.used.append(c)
                lowers += found[0]
                uppers += found[1]
        return _fold("max", axis.lo, lowers), _fold("min", axis.hi, uppers)

    def conds(self):
        """The conditions that hold inside the loops (all of them, once guarded)."""
        return tuple(self.used + self.pending)
