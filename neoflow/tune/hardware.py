"""tune/hardware: what this machine offers a kernel -- cores, SIMD width,
cache sizes -- read from /proc/cpuinfo and sysfs (the SIMD width and FMA
from toolchain/target.py: what kernels are generated for, NEOFLOW_VECTOR_BYTES
included), and a fingerprint of it.

The search prunes schedules with these figures (tune/prune.py) and the
tuning database keys records by the fingerprint, so a schedule tuned on one
machine is never taken for another's. Where the files are missing (not
Linux) conservative defaults stand in.

Besides the CPU the fingerprint covers what else decides a kernel's time:
the C compiler's version line and the flags kernels are built with, the
OpenMP thread count they run with (the target's, toolchain/target.py:
OMP_NUM_THREADS, else this process's CPUs), the
C code generator's version, and an optional tag (NEOFLOW_HARDWARE_TAG) for
what NeoFlow cannot see -- or to keep simulated nodes of one host apart.
Machines that agree on all of it share their records.

Hands on: a `Hardware` record (`detect()` for this machine).
"""
import functools
import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from ..codegen.c import VERSION as CODEGEN_VERSION
from ..errors import NeoFlowError
from ..te import dtype as dt

_CPUINFO = Path("/proc/cpuinfo")
_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# Fallbacks where the system does not say (bytes).
_DEFAULT_CACHES = {1: 32 << 10, 2: 256 << 10, 3: 8 << 20}
TAG_ENV = "NEOFLOW_HARDWARE_TAG"


@dataclass(frozen=True)
class Hardware:
    """A CPU as the tuner sees it: cores it may use, SIMD register width in
    bytes, FMA, per-core L1d and L2 and the shared L3 (bytes); and how
    kernels are built and run there: OpenMP `threads`, the `compiler`'s
    version line, the `flags`, the `codegen` version and a `tag`.

    >>> hw = Hardware(cores=2, simd_bytes=32, fma=True, l1=32768, l2=524288,
    ...               l3=33554432, model="AMD EPYC", arch="x86_64")
    >>> hw.lanes("float32"), hw.vector_registers
    (8, 16)
    """
    cores: int
    simd_bytes: int
    fma: bool
    l1: int
    l2: int
    l3: int
    model: str
    arch: str
    threads: int = 0          # 0: not known (a Hardware made by hand)
    compiler: str = ""
    flags: str = ""
    codegen: str = ""
    tag: str = ""

    def lanes(self, dtype):
        """SIMD lanes of `dtype` (elements per vector register)."""
        return max(1, self.simd_bytes // dt.to_numpy(dtype).itemsize)

    @property
    def vector_registers(self):
        """Architectural vector registers (32 with AVX-512, else 16)."""
        return 32 if self.simd_bytes >= 64 else 16

    @property
    def fingerprint(self):
        """A short stable digest of every field: the database's hardware key.

        >>> len(detect().fingerprint)
        16
        """
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self):
        """One line for people: "AMD EPYC, 2 cores, AVX2 (32 B) + FMA, L1 32K L2 512K L3 32M"."""
        threads = f", {self.threads} threads" if self.threads else ""
        tag = f", tag {self.tag!r}" if self.tag else ""
        return (f"{self.model}, {self.cores} cores{threads}, {self.simd_bytes * 8}-bit SIMD"
                f"{' + FMA' if self.fma else ''}, L1 {_kib(self.l1)} L2 {_kib(self.l2)} "
                f"L3 {_kib(self.l3)}{tag}")

    def to_dict(self):
        """The fields as a JSON-ready dict (`Hardware(**d)` makes it again)."""
        return asdict(self)


def detect(threads=None):
    """This machine's Hardware (read once per process), with kernels run on
    `threads` OpenMP threads (default: the target's, toolchain/target.py --
    OMP_NUM_THREADS, else this process's CPUs: what a measuring worker
    started from this process uses).

    >>> detect().cores >= 1
    True
    >>> detect(threads=3).threads
    3
    """
    from ..toolchain.target import target
    simd = target()
    return _detect(simd.threads if threads is None else int(threads),
                   os.environ.get(TAG_ENV, ""), simd)


@functools.lru_cache(maxsize=None)
def _detect(threads, tag, simd):
    from ..toolchain.target import cpus
    info = _cpuinfo()
    caches = _caches()
    compiler, build_flags = _toolchain()
    return Hardware(cores=cpus(), simd_bytes=simd.vector_bytes, fma=simd.fma,
                    l1=caches.get(1, _DEFAULT_CACHES[1]), l2=caches.get(2, _DEFAULT_CACHES[2]),
                    l3=caches.get(3, _DEFAULT_CACHES[3]),
                    model=info.get("model name", platform.processor() or "unknown").strip(),
                    arch=platform.machine(), threads=threads, compiler=compiler,
                    flags=build_flags, codegen=CODEGEN_VERSION, tag=tag)


def _toolchain():
    """(compiler version line, flags) kernels are built with here; ("none",
    "") without a C compiler (nothing can be measured then anyway)."""
    from ..toolchain.compiler import compile_flags, find_compiler
    try:
        cc = find_compiler()
        return cc.version, " ".join(compile_flags(cc, openmp=True, sanitize=False))
    except NeoFlowError:
        return "none", ""


def _cpuinfo():
    """The fields of the first processor in /proc/cpuinfo ({} when unreadable)."""
    try:
        text = _CPUINFO.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.split("\n\n")[0].splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out.setdefault(k.strip(), v.strip())
    return out


def _caches():
    """{level: bytes} of the data/unified caches cpu0 sees."""
    out = {}
    for index in sorted(_CACHE_DIR.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind in ("Data", "Unified"):
            out[level] = size
    return out


def _parse_size(text):
    """'32K' -> 32768, '32768K' -> 33554432, '1M' -> 1048576."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * scale[text[-1]] if text[-1] in scale else int(text)


def _kib(n):
    return f"{n >> 20}M" if n >= 1 << 20 and n % (1 << 20) == 0 else f"{n >> 10}K"
