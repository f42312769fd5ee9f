"""Triton backend: one Python module of @triton.jit kernels per Program
(each top-level parallel loop of a kernel one launch), and a static check
of what it generated.

>>> from neoflow.codegen.triton import generate_triton, check_triton
"""
from .check import check_triton
from .printer import Launch, TritonProgram, generate_triton

__all__ = ["Launch", "TritonProgram", "check_triton", "generate_triton"]
