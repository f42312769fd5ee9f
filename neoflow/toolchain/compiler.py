# build/compiler: the system C compiler driver.
#
# Finds a C compiler (env CC, else cc, gcc, clang on PATH), settles the flags
# this machine accepts (probed at once, in parallel, the first time a compiler
# is used; a pass is remembered in the kernel cache, keyed by the compiler's
# path, version and file, so later processes skip it), and turns one C file
# into a shared library. It hands on a library file on disk, or a BuildError whose
# message is short enough to read. No -ffast-math: kernels must agree with the
# NumPy reference, NaN and inf included.
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from neoflow.errors import BuildError, CompilerNotFoundError
from neoflow.toolchain import cache

_SEARCHED = ("cc", "gcc", "clang")
# Generated code never reads errno: -fno-math-errno lets the compiler treat
# expf, tanhf, sqrtf... as pure, so a sigmoid an expression uses twice (a
# gradient's s * (1 - s)) is computed once, and sqrtf becomes one instruction.
_BASE_FLAGS = ("-std=c11", "-fPIC", "-shared", "-ffp-contract=fast", "-fno-math-errno")
_NATIVE = "-march=native"
# GCC 12 miscompiles if-converted conditional loads under AVX2 (`c[i] = a[i] > 0
# ? b[i] : 0` in a 4x12 nest gave 10 of 48 elements wrong): loop if-conversion
# stays off wherever the compiler takes the flag.
_NO_IF_CONVERSION = "-fno-tree-loop-if-convert"
_OPENMP = "-fopenmp"
# A quick build (the first step's kernels while the optimised ones compile in
# the background): -O1 at about a third of -O3's compile time, with GCC's
# multiply-add contraction (-fexpensive-optimizations) so its arithmetic is
# -O3's, and no unrolling (NF_QUICK: the prelude's NF_UNROLL prints nothing).
_QUICK_FLAGS = ("-O1", "-DNF_QUICK")
_CONTRACT = "-fexpensive-optimizations"
_SANITIZE_FLAGS = ("-fsanitize=address", "-fno-omit-frame-pointer")
_LINK_LIBS = ("-lm",)
_STDERR_LINES = 20
_LINE_CHARS = 200

_PLAIN_PROBE = "int neoflow_probe(int x) { return x + 1; }\n"
_OPENMP_PROBE = """\
#include <omp.h>
int neoflow_probe(int n) {
    int s = 0;
    #pragma omp parallel for reduction(+:s)
    for (int i = 0; i < n; ++i) s += i;
    return s + omp_get_max_threads();
}
"""


@dataclass(frozen=True)
class Toolchain:
    """A C compiler: its executable and the first line of its `--version`."""

    path: str
    version: str


def find_compiler() -> Toolchain:
    """The C compiler to use: `$CC` if set, else `cc`, `gcc` or `clang` on PATH.

    Reads the environment at every call; raises CompilerNotFoundError with
    install instructions when there is none.

    >>> find_compiler().path            # doctest: +SKIP
    '/usr/bin/cc'
    """
    requested = os.environ.get("CC", "").strip()
    for name in (requested,) if requested else _SEARCHED:
        path = shutil.which(name)
        if path is not None:
            return Toolchain(path, _version_line(path))
    if requested:
        problem = f"CC={requested!r} does not name an executable C compiler."
    else:
        problem = f"No C compiler found on PATH (looked for {', '.join(_SEARCHED)})."
    raise CompilerNotFoundError(
        f"{problem} NeoFlow compiles kernels to native code and needs one: "
        "install it with `apt-get install gcc` (Debian/Ubuntu), `dnf install gcc` "
        "(Fedora) or `xcode-select --install` (macOS), or set the environment "
        "variable CC to the path of a C compiler."
    )


def compile_flags(
    cc: Toolchain, *, openmp: bool, sanitize: bool, quick: bool = False,
    extra_flags: Sequence[str] = ()
) -> tuple[str, ...]:
    """The command-line flags for one build; `extra_flags` come last and win.

    Drops -march=native and -fopenmp where this compiler refuses them (OpenMP
    pragmas are then ignored and kernels run on one thread). `quick`: a build
    that compiles about three times faster and runs slower (`_QUICK_FLAGS`).

    >>> compile_flags(find_compiler(), openmp=True, sanitize=False)  # doctest: +SKIP
    ('-O3', '-std=c11', '-fPIC', '-shared', '-ffp-contract=fast', '-fno-math-errno',
     '-march=native', '-fno-tree-loop-if-convert', '-fopenmp')
    """
    quick = quick and not sanitize
    flags = [*_QUICK_FLAGS] if quick else ["-O1" if sanitize else "-O3"]
    flags.extend(_BASE_FLAGS)
    _probe_all(cc.path, (_NATIVE, _NO_IF_CONVERSION) + ((_OPENMP,) if openmp else ())
               + ((_CONTRACT,) if quick else ()))
    if quick and _accepts(cc.path, _CONTRACT):
        flags.append(_CONTRACT)
    if _accepts(cc.path, _NATIVE):
        flags.append(_NATIVE)
    if _accepts(cc.path, _NO_IF_CONVERSION):
        flags.append(_NO_IF_CONVERSION)
    if openmp and _openmp_available(cc.path):
        flags.append(_OPENMP)
    if sanitize:
        flags.extend(_SANITIZE_FLAGS)
    flags.extend(extra_flags)
    return tuple(flags)


def fingerprint(cc: Toolchain, flags: Sequence[str]) -> str:
    """Text naming everything besides the source that decides the library's bytes.

    That is the compiler, its version and the flags -- and, under
    -march=native, the CPU that "native" resolves to, so a cache shared between
    machines never hands one machine code built for another.

    >>> fingerprint(Toolchain("/usr/bin/cc", "cc 12.2.0"), ("-O3",))
    '/usr/bin/cc\\ncc 12.2.0\\n-O3'
    """
    parts = [cc.path, cc.version, shlex.join(flags)]
    if _NATIVE in flags:
        parts.append(_native_target(cc.path))
    return "\n".join(parts)


def compile_shared(cc: Toolchain, flags: Sequence[str], source: Path, output: Path) -> None:
    """Compile the C file `source` into the shared library `output`.

    Raises BuildError with the first lines of the compiler's errors and the
    path of `source`, which is left in place for inspection.

    >>> compile_shared(cc, flags, Path("k.c"), Path("k.so"))  # doctest: +SKIP
    """
    command = [cc.path, *flags, "-o", str(output), str(source), *_LINK_LIBS]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise BuildError(
            f"C compiler failed (exit {result.returncode}) on {source}:\n"
            f"{_head(result.stderr)}\n"
            f"The full source is kept at {source}; flags: {shlex.join(flags)}"
        )


def asan_runtime_path() -> str | None:
    """Path of the compiler's AddressSanitizer runtime (libasan.so), or None.

    Tests that run sanitized kernels start a subprocess with this in LD_PRELOAD.

    >>> asan_runtime_path()                  # doctest: +SKIP
    '/usr/lib/gcc/x86_64-linux-gnu/12/libasan.so'
    """
    try:
        cc = find_compiler()
    except CompilerNotFoundError:
        return None
    result = subprocess.run(
        [cc.path, "-print-file-name=libasan.so"], capture_output=True, text=True
    )
    path = result.stdout.strip()
    # A compiler without the runtime echoes the bare name back.
    found = result.returncode == 0 and os.path.isabs(path) and os.path.isfile(path)
    return path if found else None


def _head(stderr: str) -> str:
    """The first lines of a compiler's stderr, each clipped, with a count of the rest."""
    lines = stderr.strip().splitlines()
    head = [_clip(line) for line in lines[:_STDERR_LINES]]
    if len(lines) > _STDERR_LINES:
        head.append(f"... ({len(lines) - _STDERR_LINES} more lines)")
    return "\n".join(head)


def _clip(line: str) -> str:
    return line if len(line) <= _LINE_CHARS else line[:_LINE_CHARS] + " ..."


@functools.lru_cache(maxsize=None)
def _version_line(path: str) -> str:
    try:
        result = subprocess.run([path, "--version"], capture_output=True, text=True)
    except OSError as err:
        raise CompilerNotFoundError(f"C compiler {path} cannot be run: {err}") from None
    if result.returncode != 0 or not result.stdout.strip():
        raise CompilerNotFoundError(
            f"C compiler {path} failed `--version` (exit {result.returncode}); "
            "set the environment variable CC to a working C compiler."
        )
    return result.stdout.strip().splitlines()[0]


@functools.lru_cache(maxsize=None)
def _probe_all(path: str, flags: tuple[str, ...]) -> None:
    """Probe `flags` at once (one compiler each) rather than one after another."""
    with ThreadPoolExecutor(len(flags)) as pool:
        list(pool.map(lambda flag: _accepts(path, flag), flags))


@functools.lru_cache(maxsize=None)
def _accepts(path: str, flag: str) -> bool:
    """Whether the compiler builds a tiny shared library with `flag` (once per
    process; a pass is kept in the cache for the next)."""
    probe = _OPENMP_PROBE if flag == _OPENMP else _PLAIN_PROBE
    key = cache.probe_key(path, _version_line(path), _file_identity(path), shlex.join(_BASE_FLAGS),
                          flag, probe)
    if cache.probe_passed(key):
        return True
    with tempfile.TemporaryDirectory(prefix="neoflow-probe-") as tmp:
        source = Path(tmp, "probe.c")
        source.write_text(probe)
        command = [path, *_BASE_FLAGS, flag, "-o", str(Path(tmp, "probe.so")), str(source)]
        passed = subprocess.run(command, capture_output=True).returncode == 0
    if passed:
        cache.record_probe(key)
    return passed


def _file_identity(path: str) -> str:
    """The compiler executable's file (resolved through links): device, inode,
    size and modification time -- a reinstalled compiler is probed anew."""
    info = os.stat(path)
    return f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"


@functools.lru_cache(maxsize=None)
def _openmp_available(path: str) -> bool:
    if _accepts(path, _OPENMP):
        return True
    warnings.warn(
        f"C compiler {path} does not support OpenMP (-fopenmp); NeoFlow kernels "
        "will run on one thread. Install libgomp (gcc) or libomp (clang) for "
        "parallel kernels.",
        RuntimeWarning,
        stacklevel=3,
    )
    return False


@functools.lru_cache(maxsize=None)
def _native_target(path: str) -> str:
    """A digest of what -march=native expands to on this machine."""
    result = subprocess.run(
        [path, _NATIVE, "-###", "-E", "-x", "c", os.devnull], capture_output=True, text=True
    )
    return "native-target " + hashlib.sha256((result.stdout + result.stderr).encode()).hexdigest()
