# build/library: loading a built shared library into this process.
#
# Wraps ctypes.CDLL and hands on typed ctypes functions. A library loaded with
# ctypes cannot be unloaded safely (function pointers to its code may still be
# held anywhere), so each path is loaded at most once per process and kept.
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Callable, Sequence

from neoflow.errors import BuildError

_loaded: dict[Path, CompiledLibrary] = {}


class CompiledLibrary:
    """A shared library built from C source and loaded into this process.

    >>> lib = compile_c("double add(double a, double b) { return a + b; }")  # doctest: +SKIP
    >>> add = lib.get("add", [ctypes.c_double] * 2, ctypes.c_double)       # doctest: +SKIP
    >>> add(1.0, 2.0)                                                      # doctest: +SKIP
    3.0
    """

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        try:
            self._cdll = ctypes.CDLL(str(path))
        except OSError as err:
            raise BuildError(f"cannot load compiled kernel {path}: {err}") from None

    def get(self, name: str, argtypes: Sequence[Any], restype: Any) -> Callable[..., Any]:
        """The exported C function `name`, typed with ctypes `argtypes` and `restype`.

        Each call returns a fresh function object, so two callers never retype
        each other's.

        >>> lib.get("add", [ctypes.c_double] * 2, ctypes.c_double)  # doctest: +SKIP
        <_FuncPtr object at 0x...>
        """
        try:
            function = self._cdll[name]
        except AttributeError:
            raise BuildError(
                f"{self.path} exports no function {name!r} (misspelled, or declared static?)"
            ) from None
        function.argtypes = list(argtypes)
        function.restype = restype
        return function

    def array(self, name: str, ctype: Any, length: int) -> Any:
        """The exported C array `name` of `length` `ctype`s, as a writable ctypes array
        over the library's own memory.

        >>> table = lib.array("nf_kernel_table", ctypes.c_void_p, 3)   # doctest: +SKIP
        >>> table[0]                                                  # doctest: +SKIP
        140234023020
        """
        try:
            return (ctype * length).in_dll(self._cdll, name)
        except ValueError:
            raise BuildError(f"{self.path} exports no array {name!r}") from None

    def __repr__(self) -> str:
        return f"CompiledLibrary({str(self.path)!r})"


def load(path: Path, source: str) -> CompiledLibrary:
    """The library at `path`, loaded on first use and the same object after.

    >>> load(Path("/home/me/.cache/neoflow/kernels/3f/3f9c....so"), source)  # doctest: +SKIP
    CompiledLibrary('/home/me/.cache/neoflow/kernels/3f/3f9c....so')
    """
    library = _loaded.get(path)
    if library is None:
        library = _loaded.setdefault(path, CompiledLibrary(path, source))
    return library
