# build/cache: the on-disk kernel cache, keyed by content hash.
#
# A key (sha256 of driver version, toolchain fingerprint and source) names an
# entry <cache>/kernels/<key[:2]>/<key>.so, next to the C source it was built
# from (<key>.c) and the sha256 of its bytes (<key>.sha256). Every file is
# written under a unique temp name and published with os.replace: a reader
# never sees half a file, and a library another process has mapped is never
# rewritten in place. An entry is handed on only if it verifies (regular file,
# ours, not group/world-writable, digest matches); anything else is rebuilt.
# <cache>/probes/<key> records a compiler probe that passed (a flag the
# compiler accepts), so a new process does not compile the probes again.
from __future__ import annotations

import atexit
import hashlib
import json
import os
import secrets
import shutil
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Callable

# Bump when the driver changes what a key's library contains.
DRIVER_VERSION = "1"

_fallbacks: dict[Path, Path] = {}  # unusable cache root -> this process's private temp dir


def cache_dir() -> Path:
    """The kernel cache directory, created private (mode 0700) when missing.

    `$NEOFLOW_CACHE_DIR` if set, else `$XDG_CACHE_HOME/neoflow`, else
    `~/.cache/neoflow`; read at every call. When that directory cannot be used
    safely, a private temp dir stands in for this process, with one warning.

    >>> os.environ["NEOFLOW_CACHE_DIR"] = "/tmp/nf-cache"   # doctest: +SKIP
    >>> cache_dir()                                         # doctest: +SKIP
    PosixPath('/tmp/nf-cache')
    """
    root = _configured_root()
    if root in _fallbacks:
        return _fallbacks[root]
    problem = _prepare(root)
    if problem is None:
        return root
    fallback = Path(tempfile.mkdtemp(prefix="neoflow-cache-"))
    atexit.register(shutil.rmtree, fallback, ignore_errors=True)
    _prepare(fallback)
    warnings.warn(
        f"NeoFlow cache directory {root} cannot be used ({problem}); compiled kernels "
        f"go to {fallback} for this process only. Set NEOFLOW_CACHE_DIR to a "
        "writable directory to keep them.",
        RuntimeWarning,
        stacklevel=2,
    )
    return _fallbacks.setdefault(root, fallback)


def cache_key(source: str, fingerprint: str) -> str:
    """The cache key of `source` built by the toolchain `fingerprint` describes.

    >>> len(cache_key("int f(void) { return 1; }", "/usr/bin/cc -O3"))
    64
    """
    payload = json.dumps([DRIVER_VERSION, fingerprint, source])
    return hashlib.sha256(payload.encode()).hexdigest()


def lookup(key: str) -> Path | None:
    """The cached library for `key` if present and verified, else None.

    >>> lookup(cache_key(source, fingerprint))   # doctest: +SKIP
    PosixPath('/home/me/.cache/neoflow/kernels/3f/3f9c....so')
    """
    library = _library_path(key)
    digest = library.with_suffix(".sha256")
    if not (_trusted(library) and _trusted(digest)):
        return None
    try:
        intact = _sha256(library) == digest.read_text().strip()
    except OSError:
        return None
    return library if intact else None


def store(key: str, source: str, build: Callable[[Path, Path], None]) -> Path:
    """Build `source` into the cache entry for `key` and return the library path.

    `build(c_file, output)` compiles; it writes to a temp name that is then
    published atomically, replacing whatever the entry held.

    >>> store(key, source, lambda c, out: compile_shared(cc, flags, c, out))  # doctest: +SKIP
    PosixPath('/home/me/.cache/neoflow/kernels/3f/3f9c....so')
    """
    library = _library_path(key)
    library.parent.mkdir(mode=0o700, exist_ok=True)
    c_file = library.with_suffix(".c")
    _publish(c_file, source.encode())
    built = _temp_name(library)
    try:
        build(c_file, built)
        os.chmod(built, 0o700)
        digest = _sha256(built)
        os.replace(built, library)
    finally:
        built.unlink(missing_ok=True)
    # Published after the library: a reader that sees the new digest sees the new library.
    _publish(library.with_suffix(".sha256"), digest.encode())
    return library


def probe_passed(key: str) -> bool:
    """Whether a compiler probe with `key` (see `probe_key`) passed before, as
    recorded by `record_probe` in this cache (only passes are recorded).

    >>> probe_passed(probe_key("/usr/bin/cc", "cc 12.2.0", "-fopenmp", source))  # doctest: +SKIP
    True
    """
    return _trusted(cache_dir() / "probes" / key)


def record_probe(key: str) -> None:
    """Remember that the compiler probe `key` passed (one empty file per pass).

    >>> record_probe(probe_key("/usr/bin/cc", "cc 12.2.0", "-fopenmp", source))  # doctest: +SKIP
    """
    probes = cache_dir() / "probes"
    probes.mkdir(mode=0o700, exist_ok=True)
    _publish(probes / key, b"")


def probe_key(*parts: str) -> str:
    """The key of a compiler probe: sha256 of the driver version and `parts`
    (the compiler's identity, the flag, the probe's source...).

    >>> len(probe_key("/usr/bin/cc", "cc 12.2.0", "-fopenmp"))
    64
    """
    return hashlib.sha256(json.dumps([DRIVER_VERSION, "probe", *parts]).encode()).hexdigest()


def _configured_root() -> Path:
    explicit = os.environ.get("NEOFLOW_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "neoflow"


def _prepare(root: Path) -> str | None:
    """Create root/kernels private; None if usable, else what is wrong."""
    kernels = root / "kernels"
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        kernels.mkdir(mode=0o700, exist_ok=True)
        info = os.lstat(kernels)
    except OSError as err:
        return str(err)
    if not stat.S_ISDIR(info.st_mode):
        return f"{kernels} is not a directory"
    if not _private(info):
        return f"{kernels} is not owned by this user or is writable by others"
    if not os.access(kernels, os.W_OK | os.X_OK):
        return f"{kernels} is not writable"
    return None


def _library_path(key: str) -> Path:
    return cache_dir() / "kernels" / key[:2] / f"{key}.so"


def _trusted(path: Path) -> bool:
    """A regular file (not a link), owned by this user, writable by no one else."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and _private(info)


def _private(info: os.stat_result) -> bool:
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _temp_name(path: Path) -> Path:
    """A name next to `path`, unique across processes and threads."""
    return path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(6)}.tmp")


def _publish(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically, mode 0600."""
    temp = _temp_name(path)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
