"""schedule/default: a good schedule for any kernel without search.

Per stage:
* elementwise: the last (unit-stride) axis innermost and vectorised, the
  other axes (or, for 1-d, blocks of the single axis) one parallel loop;
* a reduction whose output has a unit-stride axis that some operand reads
  contiguously (matmul's j, conv's w): register blocking -- a tile of up
  to 12 SIMD vectors of outputs (e.g. 6 rows x 2 vectors) accumulates in
  a local array while the reduce loops run between the outer tile loops
  and the tile itself; the rows come from an axis that contiguous operand
  does not depend on (matmul's i, conv's output channel), so each of its
  vector loads serves every row of the tile; when panels of that operand
  serve many rows over a long reduction, it is packed first (GEMM's B);
* a window reduction (conv2d: several reduce axes) whose contiguous axis is
  short: the same register blocking across the output channels instead,
  with the weights packed into channel panels (two vectors of channels by a
  few output points);
* any other reduction: reduce loops innermost into a scalar (vectorised
  as a SIMD reduction over a unit-stride axis).
Small stages run on one thread.

Hands on: a `Config` that `validate` accepts.
"""
import math

from ..te.arith import free_vars, linear_form
from ..te.visit import reads
from .config import Config, StageConfig, level_names
from .stage import Stage

VECTOR_BYTES = 32        # AVX2
ACCUMULATORS = 12        # vector registers a register tile may hold (of 16)
TAIL_COST = 3            # a partial tile (exact bounds, in memory) costs about 3 whole ones
PARALLEL_MIN_WORK = 1 << 15
ELEMENTWISE_CHUNK = 1024  # elements per parallel block of a 1-d elementwise stage
WINDOW_MIN_WIDTH = 64     # a window reduction narrower than this vectorises across channels
PACK_MIN_ROWS = 32        # rows (and reduction length) a packed panel must serve
PACK_MIN_REDUCE = 64


def default_config(kernel):
    """The default schedule of `kernel`.

    >>> cfg = default_config(kernels_for([C])[0])
    >>> cfg.stages[0].vectorize
    's1'
    """
    return Config([_stage_default(Stage(t)) for t in kernel.stages])


def _stage_default(st):
    lanes = max(1, VECTOR_BYTES // _itemsize(st.tensor.dtype))
    work = math.prod(a.extent for a in st.spatial + st.reduce_axes)
    if st.reduction is None:
        sc = _elementwise(st)
    else:
        v = _vector_axis(st)
        channels = _channel_panel(st, v, lanes)
        if channels is not None:
            sc = _channel_blocked(st, channels, lanes)
        else:
            sc = _blocked(st, v, lanes) if v is not None else _rowwise(st)
        sc.pad = list(range(len(st.paddable)))
    if work < PARALLEL_MIN_WORK:
        sc.parallel = 0
    return sc


def _itemsize(dtype):
    return {"float32": 4, "int32": 4, "float64": 8, "int64": 8, "bool": 1}[dtype]


def _unsplit(st):
    return {a: [] for a in st.axis_names}


def _elementwise(st):
    n = len(st.spatial)
    tile = _unsplit(st)
    if n == 0:
        return StageConfig(tile, [])
    if n == 1 and st.spatial[0].extent > 4 * ELEMENTWISE_CHUNK:
        tile["s0"] = [ELEMENTWISE_CHUNK]
    order = [lv for a in st.axis_names for lv in level_names(a, tile[a])]
    return StageConfig(tile, order, parallel=len(order) - 1, vectorize=f"s{n - 1}")


def _unit_stride_reads(st, var):
    """Reads in the main reduction's body that stream over the reduction (use
    a reduce axis) and whose last index steps by 1 with `var`."""
    axes = {id(a) for a in st.reduce_axes}
    out = []
    for r in reads(st.reduction.body):
        if not r.indices or not any(id(v) in axes for i in r.indices for v in free_vars(i)):
            continue
        form = linear_form(r.indices[-1])
        if form is not None and form.terms.get(var) == 1:
            out.append(r)
    return out


def _vector_axis(st):
    """The last spatial axis, if an operand of the reduction reads along it contiguously."""
    if st.spatial and _unit_stride_reads(st, st.spatial[-1]):
        return len(st.spatial) - 1
    return None


def _row_axis(st, v):
    """A spatial axis (not v) that a contiguous operand along v does not depend on."""
    contiguous = _unit_stride_reads(st, st.spatial[v])
    best = None
    for d, axis in enumerate(st.spatial):
        if d == v:
            continue
        if any(all(linear_form(i) is not None and axis not in linear_form(i).terms
                   for i in r.indices) for r in contiguous):
            if best is None or axis.extent > st.spatial[best].extent:
                best = d
    return best


def _register_tile(v_extent, u_extent, lanes):
    """(columns, rows) of the register tile: at most ACCUMULATORS vectors, as
    many as fit, two vectors per row if that costs little, few tails (a
    partial tile runs a slower exact path: counted as TAIL_COST tiles).

    >>> _register_tile(1024, 1024, 8), _register_tile(56, 64, 8)
    ((16, 6), (8, 8))
    """
    def cost(extent, f):  # time per element relative to whole tiles
        return (extent // f + TAIL_COST * (extent % f > 0)) * f / extent

    best = None
    for vectors in (2, 1):
        cols = min(vectors * lanes, v_extent)
        for rows in range(1, min(ACCUMULATORS // vectors, u_extent) + 1):
            score = vectors * rows * (1.05 if vectors == 2 else 1.0) / (
                cost(v_extent, cols) * cost(u_extent, rows))
            if best is None or score > best[0] + 1e-9:
                best = (score, cols, rows)
    return best[1], best[2]


def _blocked(st, v, lanes):
    tile = _unsplit(st)
    sv = f"s{v}"
    u = _row_axis(st, v)
    su = None if u is None else f"s{u}"
    vf, uf = _register_tile(st.spatial[v].extent, 1 if u is None else st.spatial[u].extent,
                            lanes)
    if vf < st.spatial[v].extent:
        tile[sv] = [vf]
    if u is None or uf == 1:
        su = None
    elif uf < st.spatial[u].extent:
        tile[su] = [uf]
    outer, inner = [], []
    for d in range(len(st.spatial)):
        a = f"s{d}"
        levels = level_names(a, tile[a])
        if a in (sv, su) and len(levels) == 2:
            outer.append(levels[0])
            inner.append(levels[1])
        elif a in (sv, su):
            inner.append(levels[0])
        else:
            outer.append(levels[0])
    inner.sort(key=lambda lv: lv.split(".")[0] == sv)  # the vector loop innermost
    # the longest reduce loop innermost: the tile stays in registers across it
    # (short loops, like a 3x3 window, gcc unrolls away)
    by_extent = sorted(range(len(st.reduce_axes)), key=lambda k: st.reduce_axes[k].extent)
    reduce_levels = [f"r{k}.0" for k in by_extent]
    unroll = {}
    if su is not None and len(inner) == 2 and uf >= 2:
        unroll[inner[0]] = uf
    return StageConfig(tile, outer + reduce_levels + inner, parallel=len(outer),
                       vectorize=sv, unroll=unroll, cache_write=True,
                       pack=_panels(st, v, tile, u))


def _panels(st, v, tile, u):
    """Pack the contiguous operand along the vector axis into panels when
    every panel serves many rows and a long reduction (GEMM's B): one
    contiguous stream per register tile instead of a stride per step."""
    sv = f"s{v}"
    if not tile[sv] or u is None or st.spatial[u].extent < PACK_MIN_ROWS or math.prod(
            a.extent for a in st.reduce_axes) < PACK_MIN_REDUCE:
        return []
    contiguous = {id(r.tensor) for r in _unit_stride_reads(st, st.spatial[v])}
    return [n for n, (t, axis, _) in enumerate(st.packable)
            if axis == sv and id(t) in contiguous]


def _channel_panel(st, v, lanes):
    """For a window reduction (two or more reduce axes, e.g. conv2d) whose
    contiguous axis is short, the packable operand to vectorise across
    instead -- the weights along the output channels -- as its number in
    `st.packable`, when that axis fills whole pairs of vectors; else None."""
    if v is None or len(st.reduce_axes) < 2 or st.spatial[v].extent >= WINDOW_MIN_WIDTH:
        return None
    for n, (t, axis, _) in enumerate(st.packable):
        if axis != f"s{v}" and st.extent(axis) % (2 * lanes) == 0:
            return n
    return None


def _channel_blocked(st, n, lanes):
    """Register tile: two vectors of the packed operand's axis (channels) by
    a few points of the contiguous axis, reduce loops outside it."""
    tensor, sc_axis, _ = st.packable[n]
    sv = f"s{len(st.spatial) - 1}"
    tile = _unsplit(st)
    _, rows = _register_tile(2 * lanes, st.extent(sv), lanes)
    tile[sc_axis] = [2 * lanes]
    if rows < st.extent(sv):
        tile[sv] = [rows]
    outer = [f"{a}.0" for a in st.axis_names if a.startswith("s") and (tile[a] or a != sv)]
    inner = [f"{sv}.{len(tile[sv])}", f"{sc_axis}.1"]
    reduce_levels = [f"r{k}.0" for k in range(len(st.reduce_axes))]
    return StageConfig(tile, outer + reduce_levels + inner, parallel=len(outer),
                       vectorize=sc_axis, unroll={inner[0]: rows} if rows >= 2 else {},
                       cache_write=True, pack=[n])


def _rowwise(st):
    tile = _unsplit(st)
    spatial = [f"s{d}.0" for d in range(len(st.spatial))]
    reduce_levels = [f"r{k}.0" for k in range(len(st.reduce_axes))]
    vectorize = None
    last = st.reduce_axes[-1]
    if _unit_stride_reads(st, last):
        vectorize = f"r{len(st.reduce_axes) - 1}"
    return StageConfig(tile, spatial + reduce_levels, parallel=len(spatial),
                       vectorize=vectorize, cache_write=True)
