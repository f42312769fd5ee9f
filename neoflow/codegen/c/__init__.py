"""C backend: one C file per Program (static kernel functions, the
exported kernel table and entry `nf_main`), or the entry alone.

>>> from neoflow.codegen.c import generate_c, ENTRY
"""
from .printer import ENTRY, TABLE, generate_c, generate_entry

__all__ = ["ENTRY", "TABLE", "generate_c", "generate_entry"]
