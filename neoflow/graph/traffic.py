"""graph/traffic: the estimated memory traffic of kernels -- what a kernel
reads (each of its inputs once) plus what it writes (each of its outputs
once). Kernel-local stages (`Kernel.locals`) cost nothing: they stay inside
the kernel. Caches and re-reads inside a loop nest are not modelled; the
estimate is the traffic between kernels and memory, the quantity fusion cuts.

Hands on: byte counts, for bench/fusion.py (nf.explain prints the same
estimate per kernel and in total).
"""
from .memory import nbytes


def kernel_bytes(kernel):
    """Bytes `kernel` (graph.kernel.Kernel) reads from and writes to memory.

    >>> A = nf.placeholder((4, 3), name="A")
    >>> B = nf.compute((4, 3), lambda i, j: A[i, j] * 2, name="B")
    >>> kernel_bytes(Kernel([B]))       # A read, B written: 2 x 48
    96
    """
    return sum(nbytes(t) for t in kernel.inputs) + sum(nbytes(t) for t in kernel.outputs)


def step_bytes(kernels):
    """Bytes moved by running `kernels` once (e.g. `trainer.kernels`: one step).

    >>> step_bytes(trainer.kernels)      # doctest: +SKIP
    11940020
    """
    return sum(kernel_bytes(k) for k in kernels)
