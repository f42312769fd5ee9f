"""frontends/torch/direct: a built function's entry point called with torch
tensors -- the one fast call both the op decorator (op.py) and the backend's
partitions (backend.py) make per call.

Per call: each input's address (a contiguous copy only where it is not
contiguous), a fresh torch tensor per computed output, one native call.
Nothing is re-validated that the caller's cache key already guarantees;
the caller checks shapes and dtypes (`matches`) only where its key does
not. An error the kernels report makes the call return None, so that the
caller's checked call (the BuiltFunction's own) raises it by name.

Hands on: `Direct` (`Direct.of(function)` -> a Direct or None).
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

    def __init__(self, function):
        outputs, inputs = function.outputs, function.inputs
        computed = computed_tensors(outputs)
        self._entry = function.library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p],
                                           ctypes.c_int64)
        self.inputs = [(torch.Size(t.shape), torch_dtype(t.dtype)) for t in inputs]
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
    def of(cls, function):
        """A Direct for `function`, or None where its own call is needed."""
        if not isinstance(function, BuiltFunction) or \
                random_states(topo_tensors(list(function.outputs))):
            return None
        return cls(function)

    def matches(self, tensors):
        """Whether `tensors` have the shapes and dtypes the function was built for."""
        return len(tensors) == len(self.inputs) and all(
            t.dtype == dtype and t.shape == shape
            for t, (shape, dtype) in zip(tensors, self.inputs))

    def __call__(self, tensors):
        inputs = [t if t.is_contiguous() else t.contiguous() for t in tensors]
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


__all__ = ["Direct"]
