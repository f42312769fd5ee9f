"""graph/ops_class: what kind of operation a compute is, read off its expression.

Never from op names: a compute is
* "injective" -- no reduction, and every read indexes its tensor with affine
  (or //, %) functions of the compute's own axes and constants (elementwise,
  broadcast, transpose, reshape, slice, pad, concat);
* "gather" -- no reduction, but some index reads a tensor (embedding);
* "reduction" -- contains a reduction; "light" when its flops per byte
  touched are low (sum, max, mean, softmax statistics), "heavy" when high
  (matmul, conv: each input element is reused many times).

Hands on: `op_class(t)`, `is_injective(t)`, `per_element_flops(t)` for the partitioner.
"""
import math

from ..te.expr import Read, Reduce
from ..te.flops import flops
from ..te.visit import post_order
from .memory import nbytes

HEAVY_FLOPS_PER_BYTE = 1.0  # above this a reduction counts as heavy (matmul-like)


def _has_reduce(body):
    return any(isinstance(n, Reduce) for n in post_order(body))


def _gathers(body):
    """True when some read's index reads a tensor."""
    for n in post_order(body):
        if isinstance(n, Read):
            for ix in n.indices:
                if any(isinstance(m, Read) for m in post_order(ix)):
                    return True
    return False


def own_flops(t):
    """Flops of `t`'s own loop nest (its inputs given)."""
    from ..te.visit import tensor_inputs
    return flops([t], given=tensor_inputs(t))


def per_element_flops(t):
    """Flops per output element of `t`'s own body.

    >>> per_element_flops(nf.compute((4,), lambda i: A[i] * 2 + 1))
    2.0
    """
    return own_flops(t) / max(1, math.prod(t.shape))


def bytes_touched(t):
    """Bytes `t` reads (each input once) and writes, as a separate kernel."""
    from ..te.visit import tensor_inputs
    return nbytes(t) + sum(nbytes(p) for p in tensor_inputs(t))


def op_class(t):
    """"leaf", "injective", "gather", "reduction-light" or "reduction-heavy".

    >>> op_class(nf.compute((4,), lambda i: A[i] * 2))
    'injective'
    """
    if not t.is_compute:
        return "leaf"
    body = t.op.body
    if _has_reduce(body):
        intensity = own_flops(t) / max(1, bytes_touched(t))
        return "reduction-heavy" if intensity > HEAVY_FLOPS_PER_BYTE else "reduction-light"
    if _gathers(body):
        return "gather"
    return "injective"


def is_injective(t):
    """True when `t` is an injective (elementwise/broadcast/layout) compute."""
    return op_class(t) == "injective"
