"""schedule/config: a kernel's schedule as plain data, and its validation.

A `Config` holds one `StageConfig` per stage of the kernel. Axes are named
by position (`s0..` spatial, `r0..` reduce; see schedule/stage.py) and the
loops a tiling makes by axis and level: `tile["s0"] = [8, 4]` splits s0
into the loops "s0.0" (extent ceil(n / 32)), "s0.1" (8) and "s0.2" (4).
As JSON:

    {"stages": [{"tile": {"s0": [4], "s1": [16], "r0": []},
                 "order": ["s1.0", "s0.0", "r0.0", "s0.1", "s1.1"],
                 "parallel": 2, "vectorize": "s1", "unroll": {"s0.1": 4},
                 "cache_write": true}]}

* tile: per axis the split factors, outer to inner (a factor that does not
  divide the extent leaves a tail; loops are bounded exactly, never past it).
* order: every loop, outer to inner; the levels of one axis stay in order.
* parallel: how many outer loops (spatial) run as one fused OpenMP loop.
* vectorize: the axis whose innermost loop is the innermost loop (SIMD);
  a reduce axis only for a reduction accumulated in a scalar.
* unroll: loop -> unroll factor.
* cache_write: the main reduction accumulates the output tile that the
  loops after its first reduce loop cover in a local array, written once
  at the end; false accumulates in the output itself.
* pack (optional): inputs copied, before the stage runs, into panels laid
  out for it -- numbers into `Stage.packable` (inputs with a dimension
  indexed by exactly one spatial axis, e.g. matmul's B[k, j] along j):
  B becomes P[j // f, k, j % f] with f the innermost split factor of j, so
  a loop over j's innermost level reads one contiguous panel (GEMM packing).
  When j is split once and its outer loop is the stage's first, running
  alone in parallel (parallel <= 1), each of its iterations packs just its
  own panel instead (schedule/lower.py).
* compute_at (optional, false by default): run the stage inside the
  previous stage's outer loop, row by row -- both run their first axis
  s0, unsplit, as their one parallel loop; row i of this stage is computed
  right after row i of the previous one (one parallel loop instead of two,
  the row still in cache). Legal when every read of that stage's output (and
  of an earlier stage of the same chain, or of a kernel input with as many
  rows, which the buffer plan may share) is at the same row
  (`compute_at_problem` says why not).
* split (optional, 0 by default): the main reduction (a float sum) run as
  this many parallel partial sums over chunks of its longest reduce axis,
  then their sum (schedule/split_reduce.py: weight gradients).
* pad (optional): inputs copied zero-padded before the stage runs --
  numbers into `Stage.paddable` (conv2d's input): the guarded reads
  `where(in bounds, x[...], 0)` become plain reads of the copy, so edge
  tiles need no tests.

GPU schedules (target="cuda") are the same data: the stage loops keep the
shape codegen/triton maps onto a grid (every spatial axis unsplit and in
the one parallel loop, the reduce axes after it, the last one vectorised
into a block reduction, a one-element accumulator), and `Config.gpu`
(`GpuParams`) holds the launch knobs:

    {"stages": [...], "gpu": {"xblock": 128, "rblock": 64, "num_warps": 4,
                              "num_stages": 1, "reduction": "looped"}}

* xblock: lanes (iterations of the parallel loop) per program, a power of
  two; rblock: iterations of a block reduction per pass;
* reduction: "looped" (passes of rblock) or "persistent" (one pass over
  the whole reduction when it has at most 4096 points);
* num_warps, num_stages: Triton's launch options.

Hands on: validated `Config`s for lowering; JSON for the tuning database.
"""
import json
import math
from dataclasses import dataclass, field

from ..errors import NeoFlowError
from ..te.arith import free_vars
from ..te.expr import Reduce
from ..te.visit import post_order, reads
from .delinearize import alias_source
from .stage import Stage

MAX_FACTORS = 3          # a split makes at most 4 loops per axis
MAX_UNROLL = 64
MAX_ACCUMULATOR = 4096   # elements of a local accumulator tile
GPU_MAX_BLOCK = {"xblock": 4096, "rblock": 4096}   # TRITON_MAX_BLOCK's scale
GPU_WARPS = (1, 2, 4, 8, 16, 32)
GPU_REDUCTIONS = ("looped", "persistent")


class ConfigError(NeoFlowError):
    """A schedule that does not fit its kernel."""


@dataclass
class StageConfig:
    """The schedule of one stage (see the module docstring for the fields)."""
    tile: dict
    order: list
    parallel: int = 0
    vectorize: str = None
    unroll: dict = field(default_factory=dict)
    cache_write: bool = False
    pack: list = field(default_factory=list)
    pad: list = field(default_factory=list)
    compute_at: bool = False
    split: int = 0

    def to_dict(self):
        out = {"tile": {a: list(f) for a, f in self.tile.items()}, "order": list(self.order),
               "parallel": self.parallel, "vectorize": self.vectorize,
               "unroll": dict(self.unroll), "cache_write": self.cache_write}
        if self.pack:
            out["pack"] = list(self.pack)
        if self.pad:
            out["pad"] = list(self.pad)
        if self.compute_at:
            out["compute_at"] = True
        if self.split:
            out["split"] = self.split
        return out


@dataclass
class GpuParams:
    """A GPU kernel's launch knobs (see the module docstring).

    >>> GpuParams(xblock=256).to_dict()["xblock"]
    256
    """
    xblock: int = 128
    rblock: int = 64
    num_warps: int = 4
    num_stages: int = 1
    reduction: str = "looped"

    def to_dict(self):
        return {"xblock": self.xblock, "rblock": self.rblock, "num_warps": self.num_warps,
                "num_stages": self.num_stages, "reduction": self.reduction}


@dataclass
class Config:
    """A kernel's schedule: one StageConfig per stage, JSON-serialisable;
    `gpu` (GpuParams) for a GPU kernel's launches, None on CPU.

    >>> cfg = default_config(kernel)
    >>> Config.from_json(cfg.to_json()) == cfg
    True
    """
    stages: list
    gpu: GpuParams = None

    def to_dict(self):
        out = {"stages": [s.to_dict() for s in self.stages]}
        if self.gpu is not None:
            out["gpu"] = self.gpu.to_dict()
        return out

    def to_json(self):
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data):
        try:
            stages = []
            for s in data["stages"]:
                stages.append(StageConfig(
                    tile={str(a): [int(f) for f in fs] for a, fs in s["tile"].items()},
                    order=[str(x) for x in s["order"]], parallel=int(s.get("parallel", 0)),
                    vectorize=None if s.get("vectorize") is None else str(s["vectorize"]),
                    unroll={str(k): int(v) for k, v in s.get("unroll", {}).items()},
                    cache_write=bool(s.get("cache_write", False)),
                    pack=[int(n) for n in s.get("pack", [])],
                    pad=[int(n) for n in s.get("pad", [])],
                    compute_at=s.get("compute_at", False), split=int(s.get("split", 0))))
            gpu = data.get("gpu")
            if gpu is not None:
                gpu = GpuParams(**{k: (str if k == "reduction" else int)(v)
                                   for k, v in gpu.items()})
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ConfigError(f"malformed schedule config {data!r}: {e}") from None
        return cls(stages, gpu)

    @classmethod
    def from_json(cls, text):
        return cls.from_dict(json.loads(text))


def level_names(axis, factors):
    """The loops `axis` splits into: ["s0.0", "s0.1", ...]."""
    return [f"{axis}.{j}" for j in range(len(factors) + 1)]


def level_extents(extent, factors):
    """Largest trip count of each loop of an axis of `extent` split by `factors`.

    >>> level_extents(33, [4])
    [9, 4]
    """
    return [-(-extent // math.prod(factors))] + list(factors)


def accumulator_levels(sc):
    """The spatial loops after the first reduce loop: the accumulator tile."""
    first = next((n for n, lv in enumerate(sc.order) if lv.startswith("r")), len(sc.order))
    return [lv for lv in sc.order[first:] if lv.startswith("s")]


def accumulator_size(stage, sc):
    """Elements of the accumulator tile (the largest trip counts multiplied)."""
    return math.prod(loop_extent(stage, sc, lv) for lv in accumulator_levels(sc))


def loop_extent(stage, sc, level):
    """Largest trip count of the loop `level` ("s1.0") under `sc`."""
    axis, j = level.split(".")
    return level_extents(stage.extent(axis), sc.tile[axis])[int(j)]


def validate(config, kernel):
    """Raise ConfigError (naming the stage, axis or loop) unless `config` fits `kernel`.

    >>> validate(default_config(kernel), kernel)   # passes silently
    """
    if not isinstance(config, Config):
        raise ConfigError(f"expected a Config, got {type(config).__name__}")
    if len(config.stages) != len(kernel.stages):
        raise ConfigError(f"the config has {len(config.stages)} stage schedule(s); kernel "
                          f"{kernel} has {len(kernel.stages)} stage(s)")
    stages = [Stage(t) for t in kernel.stages]
    for n, (st, sc) in enumerate(zip(stages, config.stages)):
        where = f"stage {n} ('{st.tensor.name}')"
        validate_stage(st, sc, where)
        if not isinstance(sc.compute_at, bool):
            raise ConfigError(f"{where}: compute_at must be true or false")
        problem = compute_at_problem(stages, config.stages, n, kernel.inputs) \
            if sc.compute_at else None
        if problem:
            raise ConfigError(f"{where}: cannot be computed at the previous stage: {problem}")


def row_parallel(st, sc):
    """Whether `sc` runs Stage `st` as one parallel loop over its first axis,
    unsplit, with no packed or padded copy made before it."""
    return (len(st.spatial) > 0 and sc.parallel == 1 and not sc.tile["s0"]
            and sc.order[0] == "s0.0" and not sc.pack and not sc.pad)


def compute_at_problem(stages, configs, n, inputs):
    """Why stage `n` (of Stages `stages`, scheduled by `configs`) cannot be
    computed at stage n - 1 (see the module docstring), or None if it can.

    >>> compute_at_problem(stages, configs, 1, kernel.inputs)   # doctest: +SKIP
    "stage 'shifted' reads 'a' at another row than its own"
    """
    if n == 0:
        return "it is the first stage"
    if configs[n - 1].split or configs[n].split:
        return "a stage split into partial sums (split) runs as two loops"
    head = n - 1
    while head > 0 and configs[head].compute_at:
        head -= 1
    group = stages[head:n + 1]
    for st, sc in zip(group, configs[head:n + 1]):
        if not row_parallel(st, sc):
            return (f"stage '{st.tensor.name}' must run its first axis s0, unsplit, as its "
                    "one parallel loop (parallel 1, order starting with s0.0), with no pack "
                    "or pad")
    rows = group[0].spatial[0].extent
    if group[-1].spatial[0].extent != rows:
        return f"its first axis has {group[-1].spatial[0].extent} points, the previous {rows}"
    shared = {id(st.source): st.source.name for st in group}
    shared.update({id(t): t.name for t in inputs if t.ndim and t.shape[0] == rows})
    for st in group:
        row = st.spatial[0]
        for r in reads(st.tensor.op.body):
            if id(alias_source(r.tensor)) in shared and (
                    r.tensor is not alias_source(r.tensor) or r.indices[0] is not row):
                return (f"stage '{st.tensor.name}' reads '{r.tensor.name}' at another row "
                        f"than its own")
        for e in post_order(st.tensor.op.body):
            if isinstance(e, Reduce) and e is not st.reduction and \
                    all(v is not row for v in free_vars(e)):
                return (f"stage '{st.tensor.name}' has a reduction that does not depend on "
                        "its row (it runs before the row loop)")
    return None


def validate_stage(st, sc, where):
    """Raise ConfigError (prefixed by `where`) unless `sc` fits the Stage `st`."""
    if set(sc.tile) != set(st.axis_names):
        raise ConfigError(f"{where}: tile must give factors for exactly the axes "
                          f"{st.axis_names}; got {sorted(sc.tile)}")
    for axis, factors in sc.tile.items():
        if len(factors) > MAX_FACTORS or not all(isinstance(f, int) and f >= 1 for f in factors):
            raise ConfigError(f"{where}: tile factors of axis {axis} must be at most "
                              f"{MAX_FACTORS} positive ints; got {factors}")
    loops = [lv for a in st.axis_names for lv in level_names(a, sc.tile[a])]
    if sorted(sc.order) != sorted(loops):
        raise ConfigError(f"{where}: order must list every loop once: {loops}; "
                          f"got {sc.order}")
    for a in st.axis_names:
        mine = [lv for lv in sc.order if lv.split(".")[0] == a]
        if mine != level_names(a, sc.tile[a]):
            raise ConfigError(f"{where}: the loops of axis {a} must stay outer to inner; "
                              f"order has {mine}")
    if not isinstance(sc.parallel, int) or sc.parallel < 0:
        raise ConfigError(f"{where}: parallel must be a count of outer loops >= 0, "
                          f"got {sc.parallel!r}")
    if any(lv.startswith("r") for lv in sc.order[:sc.parallel]):
        raise ConfigError(f"{where}: the {sc.parallel} parallel outer loop(s) "
                          f"{sc.order[:sc.parallel]} may not include a reduce loop")
    _validate_vectorize(st, sc, where)
    for lv, factor in sc.unroll.items():
        if lv not in loops or lv in sc.order[:sc.parallel]:
            raise ConfigError(f"{where}: cannot unroll {lv!r}: not a serial loop of this "
                              "stage")
        if not isinstance(factor, int) or not 2 <= factor <= MAX_UNROLL:
            raise ConfigError(f"{where}: unroll factor of {lv} must be in [2, {MAX_UNROLL}], "
                              f"got {factor!r}")
    _validate_cache_write(st, sc, where)
    _validate_pack(st, sc, where)
    from .split_reduce import split_problem     # split_reduce builds on this module
    problem = split_problem(st, sc)
    if problem:
        raise ConfigError(f"{where}: {problem}")


def _check_choice_list(field, value, names, kind, where):
    """`value` must list distinct indices into `names`, the `kind` inputs."""
    if not isinstance(value, list) or len(set(value)) != len(value) or not all(
            isinstance(n, int) and 0 <= n < len(names) for n in value):
        raise ConfigError(f"{where}: {field} must list distinct numbers below {len(names)} "
                          f"(the {kind} inputs {names}); got {value!r}")


def _validate_pack(st, sc, where):
    _check_choice_list("pad", sc.pad, [p[0].name for p in st.paddable], "paddable", where)
    packable = st.packable
    _check_choice_list("pack", sc.pack, [t.name for t, _, _ in packable], "packable", where)
    for n in sc.pack:
        tensor, axis, _ = packable[n]
        if not sc.tile[axis]:
            raise ConfigError(f"{where}: packing '{tensor.name}' along {axis} needs {axis} "
                              "split (its innermost factor is the panel width)")


def _validate_vectorize(st, sc, where):
    v = sc.vectorize
    if v is None:
        return
    if v not in st.axis_names:
        raise ConfigError(f"{where}: vectorize must name an axis of {st.axis_names} or be "
                          f"null; got {v!r}")
    last = level_names(v, sc.tile[v])[-1]
    if sc.order[-1] != last:
        raise ConfigError(f"{where}: the vectorised loop {last} must be the innermost loop; "
                          f"order ends with {sc.order[-1]}")
    if len(sc.order) <= sc.parallel:
        raise ConfigError(f"{where}: the vectorised loop {last} cannot also be parallel")
    if v.startswith("r") and not (sc.cache_write and not accumulator_levels(sc)):
        raise ConfigError(f"{where}: a reduce axis ({v}) can be vectorised only for a "
                          "reduction accumulated in a scalar (cache_write with no spatial "
                          "loop inside the reduction loops)")


def _validate_cache_write(st, sc, where):
    if not isinstance(sc.cache_write, bool):
        raise ConfigError(f"{where}: cache_write must be true or false")
    red = st.reduction
    if red is None:
        if sc.cache_write:
            raise ConfigError(f"{where}: cache_write needs a reduction; this stage has none")
        return
    if sc.cache_write:
        size = accumulator_size(st, sc)
        if size > MAX_ACCUMULATOR:
            raise ConfigError(f"{where}: the accumulator tile {accumulator_levels(sc)} "
                              f"has {size} elements, more than {MAX_ACCUMULATOR}")
    elif red.dtype != st.tensor.dtype:
        raise ConfigError(f"{where}: cache_write=false accumulates in the output, but the "
                          f"reduction is {red.dtype} and the output {st.tensor.dtype}")


def validate_gpu(config, kernel):
    """Raise ConfigError unless `config` is a GPU schedule of `kernel`: the
    loop shape codegen/triton maps onto a grid (module docstring) and
    launch knobs a GPU accepts (powers of two within Triton's limits).

    >>> validate_gpu(default_config(kernel, target="cuda"), kernel)   # passes silently
    """
    validate(config, kernel)
    g = config.gpu
    if not isinstance(g, GpuParams):
        raise ConfigError("a GPU schedule needs its launch knobs (Config.gpu); got none")
    for name, limit in GPU_MAX_BLOCK.items():
        v = getattr(g, name)
        if not isinstance(v, int) or v < 1 or v & (v - 1) or v > limit:
            raise ConfigError(f"gpu.{name} must be a power of two in [1, {limit}], got {v!r}")
    if g.num_warps not in GPU_WARPS:
        raise ConfigError(f"gpu.num_warps must be one of {GPU_WARPS}, got {g.num_warps!r}")
    if not isinstance(g.num_stages, int) or not 1 <= g.num_stages <= 8:
        raise ConfigError(f"gpu.num_stages must be in [1, 8], got {g.num_stages!r}")
    if g.reduction not in GPU_REDUCTIONS:
        raise ConfigError(f"gpu.reduction must be one of {GPU_REDUCTIONS}, got {g.reduction!r}")
    for n, (t, sc) in enumerate(zip(kernel.stages, config.stages)):
        st = Stage(t)
        where = f"stage {n} ('{t.name}')"
        want = gpu_stage_config(st)
        if sc != want:
            raise ConfigError(f"{where}: a GPU stage schedule is {want.to_dict()} (every "
                              f"spatial axis unsplit in the parallel loop, the reduce axes "
                              f"after it, the last vectorised); got {sc.to_dict()}")


def gpu_stage_config(st):
    """The stage loops of a GPU schedule of Stage `st` (module docstring).

    >>> gpu_stage_config(Stage(C)).to_dict()["vectorize"]      # C = sum_k A[i, k] B[k, j]
    'r0'
    """
    red = st.reduction is not None
    return StageConfig({a: [] for a in st.axis_names}, [f"{a}.0" for a in st.axis_names],
                       parallel=len(st.spatial), vectorize=st.axis_names[-1] if red else None,
                       cache_write=red)
