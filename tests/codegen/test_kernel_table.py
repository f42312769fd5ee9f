"""The entry calls kernels through a table: a library's own kernels fill its
exported `nf_kernel_table`; the entry printed alone runs whatever kernel
addresses its caller's table holds (how the runtime swaps kernels), and two
callers of one such library each run their own."""
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


def _run(library, table=None):
    entry = library.get(ENTRY, [ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int64)
    x, y, z = np.arange(8, dtype=np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    pointers = [x.ctypes.data, y.ctypes.data, z.ctypes.data]
    if table is not None:
        pointers.append(ctypes.addressof(table))
    args = (ctypes.c_void_p * len(pointers))(*pointers)
    assert entry(args, (ctypes.c_int64 * 2)()) == 0
    return y, z


def test_the_entry_alone_runs_the_kernels_of_its_callers_table():
    program = _program()
    whole = compile_c(generate_c(program))
    table = whole.array(TABLE, ctypes.c_void_p, 2)
    assert all(table)                                   # the static kernels
    entry_only = compile_c(generate_entry(program))
    own = (ctypes.c_void_p * 2)(table[0], table[1])
    for y, z in (_run(whole), _run(entry_only, own)):
        np.testing.assert_array_equal(y, np.arange(8) * 2.0)
        np.testing.assert_array_equal(z, np.arange(8) * 2.0 + 1.0)
    swapped = (ctypes.c_void_p * 2)(table[1], table[1])  # y = x + 1 too, from another table
    y, z = _run(entry_only, swapped)
    np.testing.assert_array_equal(y, np.arange(8) + 1.0)
    np.testing.assert_array_equal(z, np.arange(8) + 2.0)
    y, z = _run(entry_only, own)                        # the first caller's table unchanged
    np.testing.assert_array_equal(z, np.arange(8) * 2.0 + 1.0)
