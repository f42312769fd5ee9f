"""C backend: one C file per Program (static kernel functions, the
exported kernel table and entry `nf_main`), or the entry alone.

>>> from neoflow.codegen.c import generate_c, ENTRY
"""
from .printer import ENTRY, TABLE, generate_c, generate_entry

# Bump when the printer's output for a schedule changes (and with it the
# schedule's time): the tuning database's hardware fingerprint carries it.
VERSION = "1"

__all__ = ["ENTRY", "TABLE", "VERSION", "generate_c", "generate_entry"]
