"""schedule/split_reduce: a long sum into a small output as parallel partials
and their sum (split-K, TVM's rfactor) -- weight gradients.

A stage whose main reduction is a float sum (dW[j, k] = sum over (t, b) of
dy[t, b, j] * x[t, b, k]; a conv's weight gradient over n, oh, ow) runs
under `StageConfig.split = S` (S >= 2) as two stages, made here as te:

    P[p, i...]  = sum over chunk p of the split axis (and every other
                  reduce axis) of the body     -- p in [0, S), parallel
    out[i...]   = epilogue(sum_p P[p, i...])

The split axis is the reduce axis whose step is longest in memory
(`step_bytes`), then the one with the most points; chunk p covers
ceil(E / S) of its E points (the last fewer, its loop bounded exactly). P's schedule is the stage's own with p prepended as
the outermost loop, fused into its parallel prefix; the sum gets the
default schedule. So every output tile of one chunk runs over operands
that chunk keeps in cache, and the threads share the p loop even when the
output has too few tiles for them. A split only regroups the sum: the
terms of each output are visited in the same order, summed as S partials
(each still cascaded by schedule/accumulate.py) then added in order of p
-- one more cascade level, never less accurate.

`choose_split` is the default's cost rule (RULE below): split when the
parallel loop gives the threads (the target's, `Target.threads` from
toolchain/target.py: OMP_NUM_THREADS, else this process's CPUs, read when
the schedule is made) too few tasks, or when the operands a
reduction streams exceed the cache that a chunk's should fit, as far as the
split axis, a minimum chunk, the partials' own traffic and the contiguous
runs of the operands a chunk leaves allow. The search space samples and
mutates `split` like any other knob (the cost model does not see it yet:
measurements decide).

Hands on: `split_stages` (lower.py lowers its stages in place of one),
`choose_split` (schedule/default.py), `split_choices` / `split_problem`
(space, search, validate).
"""
import contextlib
import math
import weakref

import numpy as np

from ..te import dtype as dt
from ..te.arith import free_vars
from ..te.expr import Binary, Const, IterVar, Read, Reduce
from ..te.tensor import compute
from ..te.visit import reads, substitute, transform
from ..toolchain.target import target
from .config import ConfigError, StageConfig, accumulator_size, loop_extent, validate_stage

# The cost rule, as data (bytes, points, counts).
RULE = {
    "tasks_per_thread": 4,        # parallel iterations a thread wants (load balance)
    "chunk_bytes": 1 << 20,       # operand bytes one chunk should stream (within L2)
    "min_work": 1 << 18,          # reduce points x outputs below which nothing splits
    "min_chunk": 32,              # reduce points a partial sums at least
    "max_parts": 64,
    "partial_share": 0.5,         # the partials' bytes at most this share of the operands'
    "min_run_bytes": 1 << 18,     # contiguous bytes of each operand a chunk keeps at least:
                                  # YOLO's forward convs (1 KB runs of the weights per chunk)
                                  # and fc1 (3 KB of each weight row) ran 0.55-0.66x split,
                                  # its input-gradient convs (67 KB runs of dy) 0.5-1.07x
}


@contextlib.contextmanager
def default_splits_off():
    """Within it, the default schedule splits nothing (A/B measurements).

    >>> with default_splits_off():
    ...     default_config(Kernel([dW])).stages[0].split
    0
    """
    saved = RULE["max_parts"]
    RULE["max_parts"] = 0
    try:
        yield
    finally:
        RULE["max_parts"] = saved


def split_axis(st):
    """The position of the reduce axis a split of Stage `st` cuts, or None
    when it cannot be split (the main reduction must be a float sum, outside
    any select, of a stage scheduled as itself -- no delinearised view): of
    the axes of 2 or more points, the one whose step is longest in memory
    (`step_bytes`: a chunk of it is a few long contiguous runs of every
    operand), then the one with the most points.

    >>> split_axis(Stage(dW))      # dW[j, k] = sum over t, b of dy[t, b, j] x[t, b, k]: t
    0
    """
    red = st.reduction
    if red is None or red.op != "sum" or st.context or st.tensor is not st.source \
            or not dt.is_float(red.dtype) or not st.spatial:
        return None
    ranked = [(step_bytes(st, n), a.extent, -n) for n, a in enumerate(st.reduce_axes)
              if a.extent >= 2]
    return -max(ranked)[2] if ranked else None


def step_bytes(st, n):
    """The shortest distance in memory, over the operands of Stage `st`'s
    main reduction, between the elements one step of reduce axis `n` apart
    (the stride of the innermost dimension whose index uses it; an operand
    that does not use it does not count).

    >>> step_bytes(Stage(dW), 0), step_bytes(Stage(dW), 1)      # x[t, b, k]: 32 x 128 x 4
    (16384, 512)
    """
    axis, out = st.reduce_axes[n], math.inf
    for r in reads(st.reduction):
        dims = [d for d, index in enumerate(r.indices) if any(v is axis for v in free_vars(index))]
        if dims:
            item = np.dtype(dt.to_numpy(r.tensor.dtype)).itemsize
            out = min(out, math.prod(r.tensor.shape[dims[-1] + 1:]) * item)
    return out


def split_choices(st):
    """The part counts worth trying for Stage `st` (empty: not splittable).

    >>> split_choices(Stage(dW))[:4]
    [2, 3, 4, 6]
    """
    k = split_axis(st)
    if k is None:
        return []
    extent = st.reduce_axes[k].extent
    return sorted({_normal(extent, s) for s in range(2, min(extent, RULE["max_parts"]) + 1)})


def _normal(extent, parts):
    """The parts a split into `parts` chunks of ceil(extent / parts) really makes."""
    return -(-extent // -(-extent // parts))


def choose_split(st, sc, n_threads=None):
    """The default part count for Stage `st` under its StageConfig `sc` (0:
    none), for a parallel loop on `n_threads` threads (default: the target's,
    `target().threads`). The split stage keeps `sc`'s packed panels: each
    chunk's tiles then stream their operands from panels, not with a row's
    stride per reduction step (the LSTM's dW[512, 128] reads dgates[t, b, j]
    with a 2 KB stride, which maps every step onto the same few cache sets;
    quiet 2-core AVX2 machine, that kernel alone under both configs,
    alternated, the shapes of bench/split_reduce.py --lstm: T=64 3.5 ->
    2.6-2.8 ms, T=256 14.8-23.0 -> 13.4-17.5 ms with the panels kept).

    >>> choose_split(Stage(dW), default_config(Kernel([dW])).stages[0], 2)   # doctest: +SKIP
    20
    """
    k = split_axis(st)
    if k is None or sc.compute_at:
        return 0
    n_threads = n_threads or target().threads
    extent = st.reduce_axes[k].extent
    points = math.prod(a.extent for a in st.reduce_axes)
    outputs = math.prod(st.tensor.shape)
    if points * outputs < RULE["min_work"]:
        return 0
    itemsize = np.dtype(dt.to_numpy(st.tensor.dtype)).itemsize
    operands = sum(math.prod(t.shape) * np.dtype(dt.to_numpy(t.dtype)).itemsize
                   for t in {id(r.tensor): r.tensor for r in reads(st.reduction)}.values())
    tasks = math.prod(loop_extent(st, sc, lv) for lv in sc.order[:sc.parallel])
    want = 0
    if tasks < RULE["tasks_per_thread"] * n_threads and n_threads > 1:
        want = -(-RULE["tasks_per_thread"] * n_threads // tasks)
    tiles = outputs // max(1, accumulator_size(st, sc) if sc.cache_write else 1)
    if operands > RULE["chunk_bytes"] and tiles > 1:
        want = max(want, -(-operands // RULE["chunk_bytes"]))
    runs = extent * step_bytes(st, k) // RULE["min_run_bytes"]
    cap = min(extent, RULE["max_parts"], points // RULE["min_chunk"], runs,
              int(RULE["partial_share"] * operands // (outputs * itemsize)))
    parts = _normal(extent, min(want, cap)) if min(want, cap) >= 2 else 0
    return parts if parts >= 2 else 0


def sample_split(st, sc, rng, configs):
    """Set `sc.split` at random (none half the time) among `split_choices`,
    where neither it nor the stage after it (in `configs`) is computed at
    the one before."""
    choices = split_choices(st)
    n = next(i for i, c in enumerate(configs) if c is sc)
    if not choices or sc.compute_at or (n + 1 < len(configs) and configs[n + 1].compute_at):
        sc.split = 0
        return
    sc.split = rng.choice(choices) if rng.random() < 0.5 else 0


def split_problem(st, sc):
    """Why `sc.split` does not fit Stage `st`, or None."""
    s = sc.split
    if not s:
        return None
    if not isinstance(s, int) or s < 2:
        return f"split must be 0 (none) or a part count >= 2, got {s!r}"
    k = split_axis(st)
    if k is None:
        return ("split needs a main reduction that is a float sum outside any select, of a "
                "stage without a delinearised view")
    extent = st.reduce_axes[k].extent
    if s > extent or _normal(extent, s) != s:
        return (f"split {s} does not cut reduce axis r{k} ({extent} points) into {s} chunks "
                f"of equal size but the last; try one of {split_choices(st)}")
    if sc.compute_at:
        return "a split stage cannot be computed at the stage before"
    return None


# -- the rewrite -----------------------------------------------------------------------

_made = weakref.WeakKeyDictionary()   # tensor -> {parts: (partials, total)}


def split_tensors(tensor, st, parts):
    """(P, total): te tensors computing `tensor` (Stage `st`) as `parts`
    partial sums P[p, ...] and their sum `total` (same shape, dtype and name
    as `tensor`). Made once per (tensor, parts).

    >>> P, total = split_tensors(dW, Stage(dW), 4); P.shape
    (4, 512, 128)
    """
    memo = _made.setdefault(tensor, {})
    if parts not in memo:
        memo[parts] = _rewrite(tensor, st, parts)
    return memo[parts]


def _rewrite(tensor, st, parts):
    red, k = st.reduction, split_axis(st)
    cut = red.axes[k]
    chunk = -(-cut.extent // parts)
    fresh = [IterVar(f"{a.name}_c" if n == k else a.name, 0 if n == k else a.lo,
                     chunk if n == k else a.hi, "reduce") for n, a in enumerate(red.axes)]

    def partial(p, *index):
        at = Binary("add", Binary("mul", p, Const(chunk, dt.INDEX), dt.INDEX),
                    fresh[k], dt.INDEX)
        if cut.lo:
            at = Binary("add", at, Const(cut.lo, dt.INDEX), dt.INDEX)
        mapping = dict(zip(st.spatial, index))
        mapping.update({a: f for n, (a, f) in enumerate(zip(red.axes, fresh)) if n != k})
        mapping[cut] = at
        body = substitute(red.body, mapping)
        cond = None if red.cond is None else substitute(red.cond, mapping)
        if chunk * parts != cut.extent:     # the last chunk is shorter
            inside = Binary("lt", at, Const(cut.hi, dt.INDEX), dt.BOOL)
            cond = inside if cond is None else Binary("and", cond, inside, dt.BOOL)
        return Reduce("sum", body, fresh, cond)

    P = compute((parts,) + tensor.shape, partial, name=f"{tensor.name}_part")
    q = IterVar("split_p", 0, parts, "reduce")

    def total(*index):
        mapping = dict(zip(st.spatial, index))
        summed = Reduce("sum", Read(P, (q,) + tuple(index)), (q,))
        return substitute(transform(tensor.op.body, lambda n: summed if n is red else n),
                          mapping)

    return P, compute(tensor.shape, total, name=tensor.name)


def split_stages(tensor, sc, buffers):
    """[(tensor, StageConfig)] to lower for `tensor` under `sc`: itself, or
    (when `sc.split`) its partials and their sum -- the partials get a local
    heap buffer in `buffers` (also returned, for the caller to allocate), the
    sum the buffer of `tensor`.

    >>> pieces, local = split_stages(dW, sc, buffers)   # sc.split == 4: [(P, ..), (total, ..)]
    """
    from .default import default_config     # default.py imports this module
    from .stage import Stage
    from .loop_ir import Buffer
    if not sc.split:
        return [(tensor, sc)], []
    st = Stage(tensor)
    P, total = split_tensors(tensor, st, sc.split)
    pst = Stage(P)
    if pst.tensor is not P:
        raise ConfigError(f"stage '{tensor.name}': its partial sums are scheduled through a "
                          "view; split must be 0")
    pieces = [(P, partial_config(st, sc, pst)), (total, default_config(_One(total)).stages[0])]
    pieces[1][1].split = 0                  # the sum of the partials is not split again
    for piece, psc in pieces:
        validate_stage(Stage(piece), psc, f"stage '{piece.name}' of split '{tensor.name}'")
    buffers[id(P)] = Buffer(P.dtype, P.shape, "heap", "local")
    buffers[id(total)] = buffers[id(tensor)]
    return pieces, [buffers[id(P)]]


class _One:
    """A kernel of one stage, as default_config reads one."""

    def __init__(self, t):
        self.stages, self.inputs = (t,), tuple({id(r.tensor): r.tensor
                                                for r in reads(t.op.body)}.values())


def partial_config(st, sc, pst):
    """The schedule of the partials (Stage `pst`) from the stage's own `sc`:
    p outermost and unsplit, joining the parallel prefix; every other loop as
    in `sc` (of the split axis' factors, the inner ones that fit its chunk)."""
    k = split_axis(st)
    cut, chunk = f"r{k}", pst.reduce_axes[k].extent
    factors = list(sc.tile[cut])
    while factors and math.prod(factors) > chunk:
        factors.pop(0)
    dropped = len(sc.tile[cut]) - len(factors)

    def axis(a):             # P's name of an axis of the stage: p is s0
        return f"s{int(a[1:]) + 1}" if a.startswith("s") else a

    def moved(level):        # sc's loop -> P's (None: an outer level of the split axis dropped)
        a, j = level.split(".")
        if a == cut:
            return f"{a}.{int(j) - dropped}" if int(j) >= dropped else None
        return f"{axis(a)}.{j}"

    tile = {axis(a): list(f) for a, f in sc.tile.items()}
    tile[cut], tile["s0"] = factors, []
    order = ["s0.0"] + [moved(lv) for lv in sc.order if moved(lv)]
    unroll = {moved(lv): f for lv, f in sc.unroll.items() if moved(lv)}
    vectorize = None if sc.vectorize is None else axis(sc.vectorize)
    pack = _same_inputs(st.packable, pst.packable, sc.pack, lambda e: (id(e[0]), e[2]))
    pad = _same_inputs(st.paddable, pst.paddable, sc.pad, lambda e: id(e[0]))
    return StageConfig(tile, order, sc.parallel + 1, vectorize, unroll, sc.cache_write,
                       pack, pad)


def _same_inputs(mine, theirs, chosen, key):
    """The numbers into `theirs` of the entries `chosen` from `mine` (same key)."""
    where = {key(e): n for n, e in enumerate(theirs)}
    return sorted(where[key(mine[n])] for n in chosen if key(mine[n]) in where)
