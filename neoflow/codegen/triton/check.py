"""codegen/triton/check: a static check of generated Triton kernels.

Triton's interpreter does not catch out-of-bounds accesses and a GPU
corrupts memory silently, so every generated kernel is checked before it
is loaded:
* every tl.load / tl.store has a mask (the printer masks every access by
  its lanes and loop iterations, and gathers by their checked index);
* block sizes are powers of two within Triton's limits, num_warps valid;
* every tl.dot meets the GPU's minimum shapes (K >= 16 for 16-bit
  operands, >= 8 for fp32; M, N >= 16);
* a launch's shared memory (its block reductions' cross-warp scratch) is
  within the device's per-block limit, and its register tile (elements per
  thread) within what the register file holds.

Hands on: nothing (raises KernelCheckError / ConfigError), or the per-launch
resource estimates for the hardware model.
"""
import ast

from ...errors import NeoFlowError
from ...schedule.config import ConfigError

MAX_BLOCK = 1 << 16
TILE_PER_THREAD = 128     # fp32 tile elements per thread before registers spill
DOT_MIN_K = {16: 16, 32: 8}


class KernelCheckError(NeoFlowError):
    """Generated code that could access memory it was not proved to own."""


def check_triton(tp, smem_per_block=232448):
    """Check a TritonProgram (module docstring); returns {launch name: estimate}.

    >>> check_triton(generate_triton(program, params))["nf_k0_0"]["smem"]   # doctest: +SKIP
    0
    """
    tree = ast.parse(tp.source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_tl(node.func, ("load", "store")):
            if not any(k.arg == "mask" for k in node.keywords):
                raise KernelCheckError(f"generated Triton access without a mask at line "
                                       f"{node.lineno}: {ast.unparse(node)[:120]}")
        if isinstance(node, ast.Call) and _is_tl(node.func, ("dot",)):
            raise KernelCheckError(f"tl.dot at line {node.lineno} has no shape proof "
                                   "(the printer emits none)")
    estimates = {}
    for launch in tp.launches:
        for name, v in launch.blocks.items():
            if v < 1 or v & (v - 1) or v > MAX_BLOCK:
                raise ConfigError(f"launch {launch.name}: {name}={v} is not a power of two "
                                  f"in [1, {MAX_BLOCK}]")
        if launch.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ConfigError(f"launch {launch.name}: num_warps={launch.num_warps}")
        est = launch_resources(launch)
        if est["smem"] > smem_per_block:
            raise ConfigError(f"launch {launch.name}: needs {est['smem']} B of shared memory, "
                              f"the device allows {smem_per_block} per block")
        if est["tile_per_thread"] > TILE_PER_THREAD:
            raise ConfigError(f"launch {launch.name}: a register tile of "
                              f"{est['tile_per_thread']} elements per thread (more than "
                              f"{TILE_PER_THREAD}); lower xblock/rblock or raise num_warps")
        estimates[launch.name] = est
    return estimates


def launch_resources(launch):
    """Shared memory (bytes) and register tile (elements per thread) of a launch:
    a block reduction exchanges one fp64-wide partial per lane and warp."""
    x = launch.blocks["XBLOCK"]
    rblocks = [v for k, v in launch.blocks.items() if k != "XBLOCK"]
    tile = x * max(rblocks, default=1)
    threads = 32 * launch.num_warps
    smem = 8 * x * launch.num_warps if rblocks else 0
    return {"smem": smem, "tile_per_thread": -(-tile // threads), "threads": threads,
            "tile": tile}


def _is_tl(func, names):
    return isinstance(func, ast.Attribute) and func.attr in names and \
        isinstance(func.value, ast.Name) and func.value.id == "tl"
