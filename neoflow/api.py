"""api: `nf.build` -- tensor expressions to a native function, end to end.

outputs -> fused kernels (graph: inlining, then grouping into multi-stage
kernels; `fusion=False`: one kernel per compute) -> Configs (given, tuned -- the tuning database
-- or the schedule stage's default) -> loop
IR (schedule) -> C (codegen) -> loaded library (toolchain) -> `BuiltFunction`
(runtime/function.py).

Hands on: `BuiltFunction`s.
"""
from .codegen.c import generate_c
from .errors import NeoFlowError
from .graph.plan import check_signature, computed_tensors, partition
from .runtime.function import BuiltFunction
from .schedule import Config, default_config, lower_program
from .te.random import random_states
from .te.scan import is_scan
from .te.tensor import Tensor
from .te.visit import topo_tensors
from .toolchain import compile_c
from .tune.database import best_configs

TARGETS = ("cpu", "cuda")


def build(outputs, inputs, target="cpu", database=None, *, configs=None, sanitize=False,
          fusion=True):
    """Compile `outputs` as a function of `inputs` (placeholders/parameters, in order).

    The computation is partitioned into fused kernels (graph.partition:
    injective producers inlined, epilogues, light reductions and siblings
    grouped; see docs/fusion.md and `nf.explain`); `fusion=False` makes one
    kernel per compute, for debugging or to schedule computes one by one.

    `configs` gives schedules: one Config (a single-kernel build), a list
    with one Config or None per kernel (in `f.kernels` order), or a dict
    {kernel key: Config}. A kernel without one takes the best schedule
    `nf.tune` recorded for it in `database` (None: the per-user tuning
    database, if there is one; False: none; a path or an nf.tune.Database),
    else `default_config`. An unreadable database warns once and never
    fails the build. Random tensors (nf.random_uniform) draw afresh on each
    call, or reproducibly with `f(..., seed=7)`. `target="cuda"` generates
    Triton kernels from the same loop IR and returns a CudaFunction (torch
    tensors in and out; docs/gpu.md). `sanitize=True` builds with
    AddressSanitizer (load only in a process with `asan_runtime_path()` in
    LD_PRELOAD).

    >>> A = nf.placeholder((2, 3), name="A")
    >>> B = nf.compute((3, 2), lambda i, j: A[j, i] * 2, name="B")
    >>> f = nf.build(B, [A])
    >>> f(np.ones((2, 3), np.float32)).shape
    (3, 2)
    """
    if target not in TARGETS:
        raise NeoFlowError(f"target {target!r}: expected one of {TARGETS}")
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    inputs = check_signature(outs, inputs)
    if any(is_scan(t) for t in topo_tensors(outs)):
        if target == "cuda":
            raise NeoFlowError("nf.build: nf.scan runs on target='cpu' only (the Triton "
                               "backend has no scan loop yet)")
        from .runtime.scan_function import build_with_scans
        return build_with_scans(outs, single, inputs, lambda o, i: build(
            o, i, target, database, sanitize=sanitize, fusion=fusion))
    computed = computed_tensors(outs)
    randoms = random_states(topo_tensors(outs))
    kernels, fused = partition(computed, fusion)
    chosen = _configs_for(kernels, configs, best_configs(kernels, target, database), target)
    if target == "cuda":
        if randoms:
            raise NeoFlowError(f"nf.build: random tensor '{randoms[0].name}' is not supported "
                               "on target='cuda' yet; build it for target='cpu'")
        return _build_cuda(outs, single, inputs, fused, kernels, chosen, database, computed)
    program = lower_program(kernels, chosen, inputs + randoms, fused)
    source = generate_c(program)
    library = compile_c(source, sanitize=sanitize)
    return BuiltFunction(outs, single, inputs, fused, kernels, chosen, program, source,
                         library, database, originals=computed, randoms=randoms)


def _build_cuda(outs, single, inputs, fused, kernels, chosen, database, computed):
    """The GPU half of `build`: Triton kernels from the same loop IR (docs/gpu.md)."""
    from .runtime.cuda import CudaFunction, compile_program, require_device
    device = require_device()
    program, triton = compile_program(kernels, chosen, inputs, fused)
    return CudaFunction(outs, single, inputs, fused, kernels, chosen, program, triton, database,
                        device, originals=computed)


def _configs_for(kernels, configs, tuned, target="cpu"):
    """Per kernel: the config given, else the tuned one, else the default."""
    if configs is None:
        given = [None] * len(kernels)
    elif isinstance(configs, Config):
        if len(kernels) != 1:
            raise NeoFlowError(f"nf.build: one Config given but the outputs make "
                               f"{len(kernels)} kernels; pass a list or a dict keyed by "
                               "kernel key")
        given = [configs]
    elif isinstance(configs, dict):
        given = [configs.get(k.key) for k in kernels]
    else:
        given = list(configs)
        if len(given) != len(kernels):
            raise NeoFlowError(f"nf.build: {len(given)} configs given for {len(kernels)} "
                               "kernels")
    return [c if c is not None else t if t is not None else default_config(k, target)
            for c, t, k in zip(given, tuned, kernels)]


