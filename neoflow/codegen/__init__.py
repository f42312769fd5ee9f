"""The codegen stage: loop IR -> source code. `c/` emits C with OpenMP and
SIMD-friendly loops for CPUs; `triton/` prints the same IR as Triton kernels
for NVIDIA GPUs (imported on use: it needs no triton to print, but only
target="cuda" asks for it).

>>> from neoflow.codegen import generate_c
>>> source = generate_c(program)
"""
from .c import generate_c

__all__ = ["generate_c"]
