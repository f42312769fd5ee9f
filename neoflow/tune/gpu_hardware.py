"""tune/gpu_hardware: the GPU as the tuner sees it (DeepCuts' hardware model)
-- SMs, shared memory per block and per SM, registers, threads, L2, memory
bandwidth and peak throughput -- and an analytic ranking of GPU schedules.

`detect_gpu()` reads torch.cuda's device properties when a GPU is there;
bandwidth and peak come from a table of known parts (H100, H200, A100),
and where there is no GPU (the interpreter, CI) the documented H200 figures
stand in (`source` says which), so pruning is testable anywhere.

`rank_gpu_configs` scores each candidate `GpuParams` of a kernel the
DeepCuts way and drops the ones a GPU cannot run:
* limits (COEF_r): threads per block, shared memory per block (the block
  reductions' scratch, codegen/triton/check.py), the register tile per thread;
* occupancy: resident blocks per SM = min(warps/SM / warps, registers /
  (regs per thread x threads), shared memory per SM / per block, 32);
* wave quantization (WBRatio): 1 - ((N_TB mod R) / R) / ceil(N_TB / R) with
  R = SMs x resident blocks;
* wasted lanes: masked-off lanes and reduction slots of the last block,
  and threads left without a tile element;
* a roofline: max(bytes / bandwidth, flops / peak), divided by the above
  ratios, plus a launch overhead per launch and a latency per dependent
  pass (waves x reduction passes).
Candidates are ranked by that estimated time; `prune_report` says how many
the limits reject and how many the ranking keeps.

Hands on: `GpuHardware` records, ranked (GpuParams, estimate) lists.
"""
import functools
import hashlib
import itertools
import json
import math
from dataclasses import asdict, dataclass

from ..schedule.config import GPU_WARPS, Config, GpuParams, gpu_stage_config
from ..schedule.stage import Stage
from ..te.flops import flops

TILE_PER_THREAD = 128      # as codegen/triton/check.py
REGS_PER_TILE_ELEMENT = 2  # registers per tile element (value + partial), plus a base
REGS_BASE = 32
LAUNCH_S = 3e-6            # a kernel launch, seconds
PASS_S = 5e-7              # one dependent pass of a program (about a global-memory latency)

# Known parts: (name substring, memory bandwidth B/s, fp32 FLOP/s, bf16 tensor FLOP/s).
KNOWN = (("H200", 4.8e12, 66.9e12, 989.4e12), ("H100", 3.35e12, 66.9e12, 989.4e12),
         ("A100", 2.0e12, 19.5e12, 312e12))


@dataclass(frozen=True)
class GpuHardware:
    """One GPU's parameters (bytes, B/s, FLOP/s).

    >>> H200.sm_count, H200.smem_per_block
    (132, 232448)
    """
    name: str
    sm_count: int
    smem_per_block: int
    smem_per_sm: int
    regs_per_sm: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    l2_bytes: int
    bandwidth: float
    peak_fp32: float
    peak_bf16: float
    source: str

    @property
    def fingerprint(self):
        """Hex digest of the model and figures (the tuning database's key)."""
        data = {k: v for k, v in asdict(self).items() if k != "source"}
        return "gpu-" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# H100/H200 SXM (GH100): 132 SMs, 227 KB shared per block opt-in, 228 KB per SM,
# 64K 32-bit registers per SM, 2048 threads per SM, 50 MB L2; H200: 4.8 TB/s HBM3e.
H200 = GpuHardware("NVIDIA H200 (table)", 132, 232448, 233472, 65536, 1024, 2048, 32,
                   50 << 20, 4.8e12, 66.9e12, 989.4e12, "table")


@functools.lru_cache(maxsize=None)
def detect_gpu():
    """This machine's GPU (device 0) via torch.cuda, else the H200 table.

    >>> detect_gpu().sm_count > 0
    True
    """
    try:
        import torch
        from ..runtime.cuda import interpreting
        if interpreting() or not torch.cuda.is_available():
            return H200
        p = torch.cuda.get_device_properties(0)
    except Exception:           # no torch, no driver: the table stands in
        return H200
    bw, fp32, bf16 = next(((b, f, h) for key, b, f, h in KNOWN if key in p.name),
                          (H200.bandwidth, H200.peak_fp32, H200.peak_bf16))
    return GpuHardware(
        p.name, p.multi_processor_count,
        getattr(p, "shared_memory_per_block_optin", H200.smem_per_block),
        getattr(p, "shared_memory_per_multiprocessor", H200.smem_per_sm),
        getattr(p, "regs_per_multiprocessor", H200.regs_per_sm), 1024,
        getattr(p, "max_threads_per_multi_processor", H200.max_threads_per_sm), 32,
        getattr(p, "L2_cache_size", H200.l2_bytes), bw, fp32, bf16, "torch.cuda")


def gpu_candidates(kernel):
    """Every distinct GpuParams the search may try for `kernel`: power-of-two
    blocks up to what the kernel's loops can use (a larger block launches
    the same code), warps 1..16, stages 1..3, both reduction strategies.

    >>> len(gpu_candidates(kernel)) > 100                  # doctest: +SKIP
    True
    """
    stages = [Stage(t) for t in kernel.stages]
    reduce = max((st.reduce_axes[-1].extent for st in stages if st.reduce_axes), default=0)
    lanes = max(math.prod(a.extent for a in st.spatial) for st in stages)
    xs = [1 << n for n in range(13) if n == 0 or 1 << (n - 1) < lanes]
    rs = [1 << n for n in range(13) if n == 0 or 1 << (n - 1) < reduce] if reduce else [1]
    strategies = ("looped", "persistent") if reduce else ("looped",)
    return [GpuParams(x, r, w, s, red) for x, r, w, s, red in
            itertools.product(xs, rs, GPU_WARPS[:5], (1, 2, 3), strategies)
            if not (red == "persistent" and r != 1 << max(0, reduce - 1).bit_length())]


def estimate(kernel, params, hw):
    """(seconds, None), or (inf, the limit it breaks: "threads per block",
    "register tile", "shared memory", "registers", "occupancy")."""
    stages = [Stage(t) for t in kernel.stages]
    threads = 32 * params.num_warps
    if threads > hw.max_threads_per_block:
        return math.inf, "threads per block"
    total, bytes_moved = 0.0, 0
    for t in list(kernel.inputs) + list(kernel.outputs):
        bytes_moved += math.prod(t.shape) * (8 if t.dtype in ("float64", "int64") else 4)
    work = flops(list(kernel.outputs), given=kernel.inputs)
    for st in stages:
        lanes = math.prod(a.extent for a in st.spatial)
        r = st.reduce_axes[-1].extent if st.reduce_axes else 1
        x = min(params.xblock, 1 << max(0, lanes - 1).bit_length())
        rb = min(params.rblock, 1 << max(0, r - 1).bit_length()) if st.reduce_axes else 1
        tile = x * rb
        per_thread = -(-tile // threads)
        if per_thread > TILE_PER_THREAD:
            return math.inf, "register tile"
        smem = 8 * x * params.num_warps if st.reduce_axes else 0
        if smem > hw.smem_per_block:
            return math.inf, "shared memory"
        regs = REGS_BASE + REGS_PER_TILE_ELEMENT * per_thread
        if regs > 255:
            return math.inf, "registers"
        resident = min(hw.max_threads_per_sm // threads, hw.regs_per_sm // (regs * threads),
                       hw.smem_per_sm // smem if smem else hw.max_blocks_per_sm,
                       hw.max_blocks_per_sm)
        if resident < 1:
            return math.inf, "occupancy"
        blocks = -(-lanes // x)
        slots = hw.sm_count * resident
        waves = -(-blocks // slots)
        wb = 1 - ((blocks % slots) / slots) / waves if blocks % slots else 1.0
        occupancy = min(1.0, resident * threads / hw.max_threads_per_sm * 2)
        passes = -(-r // rb)
        used = lanes / (blocks * x) * (r / (passes * rb)) * min(1.0, tile / threads)
        share = 1 / len(stages)
        roof = max(bytes_moved * share / hw.bandwidth, work * share / hw.peak_fp32)
        total += roof / (wb * occupancy * used) + LAUNCH_S + waves * passes * PASS_S
    return total, None


def rank_gpu_configs(kernel, hw=None, candidates=None):
    """([(Config, seconds)] best first, {reason: count} of the rejected).

    >>> ranked, rejected = rank_gpu_configs(kernel)          # doctest: +SKIP
    """
    hw = hw or detect_gpu()
    stages = [gpu_stage_config(Stage(t)) for t in kernel.stages]
    kept, rejected = [], {}
    for params in candidates or gpu_candidates(kernel):
        seconds, why = estimate(kernel, params, hw)
        if why is not None:
            rejected[why] = rejected.get(why, 0) + 1
        else:
            kept.append((Config([s for s in stages], params), seconds))
    kept.sort(key=lambda p: p[1])
    return kept, rejected


def raw_space(kernel):
    """Size of the space before dropping blocks larger than the loops (13
    block sizes per blocked axis x warps x stages x strategies)."""
    red = any(Stage(t).reduce_axes for t in kernel.stages)
    return 13 * (13 * 2 if red else 1) * 5 * 3


def prune_report(kernel, hw=None, top=16):
    """How much the model prunes: the raw space, distinct candidates, rejected
    by limits, kept, the `top` it would measure, and its best estimate.

    >>> prune_report(kernel)["candidates"]                   # doctest: +SKIP
    """
    hw = hw or detect_gpu()
    cands = gpu_candidates(kernel)
    ranked, rejected = rank_gpu_configs(kernel, hw, cands)
    return {"space": raw_space(kernel), "candidates": len(cands), "rejected": sum(rejected.values()),
            "rejected_by": rejected, "valid": len(ranked), "measured": min(top, len(ranked)),
            "pruned_share": 1 - min(top, len(ranked)) / raw_space(kernel),
            "best": ranked[0][0].gpu.to_dict() if ranked else None,
            "best_estimate_s": ranked[0][1] if ranked else None, "hardware": hw.name}
