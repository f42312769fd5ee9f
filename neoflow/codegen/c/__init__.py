"""C backend: one C file per Program (static kernel functions and the
exported entry `nf_main`).

>>> from neoflow.codegen.c import generate_c, ENTRY
"""
from .printer import ENTRY, generate_c

__all__ = ["ENTRY", "generate_c"]
