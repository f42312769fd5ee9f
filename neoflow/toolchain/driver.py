# build/driver: source -> callable, the build stage end to end.
#
# Picks the compiler and flags, looks the kernel up in the on-disk cache,
# compiles it on a miss (or when the cached entry fails verification), and
# hands on the loaded CompiledLibrary.
from __future__ import annotations

from typing import Sequence

from neoflow.toolchain import cache
from neoflow.toolchain.compiler import compile_flags, compile_shared, find_compiler, fingerprint
from neoflow.toolchain.library import CompiledLibrary, load


def compile_c(
    source: str, *, openmp: bool = True, sanitize: bool = False, quick: bool = False,
    extra_flags: Sequence[str] = ()
) -> CompiledLibrary:
    """Compile C `source` to a shared library (once; later calls hit the disk cache) and load it.

    `sanitize=True` builds with AddressSanitizer; such a library loads only in
    a process started with `asan_runtime_path()` in LD_PRELOAD. `quick=True`
    builds about three times faster, into slower code with the same
    arithmetic (compiler.compile_flags).

    >>> lib = compile_c("double add(double a, double b) { return a + b; }")  # doctest: +SKIP
    >>> add = lib.get("add", [ctypes.c_double] * 2, ctypes.c_double)       # doctest: +SKIP
    >>> add(1.0, 2.0)                                                      # doctest: +SKIP
    3.0
    """
    cc = find_compiler()
    flags = compile_flags(cc, openmp=openmp, sanitize=sanitize, quick=quick,
                          extra_flags=extra_flags)
    key = cache.cache_key(source, fingerprint(cc, flags))
    path = cache.lookup(key)
    if path is None:
        path = cache.store(key, source, lambda c_file, out: compile_shared(cc, flags, c_file, out))
    return load(path, source)


def cached_c(source: str) -> CompiledLibrary | None:
    """The library `compile_c(source)` would give, loaded, if the disk cache
    has it already; else None (nothing is compiled).

    >>> cached_c("int f(void) { return 1; }") is None      # doctest: +SKIP
    True
    """
    cc = find_compiler()
    flags = compile_flags(cc, openmp=True, sanitize=False)
    path = cache.lookup(cache.cache_key(source, fingerprint(cc, flags)))
    return None if path is None else load(path, source)
