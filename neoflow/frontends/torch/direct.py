"""frontends/torch/direct: a built function's entry point called with torch
tensors -- the one fast call both the op decorator (op.py) and the backend's
partitions (backend.py) make per call.

Per call: each input's address (a contiguous copy only where it is not
contiguous), a fresh torch tensor per computed output, one native call.
Nothing is re-validated that the caller's cache key already guarantees;
the caller checks shapes and dtypes (`matches`) only where its key does
not. An error the kernels report makes the call return None, so that the
caller's checked call (the BuiltFunction's own) raises it by name.

An input may be declared strided (`layouts`: its view shape and strides):
the kernel reads it in place from its first element through a placeholder
over the elements it spans (backend.py: flat, or with the dims in memory
order where it is a permuted dense array), so no contiguous copy is made; a
tensor that arrives with other strides is first copied into that layout.

Hands on: `Direct` (`Direct.of(function, layouts)` -> a Direct or None)
and `flat_span`.
"""
import ctypes

import torch

from ...codegen.c import ENTRY
from ...graph.plan import computed_tensors
from ...runtime.function import BuiltFunction
from ...te.random import random_states
from ...te.visit import topo_tensors
from .convert import torch_dtype


class Direct:
    """The entry point of a plain BuiltFunction (no nf.scan, no random
    tensors) called with torch tensors: `direct(tensors)` -> the outputs in
    order (a tensor asked twice, or an input asked back, is a copy), or None
    when the kernels report an error.

    >>> d = Direct.of(nf.build(B, [A])); d([torch.ones(3)])   # doctest: +SKIP
    """

    def __init__(self, function, layouts=None):
        outputs, inputs = function.outputs, function.inputs
        self._layouts = list(layouts or [None] * len(inputs))
        computed = computed_tensors(outputs)
        self._entry = function.library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p],
                                           ctypes.c_int64)
        self.inputs = [(torch.Size(t.shape if layout is None else layout[0]),
                        torch_dtype(t.dtype)) for t, layout in zip(inputs, self._layouts)]
        self._results = [(tuple(t.shape), torch_dtype(t.dtype)) for t in computed]
        self._pointers = ctypes.c_void_p * (len(inputs) + len(computed))
        where = {id(t): ("in", n) for n, t in enumerate(inputs)}
        where.update({id(t): ("out", n) for n, t in enumerate(computed)})
        handed, handout = set(), []
        for t in outputs:
            handout.append(where[id(t)] + (id(t) in handed or not t.is_compute,))
            handed.add(id(t))
        self._plain = handout == [("out", n, False) for n in range(len(computed))]
        self._handout = handout

    @classmethod
    def of(cls, function, layouts=None):
        """A Direct for `function` (`layouts`: per input None, or the
        (shape, strides) it is read with), or None where its own call is
        needed."""
        if not isinstance(function, BuiltFunction) or \
                random_states(topo_tensors(list(function.outputs))):
            return None
        return cls(function, layouts)

    def matches(self, tensors):
        """Whether `tensors` have the shapes and dtypes the function was built for."""
        return len(tensors) == len(self.inputs) and all(
            t.dtype == dtype and t.shape == shape
            for t, (shape, dtype) in zip(tensors, self.inputs))

    def __call__(self, tensors):
        inputs = [(t if t.is_contiguous() else t.contiguous()) if layout is None else
                  in_layout(t, layout) for t, layout in zip(tensors, self._layouts)]
        results = [torch.empty(shape, dtype=dtype) for shape, dtype in self._results]
        err = (ctypes.c_int64 * 2)()
        self._entry(self._pointers(*[t.data_ptr() for t in inputs],
                                   *[r.data_ptr() for r in results]), err)
        if err[0] != 0:
            return None
        if self._plain:
            return results
        pools = {"in": inputs, "out": results}
        return [pools[pool][n].clone() if copy else pools[pool][n]
                for pool, n, copy in self._handout]


def in_layout(t, layout):
    """`t` with the strides `layout` (shape, strides) says (a copy only
    where it has others)."""
    if t.stride() == layout[1]:
        return t
    return torch.empty_strided(layout[0], layout[1], dtype=t.dtype).copy_(t)


def flat_span(t, layout):
    """The flat tensor of the elements strided view `t` spans, from its
    first (what a strided input's placeholder holds), in `layout`.

    >>> flat_span(torch.arange(6.).view(2, 3)[:, :2], ((2, 2), (3, 1)))
    tensor([0., 1., 2., 3., 4.])
    """
    t = in_layout(t, layout)
    shape, strides = layout
    extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    return t.as_strided((extent,), (1,))


__all__ = ["Direct", "flat_span", "in_layout"]
