"""The entry calls kernels through the exported table `nf_kernel_table`: a
library's own kernels fill it, and the entry printed alone runs whatever
kernel addresses are written there (how the runtime swaps kernels)."""
import ctypes

import numpy as np

import neoflow as nf
from neoflow.toolchain import compile_c
from neoflow.codegen.c import ENTRY, TABLE, generate_c, generate_entry
from neoflow.graph import kernels_for
from neoflow.schedule import default_config, lower_program


def _program():
    x = nf.placeholder((8,), name="x")
    y = nf.compute((8,), lambda i: x[i] * 2.0, name="y")
    z = nf.compute((8,), lambda i: y[i] + 1.0, name="z")
    kernels = kernels_for([y, z])
    return lower_program(kernels, [default_config(k) for k in kernels], [x], [y, z])


def _run(library):
    entry = library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
    x, y, z = np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    args = (ctypes.c_void_p * 3)(x.ctypes.data, y.ctypes.data, z.ctypes.data)
    assert entry(args, (ctypes.c_int64 * 2)()) == 0
    return y, z


def test_the_entry_alone_runs_the_kernels_written_into_its_table():
    program = _program()
    whole = compile_c(generate_c(program))
    table = whole.array(TABLE, ctypes.c_void_p, 2)
    assert all(table)                                   # the static kernels
    entry_only = compile_c(generate_entry(program))
    empty = entry_only.array(TABLE, ctypes.c_void_p, 2)
    assert not any(empty)
    empty[0], empty[1] = table[0], table[1]
    for y, z in (_run(whole), _run(entry_only)):
        np.testing.assert_array_equal(y, np.arange(8) * 2.0)
        np.testing.assert_array_equal(z, np.arange(8) * 2.0 + 1.0)
