"""schedule/default: a good schedule for any kernel without search.

Per stage:
* elementwise: the last (unit-stride) axis innermost and vectorised, the
  outer axes (or, for 1-d, blocks of the single axis) fused into one
  parallel loop, as few as give PARALLEL_MIN_CHUNKS iterations (the others
  stay serial, where loop partitioning can cut them);
* a reduction whose output has a unit-stride axis that some operand reads
  contiguously (matmul's j, conv's w): register blocking -- a tile of as
  many SIMD vectors of outputs as the target's registers allow (AVX2's 16:
  12, e.g. 6 rows x 2 vectors of 8 floats; AVX-512's 32: 28, 14 rows x 2
  vectors of 16; toolchain/target.py says which) accumulates in
  a local array while the reduce loops run between the outer tile loops
  and the tile itself; the rows come from an axis that contiguous operand
  does not depend on (matmul's i, conv's output channel), so each of its
  vector loads serves every row of the tile; when panels of that operand
  serve many rows over a long reduction, it is packed first (GEMM's B;
  one small enough to stay in cache only when its panels serve many
  register tiles: an RNN step's 32 rows read W_hh in place),
  and so is the operand the rows read (GEMM's A) when its panels serve
  several tiles;
* a reduction read through flattened indices (`qkv[b * T + i, h * hd + e]`),
  seen through its delinearised view (schedule/delinearize.py): a batched
  contraction, register-blocked the same way along its contiguous axis;
* a reduction that no operand reads contiguously along its last output axis
  (dense's x[b, k] * W[j, k]): the same register blocking, with the
  operands indexed by that axis packed into panels along it first;
* a convolution whose contiguous axis is short (a small image, a strided
  window): the same register blocking across the output channels instead,
  with the weights packed into channel panels (two vectors of channels by a
  few output points);
* a reduction over a small window read with strides (max_pool2d with
  stride 2): the reduce loops around a vector of output points;
* any other reduction: reduce loops innermost into a scalar (vectorised
  as a SIMD reduction over a unit-stride axis) -- also one whose
  contiguous output axis is shorter than a vector while its operands all
  stream along the last reduce axis (a small conv's weight gradient).
Small stages run on one thread (`parallel_min_work`). A run of stages that
can be computed at one another is chained that way (`compute_at`) when two
of them call a transcendental (exp, tanh, ...) on the same elements -- a
gradient re-evaluating the forward's sigmoids: in their one row loop
schedule/loop_fusion.py fuses the stages' inner loops and evaluates each
shared call once (LLTM cell forward+backward 7-10% faster). Otherwise each
stage keeps its own parallel loop, which with spinning OpenMP threads
measured as fast or 2-3% faster (MI-LSTM gates); the search tries both.

On a GPU (target="cuda") each stage keeps the one loop shape
codegen/triton maps onto a grid (config.gpu_stage_config) and the launch
knobs follow Inductor's heuristics: a pointwise kernel takes blocks of up to
1024 lanes; a reduction of at most 1024 points per output runs persistent
(one block covers it, next power of two) with as many outputs per program
as keep a tile within 4096 elements, a longer one loops over blocks of 1024
with one output per program; warps grow with the tile (256 elements per
warp, 1..8).

Hands on: a `Config` that `validate` (and for "cuda" `validate_gpu`) accepts.
"""
import math
import os

from ..te.arith import conjuncts, free_vars, is_index_expr, linear_form
from ..te.expr import Binary, Const, IterVar, Read, Select, Unary
from ..te.flops import condition_share
from ..te.simplify import conjunction
from ..te.visit import children, post_order, reads
from ..toolchain.target import target as simd_target
from .config import (Config, GpuParams, StageConfig, compute_at_problem, gpu_stage_config,
                     level_extents, level_names)
from .split_reduce import choose_split, step_bytes
from .stage import Stage

REGISTER_RESERVE = 4     # vector registers a register tile leaves to operands and broadcasts
                         # (of AVX2's 16: 12 accumulators; of AVX-512's 32: 28)
TAIL_COST = 3            # a partial tile counts as about 3 whole ones (measured again since
                         # register tiles' edge tiles run whole, schedule/lower.py: at 1 the
                         # tiles it chose on LeNet ran 8-42% slower, on MobileNet-v2 5-14%)
LONG_ROW_TAIL_COST = 2   # ... but a row tail of a 2-vector tile over a reduction of at least
LONG_REDUCTION = 128     # LONG_REDUCTION points as 2 (`_register_tile`)
PARALLEL_MIN_WORK = 1 << 15          # work (points x reduce points x _point_cost) below
PARALLEL_MIN_WORK_PASSIVE = 1 << 21  # which a stage runs on one thread; larger when OpenMP
                                     # threads sleep between parallel loops
                                     # (OMP_WAIT_POLICY=PASSIVE): waking costs more
INTRINSIC_COST = 8        # a vector exp, log, tanh, sigmoid, erf or pow in plain operations
INTRINSICS = ("exp", "log", "tanh", "sigmoid", "erf")
ELEMENTWISE_CHUNK = 1024  # elements per parallel block of a 1-d elementwise stage
PARALLEL_MIN_CHUNKS = 64  # outer loops an elementwise stage fuses into its parallel loop
WINDOW_MIN_WIDTH = 64     # a window reduction narrower than this vectorises across channels
PANELS_FIRST_RATIO = 16   # a channel-blocked tile's packed weights at least this many times its
                          # output's bytes (and past COLUMNS_FIRST_BYTES) go panel by panel:
                          # quiet machine, per-kernel A/B over the zoo: YOLO-v1's 1024ch 3x3 over
                          # 7x7 (94x) 27.5 -> 11.6 ms, its input gradient 26.8 -> 14.4, 512ch
                          # 7x7 (23x) 6.9 -> 5.2, ResNet-3D's 512ch (1700x) 3.7 -> 1.8; below
                          # it slower: YOLO's 512ch 14x14 (6x) 5.8 -> 6.8, CapsNet's primary
                          # input gradient (3x) 57 -> 89
PANEL_LOOP_MIN = 8        # column tiles for the panel loop to run in parallel on its own
PACK_MIN_ROWS = 32        # rows (and reduction length) a packed panel must serve
PACK_MIN_REDUCE = 64
PANEL_MIN_ROW_TILES = 8   # register tiles of rows each panel of a cached operand must serve to pay
CACHED_PANEL_BYTES = 512 << 10  # operand size to here: it stays in cache, read in place
                                # (_panel_copy_pays, _row_panels; a Zen 3 L2)
ROW_PANEL_MIN_BYTES = 16 << 20  # rows' operand of a wide tile packed from here (_row_panels)
COLUMNS_FIRST_BYTES = 2 << 20   # a packed operand larger than an L2 (Zen 3: 512K, Sapphire
                                # Rapids: 2M) goes column panel by column panel (_columns_first)
SMALL_WINDOW = 32         # reduce points below which a reduction vectorises across its output
SMALL_WINDOW_MIN_ROW = 2  # output row points a small window needs to vectorise across them
# Channel-blocked tiles by the target's vector registers: (vectors of channels,
# candidate output points along the row axis: see TAIL_GAIN below).
# 16 registers (AVX2): 2 vectors x 5 points, 10 accumulators -- measured on the
# ResNet-18 3x3 convs at batch 8: 99-126 GFLOP/s, against 70-95 with 4, 6 or 7
# points (7 x 2 vectors spill). 32 (AVX-512, 16-float vectors), one Sapphire
# Rapids core, loaded, 1 x 5 against 2 x 8 (or 7): conv2d 3x3 64ch 56x56 104-111
# against 90-100, conv3d 64ch 4x14x14 116 against 101, CapsNet's 9x9/2 input
# gradient 44 against 32, conv_transpose2d 128->64ch 82 against 73; but
# conv_transpose2d's weight gradient 69 against 79 and a 3x3/2 input gradient
# 61 against 72 (no rule found that tells them apart; the search tries both).
# 12-14 points by 2 vectors were slower than 8 everywhere.
# The third entry: a row of at most that many points is one tile, and where it
# is shorter, rows of a second output axis join the tile up to that many
# points. AVX-512, DCGAN's 4x4/2 discriminator convs at batch 16 (in process,
# quiet machine): 64->128ch onto 8x8, the whole row of 8 against 5 + a tail
# of 3: 193 against 126 GFLOP/s; 128->256ch onto 4x4, 2 rows x 4 against
# 1 x 4: 136-159 against 78-86 (3 or 4 rows: 92-110); ResNet's 3x3 on
# 56-wide rows keeps 5 (8 there: 136 against 168). Not measured on AVX2,
# which keeps its tile (0: no short-row rule).
# The fourth: the candidate points along an outer row axis (one taken because
# the reduction's `where=` range binds the last: a transposed conv's phases
# with bounded taps, a weight gradient), the first unless a later one cuts
# the tails' cost by TAIL_GAIN. AVX-512, DCGAN's phase kernels (rows
# from the batch of 16), ms: 5 points (3 tiles and a tail) 2.1-3.1, 4 points
# 1.3-1.6, 8 points 1.5-1.8; but weight gradients with rows from 128 input
# channels 3-12% slower with 4 than with 5 (25 tiles and a tail); along the
# last axis 4 was the slowest (above).
# Of a list of candidates the first is taken unless a later one cuts the
# tails' cost by TAIL_GAIN: on AVX-512 7 points where 5 leave a costly tail
# (conv3d 64ch 4x14x14 at batch 2: 14 = 2 x 7 against 2 x 5 and a tail of 4,
# 214 against 183 GFLOP/s; 56-wide rows keep 5: 7 there 152 against 160-168).
# AVX2 (a 2-core AVX2 EPYC, kernels alone, old and new alternated): 3 points
# along the row where 5 leave a costly tail (rows of 6, 9, 12), 4 along an
# outer axis: CapsNet's primary conv onto 6x6, 5 + a shifted tail (10 points
# for 6) 135 ms against 97 with 2 x 3 (the whole row, 12 accumulators: 112),
# its weight gradient over 9-wide rows 117 -> 109 ms and conv1's 3.7 -> 3.5;
# 4 points from the batch of 16: CapsNet's input gradient 161 -> 140 ms,
# DCGAN's phase kernels 5.8 -> 3.7 and 5.6 -> 4.3, MobileNet-v2's
# depthwise input gradients 1.07-1.43x (one DCGAN conv_transpose2d of 0.6 ms
# 0.90x). The only zoo kernels that change.
CHANNEL_TILES = {16: (2, (5, 3), 0, (5, 4)), 32: (1, (5, 7), 8, (5, 4))}
TAIL_GAIN = 1.5
CLIPPED_WINDOW_SHARE = 0.5   # see _clipped_windows_outside
CLIPPED_WINDOW_REUSE = 16


GPU_TILE = 4096            # elements of a GPU program's register tile (lanes x block)
GPU_PERSISTENT_MAX = 1024  # reduce points per output that run as one persistent block
GPU_POINTWISE_BLOCK = 1024
GPU_ELEMS_PER_WARP = 256


def default_config(kernel, target="cpu"):
    """The default schedule of `kernel` on `target` ("cpu" or "cuda").

    >>> cfg = default_config(kernels_for([C])[0])
    >>> cfg.stages[0].vectorize
    's1'
    >>> default_config(kernels_for([C])[0], target="cuda").gpu.reduction
    'persistent'
    """
    stages = [Stage(t) for t in kernel.stages]
    if target == "cuda":
        return Config([gpu_stage_config(st) for st in stages], _gpu_params(stages))
    simd = simd_target()
    configs = [_stage_default(st, simd) for st in stages]
    _chain_sharing_stages(stages, configs, kernel.inputs)
    for n, (st, sc) in enumerate(zip(stages, configs)):   # schedule/split_reduce.py
        if not (n + 1 < len(configs) and configs[n + 1].compute_at):
            sc.split = choose_split(st, sc, simd.threads)
    return Config(configs)


def _gpu_params(stages):
    reduce = max((st.reduce_axes[-1].extent for st in stages if st.reduce_axes), default=0)
    if not reduce:
        xblock, rblock, strategy = GPU_POINTWISE_BLOCK, 1, "looped"
    elif reduce <= GPU_PERSISTENT_MAX:
        rblock = 1 << (reduce - 1).bit_length()
        xblock, strategy = max(1, GPU_TILE // rblock), "persistent"
    else:
        xblock, rblock, strategy = 1, GPU_PERSISTENT_MAX, "looped"
    warps = min(8, max(1, (xblock * rblock) // GPU_ELEMS_PER_WARP))
    return GpuParams(xblock=xblock, rblock=rblock, num_warps=1 << (warps.bit_length() - 1),
                     num_stages=1, reduction=strategy)


def _chain_sharing_stages(stages, configs, inputs):
    """Set compute_at on each maximal run of stages that can be computed at one
    another where two stages call a transcendental on the same elements
    (relative to their point, the pieces of a partitioned axis aligned)."""
    for n in range(1, len(stages)):
        configs[n].compute_at = compute_at_problem(stages, configs, n, inputs) is None
    n = 0
    while n < len(stages):
        end = n + 1
        while end < len(stages) and configs[end].compute_at:
            end += 1
        seen, shared = set(), False
        for st in stages[n:end]:
            calls = _calls(st)
            shared |= bool(calls & seen)
            seen |= calls
        if not shared:
            for sc in configs[n + 1:end]:
                sc.compute_at = False
        n = end


def _calls(st):
    """The transcendental calls of a stage, as keys equal for the same function
    of the same elements relative to the stage's point. Under a select whose
    condition starts the last axis at lo, the point counts from lo, as where
    loop partitioning cuts that axis (`dgates[i, j]` for j in [128, 256) reads
    `gates[i, j]` as `h_new[i, s]` reads `gates[i, 128 + s]`)."""
    axes = {id(v): n for n, v in enumerate(st.spatial)}
    last = st.spatial[-1] if st.spatial else None
    out = set()

    def walk(e, shift):
        if isinstance(e, Unary) and e.op in INTRINSICS:
            out.add(_point_key(e, axes, last, shift))
        if isinstance(e, Select):
            walk(e.cond, shift)
            walk(e.t, _start(e.cond, last, shift))
            walk(e.f, shift)
            return
        for c in children(e):
            walk(c, shift)
    walk(st.tensor.op.body, 0)
    return out


def _start(cond, var, shift):
    """The smallest value of `var` an affine bound in `cond` allows (`j >= 128`),
    if above `shift`; else `shift`."""
    start = shift
    for c in conjuncts(cond):
        if isinstance(c, Binary) and c.op in ("ge", "gt", "le", "lt"):
            a, b = linear_form(c.a), linear_form(c.b)
            if a is None or b is None:
                continue
            form = a - b if c.op in ("ge", "gt") else b - a      # form >= 0 (> 0)
            if set(form.terms) == {var} and form.terms[var] == 1:
                start = max(start, -form.const + (c.op in ("gt", "lt")))
    return start


def _point_key(e, axes, last, shift):
    if isinstance(e, Read):
        return ("read", id(e.tensor),
                tuple(_index_key(i, axes, last, shift) for i in e.indices))
    if isinstance(e, IterVar):
        return ("axis", axes.get(id(e), id(e)))
    if isinstance(e, Const):
        return ("const", e.dtype, repr(e.value))
    return (type(e).__name__, getattr(e, "op", None),
            tuple(_point_key(c, axes, last, shift) for c in children(e)))


def _index_key(index, axes, last, shift):
    form = linear_form(index)
    if form is None:
        return _point_key(index, axes, last, shift)
    const = form.const + form.terms.get(last, 0) * shift
    return (const, frozenset((axes.get(id(v), id(v)), c) for v, c in form.terms.items()))


def _stage_default(st, simd):
    lanes = simd.lanes(st.tensor.dtype)
    registers = simd.vector_registers
    work = math.prod(a.extent for a in st.spatial + st.reduce_axes) * _point_cost(st)
    if st.reduction is None:
        sc = _elementwise(st)
    else:
        v = _vector_axis(st)
        channels = None if _flattened_contraction(st, v) else _channel_panel(st, v, lanes,
                                                                             registers)
        transposed = _transposed_panel(st, lanes) if v is None else None
        if channels is not None:
            sc = _channel_blocked(st, channels, lanes, registers)
        elif transposed is not None:
            sc = _blocked(st, len(st.spatial) - 1, lanes, registers, packed=transposed)
        elif v is None and _small_window(st):
            sc = _blocked(st, len(st.spatial) - 1, lanes, registers, address_order=False)
        elif v is not None and not _short_row_long_stream(st, v, lanes):
            sc = _blocked(st, v, lanes, registers)
        else:
            sc = _rowwise(st)
        sc.pad = list(range(len(st.paddable)))
    if work < parallel_min_work():
        sc.parallel = 0
    return sc


def _flattened_contraction(st, v):
    """Whether `st` is a reduction seen through its delinearised view
    (schedule/stage.py) with a contiguous last axis `v`: a batched
    contraction (attention's d(qkv) per head), register-blocked along v like
    a matmul -- not channel-blocked, which its batch axes (often a multiple
    of two vectors) would otherwise invite."""
    return v is not None and st.tensor is not st.source


def _point_cost(st):
    """The work of one point of `st`'s body, in plain operations: 1, plus
    INTRINSIC_COST per transcendental call (an MI-LSTM cell update's three
    sigmoids and two tanh over 64x256 points took 130 us on one thread).

    >>> _point_cost(Stage(nf.compute((4,), lambda i: nf.exp(A[i]) + nf.tanh(A[i]))))
    17
    """
    calls = sum(1 for e in post_order(st.tensor.op.body)
                if isinstance(e, Unary) and e.op in INTRINSICS
                or isinstance(e, Binary) and e.op == "pow")
    return 1 + INTRINSIC_COST * calls


def parallel_min_work():
    """The work (points x reduce points x cost per point) a stage needs to
    run on several threads: spinning OpenMP threads (the default) start a parallel loop in
    about a microsecond, sleeping ones (OMP_WAIT_POLICY=PASSIVE, as the
    benchmarks set when they time PyTorch in turn) in tens of microseconds.

    >>> parallel_min_work() in (PARALLEL_MIN_WORK, PARALLEL_MIN_WORK_PASSIVE)
    True
    """
    passive = os.environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
    return PARALLEL_MIN_WORK_PASSIVE if passive else PARALLEL_MIN_WORK


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
    parallel, chunks = 0, 1
    while parallel < len(order) - 1 and chunks < PARALLEL_MIN_CHUNKS:
        axis, depth = order[parallel].split(".")
        chunks *= level_extents(st.extent(axis), tile[axis])[int(depth)]
        parallel += 1
    return StageConfig(tile, order, parallel=parallel, vectorize=f"s{n - 1}")


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


def _contiguous_operands(st, var):
    """Ids of the operands of `st`'s main reduction whose every read steps by
    1 with `var` in its last index (`_unit_stride_reads`): whole vectors
    along `var` without a copy."""
    unit = {id(r) for r in _unit_stride_reads(st, var)}
    contiguous, strided = set(), set()
    for r in reads(st.reduction.body):
        (contiguous if id(r) in unit else strided).add(id(r.tensor))
    return contiguous - strided


def _vector_axis(st):
    """The last spatial axis, if an operand of the reduction reads along it contiguously."""
    if st.spatial and _unit_stride_reads(st, st.spatial[-1]):
        return len(st.spatial) - 1
    return None


def _short_row_long_stream(st, v, lanes):
    """Whether the contiguous output axis v is shorter than a vector while
    every operand streams contiguously along the last reduce axis, for at
    least a vector: a small conv's weight gradient (LeNet's conv1,
    dW[6, 1, 5, 5] over rows of 28). Register-blocked along v its vectors
    would be mostly lanes past the row; `_rowwise` vectorises the reduction
    along the stream instead (2-core AVX2, alternated: that kernel 3.8 ->
    1.9 ms, LeNet's step 7.8 -> 5.8 ms; ShuffleNet's depthwise weight
    gradients, 3x3 over rows of 8, 0.94 -> 0.92 ms).

    >>> _short_row_long_stream(Stage(dW_conv1), 3, 8)     # dW[6, 1, 5, 5] over rows of 28
    True
    """
    last = st.reduce_axes[-1] if st.reduce_axes else None
    return (st.spatial[v].extent < lanes and last is not None and last.extent >= lanes
            and len(_unit_stride_reads(st, last)) == len(reads(st.reduction.body)))


def _transposed_panel(st, lanes):
    """For a reduction that no operand reads contiguously along its last
    spatial axis (dense's x[b, k] * W[j, k]), the operands to pack into
    panels along that axis -- which makes them contiguous there -- as numbers
    into `st.packable`; None when there is none, the axis is too short to
    split into register tiles, the reduction too short to pay for the copy,
    or another operand of the reduction depends on that axis (a masked
    softmax's scores x[b, l * 64 + r] beside its mask m[l, r]: vectorised
    along l they would be gathered; row by row both stream along r)."""
    last = f"s{len(st.spatial) - 1}"
    if not st.spatial or st.extent(last) <= 2 * lanes or math.prod(
            a.extent for a in st.reduce_axes) < 2 * lanes or _reuse(st, last) < lanes:
        return None
    packed = [n for n, (_, axis, _) in enumerate(st.packable) if axis == last]
    tensors = {id(st.packable[n][0]) for n in packed}
    var = st.spatial[-1]
    if any(id(r.tensor) not in tensors and any(id(var) in map(id, free_vars(i))
                                               for i in r.indices)
           for r in reads(st.reduction.body)):
        return None
    return packed or None


def _small_window(st):
    """A reduction over a few points (a strided pooling window) whose output
    rows have points to vectorise across, strided reads and all, and whose
    range does not depend on the output point (no `where=`, which tightens
    the reduce loops when they run inside). A row shorter than a vector
    qualifies too: the alternative (`_rowwise`) runs every output point as
    one iteration of a single parallel loop, decomposing its index, over a
    vectorised 2-point window. With 16 lanes, LeNet's 2x2 pooling (rows of
    14 and 5) ran 7x and 3x faster across its rows, YOLO's 5.6x, ResNet-3D's
    max_pool3d 4.9x and its batch-norm gradient 1.6x (alternated, in one
    process)."""
    return (st.spatial and st.spatial[-1].extent >= SMALL_WINDOW_MIN_ROW
            and st.reduction.cond is None
            and math.prod(a.extent for a in st.reduce_axes) <= SMALL_WINDOW)


def _reuse(st, axis, operand=None):
    """Output points that share each element of a panel packed along `axis`:
    those of the other spatial axes, or, given the packed `operand`, of the
    other axes its reads do not move (a batched B's panel serves its own
    batch's rows only)."""
    if operand is None:
        return math.prod(a.extent for a in st.spatial) // st.extent(axis)
    moved = {id(x) for r in reads(st.reduction.body) if r.tensor is operand
             for i in r.indices for x in free_vars(i)}
    packed = st.axis(axis)
    return math.prod(a.extent for a in st.spatial if a is not packed and id(a) not in moved)


def _streams(st, v, packed):
    """The reads that stream along spatial axis v: unit-stride ones, or the
    reads of the operands `packed` (numbers into st.packable) once packed."""
    if packed is None:
        return _unit_stride_reads(st, st.spatial[v])
    tensors = {id(st.packable[n][0]) for n in packed}
    return [r for r in reads(st.reduction.body) if id(r.tensor) in tensors]


def _row_axis(st, v, packed=None):
    """A spatial axis (not v) that an operand streaming along v does not depend on."""
    contiguous = _streams(st, v, packed)
    best = None
    for d, axis in enumerate(st.spatial):
        if d == v:
            continue
        if any(all(linear_form(i) is not None and axis not in linear_form(i).terms
                   for i in r.indices) for r in contiguous):
            if best is None or axis.extent > st.spatial[best].extent:
                best = d
    return best


def accumulators(registers):
    """Vector registers a register tile may fill on a target with `registers`.

    >>> accumulators(16), accumulators(32)
    (12, 28)
    """
    return registers - REGISTER_RESERVE


def channel_tile(registers, extent, outer=False):
    """(vectors of channels, output points) of a channel-blocked tile on a
    target with `registers` vector registers, along a row axis of `extent`
    points -- `outer`: an axis other than the output's last (see
    CHANNEL_TILES).

    >>> channel_tile(16, 56), channel_tile(32, 56), channel_tile(32, 3), channel_tile(32, 16, True)
    ((2, 5), (1, 5), (1, 3), (1, 4))
    """
    vectors, candidates, short, outer_candidates = _channel_tiles(registers)
    if outer:
        candidates = outer_candidates
    elif extent <= short:
        return vectors, extent
    rows = candidates[0]
    for r in candidates[1:]:
        if _tail_cost(extent, r) * TAIL_GAIN < _tail_cost(extent, rows):
            rows = r
    return vectors, min(rows, extent)


def channel_rows(registers, points, extent):
    """Rows of a second output axis (of `extent`) that join a channel-blocked
    tile of `points` points: a short whole row (see CHANNEL_TILES), up to
    the target's short-row points, with the fewest tails; 1 for none.

    >>> channel_rows(32, 4, 4), channel_rows(32, 8, 8), channel_rows(32, 2, 7), channel_rows(16, 4, 4)
    (2, 1, 2, 1)
    """
    most = min(_channel_tiles(registers)[2] // points, extent)
    if most < 2:
        return 1
    return min(range(most, 1, -1), key=lambda r: _tail_cost(extent, r))


def _channel_tiles(registers):
    if registers in CHANNEL_TILES:
        return CHANNEL_TILES[registers]
    points = (max(1, accumulators(registers) // 2 - 1),)
    return 2, points, 0, points


def _tail_cost(extent, f, tail=TAIL_COST):
    """Time per element of `extent` elements cut into tiles of `f`, relative to
    whole tiles (a partial tile counted as TAIL_COST tiles).

    >>> _tail_cost(56, 8), _tail_cost(14, 8) > 1
    (1.0, True)
    """
    return (extent // f + tail * (extent % f > 0)) * f / extent


def _register_tile(v_extent, u_extent, lanes, registers=16, reduce_points=0):
    """(columns, rows) of the register tile: at most `accumulators(registers)`
    vectors, as many as fit, two vectors per row if that costs little, few
    tails (a partial tile counted as TAIL_COST tiles).
    With AVX-512's 32 registers, 14 rows x 2 vectors of 16 floats (one
    Sapphire Rapids core, loaded: matmul 512 86-88 GFLOP/s, against 87 for
    7 x 4 and 83 for 9 x 3; matmul 1024, rows first, 64-66 against 59 and
    49; AVX2's 6 x 2 vectors of 8: 49-58 on both).
    Over a reduction of `reduce_points` >= LONG_REDUCTION, where the tile's
    inner loop outweighs its set-up and stores, a row tail of a 2-vector
    tile counts as LONG_ROW_TAIL_COST tiles: a batch of 32 rows then takes
    6 rows and a shifted tail rather than 4 (2-core AVX2, alternated: the
    scanned LSTM's step GEMMs, 32 x 512 over 128 and 32 x 128 over 512,
    took its training step 4.40 -> 3.52 ms at T=16, 17.1 -> 14.6 at T=64,
    73.4 -> 62.4 at T=256; LeNet's fc1, 64 x 120 over 400, 8 x 8 -> 6 x 16,
    0.14 -> 0.10 ms). Over 20-40 points (ShuffleNet's batch-norm gradients)
    the extra rows measured 0-15% slower; of the zoo's kernels no other
    changes, on AVX-512 none.

    >>> _register_tile(1024, 1024, 8), _register_tile(56, 64, 8)
    ((16, 6), (8, 8))
    >>> _register_tile(512, 32, 8), _register_tile(512, 32, 8, reduce_points=128)
    ((16, 4), (16, 6))
    >>> _register_tile(1024, 1024, 16, registers=32)
    (32, 14)
    """
    cost = _tail_cost
    budget = accumulators(registers)
    best = None
    for vectors in (2, 1):
        cols = min(vectors * lanes, v_extent)
        row_tail = LONG_ROW_TAIL_COST if (vectors == 2 and reduce_points >= LONG_REDUCTION) \
            else TAIL_COST
        for rows in range(1, min(budget // vectors, u_extent) + 1):
            score = vectors * rows * (1.05 if vectors == 2 else 1.0) / (
                cost(v_extent, cols) * cost(u_extent, rows, row_tail))
            if best is None or score > best[0] + 1e-9:
                best = (score, cols, rows)
    return best[1], best[2]


def _blocked(st, v, lanes, registers, packed=None, address_order=True):
    """Register blocking along spatial axis v (see the module docstring);
    `packed`: the operands (numbers into st.packable) that must be packed to
    stream along v; `address_order`: the reduce loops as `_reduce_order`
    puts them, else (a small window read by strided vectors) the longest
    innermost."""
    tile = _unsplit(st)
    sv = f"s{v}"
    u = _row_axis(st, v, packed)
    su = None if u is None else f"s{u}"
    vf, uf = _register_tile(st.spatial[v].extent, 1 if u is None else st.spatial[u].extent,
                            lanes, registers, math.prod(a.extent for a in st.reduce_axes))
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
    order = _reduce_order(st) if address_order else sorted(
        range(len(st.reduce_axes)), key=lambda k: st.reduce_axes[k].extent)
    reduce_levels = [f"r{k}.0" for k in order]
    unroll = {}
    if su is not None and len(inner) == 2 and uf >= 2:
        unroll[inner[0]] = uf
    pack = (packed if packed is not None else _panels(st, v, tile, u)) + _row_panels(
        st, v, tile, su, lanes)
    parallel = len(outer)
    if _columns_first(st, tile, sv, su, pack):
        outer.remove(f"{sv}.0")
        outer.insert(0, f"{sv}.0")
        if -(-st.extent(sv) // tile[sv][0]) >= PANEL_LOOP_MIN:
            parallel = 1     # the panel loop alone: each panel packed right before use
    return StageConfig(tile, outer + reduce_levels + inner, parallel=parallel,
                       vectorize=sv, unroll=unroll, cache_write=True, pack=pack)


def _reduce_order(st):
    """A register tile's reduce loops, outer to inner, in address order: the
    one whose step in memory is shortest innermost (`step_bytes`), so the
    operands stream row after row; the tile stays in registers across all
    of them. Before, the longest loop went innermost: a weight gradient's
    sum over (t, b) of dy[t, b, j] * x[t, b, k] then jumped 64 KB per step
    (the scanned LSTM's 512x128 dW at T=64: 6.1 -> 5.0 ms alternated), and
    one over (batch, steps) of x[b, t, k] a batch row per step. Measured
    inside the step (two Trainers alternated): subLSTM's dW 1.02 -> 0.62 ms,
    MI-LSTM's 36.4 -> 32.3, DCGAN's small conv gradients 0.10 -> 0.05-0.07.
    Small windows read by strided vectors (a batch-norm gradient over a 7x7
    image) keep the longest loop innermost: in address order MobileNet-v2's
    ran 0.09 -> 0.15 ms in its step.

    >>> _reduce_order(Stage(dW))          # dW over (t, b): t outside
    [0, 1]
    """
    axes = st.reduce_axes
    return sorted(range(len(axes)), key=lambda k: (-step_bytes(st, k), axes[k].extent))


def _columns_first(st, tile, sv, su, pack):
    """Whether the vector axis' tiles should be the outermost loop: when its
    operand is packed into panels along it and outgrows the rows' (GEMM's B
    when N > M), each thread then takes a range of columns -- the panels it
    packed itself, read by no other core -- instead of a range of rows with
    every panel. Measured on MI-LSTM's 64x1024x256 dense: the pack took half
    the time (cores no longer pull panels from each other's cache). With at
    least PANEL_LOOP_MIN column tiles that loop alone runs in parallel, and
    each panel is then packed at the top of its iteration, right before the
    row tiles read it (schedule/lower.py): 5-14% faster again on the
    MI-LSTM and LLTM denses. As many columns as rows (a square GEMM) go
    first too when that operand outgrows COLUMNS_FIRST_BYTES: rows first
    stream all of it from L3 for every row tile, columns first keep one
    panel in L2 for all of them (matmul 1024 on one Sapphire Rapids core:
    78 GFLOP/s against 59)."""
    if su is None or not tile[sv] or st.extent(sv) < st.extent(su):
        return False
    packed = [n for n in pack if st.packable[n][1] == sv]
    return bool(packed) and (st.extent(sv) > st.extent(su) or any(
        _bytes(st.packable[n][0]) > COLUMNS_FIRST_BYTES for n in packed))


def _bytes(tensor):
    return math.prod(tensor.shape) * _itemsize(tensor.dtype)


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
            if axis == sv and id(t) in contiguous and _panel_copy_pays(st, t, v, tile, u)]


def _panel_copy_pays(st, t, v, tile, u):
    """Whether packing operand `t` into panels along axis v pays for its copy,
    made afresh by every call: always when `t` outgrows CACHED_PANEL_BYTES
    (its strided rows would stream from L3 or memory for every row tile);
    for a smaller one only when each panel serves at least
    PANEL_MIN_ROW_TILES register tiles of rows (the output points that do
    not move `t`, over the tile's rows). An RNN step's dgates @ W_hh
    (32 rows of 8 by a 512x128 W_hh, 256 KB, once per time step): 4 row
    tiles; unpacked it ran 27 us a call against 39. Inside the step (two
    Trainers alternated, AVX-512 tiles), where it counts: the scanned LSTM
    1.05x at T=64, subLSTM 1.04x, SC-RNN and LLTM 1.03x, LeNet 1.00x; the
    unrolled cells' kernels alone, inputs hot in cache, ran 0.63-0.94x as
    fast unpacked, a figure the step does not bear out."""
    if _bytes(t) > CACHED_PANEL_BYTES:
        return True
    row_tile = tile[f"s{u}"][0] if tile[f"s{u}"] else st.spatial[u].extent
    return _reuse(st, f"s{v}", t) >= PANEL_MIN_ROW_TILES * row_tile


def _row_panels(st, v, tile, su, lanes):
    """Pack the operands read along the row axis `su` of the register tile
    (GEMM's A, a weight gradient's upstream gradient) into panels too, when
    the reduction is long and each panel serves several vector tiles: the
    rows' values of one reduction step then sit in one cache line instead
    of one line per row. Not GEMM's A (rows apart in memory, each
    contiguous along the reduction) when smaller than ROW_PANEL_MIN_BYTES
    under a tile of two vectors or more: its rows stay in cache from one
    column tile to the next, and the copy costs more than the lines it
    saves (a batch of 32 rows in an RNN's step GEMMs). The bound was half a
    Zen 3 L2 (256 KB); on a 2-core AVX2 EPYC (Zen 1/2 class, 512 KB L2, 8 MB
    L3), A read in place ran as fast or faster at every size measured, GEMMs
    alone, old and new alternated: 512x784 @ 784x128 (1.6 MB of A) 1.06x,
    2048x128 @ 128x512 1.12x, 8192x128 (4 MB) 1.14x, 4096x784 (12.8 MB)
    1.04x, 1024^3 1.02x; SC-RNN's step 1.12x, subLSTM's 1.01x, the scanned
    LSTM's (T=64) 1.02x (two Trainers alternated); MI-LSTM's kernels that
    change 1.00x. A weight gradient's dy[b, j], contiguous along the rows,
    is packed only when larger than CACHED_PANEL_BYTES: a smaller one stays
    in cache (same machine, kernels alone: LLTM's recurrent dW over 7 steps,
    7 dgates of 96 KB, 1.54x faster in place, subLSTM's dR 1.53x, SC-RNN's
    dP and dR 1.63x and 1.38x, the transformer's q/k/v weight gradients
    1.50x, LeNet's dfc1 0.96x; steps, two Trainers alternated: LLTM
    1.03-1.13x, subLSTM 1.06x, SC-RNN 1.04x, the transformer 1.03x, MLP
    1.07x, LeNet 1.00x), while MI-LSTM's 1-8 MB dgates ran 0.33-0.40x
    unpacked."""
    sv = f"s{v}"
    if su is None or not tile[su] or not tile[sv] or math.prod(
            a.extent for a in st.reduce_axes) < PACK_MIN_REDUCE or st.extent(sv) < 2 * tile[sv][0]:
        return []

    def cached_rows(t, dim):
        if dim == t.ndim - 1:
            return _bytes(t) <= CACHED_PANEL_BYTES
        return tile[sv][0] >= 2 * lanes and _bytes(t) < ROW_PANEL_MIN_BYTES
    return [n for n, (t, axis, dim) in enumerate(st.packable)
            if axis == su and not cached_rows(t, dim)]


def _channel_panel(st, v, lanes, registers):
    """For a convolution-like reduction (a window, or a 1x1 conv over a small
    image) whose contiguous axis is short or missing (v None: a strided conv reads no
    operand contiguously), the packable operand to vectorise across
    instead -- the weights along the output channels -- as its number in
    `st.packable`, when that axis fills whole channel tiles (`channel_tile`'s
    vectors: pairs on AVX2) and other
    output points share the panel (not a batch norm's per-channel sums);
    else None."""
    if math.prod(a.extent for a in st.reduce_axes) < 2 * lanes or (
            st.spatial[v].extent >= WINDOW_MIN_WIDTH if v is not None
            else len(st.reduce_axes) < 2):   # no window: a dense layer, packed transposed
        return None
    last = f"s{len(st.spatial) - 1}"
    width = channel_tile(registers, 1)[0]
    fits = [n for n, (t, axis, _) in enumerate(st.packable)
            if axis != last and st.extent(axis) % (width * lanes) == 0 and _reuse(st, axis) > 1]
    # the widest axis: the channels, not a batch that also divides into vectors
    return max(fits, key=lambda n: st.extent(st.packable[n][1]), default=None)


def _channel_blocked(st, n, lanes, registers):
    """Register tile: a vector or two of the packed operand's axis (channels)
    by a few points of a row axis (`channel_tile`) -- the last one, unless
    the reduction's `where=` range depends on it (a strided conv's input
    gradient), then the widest one it does not depend on -- reduce loops
    outside the tile; a short row takes rows of the next free axis out
    (`channel_rows`). Every
    operand packable along the channels and read with a stride along them
    is packed (a weight shared by two applications, as a GAN's
    discriminator on real and fake images, has a gradient summing two
    products: unpacked, the second reads strided vectors, 4x slower); one
    every read of which is contiguous along them (`_contiguous_operands`)
    is read in place, its vectors whole (the
    LLTM's weight gradient over 8 steps packed eight 96 KB dgates on one
    thread for 12.6 MFLOP: 0.28 -> 0.21 ms inside the step)."""
    tensor, sc_axis, _ = st.packable[n]
    tile = _unsplit(st)
    free = _tile_free_axes(st, sc_axis)
    sv = _channel_row_axis(st, free)
    vectors, points = channel_tile(registers, 1 if sv is None else st.extent(sv),
                                   outer=sv is not None and sv != f"s{len(st.spatial) - 1}")
    tile[sc_axis] = [vectors * lanes]
    if sv is not None and points < st.extent(sv):
        tile[sv] = [points]
    rows, su = 1, None
    if sv is not None and not tile[sv]:     # a short row: rows of the next free axis out join
        outward = [d for d in free if d < int(sv[1:])]
        su = f"s{max(outward)}" if outward else None
        rows = 1 if su is None else channel_rows(registers, points, st.extent(su))
        if rows > 1:
            tile[su] = [rows]
    in_tile = ([su] if rows > 1 else []) + ([sv] if sv is not None else [])
    factor = {su: rows, sv: points}
    outer = [f"{a}.0" for a in st.axis_names if a.startswith("s") and (tile[a] or a != sv)]
    inner = [f"{a}.{len(tile[a])}" for a in in_tile] + [f"{sc_axis}.1"]
    unroll = {f"{a}.{len(tile[a])}": factor[a] for a in in_tile if factor[a] > 1}
    in_place = _contiguous_operands(st, st.spatial[int(sc_axis[1:])])
    pack = [m for m, (t, axis, _) in enumerate(st.packable)
            if axis == sc_axis and id(t) not in in_place]
    reduce_levels = [f"r{k}.0" for k in _clipped_windows_outside(
        st, sc_axis, [t for t, axis, _ in st.packable if axis == sc_axis])]
    parallel = len(outer)
    packed = max((_bytes(st.packable[m][0]) for m in pack), default=0)
    if packed > COLUMNS_FIRST_BYTES and packed >= PANELS_FIRST_RATIO * _bytes(st.tensor) and \
            st.extent(sc_axis) // tile[sc_axis][0] >= PANEL_LOOP_MIN:
        # weights past an L2 that dwarf the output: the channel panels alone as
        # the parallel loop, each packed right before its tiles read it (as
        # _columns_first does for a GEMM), not all of them first
        outer.remove(f"{sc_axis}.0")
        outer.insert(0, f"{sc_axis}.0")
        parallel = 1
    return StageConfig(tile, outer + reduce_levels + inner, parallel=parallel,
                       vectorize=sc_axis, unroll=unroll, cache_write=True, pack=pack)


def _clipped_windows_outside(st, sc_axis, operands):
    """A channel-blocked tile's reduce loops, outer to inner: as declared,
    unless the reduction's index range clips its window at most points and
    the tile's `operands` (tensors packed or read along `sc_axis`, the
    weights) are reused enough to make it compute-bound. Clipped: its
    `where=` holds on under CLIPPED_WINDOW_SHARE of the box of the axes it
    ties (a large window at a large stride over a small image: the CapsNet
    primary capsules' input gradient, 5x5 taps per phase over a 6x6
    gradient, holds on 29%). Reused: each element serves at least
    CLIPPED_WINDOW_REUSE output points inside the window (`_reuse` times
    that share; CapsNet's weights 467). The window loops then go outside
    the others, so that the innermost loop is a channel sum of constant
    length rather than a window row of a few points whose bounds move with
    the point: CapsNet's input gradient 287 -> 164 ms alone, ResNet-3D's
    stride-2 input gradient at 7x7 (reuse 63) and its layer-3 weight
    gradients (1600) 1.0-1.25x. Weights a point or a few use each (ResNet-3D's
    3x3x3 input gradients over 1x2x2 and 1x4x4, reuse 1.2 and 7.4) stream
    from memory, best in address order: window loops outside ran them 0.73x.

    >>> _clipped_windows_outside(Stage(dx_phases), "s1", [w])   # (channels, ky, kx)
    [1, 2, 0]
    """
    order = list(range(len(st.reduce_axes)))
    index_conds = [c for c in conjuncts(st.reduction.cond) if is_index_expr(c)] \
        if st.reduction.cond is not None else []
    tied = {id(v) for c in index_conds for v in free_vars(c)}
    window = [k for k in order if id(st.reduce_axes[k]) in tied]
    if not window or len(window) == len(order):
        return order
    reuse = min(_reuse(st, sc_axis, t) for t in operands)
    if reuse < CLIPPED_WINDOW_REUSE:     # no share can make up for it: skip counting
        return order
    share = condition_share(conjunction(index_conds),
                            [a for a in st.spatial + st.reduce_axes if id(a) in tied])
    if share >= CLIPPED_WINDOW_SHARE or reuse * share < CLIPPED_WINDOW_REUSE:
        return order
    return window + [k for k in order if k not in window]


def _tile_free_axes(st, sc_axis):
    """Output axes (numbers) a channel-blocked tile may take points from: not
    the channels, nor one the reduction's `where=` range depends on."""
    bound = {id(v) for v in free_vars(st.reduction.cond)} if st.reduction.cond is not None else set()
    return [d for d, a in enumerate(st.spatial) if f"s{d}" != sc_axis and id(a) not in bound]


def _channel_row_axis(st, free):
    """The row axis of a channel-blocked tile (see _channel_blocked), or None."""
    last = len(st.spatial) - 1
    if not free:
        return None
    return f"s{last}" if last in free else f"s{max(free, key=lambda d: st.spatial[d].extent)}"


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
