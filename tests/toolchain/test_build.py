"""The build stage: compile, cache on disk by content hash, verify, load."""
from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import os
import re
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from neoflow.toolchain import asan_runtime_path, cache_dir, compile_c, compiler, driver
from neoflow.toolchain.compiler import find_compiler
from neoflow.errors import BuildError, CompilerNotFoundError

ADD = "double add(double a, double b) { return a + b; }\n"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own cache; the user's real one is never touched."""
    root = tmp_path / "cache"
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(root))
    return root


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Records every compiler invocation (the C file compiled)."""
    calls: list[Path] = []
    real = driver.compile_shared

    def counting(cc, flags, source, output):
        calls.append(source)
        real(cc, flags, source, output)

    monkeypatch.setattr(driver, "compile_shared", counting)
    return calls


def call_add(library_path: Path) -> float:
    """Load a library file under a fresh name (so not the process's cached handle) and call add."""
    copy = library_path.with_name(f"copy-{os.urandom(4).hex()}.so")
    shutil.copyfile(library_path, copy)
    add = ctypes.CDLL(str(copy)).add
    add.argtypes, add.restype = [ctypes.c_double] * 2, ctypes.c_double
    return add(1.5, 2.25)


def digest_ok(library_path: Path) -> bool:
    recorded = library_path.with_suffix(".sha256").read_text().strip()
    return hashlib.sha256(library_path.read_bytes()).hexdigest() == recorded


def test_compile_and_call(cache: Path) -> None:
    lib = compile_c(ADD)
    add = lib.get("add", [ctypes.c_double, ctypes.c_double], ctypes.c_double)
    assert add(1.5, 2.25) == 3.75
    assert lib.source == ADD
    assert lib.path.parent.parent == cache / "kernels"
    assert lib.path.with_suffix(".c").read_text() == ADD


def test_missing_function_is_a_build_error() -> None:
    with pytest.raises(BuildError, match="'sub'"):
        compile_c(ADD).get("sub", [ctypes.c_double] * 2, ctypes.c_double)


def test_second_compile_hits_the_cache(builds: list[Path]) -> None:
    first = compile_c(ADD)
    mtime = first.path.stat().st_mtime_ns
    second = compile_c(ADD)
    assert len(builds) == 1
    assert second.path == first.path and second.path.stat().st_mtime_ns == mtime


def test_flags_are_part_of_the_key(builds: list[Path]) -> None:
    source = "int value(void) { return VALUE; }\n"
    three = compile_c(source, extra_flags=["-DVALUE=3"]).get("value", [], ctypes.c_int)
    four = compile_c(source, extra_flags=["-DVALUE=4"]).get("value", [], ctypes.c_int)
    assert (three(), four(), len(builds)) == (3, 4, 2)


def _rewrite(path: Path, data: bytes) -> None:
    # A new inode: this process has the old one mapped, and rewriting a mapped
    # library in place would corrupt the running code, not just the cache.
    path.unlink()
    path.write_bytes(data)


def _truncate(library: Path) -> None:
    _rewrite(library, library.read_bytes()[: library.stat().st_size // 2])


def _flip_byte(library: Path) -> None:
    data = bytearray(library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    _rewrite(library, bytes(data))


def _drop_digest(library: Path) -> None:
    library.with_suffix(".sha256").unlink()


def _world_writable(library: Path) -> None:
    os.chmod(library, 0o666)


def _group_writable_digest(library: Path) -> None:
    os.chmod(library.with_suffix(".sha256"), 0o620)


def _symlink(library: Path) -> None:
    # Same bytes, digest matches -- but a link is never trusted.
    target = library.with_name("elsewhere.so")
    library.rename(target)
    library.symlink_to(target)


@pytest.mark.parametrize(
    "damage",
    [_truncate, _flip_byte, _drop_digest, _world_writable, _group_writable_digest, _symlink],
)
def test_damaged_entry_is_rebuilt(damage, builds: list[Path]) -> None:
    library = compile_c(ADD).path
    damage(library)
    assert compile_c(ADD).path == library
    assert len(builds) == 2
    info = os.lstat(library)
    assert stat.S_ISREG(info.st_mode) and not info.st_mode & 0o022
    assert digest_ok(library)
    assert call_add(library) == 3.75


@pytest.mark.skipif(os.getuid() != 0, reason="chown to another user needs root")
def test_foreign_owned_entry_is_rebuilt(builds: list[Path]) -> None:
    library = compile_c(ADD).path
    os.chown(library, 65534, -1)
    compile_c(ADD)
    assert len(builds) == 2
    assert library.stat().st_uid == os.getuid() and digest_ok(library)


def test_missing_compiler_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(CompilerNotFoundError, match="no-such-cc") as bad_cc:
        compile_c(ADD)
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompilerNotFoundError) as none_on_path:
        compile_c(ADD)
    for message in (str(bad_cc.value), str(none_on_path.value)):
        assert "apt-get install gcc" in message and "xcode-select --install" in message
        assert "CC" in message


def test_syntax_error_gives_a_short_message() -> None:
    source = "".join(f"int f{i}(void) {{ return }}\n" for i in range(300))
    with pytest.raises(BuildError) as caught:
        compile_c(source)
    message = str(caught.value)
    assert len(message) < 4000
    assert "more lines" in message
    kept = re.search(r"kept at (\S+\.c);", message)
    assert kept and Path(kept[1]).read_text() == source


def _build_in_child(source: str, barrier) -> float:
    barrier.wait()
    lib = compile_c(source)
    return lib.get("add", [ctypes.c_double] * 2, ctypes.c_double)(1.5, 2.25)


def test_two_processes_build_the_same_kernel_at_once(cache: Path) -> None:
    source = ADD + "/* built by two processes at once */\n"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        barrier = manager.Barrier(2)
        results = pool.starmap(_build_in_child, [(source, barrier), (source, barrier)])
    assert results == [3.75, 3.75]
    files = sorted(p.name for p in (cache / "kernels").rglob("*"))
    assert not [name for name in files if name.endswith(".tmp")]
    assert len([name for name in files if name.endswith(".so")]) == 1
    assert digest_ok(compile_c(source).path)


def test_cache_dir_is_created_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "deep" / "er"
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(root))
    assert cache_dir() == root
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    compile_c(ADD)
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NEOFLOW_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "neoflow"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "neoflow"
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache_dir() == tmp_path / "explicit"


def test_unusable_cache_dir_falls_back_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    monkeypatch.setenv("NEOFLOW_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot be used") as warned:
        lib = compile_c(ADD)
        compile_c(ADD)
    assert len(warned) == 1
    assert not lib.path.is_relative_to(tmp_path)
    assert lib.get("add", [ctypes.c_double] * 2, ctypes.c_double)(1.5, 2.25) == 3.75


def test_openmp_reduction() -> None:
    source = textwrap.dedent(
        """
        long long sum_below(long long n) {
            long long s = 0;
            #pragma omp parallel for reduction(+:s)
            for (long long i = 0; i < n; ++i) s += i;
            return s;
        }
        """
    )
    sum_below = compile_c(source).get("sum_below", [ctypes.c_longlong], ctypes.c_longlong)
    n = 10_000_019
    assert sum_below(n) == n * (n - 1) // 2


def test_refused_flags_fall_back_to_a_portable_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fussy = tmp_path / "fussy-cc"
    fussy.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in -march=native|-fopenmp) exit 1;; esac; done\n'
        f'exec {find_compiler().path} "$@"\n'
    )
    fussy.chmod(0o755)
    monkeypatch.setenv("CC", str(fussy))
    with pytest.warns(RuntimeWarning, match="OpenMP") as warned:
        lib = compile_c("int threads(void) {\n#pragma omp parallel\n{}\nreturn 1; }\n")
        compile_c(ADD)
    assert len(warned) == 1
    assert lib.get("threads", [], ctypes.c_int)() == 1


def test_passed_flag_probes_are_remembered_in_the_cache(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrapper = tmp_path / "wrapped-cc"            # a compiler of its own: no probe of it is known
    wrapper.write_text(f'#!/bin/sh\nexec {find_compiler().path} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    probes: list[list[str]] = []
    real_run = compiler.subprocess.run

    def counting(command, *args, **kwargs):
        if any(str(a).endswith("probe.c") for a in command):
            probes.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(compiler.subprocess, "run", counting)

    def fresh_process_flags() -> tuple[str, ...]:
        compiler._accepts.cache_clear()          # as a new process starts
        compiler._probe_all.cache_clear()
        return compiler.compile_flags(find_compiler(), openmp=True, sanitize=False)

    first = fresh_process_flags()
    assert len(probes) == 3 and "-march=native" in first and "-fopenmp" in first
    assert len(list((cache / "probes").iterdir())) == 3
    assert fresh_process_flags() == first and len(probes) == 3     # none compiled again
    wrapper.write_text(wrapper.read_text() + "# reinstalled\n")   # another file: probed anew
    assert fresh_process_flags() == first and len(probes) == 6


@pytest.mark.skipif(asan_runtime_path() is None, reason="compiler has no AddressSanitizer runtime")
def test_sanitized_build_reports_out_of_bounds_writes(cache: Path) -> None:
    script = textwrap.dedent(
        """
        import ctypes
        from neoflow.toolchain import compile_c
        lib = compile_c('''
            #include <stdlib.h>
            int poke(int i) {
                int *a = malloc(4 * sizeof(int));
                a[i] = 1;
                int r = a[0];
                free(a);
                return r;
            }
        ''', sanitize=True)
        poke = lib.get("poke", [ctypes.c_int], ctypes.c_int)
        print("in bounds", poke(0), flush=True)
        poke(4)
        """
    )
    env = {
        **os.environ,
        "LD_PRELOAD": asan_runtime_path(),
        "ASAN_OPTIONS": "detect_leaks=0",
        "PYTHONPATH": str(REPO),
    }
    run = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert "in bounds 1" in run.stdout
    assert run.returncode != 0 and "heap-buffer-overflow" in run.stderr
