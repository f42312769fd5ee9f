"""graph/plan: the kernels a build of `outputs` from `inputs` runs -- the
signature checked (outputs are Tensors, inputs distinct placeholders or
parameters covering every leaf the outputs read), the computed tensors
partitioned into fused kernels.

Hands on: `Kernel`s in run order (for `nf.build`, `nf.tune`, benchmarks).
"""
from ..errors import InputError, NeoFlowError
from ..te.random import is_random_state
from ..te.scan import is_scan
from ..te.tensor import Tensor
from ..te.visit import topo_tensors
from .grouping import group_kernels
from .partition import fuse, kernels_of


def plan_kernels(outputs, inputs, fusion=True):
    """(kernels, single): the kernels `nf.build(outputs, inputs, fusion=fusion)`
    runs, in order, after the same checks; `single` if `outputs` is one Tensor.

    >>> kernels, single = plan_kernels(B, [A]); kernels, single
    ([<Kernel B>], True)
    """
    single = isinstance(outputs, Tensor)
    outs = [outputs] if single else list(outputs)
    check_signature(outs, inputs)
    return partition(computed_tensors(outs), fusion)[0], single


def partition(computed, fusion):
    """(kernels, the computed tensors as rebuilt by fusion, in the same order)."""
    part = fuse(computed, fusion=fusion)
    return kernels_of(part, fusion), list(part.outputs)


def grouped_kernels(outs):
    """(computed tensors among `outs`, the kernels computing them): computes
    that are fused already (a Trainer's graph, a scan's segments and steps)
    grouped into multi-stage kernels as nf.build groups them, in run order.
    The execution backends' `function` (native and cuda) build these.

    >>> computed, kernels = grouped_kernels([C]); kernels    # doctest: +SKIP
    [<Kernel B+C>]
    """
    computed = computed_tensors(outs)
    order = [t for t in topo_tensors(computed) if t.is_compute]
    return computed, group_kernels(order, {id(t) for t in computed})


def computed_tensors(outs):
    """The computed tensors among `outs`, each once, in order."""
    computed = []
    for t in outs:
        if t.is_compute and all(t is not c for c in computed):
            computed.append(t)
    return computed


def check_signature(outs, inputs):
    for t in outs:
        if not isinstance(t, Tensor):
            raise NeoFlowError(f"nf.build: outputs must be Tensors, got {t!r}")
    if isinstance(inputs, Tensor) or not isinstance(inputs, (list, tuple)):
        raise NeoFlowError("nf.build: inputs must be a list of placeholder/parameter tensors "
                           f"in call order, got {inputs!r}")
    seen = set()
    for t in inputs:
        if not isinstance(t, Tensor):
            raise NeoFlowError(f"nf.build: inputs must be Tensors, got {t!r}")
        if t.is_compute:
            raise NeoFlowError(f"nf.build: input '{t.name}' is a computed tensor; inputs are "
                               "placeholders or parameters")
        if id(t) in seen:
            raise NeoFlowError(f"nf.build: input '{t.name}' is listed twice")
        seen.add(id(t))
    for t in topo_tensors(outs):
        if not t.is_compute and not is_scan(t) and id(t) not in seen and not is_random_state(t):
            raise InputError(f"nf.build: the outputs read '{t.name}' {t.shape} {t.dtype}, "
                             "which is not among the inputs; add it to the inputs list")
    return list(inputs)


