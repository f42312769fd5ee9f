"""The executor: owns the buffers of a training step and runs its kernels.

Buffers are allocated once from a `BufferPlan`: one persistent array per leaf
(inputs, scalars, parameters, optimizer state), one arena, and a view of the
right shape and dtype per tensor (at its planned arena offset). A backend turns
the kernels into one step program over those views; the executor runs it,
then copies the values of aliases that could not be done in place.

A backend with device memory (runtime/cuda.py) gives its own `memory`
(allocate, view, write, host, copy); host NumPy memory is the default.

Hands on: `Executor.step()` (optionally timing each kernel), and
`buffer(t)` — the live array of tensor `t`.
"""
import numpy as np

from ..te import dtype as dt
from ..graph.memory import ALIGN, nbytes


def aligned_empty(size):
    """An uninitialised uint8 array of `size` bytes starting on an ALIGN boundary.

    >>> aligned_empty(100).ctypes.data % ALIGN
    0
    """
    raw = np.empty(size + ALIGN, np.uint8)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + size]


def view(memory, t, offset=0):
    """Tensor `t`'s shape and dtype over the bytes of `memory` from `offset`."""
    return memory[offset:offset + nbytes(t)].view(dt.to_numpy(t.dtype)).reshape(t.shape)


class HostMemory:
    """Buffers as NumPy arrays (the CPU backends')."""

    @staticmethod
    def allocate(size):
        return aligned_empty(size)

    view = staticmethod(view)

    @staticmethod
    def write(target, value):
        target[...] = value

    @staticmethod
    def host(buffer):
        return buffer.copy()

    @staticmethod
    def copy(target, value):
        np.copyto(target, value)


class Executor:
    """Buffers and the step program of a planned graph.

    >>> ex = Executor(graph, kernels, plan, ReferenceBackend())   # doctest: +SKIP
    >>> ex.buffer(graph.params[0])[...] = w0; ex.step()           # doctest: +SKIP
    """

    def __init__(self, graph, kernels, plan, backend):
        self.memory = mem = getattr(backend, "memory", HostMemory)
        self.arena = mem.allocate(plan.arena_bytes)
        self.views = {}
        for t in graph.leaves:
            self.views[id(t)] = mem.view(mem.allocate(nbytes(t)), t)
        for kernel in kernels:
            for t in kernel.outputs:
                kind, where = plan.home[id(t)]
                if kind == "leaf":
                    self.views[id(t)] = self.views[id(where)]
                else:
                    self.views[id(t)] = mem.view(self.arena, t, where)
        updates = {id(a.value) for a in graph.aliases}
        apart = [n for n, k in enumerate(kernels) if any(id(t) in updates for t in k.outputs)]
        self.program = backend.program(kernels, self.views, apart)
        self.copies = [(self.views[id(a.target)], self.views[id(a.value)])
                       for a in graph.aliases if not a.inplace]

    def buffer(self, t):
        """The array that holds tensor `t` during and between steps."""
        return self.views[id(t)]

    def write(self, t, value):
        """Set tensor `t`'s buffer to `value` (an array, a scalar, or a device tensor)."""
        self.memory.write(self.views[id(t)], value)

    def host(self, t):
        """A NumPy copy of tensor `t`'s buffer."""
        return self.memory.host(self.views[id(t)])

    def step(self, profile=False):
        """Run every kernel once, then finish the aliases done by copy.
        `profile=True` (native programs) runs the kernels one by one and
        returns the seconds each took."""
        times = self.program.profile() if profile else self.program()
        for target, value in self.copies:
            self.memory.copy(target, value)
        return times
