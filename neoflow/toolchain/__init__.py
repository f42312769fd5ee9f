"""The build stage: C source -> loaded library.

Compiles once with the system C compiler, caches the library on disk by
content hash, and loads it with ctypes.

>>> from neoflow.toolchain import compile_c
>>> lib = compile_c("int twice(int x) { return 2 * x; }")    # doctest: +SKIP
"""
from neoflow.toolchain.cache import cache_dir
from neoflow.toolchain.compiler import asan_runtime_path
from neoflow.toolchain.driver import cached_c, compile_c
from neoflow.toolchain.library import CompiledLibrary

__all__ = ["CompiledLibrary", "asan_runtime_path", "cache_dir", "cached_c", "compile_c"]
