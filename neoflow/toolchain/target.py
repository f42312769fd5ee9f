# toolchain/target: the target kernels are generated for -- its SIMD and
# the threads its parallel loops run on.
#
# What the C compiler builds for with this machine's flags (-march=native
# where it takes it): the vector width in bytes, the architectural vector
# registers and whether it fuses multiply-adds. Read once from the
# compiler's predefined macros (`cc <flags> -dM -E`): AVX-512F gives 64-byte
# vectors and 32 registers, AVX 32 bytes and 16, NEON 16 and 32, anything
# else SSE-like 16 and 16. The answer is kept in the kernel cache as a
# probe that passed (keyed by the compiler's fingerprint: its identity, flags
# and what -march=native expands to on this CPU), so later
# processes read it without running the compiler; NEOFLOW_VECTOR_BYTES
# (16, 32 or 64) overrides the width -- for A/B runs and tests -- and the
# registers then follow the table (32 on an AVX-512 machine gives AVX2's
# 16 ymm registers). The schedules (register tiles, panels), the accumulate
# pass and the C code generator (codegen/c's NF_VBYTES) all take the width
# from here.
#
# The threads (`Target.threads`) are OpenMP's: the first entry of
# OMP_NUM_THREADS when the variable is a list of positive integers, else
# the CPUs this process may use (its affinity; os.cpu_count() where the
# system cannot say). On a value libgomp rejects ("0", "abc", "4,") it
# prints "Invalid value for environment variable OMP_NUM_THREADS" and runs
# on those CPUs; the target counts them too, with a RuntimeWarning. Read at
# every target() call, like NEOFLOW_VECTOR_BYTES; the default schedule's
# split sums (schedule/split_reduce.py) and the tuner's hardware
# fingerprint (tune/hardware.py) take the count from here.
# Hands on: a `Target`.
from __future__ import annotations

import functools
import os
import re
import subprocess
import warnings
from dataclasses import dataclass, replace

from neoflow.errors import NeoFlowError
from neoflow.toolchain import cache

ENV = "NEOFLOW_VECTOR_BYTES"
THREADS_ENV = "OMP_NUM_THREADS"
# what libgomp accepts: a comma-separated list of positive decimal integers
_THREAD_LIST = re.compile(r"\s*\+?[0-9]+\s*(,\s*\+?[0-9]+\s*)*")

# (macro the compiler predefines, vector bytes, vector registers), first match wins.
_LEVELS = (("__AVX512F__", 64, 32), ("__AVX__", 32, 16), ("__ARM_NEON", 16, 32),
           (None, 16, 16))
_SIZES = {"float32": 4, "int32": 4, "float64": 8, "int64": 8, "bool": 1}
_FMA_MACROS = ("__FMA__", "__ARM_FEATURE_FMA")
# registers an overridden width gets where the compiler's own level differs
_REGISTERS = {64: 32, 32: 16, 16: 16}
# The widest vectors the compiler's own vectoriser is counted with (loops not
# printed with vector types: `omp simd` reductions, `ivdep` loops): GCC and
# clang tune Intel's AVX-512 cores for 256-bit loops (-mprefer-vector-width=256,
# which gcc -march=native -Q --help=target shows on Sapphire Rapids). Where a
# compiler uses wider ones, the blocked sums (schedule/accumulate.py) that count
# these lanes are only more accurate than planned.
AUTO_VECTOR_BYTES = 32


class TargetError(NeoFlowError):
    """A bad NEOFLOW_VECTOR_BYTES."""


@dataclass(frozen=True)
class Target:
    """The target of generated kernels: its SIMD (what the compiler builds
    for) and the OpenMP `threads` a parallel loop runs on (0: not said -- a
    Target made by hand, or the compiler's half from native_target()).

    >>> t = Target(vector_bytes=64, vector_registers=32, fma=True, threads=8)
    >>> t.lanes("float32"), t.lanes("float64"), t.threads
    (16, 8, 8)
    """

    vector_bytes: int
    vector_registers: int
    fma: bool
    overridden: bool = False
    threads: int = 0

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` ("float32", "int64", ...) in one vector."""
        return max(1, self.vector_bytes // _SIZES[dtype])

    def auto_lanes(self, dtype: str) -> int:
        """Elements of `dtype` in a vector of the compiler's own vectoriser.

        >>> Target(64, 32, True).auto_lanes("float32")
        8
        """
        return max(1, min(self.vector_bytes, AUTO_VECTOR_BYTES) // _SIZES[dtype])

    def describe(self) -> str:
        """One line for people.

        >>> Target(64, 32, True, threads=8).describe()
        '512-bit vectors, 32 registers, FMA, 8 threads'
        """
        how = f" ({ENV})" if self.overridden else ""
        threads = f", {self.threads} thread{'s' if self.threads != 1 else ''}" \
            if self.threads else ""
        return (f"{self.vector_bytes * 8}-bit vectors, {self.vector_registers} registers"
                f"{', FMA' if self.fma else ''}{how}{threads}")


def target() -> Target:
    """The target kernels are generated for: the compiler's SIMD, unless
    NEOFLOW_VECTOR_BYTES overrides the width, on omp_threads() threads (both
    variables read at every call).

    >>> target().vector_bytes in (16, 32, 64), target().threads >= 1
    (True, True)
    """
    native = replace(native_target(), threads=omp_threads())
    text = os.environ.get(ENV, "").strip()
    if not text:
        return native
    if text not in ("16", "32", "64"):
        raise TargetError(f"{ENV}={text!r}: expected the vector width in bytes, 16, 32 or 64")
    width = int(text)
    if width == native.vector_bytes:
        return native
    return replace(native, vector_bytes=width, vector_registers=_REGISTERS[width],
                   overridden=True)


def omp_threads(env=None) -> int:
    """The threads an OpenMP parallel loop runs on in a process started with
    `env` (default os.environ): the first entry of OMP_NUM_THREADS, else
    the CPUs this process may use. A value OpenMP rejects (not a list of
    positive integers: "0", "abc", "4,") is ignored as libgomp ignores it,
    with a warning; an empty one counts as unset.

    >>> omp_threads({"OMP_NUM_THREADS": "3,1"})
    3
    """
    env = os.environ if env is None else env
    text = env.get(THREADS_ENV, "")
    if _THREAD_LIST.fullmatch(text):
        counts = [int(n) for n in text.split(",")]
        if min(counts) > 0:
            return counts[0]
    n = cpus()
    if text.strip():
        warnings.warn(f"{THREADS_ENV}={text!r} is not a list of positive integers; OpenMP "
                      f"ignores it and so does NeoFlow: parallel loops run on the {n} "
                      f"CPU{'s' if n != 1 else ''} this process may use", RuntimeWarning,
                      stacklevel=2)
    return n


def cpus() -> int:
    """The CPUs this process may use: its affinity (taskset, cgroups' cpusets),
    else the machine's count.

    >>> cpus() >= 1
    True
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=None)
def native_target() -> Target:
    """What the C compiler builds for with the kernels' flags (once per
    process; a 16-byte SSE-like target without a compiler): the SIMD half of
    target(), its `threads` 0.

    >>> native_target().vector_registers in (16, 32)
    True
    """
    from neoflow.toolchain.compiler import compile_flags, find_compiler, fingerprint
    try:
        cc = find_compiler()
    except NeoFlowError:
        return Target(16, 16, False)
    flags = [f for f in compile_flags(cc, openmp=False, sanitize=False) if f != "-shared"]
    # fingerprint: the compiler, its flags and what -march=native means on this
    # CPU, so machines sharing a cache directory never read each other's answer
    identity = (fingerprint(cc, flags), "target")
    for candidate in _candidates():
        if cache.probe_passed(cache.probe_key(*identity, _probe_text(candidate))):
            return candidate
    found = _from_macros(_macros(cc.path, flags))
    cache.record_probe(cache.probe_key(*identity, _probe_text(found)))
    return found


def _probe_text(t):
    """What a probe records of Target `t`: its SIMD fields, in the text of
    the repr before Target had `threads` (so recorded probes stay valid)."""
    return (f"Target(vector_bytes={t.vector_bytes}, vector_registers={t.vector_registers}, "
            f"fma={t.fma}, overridden={t.overridden})")


def _candidates():
    return [Target(b, r, fma) for _, b, r in _LEVELS for fma in (True, False)]


def _macros(path, flags):
    """The names of the macros the compiler predefines under `flags` (empty on failure)."""
    try:
        result = subprocess.run([path, *flags, "-dM", "-E", "-x", "c", os.devnull],
                                capture_output=True, text=True)
    except OSError:
        return set()
    return {line.split()[1] for line in result.stdout.splitlines()
            if line.startswith("#define ") and len(line.split()) >= 2}


def _from_macros(macros):
    """The Target the predefined `macros` describe.

    >>> _from_macros({"__AVX__", "__AVX2__", "__FMA__"})
    Target(vector_bytes=32, vector_registers=16, fma=True, overridden=False, threads=0)
    """
    _, width, registers = next(level for level in _LEVELS
                               if level[0] is None or level[0] in macros)
    return Target(width, registers, any(m in macros for m in _FMA_MACROS))
