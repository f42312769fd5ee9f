"""The codegen stage: loop IR -> source code. `c/` emits C with OpenMP and
SIMD-friendly loops for CPUs (a Triton backend for GPUs lowers from the same
IR later).

>>> from neoflow.codegen import generate_c
>>> source = generate_c(program)
"""
from .c import generate_c

__all__ = ["generate_c"]
