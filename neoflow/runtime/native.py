"""The native execution backend: the whole training step as one generated C
function over the planned buffers, called once per step.

Every kernel output is passed in as an argument (none is a temporary of the
generated entry), so the buffer plan decides every address: arena memory is
reused across kernels and in-place updates receive their target's buffer as
output. The pointer array is built once; a step is one ctypes call.

Hands on: a step program and forward functions for the executor.
"""
import ctypes

import numpy as np

from ..api import BuiltFunction
from ..build import compile_c
from ..codegen.c import ENTRY, generate_c
from ..graph import kernels_for
from ..schedule import default_config, lower_program

def compile_kernels(kernels, inputs, outputs, computed, aliased=()):
    """A BuiltFunction running `kernels` with every tensor in `computed` passed in;
    kernels whose indices are in `aliased` write over memory they read."""
    configs = [default_config(k) for k in kernels]
    program = lower_program(kernels, configs, inputs, computed)
    source = generate_c(program, aliased)
    library = compile_c(source)
    return BuiltFunction(outputs, False, inputs, computed, kernels, configs, program, source,
                         library, None)


class NativeBackend:
    """Runs kernels as generated C (default schedules).

    >>> step = NativeBackend().program(kernels, views)       # doctest: +SKIP
    >>> step()                                               # doctest: +SKIP
    """

    name = "native"

    def program(self, kernels, views):
        """A callable running `kernels` in order over `views` ({id(tensor): ndarray})."""
        produced = {id(t) for k in kernels for t in k.outputs}
        leaves, seen = [], set()
        for k in kernels:
            for t in k.inputs:
                if id(t) not in produced and id(t) not in seen:
                    seen.add(id(t))
                    leaves.append(t)
        outputs = [t for k in kernels for t in k.outputs]
        aliased = {n for n, k in enumerate(kernels)
                   if any(np.may_share_memory(views[id(a)], views[id(b)])
                          for a in k.inputs for b in k.outputs)}
        fn = compile_kernels(kernels, leaves, outputs, outputs, aliased)
        entry = fn.library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
        pointers = (ctypes.c_void_p * (len(leaves) + len(outputs)))(
            *[views[id(t)].ctypes.data for t in leaves + outputs])
        err = (ctypes.c_int64 * 2)()

        def run():
            if entry(pointers, err):
                code, index = err[0], err[1]
                err[0] = err[1] = 0
                fn._raise(code, index)  # the OutOfBounds/Memory error nf.build raises
        return run

    def function(self, outputs, inputs):
        """A callable(*arrays) -> tuple of fresh arrays computing `outputs`."""
        computed = []
        for t in outputs:
            if t.is_compute and all(t is not c for c in computed):
                computed.append(t)
        return compile_kernels(kernels_for(computed), list(inputs), list(outputs), computed)
