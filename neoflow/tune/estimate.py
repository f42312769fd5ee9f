"""tune/estimate: an analytic model of one stage's loop nest on a Hardware.

For a stage under its StageConfig this computes, loop by loop, the bytes
the body of each loop touches (its working set, per tensor, from the affine
index forms of the reads), how often each working set is loaded into each
cache level (a tensor's data is reused across the loops just outside the
level it fits in that do not index it), and from that and the work an
estimate of cycles: the slowest of compute (SIMD lanes used, register tile
held or spilled) and the traffic between levels, spread over the cores the
parallel loop can keep busy.

The pruner (tune/prune.py) tests its figures against the caches; the cost
model (tune/features.py) learns from them. Nothing here is measured.

Hands on: `StageEstimate`s.
"""
import json
import math
from dataclasses import dataclass, field

from ..schedule.config import accumulator_levels, level_names, loop_extent
from ..schedule.stage import Stage
from ..te import dtype as dt
from ..te.arith import linear_form
from ..te.flops import flops
from ..te.visit import reads, tensor_inputs

LINE = 64                      # cache line bytes
BANDWIDTH = (32.0, 16.0, 8.0)  # bytes/cycle per core into L1 (from L2), L2, L3
DRAM_BANDWIDTH = 8.0           # bytes/cycle for the whole chip


@dataclass
class StageEstimate:
    """What the model says about one stage under one schedule.

    `footprint[d]` is the bytes the loops from depth d inward touch
    (footprint[0]: the whole nest); `traffic` the bytes moved into L1, L2
    and L3; `cycles` the estimated time on one chip.
    """
    flops: int
    loops: list                     # (level, extent), outer to inner
    footprint: list
    traffic: tuple
    parallel_chunks: int
    parallel_efficiency: float
    vector_extent: int
    vector_efficiency: float
    register_tile: int              # accumulator elements inside the innermost reduce loop
    register_fit: bool
    step_bytes: int                 # bytes one step of the innermost reduce loop touches
    accumulator_bytes: int
    compute_cycles: float
    cycles: float = 0.0
    notes: dict = field(default_factory=dict)


class _Access:
    """The reads of one tensor by a stage, per dimension: |coefficient| per
    config axis, a fixed span (other variables, offsets between reads), or
    the whole dimension (an index that is not affine)."""

    def __init__(self, tensor):
        self.tensor, self.shape = tensor, tensor.shape
        self.itemsize = dt.to_numpy(tensor.dtype).itemsize
        self.coef = [dict() for _ in self.shape]
        self.fixed = [0] * len(self.shape)
        self.full = [False] * len(self.shape)
        self.consts = [set() for _ in self.shape]

    def add(self, indices, names):
        for d, index in enumerate(indices):
            form = linear_form(index)
            if form is None:
                self.full[d] = True
                continue
            span = 0
            for var, c in form.terms.items():
                name = names.get(id(var))
                if name is None:
                    span += abs(c) * (var.extent - 1)
                else:
                    self.coef[d][name] = max(self.coef[d].get(name, 0), abs(c))
            self.fixed[d] = max(self.fixed[d], span)
            self.consts[d].add(form.const)

    def depends(self, axis):
        return any(axis in c for c in self.coef)

    def elements(self, spans, lines):
        """Elements (or, with `lines`, bytes in whole cache lines) touched
        when each axis a ranges over `spans[a] + 1` consecutive values."""
        ranges = []
        for d, n in enumerate(self.shape):
            if self.full[d]:
                ranges.append(n)
                continue
            spread = max(self.consts[d]) - min(self.consts[d]) if self.consts[d] else 0
            r = 1 + self.fixed[d] + spread + sum(c * spans.get(a, 0)
                                                 for a, c in self.coef[d].items())
            ranges.append(min(n, r))
        if not lines:
            return math.prod(ranges)
        if not ranges:
            return LINE
        last = -(-ranges[-1] * self.itemsize // LINE) * LINE
        return math.prod(ranges[:-1]) * last


class _StageFacts:
    """What the estimate needs of a stage whatever its schedule: its reads
    (per tensor), its output and its work."""

    def __init__(self, stage):
        names = {id(stage.axis(a)): a for a in stage.axis_names}
        accesses = {}
        for r in reads(stage.tensor.op.body):
            accesses.setdefault(id(r.tensor), _Access(r.tensor)).add(r.indices, names)
        out = _Access(stage.tensor)
        out.add(stage.spatial, names)
        self.reads = list(accesses.values())
        self.tensors = self.reads + [out]
        self.work = flops(stage.tensor, given=tensor_inputs(stage.tensor))


def stage_estimate(stage, sc, hw, facts=None):
    """The StageEstimate of `stage` (a schedule.Stage) under StageConfig `sc`
    (`facts`: the stage's _StageFacts, when already made).

    >>> est = stage_estimate(Stage(C), default_config(kernel).stages[0], detect())
    >>> est.register_fit
    True
    """
    facts = facts or _StageFacts(stage)
    tensors = facts.tensors
    loops = [(lv, loop_extent(stage, sc, lv)) for lv in sc.order]
    strides = {}
    for a in stage.axis_names:
        fs = sc.tile[a]
        for j, lv in enumerate(level_names(a, fs)):
            strides[lv] = math.prod(fs[j:])

    def spans(depth):
        out_spans = {}
        for lv, ext in loops[depth:]:
            a = lv.split(".")[0]
            out_spans[a] = out_spans.get(a, 0) + strides[lv] * (ext - 1)
        return out_spans

    packed = {id(stage.packable[n][0]) for n in sc.pack}

    def touched(t, sp):   # a packed input's panel is contiguous: no partial lines
        if id(t.tensor) in packed:
            return -(-t.elements(sp, lines=False) * t.itemsize // LINE) * LINE
        return t.elements(sp, lines=True)

    per_depth = [[touched(t, spans(d)) for t in tensors] for d in range(len(loops) + 1)]
    footprint = [sum(row) for row in per_depth]
    traffic = tuple(_traffic(loops, tensors, per_depth, footprint, cap)
                    for cap in (hw.l1, hw.l2, hw.l3))

    work = facts.work
    itemsize = dt.to_numpy(stage.tensor.dtype).itemsize
    lanes = hw.lanes(stage.tensor.dtype) if dt.is_float(stage.tensor.dtype) else 1
    chunks = math.prod(ext for _, ext in loops[:sc.parallel]) if sc.parallel else 1
    threads = min(hw.cores, chunks)
    par_eff = chunks / (-(-chunks // threads) * threads) * threads / hw.cores
    vext, vec_eff = 1, 1.0 / lanes
    if sc.vectorize is not None:
        vext = loop_extent(stage, sc, level_names(sc.vectorize, sc.tile[sc.vectorize])[-1])
        vec_eff = vext / (-(-vext // lanes) * lanes)

    inner_reduce = max((n for n, (lv, _) in enumerate(loops) if lv.startswith("r")),
                       default=None)
    reg_tile, step_bytes, acc_bytes, reg_fit = 1, 0, 0, True
    compute = max(work, 1) / (2.0 * (2 if hw.fma else 1) * lanes * vec_eff)
    if stage.reduction is not None and inner_reduce is not None:
        inside = loops[inner_reduce + 1:]
        reg_tile = math.prod(ext for lv, ext in inside if lv.startswith("s"))
        step_bytes = footprint[inner_reduce + 1]
        if sc.cache_write:
            acc_bytes = itemsize * math.prod(loop_extent(stage, sc, lv)
                                             for lv in accumulator_levels(sc))
        vectors = -(-reg_tile // lanes) if sc.vectorize else reg_tile
        reg_fit = sc.cache_write and vectors <= hw.vector_registers - 3
        # operands loaded per step against the multiply-adds of the tile
        step = spans(inner_reduce + 1)
        loads = sum(t.elements(step, lines=False) for t in facts.reads)
        loads = loads / lanes if sc.vectorize else loads
        if not reg_fit:
            loads += 2 * vectors      # accumulator read and written back each step
        compute *= max(1.0, loads / max(vectors, 1))
    mem = [traffic[0] / BANDWIDTH[0], traffic[1] / BANDWIDTH[1], traffic[2] / BANDWIDTH[2]]
    per_core = max([compute] + mem) / (hw.cores * par_eff)
    dram = footprint[0] / DRAM_BANDWIDTH
    return StageEstimate(
        flops=work, loops=loops, footprint=footprint, traffic=traffic,
        parallel_chunks=chunks, parallel_efficiency=par_eff, vector_extent=vext,
        vector_efficiency=vec_eff, register_tile=reg_tile, register_fit=reg_fit,
        step_bytes=step_bytes, accumulator_bytes=acc_bytes, compute_cycles=compute,
        cycles=max(per_core, dram))


def _traffic(loops, tensors, per_depth, footprint, capacity):
    """Bytes loaded into a cache of `capacity`: each tensor's working set at
    the outermost depth that fits, once per iteration of the loops outside
    it, except the innermost run of loops that do not index that tensor."""
    depth = next((d for d, f in enumerate(footprint) if f <= capacity // 2), len(loops))
    total = 0
    for n, t in enumerate(tensors):
        axes = [lv.split(".")[0] for lv, _ in loops[:depth]]
        last = max((i for i, a in enumerate(axes) if t.depends(a)), default=-1)
        total += per_depth[depth][n] * math.prod(ext for _, ext in loops[:last + 1])
    return total


class Estimates:
    """`stage_estimate` for the stages of one kernel, remembered per stage
    schedule (the pruner and the features ask for the same ones).

    >>> est = Estimates(kernel, detect())
    >>> est(0, default_config(kernel).stages[0]).cycles > 0
    True
    """

    def __init__(self, kernel, hw):
        self.hw = hw
        self.stages = [Stage(t) for t in kernel.stages]
        self._facts = [_StageFacts(st) for st in self.stages]
        self._memo = {}

    def __call__(self, n, sc):
        key = (n, json.dumps(sc.to_dict(), sort_keys=True))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = stage_estimate(self.stages[n], sc, self.hw,
                                                   self._facts[n])
        return hit


def kernel_estimate(kernel, config, hw):
    """StageEstimates of every stage of `kernel` under `config`.

    >>> sum(e.cycles for e in kernel_estimate(kernel, default_config(kernel), detect()))
    """
    return [stage_estimate(Stage(t), sc, hw) for t, sc in zip(kernel.stages, config.stages)]
