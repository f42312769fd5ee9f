"""Buffer planning for one training step: liveness over the kernel order and
reuse of dead memory.

Every leaf (input, parameter, optimizer state, scalar) owns a persistent
buffer; an in-place alias value shares its target's buffer. Every other
tensor a kernel writes gets a range of one arena: it is live from the kernel
that writes it to the last kernel that reads it (step outputs: to the end),
and two tensors whose lives overlap never overlap in the arena. A kernel's
outputs are live together with its inputs, so no kernel writes over what it
reads. Offsets are chosen greedily by size (largest tensor first, each in
the smallest gap left by the tensors already placed whose lives overlap its
own), which stays close to the lower bound, the most bytes live at once.
Offsets are 64-byte aligned.

Hands on: a `BufferPlan` — for each tensor a leaf or an arena offset — and
the byte counts `memory_stats` reports.
"""
import math

import numpy as np

ALIGN = 64


def nbytes(t):
    """Bytes of tensor `t`'s buffer (a 0-d tensor holds one element).

    >>> nbytes(nf.placeholder((4, 3), "float64"))
    96
    """
    return math.prod(t.shape) * np.dtype(t.dtype).itemsize


class BufferPlan:
    """Where every tensor of the step lives.

    `home[id(t)]` is ("leaf", leaf tensor) or ("arena", byte offset);
    `arena_bytes` is the arena's size; `most_live_bytes` the most bytes of
    arena tensors live at once (the lower bound of any arena for this order).
    """

    def __init__(self, home, arena_bytes, most_live_bytes, unplanned_bytes):
        self.home, self.arena_bytes = home, arena_bytes
        self.most_live_bytes, self.unplanned_bytes = most_live_bytes, unplanned_bytes

    def stats(self, graph):
        """Byte counts: by kind of leaf, the arena, the peak, and what an
        arena without reuse would need."""
        state = [t for slots in graph.state.values() for t in slots.values()]
        parts = {"parameter_bytes": graph.params + graph.frozen,
                 "optimizer_state_bytes": state,
                 "input_bytes": graph.inputs + list(graph.scalars.values())}
        out = {k: sum(nbytes(t) for t in ts) for k, ts in parts.items()}
        out["activation_bytes"] = self.arena_bytes
        out["activation_bytes_lower_bound"] = self.most_live_bytes
        out["activation_bytes_without_reuse"] = self.unplanned_bytes
        out["peak_bytes"] = sum(out[k] for k in parts) + out["activation_bytes"]
        return out


def lifetimes(graph, kernels):
    """{id(t): (tensor, first kernel, last kernel)} of every tensor the
    arena holds: kernel outputs that are neither leaves nor in-place aliases.

    >>> lifetimes(graph, graph.kernels())                       # doctest: +SKIP
    """
    resident = {id(t) for t in graph.leaves}
    resident.update(id(a.value) for a in graph.aliases if a.inplace)
    life = {}
    for k, kernel in enumerate(kernels):
        for t in kernel.outputs:
            if id(t) not in resident:
                life[id(t)] = [t, k, k]
        for t in kernel.inputs:
            if id(t) in life:
                life[id(t)][2] = k
    for t in graph.outputs:
        if id(t) in life:
            life[id(t)][2] = len(kernels)
    return {i: tuple(v) for i, v in life.items()}


def plan_buffers(graph, kernels):
    """Plan the buffers of `graph` run as `kernels` (graph.kernel.Kernel, in run order);
    a kernel's local stages need no buffer.

    >>> plan = plan_buffers(graph, graph.kernels())             # doctest: +SKIP
    >>> plan.stats(graph)["peak_bytes"]                          # doctest: +SKIP
    """
    home = {id(t): ("leaf", t) for t in graph.leaves}
    for a in graph.aliases:
        if a.inplace:
            home[id(a.value)] = ("leaf", a.target)
    life = lifetimes(graph, kernels)
    size = {i: -(-nbytes(t) // ALIGN) * ALIGN for i, (t, _, _) in life.items()}
    placed = []  # (offset, end offset, first kernel, last kernel)
    arena = 0
    for i in sorted(life, key=lambda i: (-size[i], life[i][1])):
        _, first, last = life[i]
        busy = sorted((lo, hi) for lo, hi, f, l in placed if f <= last and first <= l)
        offset = _best_gap(busy, size[i])
        placed.append((offset, offset + size[i], first, last))
        home[i] = ("arena", offset)
        arena = max(arena, offset + size[i])
    live = [0] * (len(kernels) + 1)
    for i, (_, first, last) in life.items():
        for k in range(first, last + 1):
            live[k] += size[i]
    return BufferPlan(home, arena, max(live, default=0), sum(size.values()))


def _best_gap(busy, need):
    """The start of the smallest gap of at least `need` bytes between the
    sorted, possibly overlapping ranges `busy` (or the end of the last)."""
    best, best_size, cursor = None, None, 0
    for lo, hi in busy:
        gap = lo - cursor
        if gap >= need and (best_size is None or gap < best_size):
            best, best_size = cursor, gap
        cursor = max(cursor, hi)
    return cursor if best is None else best
